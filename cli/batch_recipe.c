/* ctxpatch batch: the recipe (docs/batch.md): read, validate, expand to jobs (the cross product
 * of inputs x methods x target lengths x formats, or an explicit list), name each job's output
 * and compute its digest (tool version, input fingerprint, patch arguments). */
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_strict.h"
#include "cli/batch.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/file_list.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/patchers/patch.h"

#define RECIPE_MAX ((size_t)4 << 20)

/* Output formats batch can ask `patch` for, and the arguments that ask for it. A gguf job's
 * output is one file, OUT.gguf (job_name adds the suffix), stamped beside it (batch_run.c). */
static const struct {
  const char *name;
  const char *args[3];
} formats[] = {{"safetensors", {NULL}}, {"onnx", {"--to", "onnx", NULL}}, {"gguf", {"--to", "gguf", NULL}}};

static int push(char ***v, int *n, const char *s) {
  int rc = CP_ARRAY_RESIZE(*v, (size_t)*n + 1, "recipe");
  if (rc < 0) return rc;
  CP_CHECK_ALLOC((*v)[*n] = strdup(s), "recipe");
  (*n)++;
  return 0;
}

static void free_strv(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* A JSON scalar as one command-line value: integers without a fraction, other numbers in full. */
static int scalar_text(char out[64], const cJSON *v, const char *where) {
  if (cJSON_IsString(v) && strlen(v->valuestring) < 64 && v->valuestring[0] != '-') snprintf(out, 64, "%s", v->valuestring);
  else if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
    double x = v->valuedouble;
    if (x == floor(x) && fabs(x) < 9e15) snprintf(out, 64, "%.0f", x);
    else snprintf(out, 64, "%.17g", x);
  } else return cp_error_set(CP_EARG, "%s: expected a number or a short string not starting with '-'", where);
  return 0;
}

/* A list value ("256,512" or [256, 512]) as one comma-separated argument. */
static int list_text(cp_strbuf *b, const cJSON *v, const char *where) {
  if (!cJSON_IsArray(v)) {
    char t[64];
    int rc = scalar_text(t, v, where);
    if (rc == 0) cp_strbuf_str(b, t);
    return rc;
  }
  const cJSON *e;
  int rc = 0;
  cJSON_ArrayForEach(e, v) {
    char t[64];
    if ((rc = scalar_text(t, e, where)) < 0) return rc;
    cp_strbuf_printf(b, "%s%s", b->len ? "," : "", t);
  }
  return b->len ? 0 : cp_error_set(CP_EARG, "%s: empty list", where);
}

/* Options batch sets itself; a method may not set them. */
static bool reserved(const char *k) {
  static const char *const r[] = {"method", "target-len", "verify", "lengths", "depths", "samples", "seed", "threads",
                                  "min-accuracy", "no-regression-at", "no-verify", "force", "help"};
  for (size_t i = 0; i < sizeof r / sizeof *r; i++)
    if (!strcmp(k, r[i])) return true;
  return false;
}

