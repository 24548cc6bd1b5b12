/* The runtime check (verify/runtime_check.h): the probe prompts through the runtime an artifact
 * ships to (the node script, run without a shell) and through the engine, their logits compared. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/num.h"
#include "ctxpatch/base/spawn.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/formats/gguf.h"
#include "verify/runtime_check.h"
#include "verify/splitmix.h"

enum { POSITIONS = 4 };        /* logits compared per prompt */
#define HEADER_MAX 4096        /* the script's JSON line */
#define MAX_RUNTIME_PROMPTS 64 /* probes x lengths */

void cp_runtime_params_init(cp_runtime_params *p) {
  memset(p, 0, sizeof *p);
  p->node = "node";
  p->timeout_s = CP_RUNTIME_TIMEOUT;
}

const char *cp_runtime_name(cp_runtime_kind k) { return k == CP_RUNTIME_LLAMACPP ? "llama.cpp" : "onnxruntime"; }

int cp_runtime_from_name(cp_runtime_kind *out, const char *name) {
  if (!strcmp(name, "llama.cpp")) *out = CP_RUNTIME_LLAMACPP;
  else if (!strcmp(name, "onnxruntime")) *out = CP_RUNTIME_ONNXRUNTIME;
  else return cp_error_set(CP_EARG, "unknown runtime '%s' (llama.cpp, onnxruntime)", name);
  return 0;
}

double cp_runtime_tolerance(const char *weights) {
  return !strcmp(weights, "f32")    ? CP_RUNTIME_TOL_F32
         : !strcmp(weights, "f16")  ? CP_RUNTIME_TOL_F16
         : !strcmp(weights, "bf16") ? CP_RUNTIME_TOL_BF16
                                    : CP_RUNTIME_TOL_QUANT;
}

typedef struct {
  int n;                     /* prompts */
  cp_probe_sample *s;        /* [n] */
  int64_t (*pos)[POSITIONS]; /* [n][n_pos[i]] ascending */
  int *n_pos;                /* [n] */
  size_t rows;               /* sum of n_pos */
  char sha256[65];           /* of the ids and positions, as the request lists them */
} prompt_set;

static void prompts_free(prompt_set *ps) {
  for (int i = 0; i < ps->n && ps->s; i++) cp_probe_sample_free(&ps->s[i]);
  free(ps->s);
  free(ps->pos);
  free(ps->n_pos);
  memset(ps, 0, sizeof *ps);
}

/* Four positions spread over n tokens, the last included, without repeats. */
static int spread(int64_t pos[POSITIONS], int64_t n) {
  int k = 0;
  for (int i = 0; i < POSITIONS; i++) {
    int64_t p = (int64_t)(i + 1) * n / POSITIONS - 1;
    if (p >= 0 && (k == 0 || p > pos[k - 1])) pos[k++] = p;
  }
  return k;
}

static int make_prompts(prompt_set *ps, const cp_tokenizer *tok, const cp_runtime_prompts *pr) {
  static const cp_probe_kind passkey = CP_PROBE_PASSKEY;
  const cp_probe_kind *probes = pr->n_probes ? pr->probes : &passkey;
  int np = pr->n_probes ? pr->n_probes : 1, rc = 0;
  if (np * pr->n_lengths < 1 || np * pr->n_lengths > MAX_RUNTIME_PROMPTS)
    return cp_error_set(CP_EARG, "runtime check: %d prompts (1 to %d)", np * pr->n_lengths, MAX_RUNTIME_PROMPTS);
  ps->n = np * pr->n_lengths;
  CP_CHECK_ALLOC(ps->s = calloc((size_t)ps->n, sizeof *ps->s), "runtime check");
  CP_CHECK_ALLOC(ps->pos = calloc((size_t)ps->n, sizeof *ps->pos), "runtime check");
  CP_CHECK_ALLOC(ps->n_pos = calloc((size_t)ps->n, sizeof *ps->n_pos), "runtime check");
  cp_strbuf b = {0};
  for (int p = 0, i = 0; p < np; p++)
    for (int l = 0; l < pr->n_lengths; l++, i++) {
      uint64_t st = pr->seed ^ ((uint64_t)probes[p] << 48) ^ (uint64_t)pr->lengths[l];
      if ((rc = cp_probe_make(&ps->s[i], tok, probes[p], pr->lengths[l], 0.5, cp_splitmix64_next(&st))) < 0) goto done;
      ps->n_pos[i] = spread(ps->pos[i], (int64_t)ps->s[i].n_ids);
      ps->rows += (size_t)ps->n_pos[i];
      for (size_t t = 0; t < ps->s[i].n_ids; t++)
        cp_strbuf_printf(&b, "%s%lld", t ? "," : "", (long long)ps->s[i].ids[t]);
      cp_strbuf_put(&b, ";", 1);
      for (int k = 0; k < ps->n_pos[i]; k++) cp_strbuf_printf(&b, "%s%lld", k ? "," : "", (long long)ps->pos[i][k]);
      cp_strbuf_put(&b, "\n", 1);
    }
  if (b.oom) rc = cp_nomem("runtime check");
  else cp_sha256_hex(ps->sha256, b.s, b.len);
done:
  cp_strbuf_free(&b);
  return rc;
}

