/* The verify report (include/ctxpatch/verify/report.h): one self-contained HTML5 page drawn from a
 * certificate (docs/certificate.md). No scripts and no external resources: CSS is inline and
 * every chart is inline SVG drawn here. Every string taken from the certificate is escaped (it
 * holds file names and rule JSON), invalid UTF-8 becomes U+FFFD, and numbers use fixed formats,
 * so the same certificate always gives the same bytes. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/utf8.h"
#include "ctxpatch/verify/report.h"

/* ---- growing string buffer ------------------------------------------------------------- */

typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra) {
  if (b->oom) return;
  if (extra > SIZE_MAX / 2 - b->len) {
    b->oom = true;
    return;
  }
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->oom = true;
    return;
  }
  b->p = p;
  b->cap = cap;
}

static void sb_putn(sbuf *b, const char *s, size_t n) {
  sb_reserve(b, n);
  if (b->oom) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = true;
    return;
  }
  if ((size_t)n < sizeof small) {
    sb_putn(b, small, (size_t)n);
    return;
  }
  sb_reserve(b, (size_t)n);
  if (b->oom) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Text or attribute content: markup characters become entities, control characters other
 * than tab and newline and invalid UTF-8 become U+FFFD. */
static void sb_esc(sbuf *b, const char *s) {
  const unsigned char *u = (const unsigned char *)(s ? s : "");
  const unsigned char *end = u + strlen((const char *)u);
  while (*u) {
    unsigned c = *u;
    const char *ent = NULL;
    switch (c) {
    case '&': ent = "&amp;"; break;
    case '<': ent = "&lt;"; break;
    case '>': ent = "&gt;"; break;
    case '"': ent = "&quot;"; break;
    case '\'': ent = "&#39;"; break;
    default: break;
    }
    if (ent) {
      sb_puts(b, ent);
      u++;
    } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
      sb_puts(b, "&#xFFFD;");
      u++;
    } else {
      uint32_t cp;
      size_t n = cp_utf8_decode(&cp, u, (size_t)(end - u));
      if (n == 0) {
        sb_puts(b, "&#xFFFD;");
        u++;
      } else {
        sb_putn(b, (const char *)u, n);
        u += n;
      }
    }
  }
}

/* ---- number formats (fixed, so output is deterministic) -------------------------------- */

/* Integers as integers, other numbers with three decimals, NaN as an en dash. */
static void fmt_num(char out[48], double v) {
  if (isnan(v)) snprintf(out, 48, "\xE2\x80\x93");
  else if (fabs(v) < 1e18 && v == floor(v)) snprintf(out, 48, "%.0f", v);
  else if (fabs(v) < 1e15) snprintf(out, 48, "%.3f", v);
  else snprintf(out, 48, "%.6g", v);
}

/* Lengths on chart axes: 1024 multiples as "4K", others exact. */
static void fmt_len_short(char out[32], double len) {
  long long v = (long long)len;
  if (v >= 1024 && v % 1024 == 0) snprintf(out, 32, "%lldK", v / 1024);
  else snprintf(out, 32, "%lld", v);
}

/* ---- parsed certificate ---------------------------------------------------------------- */

typedef struct {
  bool present;
  double *acc;  /* [n_lengths] accuracy over depths (NaN = null) */
  double *cell; /* [n_lengths * n_depths] correct_by_depth / samples */
} side_probe;

typedef struct {
  bool present;
  int n;
  double *len, *pmax, *entropy; /* [n] */
} side_attention;

typedef struct {
  int n_probes, n_lengths, n_depths;
  const char **probe_names; /* [n_probes], borrowed from the cJSON */
  double *lengths;          /* [n_lengths] */
  double *depths;           /* [n_depths] */
  double samples;
  bool has_baseline;
  side_probe *side[2];      /* [n_probes] each; [1] only with a baseline */
  side_attention att[2];
} report_data;

static const char *const SIDE_NAME[2] = {"patched", "baseline"};

static void data_free(report_data *d) {
  free(d->probe_names);
  free(d->lengths);
  free(d->depths);
  for (int s = 0; s < 2; s++) {
    if (d->side[s]) {
      for (int p = 0; p < d->n_probes; p++) {
        free(d->side[s][p].acc);
        free(d->side[s][p].cell);
      }
      free(d->side[s]);
    }
    free(d->att[s].len);
    free(d->att[s].pmax);
    free(d->att[s].entropy);
  }
}

/* CP_EARG with the one-line message "certificate: key 'K': why". */
static int bad_key(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_key(const char *key, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return cp_error_set(CP_EARG, "certificate: key '%s': %s", key, why);
}

/* Lengths are token counts; above 2^53 a double no longer holds every integer. */
#define MAX_LEN 9007199254740992.0

static bool is_int(double v) { return isfinite(v) && v == floor(v); }

/* A number, or NaN for null; anything else is refused. */
static int num_or_null(double *out, const cJSON *it, const char *key) {
  if (cJSON_IsNull(it)) {
    *out = NAN;
    return 0;
  }
  if (!cJSON_IsNumber(it)) return bad_key(key, "expected a number or null");
  *out = it->valuedouble;
  return 0;
}

/* An optional object member must have the given type when present. */
static int check_type(const cJSON *obj, const char *name, const char *key, cJSON_bool (*is)(const cJSON *),
                      const char *what) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
  if (it && !is(it)) return bad_key(key, "expected %s", what);
  return 0;
}

static int alloc_doubles(double **out, size_t n) {
  *out = calloc(n ? n : 1, sizeof **out);
  return *out ? 0 : cp_error_set(CP_ENOMEM, "certificate: out of memory");
}