static int parse_method(batch_method *m, const cJSON *e, int i, const char *rp) {
  char where[160];
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"), *meth = cJSON_GetObjectItemCaseSensitive(e, "method");
  const cJSON *opts = cJSON_GetObjectItemCaseSensitive(e, "options"), *o;
  cp_patch_method pm;
  if (!cJSON_IsString(name) || !*name->valuestring || strpbrk(name->valuestring, "/{} "))
    return cp_error_set(CP_EARG, "%s: methods[%d].name: expected a non-empty string without '/', '{', '}' or spaces", rp, i);
  if (!cJSON_IsString(meth) || cp_patch_method_from_name(&pm, meth->valuestring) < 0)
    return cp_error_set(CP_EARG, "%s: methods[%d].method: expected one of temperature, alibi-pi, lm-infinite, rope-pi, fire-threshold", rp, i);
  CP_CHECK_ALLOC(m->name = strdup(name->valuestring), rp);
  CP_CHECK_ALLOC(m->method = strdup(meth->valuestring), rp);
  if (opts && !cJSON_IsObject(opts)) return cp_error_set(CP_EARG, "%s: methods[%d].options: expected an object", rp, i);
  cJSON_ArrayForEach(o, opts) {
    snprintf(where, sizeof where, "%s: methods[%d].options.%s", rp, i, o->string);
    if (!*o->string || strspn(o->string, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(o->string) || reserved(o->string))
      return cp_error_set(CP_EARG, "%s: not a method option of 'ctxpatch patch' (batch sets it, or not a-z0-9-)", where);
    if (cJSON_IsFalse(o)) continue;
    char flag[80], val[64];
    snprintf(flag, sizeof flag, "--%s", o->string);
    int rc = push(&m->args, &m->n_args, flag);
    if (rc == 0 && !cJSON_IsTrue(o) && (rc = scalar_text(val, o, where)) == 0) rc = push(&m->args, &m->n_args, val);
    if (rc < 0) return rc;
  }
  return 0;
}

static char *resolve(const batch_recipe *r, const char *p);

/* "verify": probe settings shared by every job, as patch arguments. */
static int parse_verify(batch_recipe *r, const cJSON *v) {
  static const struct {
    const char *key, *flag;
  } map[] = {{"probes", "--verify"}, {"lengths", "--lengths"}, {"depths", "--depths"}, {"samples", "--samples"},
             {"seed", "--seed"}, {"min_accuracy", "--min-accuracy"}, {"no_regression_at", "--no-regression-at"},
             {"work_budget", "--work-budget"}, {"looks", "--looks"}};
  const cJSON *e;
  int rc = 0;
  if (v && !cJSON_IsObject(v)) return cp_error_set(CP_EARG, "%s: verify: expected an object", r->path);
  cJSON_ArrayForEach(e, v) {
    char where[160];
    snprintf(where, sizeof where, "%s: verify.%s", r->path, e->string);
    size_t k = 0;
    while (k < sizeof map / sizeof *map && strcmp(map[k].key, e->string)) k++;
    if (!strcmp(e->string, "baseline_cache")) {
      if (!cJSON_IsString(e) || !*e->valuestring) return cp_error_set(CP_EARG, "%s: expected a folder path", where);
      free(r->baseline_cache);
      CP_CHECK_ALLOC(r->baseline_cache = resolve(r, e->valuestring), where);
    } else if (!strcmp(e->string, "threads")) {
      if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > 1024 || e->valuedouble != floor(e->valuedouble))
        return cp_error_set(CP_EARG, "%s: expected an integer in [1, 1024]", where);
      r->threads = (int)e->valuedouble;
    } else if (!strcmp(e->string, "no_verify") || !strcmp(e->string, "accept_no_gain") ||
               !strcmp(e->string, "accept_underpowered") || !strcmp(e->string, "sequential")) {
      if (!cJSON_IsBool(e)) return cp_error_set(CP_EARG, "%s: expected true or false", where);
      const char *flag = !strcmp(e->string, "no_verify")        ? "--no-verify"
                         : !strcmp(e->string, "accept_no_gain") ? "--accept-no-gain"
                         : !strcmp(e->string, "sequential")     ? "--sequential"
                                                                : "--accept-underpowered";
      if (cJSON_IsTrue(e) && (rc = push(&r->verify_args, &r->n_verify_args, flag)) < 0) return rc;
    } else if (k == sizeof map / sizeof *map) {
      return cp_error_set(CP_EARG, "%s: unknown key (probes, lengths, depths, samples, seed, min_accuracy, "
                                   "no_regression_at, work_budget, threads, no_verify, accept_no_gain, "
                                   "accept_underpowered, sequential, looks, baseline_cache)",
                          where);
    } else {
      cp_strbuf b = {0};
      rc = list_text(&b, e, where);
      if (rc == 0 && b.oom) rc = cp_nomem("%s", where);
      if (rc == 0 && (rc = push(&r->verify_args, &r->n_verify_args, map[k].flag)) == 0)
        rc = push(&r->verify_args, &r->n_verify_args, b.s);
      cp_strbuf_free(&b);
      if (rc < 0) return rc;
    }
  }
  for (int i = 0; r->baseline_cache && i < r->n_verify_args; i++)
    if (!strcmp(r->verify_args[i], "--no-verify"))
      return cp_error_set(CP_EARG, "%s: verify.baseline_cache: the jobs certify nothing (no_verify)", r->path);
  return 0;
}