typedef struct {
  const int64_t *pos;
  int n_pos, next;
  float *dst; /* [n_pos, vocab] */
  int vocab;
} collect_ctx;

static int collect(void *ctx, const float *logits /* [n_rows, vocab] */, int64_t row0, int64_t n_rows) {
  collect_ctx *c = ctx;
  while (c->next < c->n_pos && c->pos[c->next] < row0 + n_rows) {
    memcpy(c->dst + (size_t)c->next * (size_t)c->vocab, logits + (size_t)(c->pos[c->next] - row0) * (size_t)c->vocab,
           (size_t)c->vocab * sizeof *logits);
    c->next++;
  }
  return 0;
}

/* The engine's logits at the prompts' positions, [rows, vocab]. */
static int engine_logits(float *out /* [rows, vocab] */, const cp_model *m, const cp_rule *rule, const prompt_set *ps,
                         int threads) {
  cp_engine *e = NULL;
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = threads;
  int rc = cp_engine_create(&e, m, rule, &ep);
  size_t row = 0;
  for (int i = 0; i < ps->n && rc == 0; i++) {
    collect_ctx c = {ps->pos[i], ps->n_pos[i], 0, out + row * (size_t)m->vocab, m->vocab};
    rc = cp_engine_forward_blocks(e, collect, &c, ps->s[i].ids, (int64_t)ps->s[i].n_ids, NULL, 0);
    row += (size_t)ps->n_pos[i];
  }
  cp_engine_free(e);
  return rc;
}

/* The request file the script reads: a private temporary, removed by the caller. */
static int write_request(char path[64], const prompt_set *ps, int vocab, int threads) {
  const char *dir = getenv("TMPDIR");
  cp_strbuf b = {0};
  int rc = 0;
  snprintf(path, 64, "%s/ctxpatch-runtime-XXXXXX", dir && strlen(dir) < 30 ? dir : "/tmp");
  int fd = mkstemp(path);
  if (fd < 0) {
    rc = cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
    path[0] = '\0';
    return rc;
  }
  cp_strbuf_printf(&b, "{\"threads\": %d, \"vocab\": %d, \"prompts\": [", threads, vocab);
  for (int i = 0; i < ps->n; i++) {
    cp_strbuf_str(&b, i ? ", {\"ids\": [" : "{\"ids\": [");
    for (size_t t = 0; t < ps->s[i].n_ids; t++)
      cp_strbuf_printf(&b, "%s%lld", t ? "," : "", (long long)ps->s[i].ids[t]);
    cp_strbuf_str(&b, "], \"positions\": [");
    for (int k = 0; k < ps->n_pos[i]; k++) cp_strbuf_printf(&b, "%s%lld", k ? "," : "", (long long)ps->pos[i][k]);
    cp_strbuf_str(&b, "]}");
  }
  cp_strbuf_str(&b, "]}\n");
  if (b.oom) rc = cp_nomem("runtime check request");
  else {
    size_t done = 0;
    while (done < b.len && rc == 0) {
      ssize_t w = write(fd, b.s + done, b.len - done);
      if (w < 0 && errno != EINTR) rc = cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
      else if (w > 0) done += (size_t)w;
    }
  }
  close(fd);
  cp_strbuf_free(&b);
  return rc;
}

