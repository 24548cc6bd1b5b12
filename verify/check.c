/* `ctxpatch check` (include/ctxpatch/verify/check.h): the manifest against the files, the
 * certificate against the files and the metadata, then the schema and the optional re-run. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/quote.h"
#include "verify/check_int.h"

#define SUMS_NAME "SHA256SUMS"
#define CERT_NAME "certificate.json"
#define REPORT_NAME "report.html"
#define SUMS_MAX ((size_t)16 << 20)
#define CERT_MAX ((size_t)64 << 20)

void cp_check_params_init(cp_check_params *p) {
  memset(p, 0, sizeof *p);
  p->tolerance = CP_CHECK_DEFAULT_TOLERANCE;
}

void cp_check_report_free(cp_check_report *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_failures; i++) free(r->failures[i].message);
  free(r->failures);
  memset(r, 0, sizeof *r);
}

int check_fail(cp_check_report *r, const char *kind, const char *fmt, ...) {
  char raw[1024], line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  cp_quote_text(line, sizeof line, raw, strlen(raw), 0); /* one line, names made printable */
  char *msg = strdup(line);
  if (!msg || CP_ARRAY_RESERVE(r->failures, r->cap, r->n_failures + 1, "check report") < 0) {
    free(msg);
    r->oom = true;
    return cp_nomem("check report");
  }
  cp_check_failure *f = &r->failures[r->n_failures++];
  snprintf(f->kind, sizeof f->kind, "%s", kind);
  f->message = msg;
  return 0;
}

int check_meta_add(check_ctx *c, const char *where, cJSON *block) {
  int rc = CP_ARRAY_RESERVE(c->meta, c->cap_meta, c->n_meta + 1, "check metadata");
  char *w = rc == 0 ? strdup(where) : NULL;
  if (!w) {
    cJSON_Delete(block);
    return rc < 0 ? rc : cp_nomem("check metadata");
  }
  c->meta[c->n_meta++] = (check_meta){w, block};
  return 0;
}

/* A manifest line: "<64 lowercase hex>  <name>" (or " *<name>", sha256sum's binary mode). */
typedef struct {
  char hex[65];
  char *name; /* points into the manifest text */
} sums_entry;

static bool is_hex64(const char *s) {
  for (int i = 0; i < 64; i++)
    if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return false;
  return true;
}

/* A relative path that stays inside the folder. */
static bool safe_name(const char *n) {
  if (!*n || *n == '/') return false;
  for (const char *p = n; *p;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 0 || (len == 2 && !strncmp(p, "..", 2)) || (len == 1 && *p == '.')) return false;
    p += len + (e ? 1 : 0);
  }
  return true;
}

/* Parses SHA256SUMS (text modified in place); bad lines are failures, not errors. */
static int parse_sums(sums_entry **out, size_t *n_out, char *text, size_t len, cp_check_report *r) {
  sums_entry *v = NULL;
  size_t n = 0, cap = 0;
  int rc = 0, line_no = 0;
  for (char *p = text; p < text + len && rc == 0;) {
    char *nl = memchr(p, '\n', (size_t)(text + len - p));
    char *end = nl ? nl : text + len;
    *end = '\0';
    line_no++;
    size_t ll = (size_t)(end - p);
    if (ll == 0) {
    } else if (ll < 67 || !is_hex64(p) || p[64] != ' ' || (p[65] != ' ' && p[65] != '*') || memchr(p, '\0', ll)) {
      rc = check_fail(r, "sums-syntax", SUMS_NAME ": line %d: not '<sha256>  <name>'", line_no);
    } else if (!safe_name(p + 66)) {
      rc = check_fail(r, "sums-syntax", SUMS_NAME ": line %d: unsafe name '%s' (absolute, empty or '..')", line_no, p + 66);
    } else {
      bool dup = false;
      for (size_t i = 0; i < n && !dup; i++) dup = !strcmp(v[i].name, p + 66);
      if (dup) rc = check_fail(r, "sums-syntax", SUMS_NAME ": line %d: '%s' listed twice", line_no, p + 66);
      else if ((rc = CP_ARRAY_RESERVE(v, cap, n + 1, SUMS_NAME)) == 0) {
        memcpy(v[n].hex, p, 64);
        v[n].hex[64] = '\0';
        v[n++].name = p + 66;
      }
    }
    p = end + 1;
  }
  *out = v;
  *n_out = n;
  return rc;
}