/* A method option that "verify" gives too (`sequential`, `looks`, `accept-no-gain`, ...) would reach
 * patch twice, which refuses it: refused here, when the recipe is loaded, not as every job's error.
 * A method may set such an option when verify does not: two methods differing only in their
 * sequential design are two jobs, each with its design in its arguments and so in its digest. */
static int check_twice(const batch_recipe *r) {
  for (int i = 0; i < r->n_methods; i++)
    for (int a = 0; a < r->methods[i].n_args; a++) {
      const char *flag = r->methods[i].args[a];
      for (int v = 0; flag[0] == '-' && flag[1] == '-' && v < r->n_verify_args; v++)
        if (!strcmp(flag, r->verify_args[v]))
          return cp_error_set(CP_EARG, "%s: methods[%d].options.%s: verify sets it for every job", r->path, i, flag + 2);
    }
  return 0;
}

/* A recipe path: absolute, or relative to the recipe's folder. */
static char *resolve(const batch_recipe *r, const char *p) { return p[0] == '/' ? strdup(p) : cp_path_join(r->dir, p); }

/* Every path an "inputs" entry names (a glob must match something), as real paths. */
static int expand_input(char ***out, int *n, const batch_recipe *r, const char *pattern, const char *where) {
  char *full = resolve(r, pattern);
  CP_CHECK_ALLOC(full, where);
  glob_t g;
  int grc = glob(full, 0, NULL, &g), rc = 0;
  if (grc != 0) rc = cp_error_set(CP_ENOTFOUND, "%s: '%s' matches nothing", where, full);
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
    char *real = realpath(g.gl_pathv[i], NULL);
    if (!real) rc = cp_error_set(CP_ENOTFOUND, "%s: %s: cannot resolve", where, g.gl_pathv[i]);
    else rc = push(out, n, real);
    free(real);
  }
  if (grc == 0) globfree(&g);
  free(full);
  return rc;
}

/* {input}, {method}, {target}, {format} in the output name template. */
static int job_name(char **out, const char *tmpl, const char *input, const char *method, int64_t target, const char *format,
                    const char *rp) {
  cp_strbuf b = {0};
  const char *base = strrchr(input, '/');
  base = base ? base + 1 : input;
  int rc = 0;
  for (const char *p = tmpl; *p && rc == 0; p++) {
    if (*p != '{') {
      cp_strbuf_putc(&b, *p);
      continue;
    }
    const char *e = strchr(p, '}');
    size_t len = e ? (size_t)(e - p - 1) : 0;
    if (e && len == 5 && !strncmp(p + 1, "input", 5)) cp_strbuf_str(&b, base);
    else if (e && len == 6 && !strncmp(p + 1, "method", 6)) cp_strbuf_str(&b, method);
    else if (e && len == 6 && !strncmp(p + 1, "target", 6)) cp_strbuf_printf(&b, "%lld", (long long)target);
    else if (e && len == 6 && !strncmp(p + 1, "format", 6)) cp_strbuf_str(&b, format);
    else rc = cp_error_set(CP_EARG, "%s: output.name: unknown placeholder at '%s' ({input}, {method}, {target}, {format})", rp, p);
    if (e) p = e;
  }
  /* A GGUF is one file named *.gguf: the suffix is added unless the template ends with it. */
  if (rc == 0 && !strcmp(format, "gguf") && (b.len < 5 || strcmp(b.s + b.len - 5, ".gguf") != 0)) cp_strbuf_str(&b, ".gguf");
  if (rc == 0 && b.oom) rc = cp_nomem("%s", rp);
  if (rc == 0 && (!b.len || b.s[0] == '/' || strstr(b.s, "..") || b.s[b.len - 1] == '/'))
    rc = cp_error_set(CP_EARG, "%s: output.name: '%s' is empty, absolute, ends in '/' or has '..'", rp, b.s ? b.s : "");
  /* A name ending like batch's own files beside another job's output would be that job's record. */
  static const char *const own[] = {".batch.log", ".batch-failed.json", ".batch-claim.json", ".batch.json", ".bake"};
  for (size_t k = 0; rc == 0 && k < sizeof own / sizeof *own; k++)
    if (b.len >= strlen(own[k]) && !strcmp(b.s + b.len - strlen(own[k]), own[k]))
      rc = cp_error_set(CP_EARG, "%s: output.name: '%s' ends in '%s', the name of batch's own files", rp, b.s, own[k]);
  /* "." (or an empty step) names the output folder itself or its parent's entry: never a job's own. */
  for (const char *s = b.s; rc == 0 && s; s = strchr(s, '/') ? strchr(s, '/') + 1 : NULL)
    if (*s == '/' || (s[0] == '.' && (s[1] == '/' || !s[1])))
      rc = cp_error_set(CP_EARG, "%s: output.name: '%s' has a '.' or empty path step", rp, b.s);
  if (rc < 0) cp_strbuf_free(&b);
  *out = rc < 0 ? NULL : b.s;
  return rc;
}