/* The script's answer: the JSON line (runtime, version, vocab, rows) and rows x vocab float32 LE. */
static int parse_answer(float *out /* [rows, vocab] */, char **version, const cp_spawn_result *res, size_t rows,
                        int vocab, const char *what) {
  const char *nl = memchr(res->out, '\n', res->out_len < HEADER_MAX ? res->out_len : HEADER_MAX);
  cJSON *h = NULL;
  size_t need;
  int rc = 0;
  if (!nl) return cp_error_set(CP_EVERIFY_RUNTIME, "%s: no header line in the runtime's answer", what);
  if (cp_json_parse_strict(&h, res->out, (size_t)(nl - res->out), what, 4, CP_EVERIFY_RUNTIME, CP_EVERIFY_RUNTIME,
                           CP_EVERIFY_RUNTIME, CP_EVERIFY_RUNTIME) < 0)
    return cp_error_code();
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(h, "version"), *r = cJSON_GetObjectItemCaseSensitive(h, "rows"),
              *V = cJSON_GetObjectItemCaseSensitive(h, "vocab");
  if (!cJSON_IsString(v) || !cJSON_IsNumber(r) || !cJSON_IsNumber(V) || r->valuedouble != (double)rows ||
      V->valuedouble != (double)vocab || !cp_size_mul(&need, rows, (size_t)vocab) || !cp_size_mul(&need, need, 4) ||
      res->out_len - (size_t)(nl + 1 - res->out) != need) {
    rc = cp_error_set(CP_EVERIFY_RUNTIME, "%s: the runtime's answer is not %zu rows of %d logits", what, rows, vocab);
    goto done;
  }
  const unsigned char *p = (const unsigned char *)nl + 1;
  for (size_t i = 0; i < rows * (size_t)vocab; i++) {
    uint32_t u =
        (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
    memcpy(&out[i], &u, 4);
  }
  CP_CHECK_ALLOC_GOTO(*version = strdup(v->valuestring), what);
done:
  cJSON_Delete(h);
  return rc;
}

/* Whether the folder holds what the runtime needs; else *why says what is missing. */
static bool installed(const char *dir, cp_runtime_kind kind, char *why, size_t cap) {
  const char *need[2] = {kind == CP_RUNTIME_LLAMACPP ? "node-llama-cpp" : "onnxruntime-node",
                         kind == CP_RUNTIME_LLAMACPP ? "@node-llama-cpp/linux-x64" : NULL};
  for (int i = 0; i < 2 && need[i]; i++) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/package.json", dir, need[i]);
    if (stat(path, &st) != 0) {
      snprintf(why, cap, "%s is not installed in %s", need[i], dir);
      return false;
    }
  }
  return true;
}

bool cp_runtime_installed(const cp_runtime_params *params, cp_runtime_kind kind) {
  char why[4200];
  return params && params->node_modules && installed(params->node_modules, kind, why, sizeof why);
}

/* `weights` (may be NULL) is kept for a later check --rerun's tolerance (ONNX: not in the graph's metadata). */
static cJSON *not_checked(cp_runtime_kind kind, const char *why, const char *weights) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "runtime", cp_runtime_name(kind));
  cJSON_AddNullToObject(o, "version");
  cJSON_AddStringToObject(o, "result", "not checked");
  cJSON_AddStringToObject(o, "statement", CP_RUNTIME_NOT_CHECKED);
  cJSON_AddStringToObject(o, "reason", why);
  if (weights) cJSON_AddStringToObject(o, "weights", weights);
  return o;
}

/* What the GGUF says of itself: its content digest (what llama.cpp computes with; "" when none) and
 * its weights' type from general.file_type (llama_ftype: 0 F32, 1 F16, 7 Q8_0, 32 BF16); whether it
 * has no vocabulary (tokenizer.ggml.model "no_vocab", which node-llama-cpp aborts on). */
static void gguf_facts(char hex[65], char weights[32], bool *no_vocab, const char *path) {
  cp_gguf_file *g = NULL;
  const char *v = NULL;
  size_t len = 0;
  int64_t ft = -1;
  hex[0] = '\0';
  snprintf(weights, 32, "f32");
  if (cp_gguf_open(&g, path) == 0) {
    if (cp_gguf_find_key(g, "ctxpatch.content_sha256") >= 0 &&
        cp_gguf_get_str(&v, &len, g, "ctxpatch.content_sha256") == 0 && len == 64) {
      memcpy(hex, v, 64);
      hex[64] = '\0';
    }
    *no_vocab = cp_gguf_find_key(g, "tokenizer.ggml.model") >= 0 &&
                cp_gguf_get_str(&v, &len, g, "tokenizer.ggml.model") == 0 && len == 8 && !memcmp(v, "no_vocab", 8);
    if (cp_gguf_find_key(g, "general.file_type") >= 0 && cp_gguf_get_int(&ft, g, "general.file_type") == 0 && ft != 0)
      snprintf(weights, 32, ft == 1 ? "f16" : ft == 7 ? "q8_0" : ft == 32 ? "bf16" : "file_type %lld", (long long)ft);
  }
  cp_error_clear();
  cp_gguf_free(g);
}