static int parse_probe_side(side_probe *sp, const report_data *d, const cJSON *arr, int side, int p) {
  char key[192];
  const char *name = d->probe_names[p];
  snprintf(key, sizeof key, "results.%s.%s", SIDE_NAME[side], name);
  if (!cJSON_IsArray(arr)) return bad_key(key, "expected an array of per-length entries");
  if (cJSON_GetArraySize(arr) != d->n_lengths)
    return bad_key(key, "%d entries, probes.lengths has %d", cJSON_GetArraySize(arr), d->n_lengths);
  int rc;
  if ((rc = alloc_doubles(&sp->acc, (size_t)d->n_lengths)) < 0) return rc;
  if ((rc = alloc_doubles(&sp->cell, (size_t)d->n_lengths * (size_t)d->n_depths)) < 0) return rc;
  sp->present = true;
  int l = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    snprintf(key, sizeof key, "results.%s.%s[%d]", SIDE_NAME[side], name, l);
    if (!cJSON_IsObject(e)) return bad_key(key, "expected an object");
    const cJSON *len = cJSON_GetObjectItemCaseSensitive(e, "length");
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(e, "accuracy");
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(e, "correct_by_depth");
    snprintf(key, sizeof key, "results.%s.%s[%d].length", SIDE_NAME[side], name, l);
    if (!cJSON_IsNumber(len)) return bad_key(key, "missing or not a number");
    if (len->valuedouble != d->lengths[l])
      return bad_key(key, "%.0f does not match probes.lengths[%d] = %.0f", len->valuedouble, l, d->lengths[l]);
    snprintf(key, sizeof key, "results.%s.%s[%d].accuracy", SIDE_NAME[side], name, l);
    if (!acc) return bad_key(key, "missing");
    if ((rc = num_or_null(&sp->acc[l], acc, key)) < 0) return rc;
    if (!isnan(sp->acc[l]) && !(sp->acc[l] >= 0 && sp->acc[l] <= 1)) return bad_key(key, "not in [0, 1]");
    snprintf(key, sizeof key, "results.%s.%s[%d].correct_by_depth", SIDE_NAME[side], name, l);
    if (!cJSON_IsArray(by)) return bad_key(key, "missing or not an array");
    if (cJSON_GetArraySize(by) != d->n_depths)
      return bad_key(key, "%d entries, probes.depths has %d", cJSON_GetArraySize(by), d->n_depths);
    int k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, by) {
      if (!cJSON_IsNumber(c) || !is_int(c->valuedouble) || c->valuedouble < 0 || c->valuedouble > d->samples) {
        snprintf(key, sizeof key, "results.%s.%s[%d].correct_by_depth[%d]", SIDE_NAME[side], name, l, k);
        return bad_key(key, "expected an integer in [0, probes.samples = %.0f]", d->samples);
      }
      sp->cell[(size_t)l * d->n_depths + k] = c->valuedouble / d->samples;
      k++;
    }
    l++;
  }
  return 0;
}

static int parse_attention(side_attention *sa, const cJSON *arr, int side) {
  char key[96];
  snprintf(key, sizeof key, "results.%s.attention", SIDE_NAME[side]);
  if (!cJSON_IsArray(arr)) return bad_key(key, "expected an array of per-length entries");
  int n = cJSON_GetArraySize(arr), rc;
  if ((rc = alloc_doubles(&sa->len, (size_t)n)) < 0 || (rc = alloc_doubles(&sa->pmax, (size_t)n)) < 0 ||
      (rc = alloc_doubles(&sa->entropy, (size_t)n)) < 0)
    return rc;
  sa->present = n > 0;
  sa->n = n;
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, arr) {
    snprintf(key, sizeof key, "results.%s.attention[%d]", SIDE_NAME[side], i);
    if (!cJSON_IsObject(e)) return bad_key(key, "expected an object");
    const cJSON *len = cJSON_GetObjectItemCaseSensitive(e, "length");
    snprintf(key, sizeof key, "results.%s.attention[%d].length", SIDE_NAME[side], i);
    if (!cJSON_IsNumber(len) || !is_int(len->valuedouble) || len->valuedouble < 1 || len->valuedouble > MAX_LEN)
      return bad_key(key, "missing or not a positive integer");
    sa->len[i] = len->valuedouble;
    static const char *const fields[2] = {"pmax", "entropy"};
    double *dst[2] = {&sa->pmax[i], &sa->entropy[i]};
    for (int f = 0; f < 2; f++) {
      snprintf(key, sizeof key, "results.%s.attention[%d].%s", SIDE_NAME[side], i, fields[f]);
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, fields[f]);
      if (!v) return bad_key(key, "missing");
      if ((rc = num_or_null(dst[f], v, key)) < 0) return rc;
      if (!isnan(*dst[f]) && (!isfinite(*dst[f]) || *dst[f] < 0)) return bad_key(key, "negative or not finite");
    }
    if (!isnan(sa->pmax[i]) && sa->pmax[i] > 1) {
      snprintf(key, sizeof key, "results.%s.attention[%d].pmax", SIDE_NAME[side], i);
      return bad_key(key, "greater than 1");
    }
    i++;
  }
  return 0;
}

/* Checks the parts the page is drawn from. probes and results.patched are required; the rest
 * is optional but must have the documented type when present. */