/* SHA-256 over the input's files: path and content digest (or size and mtime with "stat"). */
static int fingerprint(char hex[65], const char *input, bool stat_only) {
  cp_file_list l = {0};
  cp_strbuf b = {0};
  int rc = cp_file_list_make(&l, input);
  if (rc == CP_EIO) { /* a single file */
    char h[65];
    if ((rc = cp_sha256_file(h, input)) == 0) cp_strbuf_printf(&b, "%s\n", h);
  }
  for (size_t i = 0; i < l.n && rc == 0; i++) {
    char *full = cp_path_join(input, l.items[i].path), h[65] = "";
    CP_CHECK_ALLOC_GOTO(full, input);
    if (stat_only) snprintf(h, sizeof h, "%llu %lld", l.items[i].size, l.items[i].mtime_ns);
    else rc = cp_sha256_file(h, full);
    free(full);
    cp_strbuf_printf(&b, "%s\t%s\n", l.items[i].path, h);
  }
  if (rc == 0 && b.oom) rc = cp_nomem("%s", input);
  if (rc == 0) cp_sha256_hex(hex, b.s ? b.s : "", b.len);
done:
  cp_strbuf_free(&b);
  cp_file_list_free(&l);
  return rc;
}

/* The digest: format version, tool version, input fingerprint, patch arguments (not IN, OUT or
 * --threads: the same job on another machine or with another --jobs is the same job). */
static void job_digest(batch_job *j, const char *input_fp) {
  cp_strbuf b = {0};
  cp_strbuf_printf(&b, "ctxpatch-batch 1\ntool %s\ninput %s\n", CTXPATCH_VERSION, input_fp);
  for (int i = 0; i < j->n_args; i++) cp_strbuf_put(&b, j->args[i], strlen(j->args[i]) + 1); /* NUL-separated */
  cp_sha256_hex(j->digest, b.s ? b.s : "", b.len);
  cp_strbuf_free(&b);
}