/* Where the largest difference lies: row `row` of the prompts' positions as (prompt, position). */
static void add_diff_at(cJSON *o, const prompt_set *ps, size_t row) {
  cJSON *at = cJSON_AddObjectToObject(o, "max_diff_at");
  for (int i = 0; i < ps->n; row -= (size_t)ps->n_pos[i], i++)
    if (row < (size_t)ps->n_pos[i]) {
      cJSON_AddNumberToObject(at, "prompt", i);
      cJSON_AddNumberToObject(at, "tokens", (double)ps->s[i].n_ids);
      cJSON_AddNumberToObject(at, "position", (double)ps->pos[i][row]);
      return;
    }
}

static cJSON *result_object(cp_runtime_kind kind, const char *version, const prompt_set *ps, double diff,
                            size_t diff_row, int top1_agree, const char *weights, const char *content) {
  const double tol = cp_runtime_tolerance(weights);
  const bool equal = diff <= tol; /* NaN (a non-finite logit) is not equal */
  cJSON *o = cJSON_CreateObject();
  char line[320];
  cJSON_AddStringToObject(o, "runtime", cp_runtime_name(kind));
  cJSON_AddStringToObject(o, "version", version);
  cJSON_AddNumberToObject(o, "prompts", ps->n);
  cJSON_AddNumberToObject(o, "positions", (double)ps->rows);
  cJSON_AddStringToObject(o, "prompts_sha256", ps->sha256);
  if (content[0]) cJSON_AddStringToObject(o, "content_sha256", content);
  cJSON_AddStringToObject(o, "weights", weights);
  if (isfinite(diff)) cJSON_AddNumberToObject(o, "max_abs_logit_diff", cp_num_round(diff, CP_NUM_JSON_DIGITS));
  else cJSON_AddNullToObject(o, "max_abs_logit_diff");
  add_diff_at(o, ps, diff_row);
  cJSON_AddNumberToObject(o, "top1_agree", top1_agree);
  cJSON_AddNumberToObject(o, "tolerance", tol);
  cJSON_AddStringToObject(o, "result", equal ? "equal" : "differs");
  if (equal)
    snprintf(line, sizeof line,
             "certified on the ctxpatch engine; %s computes the same logits on the probe prompts "
             "(max |diff| %.3g <= %g)",
             cp_runtime_name(kind), diff, tol);
  else
    snprintf(line, sizeof line,
             "%s computes other logits than the certified engine on the probe prompts (max |diff| "
             "%.3g > %g): it runs something other than what was certified",
             cp_runtime_name(kind), diff, tol);
  cJSON_AddStringToObject(o, "statement", line);
  return o;
}