static int parse(report_data *d, const cJSON *c) {
  int rc;
  if (!cJSON_IsObject(c)) return cp_error_set(CP_EARG, "certificate: not a JSON object");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(c, "certificate_version");
  if (ver && !cJSON_IsNumber(ver)) return bad_key("certificate_version", "expected a number");
  if (ver && ver->valuedouble != 1)
    return cp_error_set(CP_EUNSUPPORTED, "certificate: key 'certificate_version': %g is not version 1",
                        ver->valuedouble);

  /* optional blocks: type checks only; the renderer reads them defensively */
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(c, "model");
  if ((rc = check_type(c, "tool", "tool", cJSON_IsObject, "an object")) < 0) return rc;
  if ((rc = check_type(c, "model", "model", cJSON_IsObject, "an object")) < 0) return rc;
  if ((rc = check_type(c, "rule", "rule", cJSON_IsObject, "an object")) < 0) return rc;
  if ((rc = check_type(c, "thresholds", "thresholds", cJSON_IsObject, "an object")) < 0) return rc;
  if ((rc = check_type(c, "verdict", "verdict", cJSON_IsObject, "an object")) < 0) return rc;
  if ((rc = check_type(c, "run", "run", cJSON_IsObject, "an object")) < 0) return rc;
  const cJSON *tool = cJSON_GetObjectItemCaseSensitive(c, "tool");
  if ((rc = check_type(tool, "name", "tool.name", cJSON_IsString, "a string")) < 0) return rc;
  if ((rc = check_type(tool, "version", "tool.version", cJSON_IsString, "a string")) < 0) return rc;
  if ((rc = check_type(model, "family", "model.family", cJSON_IsString, "a string")) < 0) return rc;
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(model, "train_len");
  if (tl && !cJSON_IsNull(tl) && !(cJSON_IsNumber(tl) && is_int(tl->valuedouble) && tl->valuedouble > 0))
    return bad_key("model.train_len", "expected a positive integer or null");
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(model, "files");
  if (files) {
    if (!cJSON_IsArray(files)) return bad_key("model.files", "expected an array");
    int i = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
      char key[64];
      snprintf(key, sizeof key, "model.files[%d]", i++);
      if (!cJSON_IsObject(f) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(f, "path")))
        return bad_key(key, "expected an object with a string \"path\"");
      const cJSON *h = cJSON_GetObjectItemCaseSensitive(f, "sha256");
      if (h && !cJSON_IsString(h)) return bad_key(key, "\"sha256\" is not a string");
    }
  }
  const cJSON *verdict = cJSON_GetObjectItemCaseSensitive(c, "verdict");
  if ((rc = check_type(verdict, "result", "verdict.result", cJSON_IsString, "a string")) < 0) return rc;
  const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(verdict, "reasons");
  if (reasons) {
    bool ok = cJSON_IsArray(reasons);
    const cJSON *r;
    if (ok) cJSON_ArrayForEach(r, reasons) ok = ok && cJSON_IsString(r);
    if (!ok) return bad_key("verdict.reasons", "expected an array of strings");
  }
  const cJSON *th = cJSON_GetObjectItemCaseSensitive(c, "thresholds");
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(th, "min_accuracy");
  if (ma && !cJSON_IsNull(ma) && !cJSON_IsNumber(ma))
    return bad_key("thresholds.min_accuracy", "expected a number or null");
  const cJSON *nr = cJSON_GetObjectItemCaseSensitive(th, "no_regression_at");
  if (nr) {
    bool ok = cJSON_IsArray(nr);
    const cJSON *r;
    if (ok) cJSON_ArrayForEach(r, nr) ok = ok && cJSON_IsNumber(r);
    if (!ok) return bad_key("thresholds.no_regression_at", "expected an array of numbers");
  }

  /* probes: required */
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(c, "probes");
  if (!cJSON_IsObject(probes)) return bad_key("probes", "missing or not an object");
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(probes, "names");
  const cJSON *lengths = cJSON_GetObjectItemCaseSensitive(probes, "lengths");
  const cJSON *depths = cJSON_GetObjectItemCaseSensitive(probes, "depths");
  const cJSON *samples = cJSON_GetObjectItemCaseSensitive(probes, "samples");
  if (!cJSON_IsArray(names) || cJSON_GetArraySize(names) < 1)
    return bad_key("probes.names", "missing or not a non-empty array");
  if (!cJSON_IsArray(lengths) || cJSON_GetArraySize(lengths) < 1)
    return bad_key("probes.lengths", "missing or not a non-empty array");
  if (!cJSON_IsArray(depths) || cJSON_GetArraySize(depths) < 1)
    return bad_key("probes.depths", "missing or not a non-empty array");
  if (!cJSON_IsNumber(samples) || !is_int(samples->valuedouble) || samples->valuedouble < 1)
    return bad_key("probes.samples", "missing or not a positive integer");
  if ((rc = check_type(probes, "seed", "probes.seed", cJSON_IsNumber, "a number")) < 0) return rc;
  if ((rc = check_type(probes, "max_new_tokens", "probes.max_new_tokens", cJSON_IsNumber, "a number")) < 0) return rc;
  d->n_probes = cJSON_GetArraySize(names);
  d->n_lengths = cJSON_GetArraySize(lengths);
  d->n_depths = cJSON_GetArraySize(depths);
  d->samples = samples->valuedouble;
  d->probe_names = calloc((size_t)d->n_probes, sizeof *d->probe_names);
  if (!d->probe_names) return cp_error_set(CP_ENOMEM, "certificate: out of memory");
  if ((rc = alloc_doubles(&d->lengths, (size_t)d->n_lengths)) < 0) return rc;
  if ((rc = alloc_doubles(&d->depths, (size_t)d->n_depths)) < 0) return rc;
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, names) {
    char key[48];
    snprintf(key, sizeof key, "probes.names[%d]", i);
    if (!cJSON_IsString(it) || !it->valuestring[0]) return bad_key(key, "expected a non-empty string");
    for (int j = 0; j < i; j++)
      if (strcmp(d->probe_names[j], it->valuestring) == 0) return bad_key(key, "repeats an earlier probe");
    d->probe_names[i++] = it->valuestring;
  }
  i = 0;
  cJSON_ArrayForEach(it, lengths) {
    char key[48];
    snprintf(key, sizeof key, "probes.lengths[%d]", i);
    if (!cJSON_IsNumber(it) || !is_int(it->valuedouble) || it->valuedouble < 1 || it->valuedouble > MAX_LEN)
      return bad_key(key, "expected a positive integer");
    d->lengths[i++] = it->valuedouble;
  }
  i = 0;
  cJSON_ArrayForEach(it, depths) {
    char key[48];
    snprintf(key, sizeof key, "probes.depths[%d]", i);
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0 && it->valuedouble <= 1))
      return bad_key(key, "expected a number in [0, 1]");
    d->depths[i++] = it->valuedouble;
  }

  /* results: patched required, baseline optional */
  const cJSON *results = cJSON_GetObjectItemCaseSensitive(c, "results");
  if (!cJSON_IsObject(results)) return bad_key("results", "missing or not an object");
  for (int s = 0; s < 2; s++) {
    const cJSON *side = cJSON_GetObjectItemCaseSensitive(results, SIDE_NAME[s]);
    char key[48];
    snprintf(key, sizeof key, "results.%s", SIDE_NAME[s]);
    if (!side) {
      if (s == 0) return bad_key(key, "missing");
      continue;
    }
    if (!cJSON_IsObject(side)) return bad_key(key, "expected an object");
    if (s == 1) d->has_baseline = true;
    d->side[s] = calloc((size_t)d->n_probes, sizeof *d->side[s]);
    if (!d->side[s]) return cp_error_set(CP_ENOMEM, "certificate: out of memory");
    for (int p = 0; p < d->n_probes; p++) {
      const cJSON *arr = cJSON_GetObjectItemCaseSensitive(side, d->probe_names[p]);
      if (!arr) {
        /* A baseline may lack a probe (then the page says so); the patched side may not. */
        if (s == 1) continue;
        char k2[192];
        snprintf(k2, sizeof k2, "results.patched.%s", d->probe_names[p]);
        return bad_key(k2, "missing (listed in probes.names)");
      }
      if ((rc = parse_probe_side(&d->side[s][p], d, arr, s, p)) < 0) return rc;
    }
    const cJSON *att = cJSON_GetObjectItemCaseSensitive(side, "attention");
    if (att && (rc = parse_attention(&d->att[s], att, s)) < 0) return rc;
  }
  return 0;
}