/* SHA-256 of a file as it is and with every occurrence of `zero` (64 chars; NULL: none) replaced by
 * 64 '0's, in one read: the certificate hashes files with the digest placeholder (docs/patching.md). */
static int hash_two(char plain[65], char zeroed[65], const char *path, const char *zero) {
  enum { CHUNK = 1 << 20, KEEP = 63 };
  FILE *fp = NULL;
  cp_sha256 *h1 = NULL, *h2 = NULL;
  unsigned char *buf = NULL;
  int rc = cp_fopen_input(&fp, path);
  if (rc < 0) return rc;
  if ((rc = cp_sha256_new(&h1)) < 0 || (rc = cp_sha256_new(&h2)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(buf = malloc(CHUNK + KEEP), path);
  size_t carry = 0, got;
  do {
    got = fread(buf + carry, 1, CHUNK, fp);
    cp_sha256_update(h1, buf + carry, got);
    size_t have = carry + got;
    for (size_t at = 0; zero && at + 64 <= have; at++) /* memmem is a GNU extension */
      if (buf[at] == (unsigned char)zero[0] && !memcmp(buf + at, zero, 64)) memset(buf + at, '0', 64);
    size_t feed = got == 0 ? have : (have > KEEP ? have - KEEP : 0);
    cp_sha256_update(h2, buf, feed);
    memmove(buf, buf + feed, have - feed);
    carry = have - feed;
  } while (got > 0);
  if (ferror(fp)) {
    rc = cp_error_set(CP_EIO, "%s: read error", path);
    goto done;
  }
  cp_sha256_peek(h1, plain);
  cp_sha256_peek(h2, zeroed);
done:
  free(buf);
  cp_sha256_free(h1);
  cp_sha256_free(h2);
  fclose(fp);
  return rc;
}

static const char *str_at(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The certificate digest the metadata placed in the files (the first record's), else NULL. */
static const char *placed_digest(const check_ctx *c) {
  for (size_t i = 0; i < c->n_meta; i++) {
    const char *d = str_at(c->meta[i].block, "certificate_sha256");
    if (d && strlen(d) == 64) return d;
  }
  return NULL;
}

/* The digest the certificate's model.files records for `name`, or NULL. */
static const char *certified_digest(const cJSON *cert, const char *name, bool *listed) {
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "model"), "files");
  const cJSON *f;
  *listed = false;
  cJSON_ArrayForEach(f, files) {
    const char *p = str_at(f, "path");
    if (p && !strcmp(p, name)) {
      *listed = true;
      return str_at(f, "sha256");
    }
  }
  return NULL;
}

/* Files written after certification: not among the certificate's model.files. */
static bool after_certification(const char *name) {
  return !strcmp(name, CERT_NAME) || !strcmp(name, REPORT_NAME);
}

/* Files a Hugging Face hub download puts beside the weights, which no runtime loads: the model
 * card, git's attributes and huggingface_hub's download records (docs/ci.md). Present but not in
 * SHA256SUMS, they are not failures; listed, they are checked like any file. */
static bool hub_file(const char *name) {
  return !strcmp(name, "README.md") || !strcmp(name, ".gitattributes") || !strncmp(name, ".cache/huggingface/", 19);
}

/* Point 1 and the file half of point 3 (check.h). */
static int check_files(check_ctx *c, const sums_entry *sums, size_t n_sums) {
  cp_check_report *r = c->report;
  const char *zero = placed_digest(c);
  char *full = NULL;
  int rc = 0;
  for (size_t i = 0; i < n_sums && rc == 0; i++) {
    const cp_file_entry *e = cp_file_list_find(&c->files, sums[i].name);
    if (!e) {
      rc = check_fail(r, "sums-missing-file", "%s: listed in " SUMS_NAME " but absent", sums[i].name);
      continue;
    }
    if (!S_ISREG(e->mode)) {
      rc = check_fail(r, "not-regular", "%s: is a %s, not a regular file", e->path, cp_file_type_name(e->mode));
      continue;
    }
    free(full);
    CP_CHECK_ALLOC_GOTO(full = cp_path_join(c->path, e->path), c->path);
    char plain[65], zeroed[65];
    if ((rc = hash_two(plain, zeroed, full, zero)) < 0) {
      rc = check_fail(r, "unreadable", "%s: %s", e->path, cp_error_message());
      continue;
    }
    if (strcmp(plain, sums[i].hex) != 0)
      rc = check_fail(r, "sums-mismatch", "%s: SHA-256 %.12s... differs from " SUMS_NAME "'s %.12s...", e->path, plain,
                      sums[i].hex);
    if (rc || !c->cert || after_certification(e->path)) continue;
    bool listed;
    const char *want = certified_digest(c->cert, e->path, &listed);
    if (!listed)
      rc = check_fail(r, "cert-files", "%s: in the artifact but not among the certificate's model.files", e->path);
    else if (want && strcmp(want, zeroed) != 0)
      rc = check_fail(r, "cert-files", "%s: SHA-256 %.12s... (digest field as zeros) differs from the certified %.12s...",
                      e->path, zeroed, want);
  }
  for (size_t i = 0; i < c->files.n && rc == 0; i++) { /* present but not listed */
    const char *name = c->files.items[i].path;
    bool listed = !strcmp(name, SUMS_NAME) || !strcmp(name, CP_BATCH_STAMP_NAME) || hub_file(name);
    for (size_t k = 0; k < n_sums && !listed; k++) listed = !strcmp(sums[k].name, name);
    if (!listed) rc = check_fail(r, "sums-extra-file", "%s: present but not listed in " SUMS_NAME, name);
  }
  const cJSON *f, *files = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->cert, "model"), "files");
  cJSON_ArrayForEach(f, files) { /* certified but gone */
    const char *p = str_at(f, "path");
    if (rc == 0 && p && !cp_file_list_find(&c->files, p))
      rc = check_fail(r, "cert-files", "%s: among the certificate's model.files but absent", p);
  }
done:
  free(full);
  return rc;
}