static int add_job(batch_recipe *r, size_t *cap, const char *tmpl, const char *input, const char *fp,
                   const batch_method *m, int64_t target, const char *format) {
  if (r->n_jobs >= BATCH_MAX_JOBS) return cp_error_set(CP_EOVERFLOW, "%s: more than %d jobs", r->path, BATCH_MAX_JOBS);
  int rc = CP_ARRAY_RESERVE(r->jobs, *cap, r->n_jobs + 1, r->path);
  if (rc < 0) return rc;
  batch_job *j = &r->jobs[r->n_jobs++];
  memset(j, 0, sizeof *j);
  j->method = m;
  j->target = target;
  j->format = "safetensors"; /* the table's own string: `format` may point into the recipe's JSON, freed after loading */
  for (size_t f = 0; f < sizeof formats / sizeof *formats; f++)
    if (!strcmp(formats[f].name, format)) j->format = formats[f].name;
  char t[32];
  snprintf(t, sizeof t, "%lld", (long long)target);
  CP_CHECK_ALLOC(j->input = strdup(input), r->path);
  if ((rc = job_name(&j->name, tmpl, input, m->name, target, format, r->path)) < 0) return rc;
  CP_CHECK_ALLOC(j->out = cp_path_join(r->out_dir, j->name), r->path);
  CP_CHECK_ALLOC(j->log = malloc(strlen(j->out) + 32), r->path);
  CP_CHECK_ALLOC(j->failed = malloc(strlen(j->out) + 32), r->path);
  CP_CHECK_ALLOC(j->claim = malloc(strlen(j->out) + 32), r->path);
  sprintf(j->log, "%s.batch.log", j->out);
  sprintf(j->failed, "%s.batch-failed.json", j->out);
  sprintf(j->claim, "%s.batch-claim.json", j->out);
  /* A name too long for the temporaries beside it is refused now, not once the job has run. */
  if (cp_atomic_name_check(j->out) < 0 || cp_atomic_name_check(j->failed) < 0) {
    char why[1024];
    snprintf(why, sizeof why, "%s", cp_error_message());
    return cp_error_set(CP_EARG, "%s: output.name: %s", r->path, why);
  }
  if ((rc = push(&j->args, &j->n_args, "--method")) < 0 || (rc = push(&j->args, &j->n_args, m->method)) < 0) return rc;
  for (int i = 0; i < m->n_args; i++)
    if ((rc = push(&j->args, &j->n_args, m->args[i])) < 0) return rc;
  if ((rc = push(&j->args, &j->n_args, "--target-len")) < 0 || (rc = push(&j->args, &j->n_args, t)) < 0) return rc;
  for (int i = 0; i < r->n_verify_args; i++)
    if ((rc = push(&j->args, &j->n_args, r->verify_args[i])) < 0) return rc;
  for (size_t f = 0; f < sizeof formats / sizeof *formats; f++)
    for (int a = 0; !strcmp(formats[f].name, format) && formats[f].args[a]; a++)
      if ((rc = push(&j->args, &j->n_args, formats[f].args[a])) < 0) return rc;
  job_digest(j, fp);
  return 0;
}

static int check_format(const cJSON *v, const char *where) {
  for (size_t f = 0; cJSON_IsString(v) && f < sizeof formats / sizeof *formats; f++)
    if (!strcmp(v->valuestring, formats[f].name)) return 0;
  return cp_error_set(CP_EARG, "%s: expected \"safetensors\", \"onnx\" or \"gguf\"", where);
}

static int check_target(const cJSON *v, const char *where) {
  if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= (1 << 20) && v->valuedouble == floor(v->valuedouble))
    return 0;
  return cp_error_set(CP_EARG, "%s: expected an integer in [1, 2^20]", where);
}

static const batch_method *find_method(const batch_recipe *r, const char *name) {
  for (int i = 0; i < r->n_methods; i++)
    if (!strcmp(r->methods[i].name, name)) return &r->methods[i];
  return NULL;
}

/* Fingerprints, once per distinct input. */
typedef struct {
  char **paths;
  char (*hex)[65];
  int n;
} fp_cache;

static int input_fp(const char **out, fp_cache *c, const char *input, bool stat_only) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->paths[i], input)) {
      *out = c->hex[i];
      return 0;
    }
  int rc = CP_ARRAY_RESIZE(c->hex, (size_t)c->n + 1, input), n = c->n;
  if (rc < 0 || (rc = fingerprint(c->hex[c->n], input, stat_only)) < 0 || (rc = push(&c->paths, &n, input)) < 0)
    return rc;
  *out = c->hex[c->n++];
  return 0;
}