/* ---- colours --------------------------------------------------------------------------- */

/* Accuracy 0 -> red, 0.5 -> pale yellow, 1 -> green (ColorBrewer RdYlGn end points). */
static void acc_colour(char out[8], double a) {
  static const int stops[5][3] = {
      {0xd7, 0x30, 0x27}, {0xf4, 0x6d, 0x43}, {0xfe, 0xe0, 0x8b}, {0x66, 0xbd, 0x63}, {0x1a, 0x98, 0x50}};
  if (isnan(a)) {
    snprintf(out, 8, "#e5e7eb");
    return;
  }
  if (a < 0) a = 0;
  if (a > 1) a = 1;
  double x = a * 4;
  int i = (int)x;
  if (i > 3) i = 3;
  double t = x - i;
  int rgb[3];
  for (int k = 0; k < 3; k++) rgb[k] = (int)lround(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * t);
  snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* Dark text on the light middle of the scale, white on the saturated ends. */
static const char *acc_text_colour(double a) {
  if (isnan(a)) return "#6b7280";
  return (a < 0.18 || a > 0.82) ? "#ffffff" : "#1f2937";
}

/* ---- page parts ------------------------------------------------------------------------ */

#define C_PATCHED "#1f6feb"
#define C_BASELINE "#d9480f"

static const char *get_str(const cJSON *obj, const char *name) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
  return cJSON_IsString(it) ? it->valuestring : NULL;
}

static const char CSS[] =
    "*{box-sizing:border-box}"
    "body{margin:0;background:#f6f7f9;color:#1f2937;font:14px/1.45 system-ui,-apple-system,'Segoe UI',"
    "Roboto,'DejaVu Sans',Arial,sans-serif}"
    "main{max-width:1160px;margin:0 auto;padding:20px 24px 8px}"
    "h1{font-size:22px;margin:0 0 2px}"
    "h2{font-size:17px;margin:0 0 10px}"
    "h3{font-size:14px;margin:0 0 6px;color:#374151}"
    ".sub{color:#6b7280;margin:0 0 14px}"
    ".card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:14px 16px;margin:0 0 16px}"
    ".verdict{border-radius:8px;padding:10px 16px;margin:0 0 16px;font-weight:600;border:1px solid}"
    ".verdict.pass{background:#e8f6ec;border-color:#8fd19e;color:#14532d}"
    ".verdict.fail{background:#fdecec;border-color:#f1a7a7;color:#7f1d1d}"
    ".verdict.none{background:#f3f4f6;border-color:#d1d5db;color:#374151}"
    ".verdict .big{font-size:18px;letter-spacing:.04em;margin-right:10px}"
    ".verdict ul{margin:6px 0 0;padding-left:20px;font-weight:400}"
    ".grid{display:flex;flex-wrap:wrap;gap:16px}"
    ".grid>*{flex:1 1 340px;min-width:0}"
    "table{border-collapse:collapse;font-variant-numeric:tabular-nums}"
    "th,td{padding:3px 10px;text-align:left;border-bottom:1px solid #eef0f3;vertical-align:top}"
    "th{color:#6b7280;font-weight:600}"
    "td.n{text-align:right}"
    "table.kv th{width:150px}"
    "pre{margin:0;background:#f8fafc;border:1px solid #e5e7eb;border-radius:6px;padding:8px 10px;"
    "font:12px/1.4 ui-monospace,'DejaVu Sans Mono',monospace;max-height:220px;overflow:auto;white-space:pre-wrap;tab-size:4;"
    "word-break:break-all}"
    ".mono{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:12px;word-break:break-all}"
    ".maps{display:flex;flex-wrap:wrap;gap:8px 24px;margin:0 0 8px}"
    ".maps figure{margin:0}"
    ".maps figcaption{font-weight:600;font-size:13px;margin:0 0 2px}"
    "svg{display:block;max-width:100%;height:auto}"
    "svg text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif}"
    ".note{color:#6b7280;font-size:13px;margin:4px 0}"
    ".scale{display:flex;align-items:center;gap:6px;color:#6b7280;font-size:12px;margin:0 0 10px}"
    "footer{max-width:1160px;margin:0 auto;padding:4px 24px 24px;color:#6b7280;font-size:12px}"
    "footer span{margin-right:14px}";

static void put_header(sbuf *b, const cJSON *c) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(c, "model");
  const char *family = get_str(model, "family");
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(model, "train_len");
  sb_puts(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
             "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
             "style-src 'unsafe-inline'\">\n"
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>ctxpatch verify: ");
  sb_esc(b, family ? family : "model");
  sb_puts(b, "</title>\n<style>");
  sb_puts(b, CSS);
  sb_puts(b, "</style>\n</head>\n<body>\n<main>\n<h1>ctxpatch verify report: <span class=\"family\">");
  sb_esc(b, family ? family : "unknown family");
  sb_puts(b, "</span></h1>\n<p class=\"sub\">training length ");
  if (cJSON_IsNumber(tl)) sb_printf(b, "%.0f", tl->valuedouble);
  else sb_puts(b, "unknown");
  sb_puts(b, " tokens &middot; accuracy of long-context retrieval probes, patched model");
  if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "results"), "baseline"))
    sb_puts(b, " against the unpatched baseline");
  sb_puts(b, "</p>\n");
}