/* One metadata field against the certificate's value (both strings, or both JSON trees). */
static int compare_field(check_ctx *c, const check_meta *m, const char *kind, const char *key, const cJSON *want,
                         const char *cert_key, bool required) {
  const cJSON *have = cJSON_GetObjectItemCaseSensitive(m->block, key);
  if (!have) return required ? check_fail(c->report, "meta-missing", "%s: no '%s'", m->where, key) : 0;
  if (!want || cJSON_Compare(have, want, true)) return 0;
  char *h = cJSON_PrintUnformatted(have), *w = cJSON_PrintUnformatted(want);
  int rc = check_fail(c->report, kind, "%s: %s %s differs from the certificate's %s %s", m->where, key, h ? h : "?", cert_key, w ? w : "?");
  free(h);
  free(w);
  return rc;
}

/* The metadata half of point 3 (check.h). */
static int check_metadata(check_ctx *c) {
  const cJSON *cert = c->cert, *patch = cJSON_GetObjectItemCaseSensitive(cert, "patch");
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "tool"), "version");
  int rc = 0;
  for (size_t i = 0; i < c->n_meta && rc == 0; i++) {
    const check_meta *m = &c->meta[i];
    const cJSON *certified = cJSON_GetObjectItemCaseSensitive(m->block, "certified");
    if (certified && !cJSON_IsTrue(certified))
      rc = check_fail(c->report, "meta-certified", "%s: certified is not true (written with --no-verify)", m->where);
    const char *digest = str_at(m->block, "certificate_sha256");
    if (rc == 0 && (!digest || strcmp(digest, c->report->certificate_sha256) != 0))
      rc = check_fail(c->report, "cert-digest", "%s: certificate_sha256 %.12s... is not %s's %.12s...", m->where,
                      digest ? digest : "(none)", c->cert_text ? "ctxpatch.certificate" : CERT_NAME,
                      c->report->certificate_sha256);
    if (rc == 0) rc = compare_field(c, m, "meta-version", "tool_version", version, "tool.version", true);
    if (rc == 0) rc = compare_field(c, m, "meta-fidelity", "fidelity", cJSON_GetObjectItemCaseSensitive(patch, "fidelity"), "patch.fidelity", true);
    if (rc == 0) rc = compare_field(c, m, "meta-method", "method", cJSON_GetObjectItemCaseSensitive(patch, "method"), "patch.method", false);
    if (rc == 0) rc = compare_field(c, m, "meta-rule", "rule", cJSON_GetObjectItemCaseSensitive(patch, "rule"), "patch.rule", true);
    /* The rule the engine applied when certifying is the metadata rule. */
    if (rc == 0) rc = compare_field(c, m, "meta-rule", "rule", cJSON_GetObjectItemCaseSensitive(cert, "rule"), "rule", false);
    if (rc == 0)
      rc = compare_field(c, m, "meta-rule", "baked_rule", cJSON_GetObjectItemCaseSensitive(patch, "baked_rule"), "patch.baked_rule", false);
    /* Who executes the artifact (docs/patching.md, "Runtimes"); absent on both sides before the table. */
    if (rc == 0)
      rc = compare_field(c, m, "meta-effective", "effective_in", cJSON_GetObjectItemCaseSensitive(patch, "effective_in"),
                         "patch.effective_in", false);
  }
  return rc;
}