/* inputs x methods x target_lengths x formats. */
static int cross_product(batch_recipe *r, const cJSON *doc, const char *tmpl, fp_cache *fc) {
  const cJSON *inputs = cJSON_GetObjectItemCaseSensitive(doc, "inputs"), *targets = cJSON_GetObjectItemCaseSensitive(doc, "target_lengths");
  const cJSON *fmts = cJSON_GetObjectItemCaseSensitive(doc, "formats"), *e, *t, *f;
  char where[160], **paths = NULL;
  int n_paths = 0, rc = 0, i = 0;
  size_t cap = 0;
  if (!cJSON_IsArray(inputs) || !cJSON_GetArraySize(inputs)) return cp_error_set(CP_EARG, "%s: inputs: expected a non-empty array of paths or globs", r->path);
  if (!cJSON_IsArray(targets) || !cJSON_GetArraySize(targets)) return cp_error_set(CP_EARG, "%s: target_lengths: expected a non-empty array", r->path);
  if (fmts && (!cJSON_IsArray(fmts) || !cJSON_GetArraySize(fmts))) return cp_error_set(CP_EARG, "%s: formats: expected a non-empty array", r->path);
  cJSON_ArrayForEach(e, inputs) {
    snprintf(where, sizeof where, "%s: inputs[%d]", r->path, i++);
    if (!cJSON_IsString(e)) rc = cp_error_set(CP_EARG, "%s: expected a path or glob", where);
    if (rc < 0 || (rc = expand_input(&paths, &n_paths, r, e->valuestring, where)) < 0) goto done;
  }
  i = 0;
  cJSON_ArrayForEach(t, targets) {
    snprintf(where, sizeof where, "%s: target_lengths[%d]", r->path, i++);
    if ((rc = check_target(t, where)) < 0) goto done;
  }
  i = 0;
  cJSON_ArrayForEach(f, fmts) {
    snprintf(where, sizeof where, "%s: formats[%d]", r->path, i++);
    if ((rc = check_format(f, where)) < 0) goto done;
  }
  for (int p = 0; p < n_paths; p++)
    for (int m = 0; m < r->n_methods; m++)
      cJSON_ArrayForEach(t, targets) {
        const char *fp;
        if ((rc = input_fp(&fp, fc, paths[p], r->stat_inputs)) < 0) goto done;
        if (!fmts) rc = add_job(r, &cap, tmpl, paths[p], fp, &r->methods[m], (int64_t)t->valuedouble, "safetensors");
        cJSON_ArrayForEach(f, fmts) if (rc == 0) rc = add_job(r, &cap, tmpl, paths[p], fp, &r->methods[m],
                                                                (int64_t)t->valuedouble, f->valuestring);
        if (rc < 0) goto done;
      }
done:
  free_strv(paths, n_paths);
  return rc;
}

/* "jobs": [{"input", "method", "target_length", "format"}]: an explicit list. */
static int explicit_list(batch_recipe *r, const cJSON *jobs, const char *tmpl, fp_cache *fc) {
  const cJSON *e;
  size_t cap = 0;
  int i = 0, rc = 0;
  if (!cJSON_IsArray(jobs) || !cJSON_GetArraySize(jobs)) return cp_error_set(CP_EARG, "%s: jobs: expected a non-empty array", r->path);
  cJSON_ArrayForEach(e, jobs) {
    char where[160], **paths = NULL, wf[180];
    int n = 0;
    snprintf(where, sizeof where, "%s: jobs[%d]", r->path, i++);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(e, "input"), *m = cJSON_GetObjectItemCaseSensitive(e, "method");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "target_length"), *f = cJSON_GetObjectItemCaseSensitive(e, "format");
    const batch_method *bm = cJSON_IsString(m) ? find_method(r, m->valuestring) : NULL;
    const char *fp;
    snprintf(wf, sizeof wf, "%s.format", where);
    if (!cJSON_IsString(in)) rc = cp_error_set(CP_EARG, "%s.input: expected a path", where);
    else if (!bm) rc = cp_error_set(CP_EARG, "%s.method: expected the name of a methods entry", where);
    else if ((rc = check_target(t, where)) == 0 && (!f || (rc = check_format(f, wf)) == 0) &&
             (rc = expand_input(&paths, &n, r, in->valuestring, where)) == 0) {
      if (n != 1) rc = cp_error_set(CP_EARG, "%s.input: names %d paths, expected one", where, n);
      else if ((rc = input_fp(&fp, fc, paths[0], r->stat_inputs)) == 0)
        rc = add_job(r, &cap, tmpl, paths[0], fp, bm, (int64_t)t->valuedouble, f ? f->valuestring : "safetensors");
    }
    free_strv(paths, n);
    if (rc < 0) return rc;
  }
  return 0;
}