static void put_verdict(sbuf *b, const cJSON *c) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "verdict");
  const char *result = get_str(v, "result");
  const char *cls = !result ? "none" : strcmp(result, "pass") == 0 ? "pass" : strcmp(result, "fail") == 0 ? "fail" : "none";
  sb_printf(b, "<section class=\"verdict %s\"><span class=\"big\">", cls);
  if (!result) sb_puts(b, "NO VERDICT");
  else if (strcmp(cls, "pass") == 0) sb_puts(b, "PASS");
  else if (strcmp(cls, "fail") == 0) sb_puts(b, "FAIL");
  else sb_esc(b, result);
  sb_puts(b, "</span>");
  const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(v, "reasons");
  int n = cJSON_GetArraySize(reasons);
  if (!result) sb_puts(b, "the certificate records no verdict");
  else if (n == 0 && strcmp(cls, "pass") == 0) sb_puts(b, "every threshold was met");
  else if (n == 0) sb_puts(b, "no reasons recorded");
  else {
    sb_printf(b, "%d threshold%s failed<ul>", n, n == 1 ? "" : "s");
    const cJSON *r;
    cJSON_ArrayForEach(r, reasons) {
      sb_puts(b, "<li>");
      sb_esc(b, r->valuestring);
      sb_puts(b, "</li>");
    }
    sb_puts(b, "</ul>");
  }
  sb_puts(b, "</section>\n");
}

static void put_num_list(sbuf *b, const double *v, int n) {
  for (int i = 0; i < n; i++) {
    char s[48];
    fmt_num(s, v[i]);
    sb_printf(b, "%s%s", i ? ", " : "", s);
  }
}

/* A rule object pretty-printed by cJSON (deterministic) and escaped. */
static void put_rule_json(sbuf *b, const cJSON *rule) {
  char *text = cJSON_Print(rule);
  if (!text) {
    b->oom = true;
    return;
  }
  sb_puts(b, "<pre class=\"rule\">");
  sb_esc(b, text);
  sb_puts(b, "</pre>");
  free(text);
}

static void put_settings(sbuf *b, const cJSON *c, const report_data *d) {
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(c, "probes");
  const cJSON *th = cJSON_GetObjectItemCaseSensitive(c, "thresholds");
  sb_puts(b, "<div class=\"grid\">\n<section class=\"card\"><h2>Probe settings</h2><table class=\"kv\">");
  sb_puts(b, "<tr><th>probes</th><td>");
  for (int p = 0; p < d->n_probes; p++) {
    if (p) sb_puts(b, ", ");
    sb_esc(b, d->probe_names[p]);
  }
  sb_puts(b, "</td></tr><tr><th>lengths (tokens)</th><td>");
  put_num_list(b, d->lengths, d->n_lengths);
  sb_puts(b, "</td></tr><tr><th>depths</th><td>");
  for (int i = 0; i < d->n_depths; i++) sb_printf(b, "%s%.3f", i ? ", " : "", d->depths[i]);
  sb_printf(b, "</td></tr><tr><th>samples per cell</th><td>%.0f</td></tr>", d->samples);
  static const char *const keys[2] = {"seed", "max_new_tokens"};
  static const char *const labels[2] = {"seed", "max new tokens"};
  for (int k = 0; k < 2; k++) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(probes, keys[k]);
    if (!it) continue;
    char s[48];
    fmt_num(s, it->valuedouble);
    sb_printf(b, "<tr><th>%s</th><td>%s</td></tr>", labels[k], s);
  }
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(th, "min_accuracy");
  sb_puts(b, "<tr><th>min accuracy</th><td>");
  if (cJSON_IsNumber(ma)) sb_printf(b, "%.3f", ma->valuedouble);
  else sb_puts(b, "none");
  sb_puts(b, "</td></tr><tr><th>no regression at</th><td>");
  const cJSON *nr = cJSON_GetObjectItemCaseSensitive(th, "no_regression_at");
  if (cJSON_GetArraySize(nr) == 0) sb_puts(b, "none");
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, nr) {
    char s[48];
    fmt_num(s, it->valuedouble);
    sb_printf(b, "%s%s", i++ ? ", " : "", s);
  }
  sb_puts(b, "</td></tr></table></section>\n");

  /* the rule, pretty-printed by cJSON (deterministic) and escaped */
  sb_puts(b, "<section class=\"card\"><h2>Attention rule (patched side)</h2>");
  const cJSON *rule = cJSON_GetObjectItemCaseSensitive(c, "rule");
  /* A `ctxpatch patch` certificate also says what was baked into the weights: then the rule the
   * engine applied can be empty while the patched side still differs from the original. */
  const cJSON *patch = cJSON_GetObjectItemCaseSensitive(c, "patch");
  const cJSON *baked = cJSON_GetObjectItemCaseSensitive(patch, "baked_rule");
  if (cJSON_IsObject(baked) && baked->child) {
    const cJSON *fidelity = cJSON_GetObjectItemCaseSensitive(patch, "fidelity");
    sb_puts(b, "<p class=\"note\">baked into the artifact");
    if (cJSON_IsString(fidelity)) {
      sb_puts(b, " (");
      sb_esc(b, fidelity->valuestring);
      sb_puts(b, ")");
    }
    sb_puts(b, ":</p>");
    put_rule_json(b, baked);
    if (rule && rule->child) sb_puts(b, "<p class=\"note\">applied by the engine from the metadata:</p>");
  }
  if (rule && rule->child) put_rule_json(b, rule);
  else if (!(cJSON_IsObject(baked) && baked->child))
    sb_puts(b, "<p class=\"note\">none: the patched side ran the model's own attention</p>");
  sb_puts(b, "</section>\n</div>\n");
}

static void put_scale(sbuf *b) {
  sb_puts(b, "<div class=\"scale\">accuracy <svg width=\"220\" height=\"14\" viewBox=\"0 0 220 14\" role=\"img\" "
             "aria-label=\"colour scale\">");
  for (int i = 0; i <= 10; i++) {
    char col[8];
    acc_colour(col, i / 10.0);
    sb_printf(b, "<rect x=\"%d\" y=\"0\" width=\"20\" height=\"14\" fill=\"%s\"/>", i * 20, col);
  }
  sb_puts(b, "</svg> 0 &rarr; 1 (grey: not run)</div>\n");
}

/* Heatmap: depth (rows) x length (columns); each cell is correct_by_depth / samples. */
enum { HM_LABEL_W = 58, HM_HEAD_H = 34, HM_CELL_W = 52, HM_CELL_H = 28 };

