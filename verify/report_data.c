/* Certificate -> report data: every part the report draws checked for presence, type and range,
 * with a one-line message naming the key (verify/report_data.h). */
#include "verify/report_data.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

#define SIDE_NAME REPORT_SIDE_NAME

const char *const REPORT_SIDE_NAME[2] = {"patched", "baseline"};

void report_data_free(report_data *d) {
  free(d->probe_names);
  free(d->lengths);
  free(d->depths);
  for (int s = 0; s < 2; s++) {
    if (d->side[s]) {
      for (int p = 0; p < d->n_probes; p++) {
        free(d->side[s][p].acc);
        free(d->side[s][p].cell);
        free(d->side[s][p].ran);
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
  return *out ? 0 : cp_nomem("certificate");
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
  if ((rc = alloc_doubles(&sp->ran, (size_t)d->n_lengths * (size_t)d->n_depths)) < 0) return rc;
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
    const cJSON *c, *ran = cJSON_GetObjectItemCaseSensitive(e, "prompts_by_depth"); /* a sequential cell */
    if (ran && (!cJSON_IsArray(ran) || cJSON_GetArraySize(ran) != d->n_depths)) {
      snprintf(key, sizeof key, "results.%s.%s[%d].prompts_by_depth", SIDE_NAME[side], name, l);
      return bad_key(key, "expected one count per probes.depths");
    }
    cJSON_ArrayForEach(c, by) {
      const cJSON *rk = ran ? cJSON_GetArrayItem(ran, k) : NULL;
      double n = rk && cJSON_IsNumber(rk) && is_int(rk->valuedouble) && rk->valuedouble >= 0 &&
                         rk->valuedouble <= d->samples
                     ? rk->valuedouble
                     : ran ? -1 : d->samples;
      if (n < 0) {
        snprintf(key, sizeof key, "results.%s.%s[%d].prompts_by_depth[%d]", SIDE_NAME[side], name, l, k);
        return bad_key(key, "expected an integer in [0, probes.samples = %.0f]", d->samples);
      }
      if (!cJSON_IsNumber(c) || !is_int(c->valuedouble) || c->valuedouble < 0 || c->valuedouble > d->samples) {
        snprintf(key, sizeof key, "results.%s.%s[%d].correct_by_depth[%d]", SIDE_NAME[side], name, l, k);
        return bad_key(key, "expected an integer in [0, probes.samples = %.0f]", d->samples);
      }
      if (c->valuedouble > n) {
        snprintf(key, sizeof key, "results.%s.%s[%d].correct_by_depth[%d]", SIDE_NAME[side], name, l, k);
        return bad_key(key, "more than the %.0f prompts run at that depth", n);
      }
      sp->ran[(size_t)l * d->n_depths + k] = n;
      sp->cell[(size_t)l * d->n_depths + k] = n > 0 ? c->valuedouble / n : NAN; /* no prompt: no colour */
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

/* Optional blocks: type checks only; the renderer reads them defensively. */
static int check_optional(const cJSON *c) {
  int rc;
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

  return 0;
}

/* probes: required; names, lengths and depths are copied into d. */
static int parse_probes(report_data *d, const cJSON *c) {
  int rc;
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(c, "probes");
  if (!cJSON_IsObject(probes)) return bad_key("probes", "missing or not an object");
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(probes, "names");
  const cJSON *lengths = cJSON_GetObjectItemCaseSensitive(probes, "lengths");
  const cJSON *depths = cJSON_GetObjectItemCaseSensitive(probes, "depths");
  const cJSON *samples = cJSON_GetObjectItemCaseSensitive(probes, "samples");
  /* a ppl-only certificate has no retrieval probe */
  if (!cJSON_IsArray(names) || (cJSON_GetArraySize(names) < 1 && !cJSON_GetObjectItemCaseSensitive(probes, "ppl")))
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
  d->probe_names = calloc((size_t)d->n_probes + 1, sizeof *d->probe_names);
  CP_CHECK_ALLOC(d->probe_names, "certificate");
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

  return 0;
}

/* results: patched required, baseline optional. */
static int parse_results(report_data *d, const cJSON *c) {
  int rc;
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
    d->side[s] = calloc((size_t)d->n_probes + 1, sizeof *d->side[s]);
    CP_CHECK_ALLOC(d->side[s], "certificate");
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


/* Checks the parts the page is drawn from. probes and results.patched are required; the rest
 * is optional but must have the documented type when present. */
int report_data_parse(report_data *d, const cJSON *c) {
  int rc;
  if (!cJSON_IsObject(c)) return cp_error_set(CP_EARG, "certificate: not a JSON object");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(c, "certificate_version");
  if (ver && !cJSON_IsNumber(ver)) return bad_key("certificate_version", "expected a number");
  if (ver && ver->valuedouble != 1)
    return cp_error_set(CP_EUNSUPPORTED, "certificate: key 'certificate_version': %g is not version 1",
                        ver->valuedouble);

  if ((rc = check_optional(c)) < 0 || (rc = parse_probes(d, c)) < 0) return rc;
  return parse_results(d, c);
}