static int cmp_job(const void *a, const void *b) { return strcmp(((const batch_job *)a)->name, ((const batch_job *)b)->name); }

/* The outputs apart from the inputs: every "inputs" entry (or jobs[].input) as a resolved path or
 * glob for batch_check_apart. */
static int check_apart(const batch_recipe *r, const cJSON *list, bool jobs) {
  char **pats = NULL;
  int n = 0, rc = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    const cJSON *in = jobs ? cJSON_GetObjectItemCaseSensitive(e, "input") : e;
    char *full = cJSON_IsString(in) ? resolve(r, in->valuestring) : NULL;
    if (full) rc = push(&pats, &n, full);
    else if (cJSON_IsString(in)) rc = cp_nomem("%s", r->path);
    free(full);
    if (rc < 0) break;
  }
  if (rc == 0) rc = batch_check_apart(r, (const char *const *)pats, n);
  free_strv(pats, n);
  return rc;
}

static int parse_doc(batch_recipe *r, const cJSON *doc) {
  static const char *const keys[] = {"recipe_version", "inputs", "methods", "target_lengths", "formats", "verify",
                                     "output", "jobs", "input_digest"};
  const cJSON *e, *v = cJSON_GetObjectItemCaseSensitive(doc, "recipe_version");
  int rc = 0, i = 0;
  cJSON_ArrayForEach(e, doc) {
    size_t k = 0;
    while (k < sizeof keys / sizeof *keys && strcmp(keys[k], e->string)) k++;
    if (k == sizeof keys / sizeof *keys) return cp_error_set(CP_EARG, "%s: unknown key '%s'", r->path, e->string);
  }
  if (!cJSON_IsNumber(v) || v->valuedouble != 1) return cp_error_set(CP_EARG, "%s: recipe_version: expected 1", r->path);
  const cJSON *dig = cJSON_GetObjectItemCaseSensitive(doc, "input_digest");
  if (dig && !(cJSON_IsString(dig) && (!strcmp(dig->valuestring, "content") || !strcmp(dig->valuestring, "stat"))))
    return cp_error_set(CP_EARG, "%s: input_digest: expected \"content\" or \"stat\"", r->path);
  r->stat_inputs = dig && !strcmp(dig->valuestring, "stat");
  const cJSON *methods = cJSON_GetObjectItemCaseSensitive(doc, "methods");
  if (!cJSON_IsArray(methods) || !cJSON_GetArraySize(methods)) return cp_error_set(CP_EARG, "%s: methods: expected a non-empty array", r->path);
  CP_CHECK_ALLOC(r->methods = calloc((size_t)cJSON_GetArraySize(methods), sizeof *r->methods), r->path);
  cJSON_ArrayForEach(e, methods) {
    rc = parse_method(&r->methods[i], e, i, r->path);
    r->n_methods = ++i; /* counted even when refused, so batch_recipe_free frees what it parsed */
    if (rc < 0) return rc;
    if (find_method(r, r->methods[i - 1].name) != &r->methods[i - 1])
      return cp_error_set(CP_EARG, "%s: methods[%d].name: '%s' used twice", r->path, i - 1, r->methods[i - 1].name);
  }
  if ((rc = parse_verify(r, cJSON_GetObjectItemCaseSensitive(doc, "verify"))) < 0) return rc;
  if ((rc = check_twice(r)) < 0) return rc;
  const cJSON *out = cJSON_GetObjectItemCaseSensitive(doc, "output");
  const cJSON *dir = cJSON_GetObjectItemCaseSensitive(out, "dir"), *name = cJSON_GetObjectItemCaseSensitive(out, "name");
  if (!cJSON_IsString(dir) || !*dir->valuestring) return cp_error_set(CP_EARG, "%s: output.dir: expected a folder path", r->path);
  if (name && !cJSON_IsString(name)) return cp_error_set(CP_EARG, "%s: output.name: expected a template string", r->path);
  CP_CHECK_ALLOC(r->out_dir = resolve(r, dir->valuestring), r->path);
  const cJSON *fmts = cJSON_GetObjectItemCaseSensitive(doc, "formats"), *jobs = cJSON_GetObjectItemCaseSensitive(doc, "jobs");
  const char *tmpl = name ? name->valuestring
                          : cJSON_GetArraySize(fmts) > 1 || jobs ? "{input}-{method}-{target}-{format}" : "{input}-{method}-{target}";
  fp_cache fc = {0};
  if (jobs && (cJSON_GetObjectItemCaseSensitive(doc, "inputs") || cJSON_GetObjectItemCaseSensitive(doc, "target_lengths") || fmts))
    rc = cp_error_set(CP_EARG, "%s: jobs (an explicit list) excludes inputs, target_lengths and formats", r->path);
  else rc = jobs ? explicit_list(r, jobs, tmpl, &fc) : cross_product(r, doc, tmpl, &fc);
  free_strv(fc.paths, fc.n);
  free(fc.hex);
  if (rc < 0) return rc;
  qsort(r->jobs, r->n_jobs, sizeof *r->jobs, cmp_job);
  for (size_t k = 1; k < r->n_jobs; k++)
    if (!strcmp(r->jobs[k].name, r->jobs[k - 1].name))
      return cp_error_set(CP_EARG, "%s: two jobs write '%s' (output.name needs more placeholders)", r->path, r->jobs[k].name);
  return check_apart(r, jobs ? jobs : cJSON_GetObjectItemCaseSensitive(doc, "inputs"), jobs != NULL);
}