static void put_heatmap(sbuf *b, const report_data *d, int side, int p) {
  const side_probe *sp = &d->side[side][p];
  int w = HM_LABEL_W + d->n_lengths * HM_CELL_W + 2, h = HM_HEAD_H + d->n_depths * HM_CELL_H + 2;
  sb_printf(b, "<figure><figcaption>%s</figcaption>", side == 0 ? "patched" : "baseline");
  sb_printf(b, "<svg class=\"heatmap\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
               "aria-label=\"%s accuracy by depth and length\">",
            w, h, w, h, SIDE_NAME[side]);
  sb_printf(b, "<text x=\"%d\" y=\"11\" font-size=\"11\" fill=\"#6b7280\" text-anchor=\"middle\">length (tokens)</text>",
            HM_LABEL_W + d->n_lengths * HM_CELL_W / 2);
  sb_printf(b, "<text x=\"4\" y=\"%d\" font-size=\"11\" fill=\"#6b7280\">depth</text>", HM_HEAD_H - 6);
  for (int l = 0; l < d->n_lengths; l++) {
    char lab[32];
    fmt_len_short(lab, d->lengths[l]);
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#374151\" text-anchor=\"middle\">%s</text>",
              HM_LABEL_W + l * HM_CELL_W + HM_CELL_W / 2, HM_HEAD_H - 6, lab);
  }
  for (int k = 0; k < d->n_depths; k++) {
    int y = HM_HEAD_H + k * HM_CELL_H;
    sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#374151\" text-anchor=\"end\">%.2f</text>",
              HM_LABEL_W - 8, y + HM_CELL_H / 2 + 4, d->depths[k]);
    for (int l = 0; l < d->n_lengths; l++) {
      double a = sp->cell[(size_t)l * d->n_depths + k];
      char col[8];
      acc_colour(col, a);
      int x = HM_LABEL_W + l * HM_CELL_W;
      sb_printf(b, "<g class=\"hm-cell\"><title>%s, length %.0f, depth %.3f: %.0f of %.0f correct</title>",
                SIDE_NAME[side], d->lengths[l], d->depths[k], a * d->samples, d->samples);
      sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"1.5\"/>",
                x, y, HM_CELL_W, HM_CELL_H, col);
      sb_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"%s\" text-anchor=\"middle\">%.2f</text></g>",
                x + HM_CELL_W / 2, y + HM_CELL_H / 2 + 4, acc_text_colour(a), a);
    }
  }
  sb_puts(b, "</svg></figure>");
}

/* ---- line charts on a log2 length axis ------------------------------------------------- */

typedef struct {
  const char *label, *colour;
  bool dashed;
  int n;
  const double *x, *y; /* x: lengths; y: NaN = gap */
} series;

typedef struct {
  /* title: plain text (the aria-label); title_svg, y_label_svg: SVG markup fragments, always
   * constants of this file, never certificate text */
  const char *title, *title_svg, *y_label_svg, *y_fmt;
  double y_min, y_max;
  int y_ticks;
  double hline;      /* NaN = none (e.g. the min_accuracy threshold) */
  const char *hline_label;
  double vline;      /* NaN = none (the training length) */
} chart_opts;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { CH_W = 540, CH_H = 290, CH_L = 56, CH_R = 16, CH_T = 34, CH_B = 44 };