/* The certificate's text (`name`: where it came from): digest, parse, schema, verdict. */
static int parse_certificate(check_ctx *c, const char *text, size_t len, const char *name) {
  cp_check_report *r = c->report;
  int rc = 0;
  cp_sha256_hex(r->certificate_sha256, text, len);
  if (cp_json_parse_strict(&c->cert, text, len, name, 64, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0 ||
      !cJSON_IsObject(c->cert)) {
    rc = check_fail(r, "cert-json", "%s%s", c->cert ? name : cp_error_message(), c->cert ? ": not a JSON object" : "");
    cJSON_Delete(c->cert);
    c->cert = NULL;
    return rc;
  }
  size_t before = r->n_failures;
  if ((rc = check_certificate_schema(r, c->cert)) < 0) return rc;
  const char *verdict = str_at(cJSON_GetObjectItemCaseSensitive(c->cert, "verdict"), "result");
  if (verdict && strcmp(verdict, "pass") != 0) rc = check_fail(r, "cert-verdict", "%s: verdict.result is '%s'", name, verdict);
  if (r->n_failures > before) { /* the cross-checks read fields the schema vouches for */
    cJSON_Delete(c->cert);
    c->cert = NULL;
  }
  return rc;
}

/* certificate.json of a folder, or the text a single-file format embedded. Absent or broken is a failure. */
static int load_certificate(check_ctx *c) {
  if (c->cert_text) return parse_certificate(c, c->cert_text, c->cert_len, "ctxpatch.certificate");
  char *path = cp_path_join(c->path, CERT_NAME), *text = NULL;
  size_t len = 0;
  CP_CHECK_ALLOC(path, c->path);
  int rc = cp_read_file(&text, &len, path, CERT_MAX);
  if (rc < 0) rc = check_fail(c->report, "cert-missing", CERT_NAME ": %s", cp_error_message());
  else rc = parse_certificate(c, text, len, CERT_NAME);
  free(path);
  free(text);
  return rc;
}

static int check_sums(check_ctx *c) {
  char *path = cp_path_join(c->path, SUMS_NAME), *text = NULL;
  size_t len = 0, n = 0;
  sums_entry *sums = NULL;
  CP_CHECK_ALLOC(path, c->path);
  struct stat st;
  int rc = 0;
  if (lstat(path, &st) != 0 && errno == ENOENT)
    rc = check_fail(c->report, "sums-missing", SUMS_NAME ": absent: the artifact has no manifest (written with "
                                               "--no-manifest?), so its files cannot be checked");
  else if ((rc = cp_read_file(&text, &len, path, SUMS_MAX)) < 0)
    rc = check_fail(c->report, "sums-missing", SUMS_NAME ": %s", cp_error_message());
  else if ((rc = parse_sums(&sums, &n, text, len, c->report)) == 0) {
    c->report->n_files = n;
    rc = check_files(c, sums, n);
  }
  free(sums);
  free(text);
  free(path);
  return rc;
}

/* The report beside the certificate: a folder's report.html, a single file's FILE.report.html. */
static int check_report_of(check_ctx *c, bool dir) {
  char *path = dir ? cp_path_join(c->path, REPORT_NAME) : malloc(strlen(c->path) + sizeof CP_REPORT_SUFFIX);
  CP_CHECK_ALLOC(path, c->path);
  if (!dir) sprintf(path, "%s" CP_REPORT_SUFFIX, c->path);
  int rc = check_report(c, path, dir ? REPORT_NAME : path);
  free(path);
  return rc;
}

int cp_check_artifact(cp_check_report *out, const char *path, const cp_check_params *params) {
  memset(out, 0, sizeof *out);
  check_ctx c = {.path = path, .report = out};
  struct stat st;
  int rc = 0;
  if (stat(path, &st) != 0) return cp_error_set(CP_ENOTFOUND, "%s: no such artifact", path);
  const check_format *fmt = S_ISDIR(st.st_mode) ? NULL : check_format_of_file(path);
  if (S_ISDIR(st.st_mode)) {
    if ((rc = cp_file_list_make(&c.files, path)) < 0) return rc;
    fmt = check_format_detect(&c.files);
  }
  if (!fmt) {
    rc = cp_error_set(CP_EFORMAT, "%s: not a ctxpatch artifact (no safetensors, ONNX or GGUF weights)", path);
    goto done;
  }
  out->format = fmt->name;
  bool dir = S_ISDIR(st.st_mode);
  if (dir ? !fmt->read_meta : !fmt->read_file) {
    rc = cp_error_set(CP_EUNSUPPORTED, "%s: %s artifacts%s: format not supported by check yet", path, fmt->name,
                      dir ? " as a folder" : " as one file");
    goto done;
  }
  /* GGUF and ONNX: --rerun redoes the runtime comparison only, so it needs the runtime (an ONNX
   * folder, or the graph file of patch IN.onnx OUT.onnx, whose comparison was made on that file). */
  bool runtime = params && params->runtime && params->runtime->node_modules;
  if (params && params->rerun && !runtime && !strcmp(fmt->name, "onnx")) { /* probes: C engine only */
    rc = cp_error_set(CP_EUNSUPPORTED, "%s: --rerun: the C engine does not run ONNX graphs; check the artifact without "
                                       "--rerun, or give --runtime-dir to redo the onnxruntime comparison (docs/onnx.md)",
                      path);
    goto done;
  }
  if (params && params->rerun && !runtime && !dir) { /* GGUF: the probes are not re-run on one file */
    rc = cp_error_set(CP_EUNSUPPORTED, "%s: --rerun: not supported for a %s file without --runtime-dir (which redoes the "
                                       "llama.cpp comparison); or --rerun the folder patch wrote without --to gguf "
                                       "(docs/ci.md)", path, fmt->name);
    goto done;
  }
  if (dir) {
    if ((rc = load_certificate(&c)) < 0 || (rc = fmt->read_meta(&c)) < 0 || (rc = check_sums(&c)) < 0) goto done;
  } else if ((rc = fmt->read_file(&c)) < 0 || (c.cert_text && (rc = load_certificate(&c)) < 0)) {
    goto done; /* one file: no manifest; the certificate comes out of the file */
  }
  if (c.cert && (rc = check_metadata(&c)) < 0) goto done;
  if (c.cert && (rc = check_report_of(&c, dir)) < 0) goto done;
  if (c.cert && (rc = check_runtime(&c, params)) < 0) goto done;
  if (c.cert && (rc = check_policy(&c, params)) < 0) goto done;
  /* An artifact that failed a static check is not run: its certificate may be edited to ask
   * for any amount of work (docs/reliability.md, "Work budget"). */
  if (c.cert && params && params->rerun && !strcmp(fmt->name, "safetensors") && out->n_failures == 0)
    rc = check_rerun(&c, params);
done:
  for (size_t i = 0; i < c.n_meta; i++) {
    free(c.meta[i].where);
    cJSON_Delete(c.meta[i].block);
  }
  free(c.meta);
  free(c.cert_text);
  cJSON_Delete(c.cert);
  cp_file_list_free(&c.files);
  return rc;
}