int batch_recipe_load(batch_recipe *r, const char *path) {
  memset(r, 0, sizeof *r);
  char *text = NULL;
  size_t len = 0;
  cJSON *doc = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(r->path = strdup(path), path);
  const char *slash = strrchr(path, '/');
  CP_CHECK_ALLOC_GOTO(r->dir = slash ? strndup(path, (size_t)(slash - path + (slash == path))) : strdup("."), path);
  if ((rc = cp_read_file(&text, &len, path, RECIPE_MAX)) < 0) goto done;
  if ((rc = cp_json_parse_strict(&doc, text, len, path, 32, CP_EARG, CP_EARG, CP_EARG, CP_EARG)) < 0) goto done;
  if (!cJSON_IsObject(doc)) {
    rc = cp_error_set(CP_EARG, "%s: expected a JSON object", path);
    goto done;
  }
  rc = parse_doc(r, doc);
done:
  cJSON_Delete(doc);
  free(text);
  return rc;
}

void batch_recipe_free(batch_recipe *r) {
  for (int i = 0; i < r->n_methods; i++) {
    free(r->methods[i].name);
    free(r->methods[i].method);
    free_strv(r->methods[i].args, r->methods[i].n_args);
  }
  free(r->methods);
  free_strv(r->verify_args, r->n_verify_args);
  for (size_t k = 0; k < r->n_jobs; k++) {
    batch_job *j = &r->jobs[k];
    free(j->name);
    free(j->input);
    free(j->out);
    free(j->log);
    free(j->failed);
    free(j->claim);
    free_strv(j->args, j->n_args);
  }
  free(r->jobs);
  free(r->path);
  free(r->dir);
  free(r->out_dir);
  free(r->baseline_cache);
  memset(r, 0, sizeof *r);
}