static void put_chart(sbuf *b, const char *cls, const chart_opts *o, const series *s, int n_series) {
  double xmin = INFINITY, xmax = -INFINITY;
  for (int i = 0; i < n_series; i++)
    for (int k = 0; k < s[i].n; k++) {
      double v = log2(s[i].x[k]);
      if (v < xmin) xmin = v;
      if (v > xmax) xmax = v;
    }
  if (!(xmin <= xmax)) xmin = 0, xmax = 1;
  if (xmax - xmin < 1e-9) xmin -= 1, xmax += 1;
  double pad = (xmax - xmin) * 0.04;
  xmin -= pad, xmax += pad;
  double pw = CH_W - CH_L - CH_R, ph = CH_H - CH_T - CH_B;
#define PX(v) (CH_L + ((log2(v) - xmin) / (xmax - xmin)) * pw)
#define PY(v) (CH_T + (1 - ((v) - o->y_min) / (o->y_max - o->y_min)) * ph)
  sb_printf(b, "<svg class=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", cls,
            CH_W, CH_H, CH_W, CH_H);
  sb_esc(b, o->title);
  sb_puts(b, "\">");
  sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"#fbfcfd\" stroke=\"#d1d5db\"/>", CH_L,
            CH_T, pw, ph);
  /* y grid and labels */
  for (int t = 0; t <= o->y_ticks; t++) {
    double v = o->y_min + (o->y_max - o->y_min) * t / o->y_ticks;
    double y = PY(v);
    if (t > 0 && t < o->y_ticks)
      sb_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e7eb\"/>", CH_L, y, CH_L + pw, y);
    sb_printf(b, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#4b5563\" text-anchor=\"end\">", CH_L - 6, y + 4);
    sb_printf(b, o->y_fmt, v);
    sb_puts(b, "</text>");
  }
  sb_printf(b, "<text transform=\"translate(14 %.1f) rotate(-90)\" font-size=\"11\" fill=\"#6b7280\" "
               "text-anchor=\"middle\">",
            CH_T + ph / 2);
  sb_puts(b, o->y_label_svg);
  sb_puts(b, "</text>");
  /* x ticks at every length any series has, labels thinned so they never overlap */
  size_t n_ticks = 0, cap = 0;
  for (int i = 0; i < n_series; i++) cap += (size_t)s[i].n;
  double *ticks = malloc((cap ? cap : 1) * sizeof *ticks);
  if (!ticks) b->oom = true;
  for (int i = 0; ticks && i < n_series; i++)
    for (int k = 0; k < s[i].n; k++) ticks[n_ticks++] = s[i].x[k];
  if (ticks) qsort(ticks, n_ticks, sizeof *ticks, cmp_double);
  double last_label = -1e9;
  for (size_t k = 0; k < n_ticks; k++) {
    if (k > 0 && ticks[k] == ticks[k - 1]) continue;
    double x = PX(ticks[k]);
    sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#9ca3af\"/>", x, CH_T + ph, x,
              CH_T + ph + 4);
    if (x - last_label >= 34) {
      char lab[32];
      fmt_len_short(lab, ticks[k]);
      sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#4b5563\" text-anchor=\"middle\">%s</text>", x,
                CH_T + ph + 17, lab);
      last_label = x;
    }
  }
  free(ticks);
  sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#6b7280\" text-anchor=\"middle\">"
               "prompt length (tokens, log2 scale)</text>",
            CH_L + pw / 2, CH_H - 6);
  /* reference lines */
  if (!isnan(o->vline) && o->vline > 0 && log2(o->vline) >= xmin && log2(o->vline) <= xmax) {
    double x = PX(o->vline);
    sb_printf(b, "<line class=\"train-len\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7280\" "
                 "stroke-dasharray=\"2 3\"/>",
              x, CH_T, x, CH_T + ph);
    sb_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#6b7280\">train length</text>", x + 3, CH_T + 11);
  }
  if (!isnan(o->hline) && o->hline >= o->y_min && o->hline <= o->y_max) {
    double y = PY(o->hline);
    sb_printf(b, "<line class=\"threshold\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#7e22ce\" "
                 "stroke-width=\"1.2\" stroke-dasharray=\"1 3\" stroke-linecap=\"round\"/>",
              CH_L, y, CH_L + pw, y);
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#7e22ce\" text-anchor=\"end\">", CH_L + pw - 4,
              y - 4);
    sb_esc(b, o->hline_label);
    sb_puts(b, "</text>");
  }
  /* series: a path broken at NaN points, and a marker per point */
  for (int i = 0; i < n_series; i++) {
    sbuf path = {0};
    bool pen = false;
    for (int k = 0; k < s[i].n; k++) {
      double v = s[i].y[k];
      if (isnan(v)) {
        pen = false;
        continue;
      }
      if (v < o->y_min) v = o->y_min;
      if (v > o->y_max) v = o->y_max;
      sb_printf(&path, "%s%.1f %.1f ", pen ? "L" : "M", PX(s[i].x[k]), PY(v));
      pen = true;
    }
    if (path.oom) b->oom = true;
    if (path.len) {
      path.p[path.len - 1] = '\0';
      sb_printf(b, "<path class=\"series\" d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.2\"%s "
                   "stroke-linejoin=\"round\"/>",
                path.p, s[i].colour, s[i].dashed ? " stroke-dasharray=\"7 4\"" : "");
    }
    free(path.p);
    for (int k = 0; k < s[i].n; k++) {
      double v = s[i].y[k];
      if (isnan(v)) continue;
      if (v < o->y_min) v = o->y_min;
      if (v > o->y_max) v = o->y_max;
      if (s[i].dashed)
        sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"#ffffff\" stroke=\"%s\" "
                     "stroke-width=\"1.8\"/>",
                  PX(s[i].x[k]) - 3.5, PY(v) - 3.5, s[i].colour);
      else
        sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.6\" fill=\"%s\"/>", PX(s[i].x[k]), PY(v), s[i].colour);
    }
  }
  /* title and legend above the plot */
  sb_printf(b, "<text x=\"%d\" y=\"14\" font-size=\"13\" font-weight=\"600\" fill=\"#1f2937\">", CH_L);
  sb_puts(b, o->title_svg);
  sb_puts(b, "</text>");
  double lx = CH_W - CH_R;
  for (int i = n_series - 1; i >= 0; i--) {
    double tw = 7.0 * (double)strlen(s[i].label) + 34;
    lx -= tw;
    sb_printf(b, "<g class=\"legend\"><line x1=\"%.1f\" y1=\"24\" x2=\"%.1f\" y2=\"24\" stroke=\"%s\" stroke-width=\"2.2\"%s/>",
              lx, lx + 22, s[i].colour, s[i].dashed ? " stroke-dasharray=\"5 3\"" : "");
    sb_printf(b, "<text x=\"%.1f\" y=\"28\" font-size=\"11\" fill=\"#374151\">", lx + 26);
    sb_esc(b, s[i].label);
    sb_puts(b, "</text></g>");
  }
  sb_puts(b, "</svg>");
#undef PX
#undef PY
}

static void put_probe(sbuf *b, const cJSON *c, const report_data *d, int p) {
  const side_probe *pat = &d->side[0][p];
  const side_probe *base = d->has_baseline && d->side[1][p].present ? &d->side[1][p] : NULL;
  sb_puts(b, "<section class=\"card probe\"><h2>Probe: ");
  sb_esc(b, d->probe_names[p]);
  sb_puts(b, "</h2>\n<div class=\"maps\">");
  put_heatmap(b, d, 0, p);
  if (base) put_heatmap(b, d, 1, p);
  sb_puts(b, "</div>\n");
  if (!d->has_baseline) sb_puts(b, "<p class=\"note\">no baseline in this certificate (run verify with --baseline)</p>\n");
  else if (!base) sb_puts(b, "<p class=\"note\">the baseline has no results for this probe</p>\n");

  const cJSON *model = cJSON_GetObjectItemCaseSensitive(c, "model");
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(model, "train_len");
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "thresholds"), "min_accuracy");
  series s[2] = {{"patched", C_PATCHED, false, d->n_lengths, d->lengths, pat->acc},
                 {"baseline", C_BASELINE, true, d->n_lengths, d->lengths, base ? base->acc : NULL}};
  chart_opts o = {"Accuracy against length", "Accuracy against length", "accuracy", "%.2f", 0, 1, 4,
                  cJSON_IsNumber(ma) ? ma->valuedouble : NAN, "min accuracy",
                  cJSON_IsNumber(tl) ? tl->valuedouble : NAN};
  sb_puts(b, "<div class=\"grid\"><div>");
  put_chart(b, "chart accuracy", &o, s, base ? 2 : 1);
  sb_puts(b, "</div><div><table class=\"acc\"><tr><th>length</th><th class=\"n\">patched</th>");
  if (base) sb_puts(b, "<th class=\"n\">baseline</th><th class=\"n\">&Delta;</th>");
  sb_puts(b, "</tr>");
  for (int l = 0; l < d->n_lengths; l++) {
    char a[48];
    fmt_num(a, d->lengths[l]);
    sb_printf(b, "<tr><td>%s</td>", a);
    if (isnan(pat->acc[l])) sb_puts(b, "<td class=\"n\">&ndash;</td>");
    else sb_printf(b, "<td class=\"n\">%.3f</td>", pat->acc[l]);
    if (base) {
      if (isnan(base->acc[l])) sb_puts(b, "<td class=\"n\">&ndash;</td><td class=\"n\">&ndash;</td>");
      else {
        sb_printf(b, "<td class=\"n\">%.3f</td>", base->acc[l]);
        double delta = pat->acc[l] - base->acc[l];
        if (isnan(delta)) sb_puts(b, "<td class=\"n\">&ndash;</td>");
        else {
          /* %+.3f would print "-0.000" for tiny negatives; round first so equal reads as 0.000 */
          double r = round(delta * 1000) / 1000;
          const char *colour = r > 0 ? "#15803d" : r < 0 ? "#b91c1c" : "#6b7280";
          if (r == 0) sb_printf(b, "<td class=\"n\" style=\"color:%s\">0.000</td>", colour);
          else sb_printf(b, "<td class=\"n\" style=\"color:%s\">%+.3f</td>", colour, r);
        }
      }
    }
    sb_puts(b, "</tr>");
  }
  sb_puts(b, "</table></div></div>\n</section>\n");
}