int cp_runtime_check(cJSON **out, bool *differs, const cp_runtime_params *params, cp_runtime_kind kind,
                     const char *artifact, const cp_model *m, const cp_rule *rule, const cp_tokenizer *tok,
                     const cp_runtime_prompts *pr, const char *weights) {
  prompt_set ps = {0};
  char content[65] = "", wtype[32] = "f32";
  char req[64] = "", why[4200], *version = NULL, what[4200];
  float *ours = NULL, *theirs = NULL;
  cp_spawn_result res = {0};
  int rc = 0;
  *out = NULL;
  *differs = false;
  if (!params || !params->node_modules) {
    CP_CHECK_ALLOC(*out = not_checked(kind, "no runtime folder given (--runtime-dir or CTXPATCH_RUNTIMES)", weights),
                   "runtime");
    return 0;
  }
  if (!installed(params->node_modules, kind, why, sizeof why)) {
    CP_CHECK_ALLOC(*out = not_checked(kind, why, weights), "runtime");
    return 0;
  }
  if (m && m->family == CP_FAMILY_T5) { /* the script feeds decoder-only prompts */
    CP_CHECK_ALLOC(*out = not_checked(kind, "an encoder-decoder model: the runtime check compares decoder-only models",
                                      weights),
                   "runtime");
    return 0;
  }
  if (!params->script)
    return cp_error_set(CP_EARG, "runtime check: no ctxpatch_runtime.mjs script to drive %s", cp_runtime_name(kind));
  snprintf(what, sizeof what, "%s: %s runtime check", artifact, cp_runtime_name(kind));
  bool no_vocab = false;
  if (kind == CP_RUNTIME_LLAMACPP) gguf_facts(content, wtype, &no_vocab, artifact);
  if (no_vocab) {
    CP_CHECK_ALLOC(*out = not_checked(kind,
                                      "the file has no vocabulary (tokenizer.ggml.model no_vocab), which "
                                      "node-llama-cpp cannot load",
                                      weights),
                   "runtime");
    return 0;
  }
  if (weights) snprintf(wtype, sizeof wtype, "%s", weights);
  if ((rc = make_prompts(&ps, tok, pr)) < 0) goto done;
  size_t n;
  if (!cp_size_mul(&n, ps.rows, (size_t)m->vocab)) {
    rc = cp_error_set(CP_EOVERFLOW, "%s: %zu rows x %d logits", what, ps.rows, m->vocab);
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(ours = malloc(n * sizeof *ours + 1), what);
  CP_CHECK_ALLOC_GOTO(theirs = malloc(n * sizeof *theirs + 1), what);
  int threads = params->threads > 0 ? params->threads : pr->threads > 0 ? pr->threads : cp_cpu_count();
  if ((rc = engine_logits(ours, m, rule, &ps, threads)) < 0) goto done;
  if ((rc = write_request(req, &ps, m->vocab, threads)) < 0) goto done;
  const char *argv[] = {params->node ? params->node : "node",
                        params->script,
                        params->node_modules,
                        cp_runtime_name(kind),
                        artifact,
                        req,
                        NULL};
  if ((rc = cp_spawn_capture(&res, argv, n * 4 + HEADER_MAX,
                             params->timeout_s > 0 ? params->timeout_s : CP_RUNTIME_TIMEOUT, what)) < 0) {
    char msg[1024]; /* the message buffer is the one cp_error_set writes */
    snprintf(msg, sizeof msg, "%s", cp_error_message());
    rc = cp_error_set(CP_EVERIFY_RUNTIME, "%s", msg);
    goto done;
  }
  if (res.status == 3 && kind == CP_RUNTIME_ONNXRUNTIME && cp_path_has_suffix(artifact, ".onnx")) {
    /* a graph file whose output is not logits (a headless GPT2Model): nothing to compare */
    CP_CHECK_ALLOC_GOTO(*out = not_checked(kind, res.err_line[0] ? res.err_line : "the graph gives no logits", weights),
                        what);
    goto done;
  }
  if (res.status != 0) {
    rc = cp_error_set(CP_EVERIFY_RUNTIME, "%s: exit %d: %s", what, res.status,
                      res.err_line[0] ? res.err_line : "no message");
    goto done;
  }
  if ((rc = parse_answer(theirs, &version, &res, ps.rows, m->vocab, what)) < 0) goto done;
  double diff = 0;
  size_t diff_row = 0;
  int agree = 0;
  for (size_t r = 0; r < ps.rows; r++) {
    const float *a = ours + r * (size_t)m->vocab, *b = theirs + r * (size_t)m->vocab;
    int ia = 0, ib = 0;
    for (int v = 0; v < m->vocab; v++) {
      double d = fabs((double)a[v] - (double)b[v]);
      if (!(d <= diff)) diff = isnan(d) ? NAN : d, diff_row = r; /* a NaN sticks */
      if (isnan(diff)) break;
      ia = a[v] > a[ia] ? v : ia;
      ib = b[v] > b[ib] ? v : ib;
    }
    if (isnan(diff)) break;
    agree += ia == ib;
  }
  CP_CHECK_ALLOC_GOTO(*out = result_object(kind, version, &ps, diff, diff_row, agree, wtype, content), what);
  *differs = !(diff <= cp_runtime_tolerance(wtype));
done:
  if (req[0]) unlink(req);
  free(res.out);
  free(version);
  free(ours);
  free(theirs);
  prompts_free(&ps);
  return rc;
}