static void put_attention(sbuf *b, const cJSON *c, const report_data *d) {
  if (!d->att[0].present && !d->att[1].present) return;
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "model"), "train_len");
  double vline = cJSON_IsNumber(tl) ? tl->valuedouble : NAN;
  sb_puts(b, "<section class=\"card attention\"><h2>Attention dispersion</h2>"
             "<p class=\"note\">Mean largest attention weight (P<sub>max</sub>) and mean entropy of the self-attention "
             "softmaxes on one probe prompt per length. Unpatched attention spreads thinner as the prompt grows "
             "(P<sub>max</sub> falls, entropy rises); a working patch keeps both near their training-length values."
             "</p>\n<div class=\"grid\"><div>");
  series sp[2], se[2];
  int n = 0;
  double emax = 0;
  for (int s = 0; s < 2; s++) {
    const side_attention *a = &d->att[s];
    if (!a->present) continue;
    for (int i = 0; i < a->n; i++)
      if (!isnan(a->entropy[i]) && a->entropy[i] > emax) emax = a->entropy[i];
    sp[n] = (series){SIDE_NAME[s], s ? C_BASELINE : C_PATCHED, s == 1, a->n, a->len, a->pmax};
    se[n] = (series){SIDE_NAME[s], s ? C_BASELINE : C_PATCHED, s == 1, a->n, a->len, a->entropy};
    n++;
  }
  /* entropy axis: 0 to the next whole nat above the largest value */
  double etop = ceil(emax * 1.05);
  if (etop < 1) etop = 1;
  int eticks = etop <= 8 ? (int)etop : 4;
#define PMAX_SVG "P<tspan font-size=\"75%\" dy=\"3\">max</tspan><tspan dy=\"-3\"> </tspan>"
  chart_opts op = {"P_max against length", PMAX_SVG "against length", "mean " PMAX_SVG, "%.2f", 0, 1, 4, NAN, "", vline};
  chart_opts oe = {"Entropy against length", "Entropy against length", "mean entropy (nats)", "%.1f", 0, etop, eticks, NAN, "", vline};
  put_chart(b, "chart pmax", &op, sp, n);
  sb_puts(b, "</div><div>");
  put_chart(b, "chart entropy", &oe, se, n);
  sb_puts(b, "</div></div>\n</section>\n");
}

static void put_files(sbuf *b, const cJSON *c) {
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "model"), "files");
  if (cJSON_GetArraySize(files) == 0) return;
  sb_puts(b, "<section class=\"card files\"><h2>Model files</h2><table><tr><th>path</th><th>SHA-256</th></tr>");
  const cJSON *f;
  cJSON_ArrayForEach(f, files) {
    sb_puts(b, "<tr><td class=\"mono\">");
    sb_esc(b, get_str(f, "path"));
    sb_puts(b, "</td><td class=\"mono\">");
    const char *h = get_str(f, "sha256");
    if (h) sb_esc(b, h);
    else sb_puts(b, "&ndash;");
    sb_puts(b, "</td></tr>");
  }
  sb_puts(b, "</table></section>\n");
}

static void put_footer(sbuf *b, const cJSON *c) {
  const cJSON *tool = cJSON_GetObjectItemCaseSensitive(c, "tool");
  const char *name = get_str(tool, "name"), *version = get_str(tool, "version");
  sb_puts(b, "</main>\n<footer><span>");
  sb_esc(b, name ? name : "ctxpatch");
  sb_puts(b, " ");
  sb_esc(b, version ? version : "(version unknown)");
  sb_puts(b, "</span>");
  const cJSON *run = cJSON_GetObjectItemCaseSensitive(c, "run");
  const cJSON *it;
  cJSON_ArrayForEach(it, run) {
    sb_puts(b, "<span>");
    sb_esc(b, it->string);
    sb_puts(b, ": ");
    if (cJSON_IsString(it)) {
      sb_esc(b, it->valuestring);
    } else if (cJSON_IsNumber(it)) {
      char s[48];
      fmt_num(s, it->valuedouble);
      sb_puts(b, s);
    } else {
      char *text = cJSON_PrintUnformatted(it);
      if (!text) b->oom = true;
      else sb_esc(b, text);
      free(text);
    }
    sb_puts(b, "</span>");
  }
  sb_puts(b, "</footer>\n</body>\n</html>\n");
}

int cp_report_html(char **out, const cJSON *certificate) {
  *out = NULL;
  report_data d = {0};
  sbuf b = {0};
  int rc = parse(&d, certificate);
  if (rc < 0) goto done;
  put_header(&b, certificate);
  put_verdict(&b, certificate);
  put_settings(&b, certificate, &d);
  put_scale(&b);
  for (int p = 0; p < d.n_probes; p++) put_probe(&b, certificate, &d, p);
  put_attention(&b, certificate, &d);
  put_files(&b, certificate);
  put_footer(&b, certificate);
  if (b.oom) {
    rc = cp_error_set(CP_ENOMEM, "report: out of memory");
    goto done;
  }
  *out = b.p;
  b.p = NULL;
done:
  free(b.p);
  data_free(&d);
  return rc;
}

int cp_report_write(const char *path, const cJSON *certificate) {
  char *html = NULL;
  cp_atomic_file *f = NULL;
  int rc = cp_report_html(&html, certificate);
  if (rc < 0) goto done;
  if ((rc = cp_atomic_open(&f, path)) < 0) goto done;
  if ((rc = cp_atomic_write(f, html, strlen(html))) < 0) goto done;
  rc = cp_atomic_commit(f);
  f = NULL; /* commit frees the handle, also on error */
done:
  cp_atomic_abort(f);
  free(html);
  return rc;
}
