/* The JSON form of a cp_rule (../shared/spec/attention-rules.md, "The rule object"):
 * strict parsing with one refusal code per reason, and the canonical serialisation.
 *
 * Choices the spec leaves to the parser (documented here, tested in tests/test_rule.c):
 * - "temperature": x is one tau for every layer; a list is per layer, so [x] must match the
 *   depth of every stack in scope (cp_rule_check_model) like any list: it never spreads to
 *   every layer silently.
 * - Integer fields accept any JSON number with an integral value (256, 256.0, 2.56e2) up to
 *   2^53, the largest range a JSON number holds exactly; 8.5 is refused.
 * - "lambda_mask" needs both n_global and n_local (the spec gives no defaults).
 * - "top_k": k (1..CP_RULE_MAX_TOP_K) is required; from_layer (0), distance (D / 2) and rows
 *   ("decode") are optional.
 *   "distance": 0 is refused, because 0 is how cp_rule stores "the default D / 2".
 *   top_k without lambda_mask is accepted and has no effect (docs/attention-decisions.md 7).
 * - "alibi_scale": "factor" belongs to mode "static" only; elsewhere it is an unknown key.
 * - "temperature_schedule": {"points": [[L, tau], ...]}, "points" its only key, 1 to
 *   CP_RULE_MAX_SCHEDULE_POINTS points (one point is a constant tau). L is an integer >= 1 (a
 *   length in tokens), strictly increasing with distinct logs in double. tau is a number in
 *   (0, 1e30] at every point, or a list of
 *   per-layer taus at every point, all of one size (a list of one is per layer, as for
 *   "temperature"); at most CP_RULE_MAX_SCHEDULE_VALUES taus in all. With "temperature" it is
 *   refused (the spec makes them exclusive).
 */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/strbuf.h"
#include "base/json_strict.h"
#include "model/rule_json.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RULE_MAX_DEPTH 16
#define RULE_MAX_FILE (1u << 20) /* a 512-layer temperature list is ~12 KB */
#define EXACT_INT_MAX 9007199254740992.0 /* 2^53 */
#define CP_STR_(x) #x
#define CP_STR(x) CP_STR_(x)

/* ---- parsing ---- */

/* Short description of a JSON value for messages: the number, a quoted string (truncated)
 * or the type name. */
static const char *describe(char buf[64], const cJSON *v) {
  if (cJSON_IsNumber(v))
    snprintf(buf, 64, "%.17g", v->valuedouble);
  else if (cJSON_IsString(v))
    snprintf(buf, 64, "\"%.40s\"", v->valuestring);
  else if (cJSON_IsBool(v))
    snprintf(buf, 64, "%s", cJSON_IsTrue(v) ? "true" : "false");
  else if (cJSON_IsNull(v))
    snprintf(buf, 64, "null");
  else if (cJSON_IsArray(v))
    snprintf(buf, 64, "an array");
  else
    snprintf(buf, 64, "an object");
  return buf;
}

static int bad_value(const char *what, const char *key, const cJSON *v, const char *want) {
  char buf[64];
  return cp_error_set(CP_ERULE_VALUE, "%s: key '%s': %s is not %s", what, key, describe(buf, v), want);
}

/* Refuses keys of `obj` that are not in the NULL-terminated `known` list. */
static int check_keys(const cJSON *obj, const char *const *known, const char *what, const char *where) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    bool ok = false;
    for (const char *const *k = known; *k; k++)
      if (it->string && strcmp(it->string, *k) == 0) ok = true;
    if (!ok)
      return cp_error_set(CP_ERULE_KEY, "%s: unknown key '%.64s' in %s", what,
                          it->string ? it->string : "", where);
  }
  return 0;
}

static int get_object(const cJSON *v, const char *what, const char *key) {
  if (!cJSON_IsObject(v)) return bad_value(what, key, v, "an object");
  return 0;
}

/* A finite number > 0 (strict) or >= lo. */
static int get_positive(double *out, const cJSON *v, const char *what, const char *key, double lo,
                        bool strict, const char *want) {
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
      (strict ? !(v->valuedouble > lo) : !(v->valuedouble >= lo)))
    return bad_value(what, key, v, want);
  *out = v->valuedouble;
  return 0;
}

/* An integral number in [lo, hi]; hi <= 2^53. */
static int get_int(int64_t *out, const cJSON *v, const char *what, const char *key, double lo,
                   double hi, const char *want) {
  if (!cJSON_IsNumber(v)) return bad_value(what, key, v, want);
  double d = v->valuedouble;
  if (!isfinite(d) || d != floor(d) || d < lo || d > hi) return bad_value(what, key, v, want);
  *out = (int64_t)d;
  return 0;
}

static int get_enum(int *out, const cJSON *v, const char *what, const char *key,
                    const char *const *names, const char *want) {
  if (cJSON_IsString(v))
    for (int i = 0; names[i]; i++)
      if (strcmp(v->valuestring, names[i]) == 0) {
        *out = i;
        return 0;
      }
  return bad_value(what, key, v, want);
}

static const char *const SCOPE_NAMES[] = {"encoder", "self", "all", NULL};
static const char *const ROWS_NAMES[] = {"decode", "all", NULL};
static const char *const ALIBI_NAMES[] = {"static", "dynamic", "progressive", NULL};

static int parse_temperature(cp_rule *r, const cJSON *v, const char *what) {
  if (cJSON_IsNumber(v)) {
    r->n_temperature = 1;
    return get_positive(&r->temperature[0], v, what, "temperature", 0, true, "a number > 0");
  }
  if (!cJSON_IsArray(v))
    return bad_value(what, "temperature", v, "a number > 0 or an array of numbers > 0");
  int n = cJSON_GetArraySize(v);
  if (n < 1 || n > CP_RULE_MAX_LAYERS)
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature': an array of %d values (want 1..%d)",
                        what, n, CP_RULE_MAX_LAYERS);
  int i = 0;
  for (const cJSON *e = v->child; e; e = e->next, i++) {
    char key[32];
    snprintf(key, sizeof key, "temperature[%d]", i);
    int rc = get_positive(&r->temperature[i], e, what, key, 0, true, "a number > 0");
    if (rc) return rc;
  }
  r->n_temperature = n;
  r->temperature_per_layer = true;
  return 0;
}

/* A schedule tau: > 0 and at most SCHEDULE_TAU_MAX. Above it every softmax row is uniform to
 * float precision anyway, and the bound keeps each segment's slope (at most SCHEDULE_TAU_MAX over
 * the narrowest log-length gap, ~1e-16) and the piecewise sum of cp_plan_tau_at finite. */
#define SCHEDULE_TAU_MAX 1e30
#define SCHEDULE_TAU_MAX_TEXT "1e30"
static int get_tau(double *out, const cJSON *v, const char *what, const char *key, const char *want) {
  int rc = get_positive(out, v, what, key, 0, true, want);
  if (!rc && *out > SCHEDULE_TAU_MAX) rc = bad_value(what, key, v, want);
  return rc;
}

/* Point k of temperature_schedule.points: [L, tau] with tau a number or a per-layer list; the
 * first point fixes the form and size every later point must have. */
static int parse_schedule_point(cp_rule *r, const cJSON *e, int k, int n_points, const char *what) {
  char key[80];
  snprintf(key, sizeof key, "temperature_schedule.points[%d]", k);
  if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2) return bad_value(what, key, e, "a [length, tau] pair");
  const cJSON *len = e->child, *tau = e->child->next;
  int64_t L;
  snprintf(key, sizeof key, "temperature_schedule.points[%d][0]", k);
  int rc = get_int(&L, len, what, key, 1, EXACT_INT_MAX, "a length: an integer >= 1");
  if (rc) return rc;
  if (k > 0 && L <= r->schedule_len[k - 1])
    return cp_error_set(CP_ERULE_VALUE, "%s: key '%s': length %lld is not above the previous point's %lld "
                        "(lengths must increase strictly)", what, key, (long long)L,
                        (long long)r->schedule_len[k - 1]);
  /* The schedule interpolates in log length: two lengths whose logs are one double make a
   * zero-width segment, and its slope (t_b - t_a) / 0 would turn tau into NaN. */
  if (k > 0 && !(log((double)L) > log((double)r->schedule_len[k - 1])))
    return cp_error_set(CP_ERULE_VALUE, "%s: key '%s': length %lld is too close to the previous point's %lld "
                        "(their logs are equal in double precision)", what, key, (long long)L,
                        (long long)r->schedule_len[k - 1]);
  r->schedule_len[k] = L;
  snprintf(key, sizeof key, "temperature_schedule.points[%d][1]", k);
  const bool list = cJSON_IsArray(tau);
  const int w = list ? cJSON_GetArraySize(tau) : 1;
  if (k == 0) {
    if (list && (w < 1 || w > CP_RULE_MAX_LAYERS))
      return cp_error_set(CP_ERULE_VALUE, "%s: key '%s': a list of %d taus (want 1..%d)", what, key, w,
                          CP_RULE_MAX_LAYERS);
    if ((int64_t)n_points * w > CP_RULE_MAX_SCHEDULE_VALUES)
      return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule.points': %d points of %d taus are "
                          "more than %d taus", what, n_points, w, CP_RULE_MAX_SCHEDULE_VALUES);
    r->schedule_per_layer = list;
    r->schedule_width = w;
  } else if (list != r->schedule_per_layer || w != r->schedule_width) {
    if (!list && !cJSON_IsNumber(tau)) return bad_value(what, key, tau, "a number > 0 or a list of them");
    char got[40], want[40];
    snprintf(got, sizeof got, list ? "a list of %d taus" : "one tau", w);
    snprintf(want, sizeof want, r->schedule_per_layer ? "a list of %d taus" : "one tau", r->schedule_width);
    return cp_error_set(CP_ERULE_VALUE, "%s: key '%s': %s, but point 0 has %s (every point has the same form)",
                        what, key, got, want);
  }
  if (!list) return get_tau(&r->schedule_tau[k], tau, what, key, "a number > 0 and <= " SCHEDULE_TAU_MAX_TEXT " or a list of them");
  int l = 0;
  for (const cJSON *t = tau->child; t; t = t->next, l++) {
    snprintf(key, sizeof key, "temperature_schedule.points[%d][1][%d]", k, l);
    if ((rc = get_tau(&r->schedule_tau[k * w + l], t, what, key, "a number > 0 and <= " SCHEDULE_TAU_MAX_TEXT))) return rc;
  }
  return 0;
}

static int parse_schedule(cp_rule *r, const cJSON *v, const char *what) {
  static const char *const known[] = {"points", NULL};
  int rc = get_object(v, what, "temperature_schedule");
  if (!rc) rc = check_keys(v, known, what, "temperature_schedule");
  if (rc) return rc;
  const cJSON *pts = cJSON_GetObjectItemCaseSensitive(v, "points");
  if (!pts) return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule': missing \"points\"", what);
  if (!cJSON_IsArray(pts)) return bad_value(what, "temperature_schedule.points", pts, "an array of [length, tau] pairs");
  int n = cJSON_GetArraySize(pts);
  if (n < 1 || n > CP_RULE_MAX_SCHEDULE_POINTS)
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule.points': %d points (want 1..%d)", what, n,
                        CP_RULE_MAX_SCHEDULE_POINTS);
  int k = 0;
  for (const cJSON *e = pts->child; e; e = e->next, k++)
    if ((rc = parse_schedule_point(r, e, k, n, what))) return rc;
  r->n_schedule = n;
  return 0;
}

static int parse_alibi(cp_rule *r, const cJSON *v, const char *what) {
  int rc = get_object(v, what, "alibi_scale");
  if (rc) return rc;
  const cJSON *mode = cJSON_GetObjectItemCaseSensitive(v, "mode");
  if (!mode)
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'alibi_scale': missing \"mode\"", what);
  int m;
  rc = get_enum(&m, mode, what, "alibi_scale.mode", ALIBI_NAMES, "\"static\", \"dynamic\" or \"progressive\"");
  if (rc) return rc;
  if (m == 0) {
    static const char *const known[] = {"mode", "factor", NULL};
    if ((rc = check_keys(v, known, what, "alibi_scale"))) return rc;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, "factor");
    if (!f)
      return cp_error_set(CP_ERULE_VALUE, "%s: key 'alibi_scale': mode \"static\" needs \"factor\"", what);
    if ((rc = get_positive(&r->alibi_factor, f, what, "alibi_scale.factor", 1, false, "a number >= 1")))
      return rc;
    r->alibi_mode = CP_ALIBI_STATIC;
  } else {
    static const char *const known[] = {"mode", NULL};
    if ((rc = check_keys(v, known, what, m == 1 ? "alibi_scale (mode \"dynamic\")" : "alibi_scale (mode \"progressive\")")))
      return rc;
    r->alibi_mode = m == 1 ? CP_ALIBI_DYNAMIC : CP_ALIBI_PROGRESSIVE;
  }
  return 0;
}

static int parse_lambda(cp_rule *r, const cJSON *v, const char *what) {
  static const char *const known[] = {"n_global", "n_local", NULL};
  int rc = get_object(v, what, "lambda_mask");
  if (!rc) rc = check_keys(v, known, what, "lambda_mask");
  if (rc) return rc;
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(v, "n_global");
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(v, "n_local");
  if (!g || !l)
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'lambda_mask': missing \"%s\"", what,
                        g ? "n_local" : "n_global");
  if ((rc = get_int(&r->n_global, g, what, "lambda_mask.n_global", 0, EXACT_INT_MAX, "an integer >= 0")))
    return rc;
  if ((rc = get_int(&r->n_local, l, what, "lambda_mask.n_local", 1, EXACT_INT_MAX, "an integer >= 1")))
    return rc;
  r->has_lambda = true;
  return 0;
}

static int parse_top_k(cp_rule *r, const cJSON *v, const char *what) {
  static const char *const known[] = {"k", "from_layer", "distance", "rows", NULL};
  int rc = get_object(v, what, "top_k");
  if (!rc) rc = check_keys(v, known, what, "top_k");
  if (rc) return rc;
  const cJSON *k = cJSON_GetObjectItemCaseSensitive(v, "k");
  if (!k) return cp_error_set(CP_ERULE_VALUE, "%s: key 'top_k': missing \"k\"", what);
  int64_t x;
  if ((rc = get_int(&x, k, what, "top_k.k", 1, CP_RULE_MAX_TOP_K, "an integer in [1, " CP_STR(CP_RULE_MAX_TOP_K) "]")))
    return rc;
  r->top_k = (int)x;
  const cJSON *e;
  if ((e = cJSON_GetObjectItemCaseSensitive(v, "from_layer"))) {
    if ((rc = get_int(&x, e, what, "top_k.from_layer", 0, INT_MAX, "an integer >= 0"))) return rc;
    r->top_k_from_layer = (int)x;
  }
  if ((e = cJSON_GetObjectItemCaseSensitive(v, "distance"))) {
    /* 0 would read back as "default D / 2" (see the note at the top). */
    if ((rc = get_int(&r->top_k_distance, e, what, "top_k.distance", 1, EXACT_INT_MAX,
                      "an integer >= 1 (omit it for the default D / 2)")))
      return rc;
  }
  if ((e = cJSON_GetObjectItemCaseSensitive(v, "rows"))) {
    int rows;
    if ((rc = get_enum(&rows, e, what, "top_k.rows", ROWS_NAMES, "\"decode\" or \"all\""))) return rc;
    r->top_k_rows = rows == 0 ? CP_TOPK_ROWS_DECODE : CP_TOPK_ROWS_ALL;
  }
  r->has_top_k = true;
  return 0;
}

int cp_rule_from_json(cp_rule *out, const cJSON *json, const char *what) {
  static const char *const known[] = {"temperature", "temperature_schedule", "temperature_scope", "alibi_scale",
                                      "lambda_mask", "distance_ceiling", "top_k", "fire_threshold", "train_len",
                                      NULL};
  cp_rule_init(out);
  cp_rule r;
  cp_rule_init(&r);
  int rc = 0;
  if (!cJSON_IsObject(json)) {
    char buf[64];
    rc = cp_error_set(CP_ERULE_VALUE, "%s: the rule is %s, not a JSON object", what, describe(buf, json));
    goto done;
  }
  if ((rc = check_keys(json, known, what, "the rule"))) goto done;
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "temperature")) && (rc = parse_temperature(&r, v, what)))
    goto done;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "temperature_schedule"))) {
    if (r.n_temperature > 0) {
      rc = cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule': a rule has temperature or "
                        "temperature_schedule, not both", what);
      goto done;
    }
    if ((rc = parse_schedule(&r, v, what))) goto done;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "temperature_scope"))) {
    int s;
    if ((rc = get_enum(&s, v, what, "temperature_scope", SCOPE_NAMES, "\"encoder\", \"self\" or \"all\"")))
      goto done;
    r.temperature_scope = s == 0 ? CP_TEMP_SCOPE_ENCODER : s == 1 ? CP_TEMP_SCOPE_SELF : CP_TEMP_SCOPE_ALL;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "alibi_scale")) && (rc = parse_alibi(&r, v, what)))
    goto done;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "lambda_mask")) && (rc = parse_lambda(&r, v, what)))
    goto done;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "distance_ceiling")) &&
      (rc = get_int(&r.distance_ceiling, v, what, "distance_ceiling", 1, EXACT_INT_MAX, "an integer >= 1")))
    goto done;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "top_k")) && (rc = parse_top_k(&r, v, what))) goto done;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "fire_threshold")) &&
      (rc = get_positive(&r.fire_threshold, v, what, "fire_threshold", 0, true, "a number > 0")))
    goto done;
  if ((v = cJSON_GetObjectItemCaseSensitive(json, "train_len")) &&
      (rc = get_int(&r.train_len, v, what, "train_len", 1, EXACT_INT_MAX, "an integer >= 1")))
    goto done;
  *out = r;
done:
  return rc;
}

int cp_rule_parse(cp_rule *out, const char *text, size_t len, const char *what) {
  cp_rule_init(out);
  cJSON *json = NULL;
  int rc = cp_json_parse_strict(&json, text, len, what, RULE_MAX_DEPTH, CP_ERULE_JSON, CP_ERULE_JSON,
                                CP_ERULE_KEY, CP_ERULE_VALUE);
  if (rc) goto done;
  rc = cp_rule_from_json(out, json, what);
done:
  cJSON_Delete(json);
  return rc;
}

int cp_rule_load(cp_rule *out, const char *path) {
  cp_rule_init(out);
  char *text = NULL;
  size_t len = 0;
  int rc = cp_read_file(&text, &len, path, RULE_MAX_FILE);
  if (rc) goto done;
  cp_input_note(path);
  rc = cp_rule_parse(out, text, len, path);
done:
  free(text);
  return rc;
}

/* ---- serialising ---- */

/* Adds a number item; NULL on allocation failure. */
static bool add_num(cJSON *obj, const char *key, double v) { return cJSON_AddNumberToObject(obj, key, v) != NULL; }
static bool add_str(cJSON *obj, const char *key, const char *v) { return cJSON_AddStringToObject(obj, key, v) != NULL; }

/* Adds {"points": [[L, tau or [taus]], ...]} as "temperature_schedule"; NULL when out of memory. */
static cJSON *schedule_to_json(cJSON *root, const cp_rule *r) {
  cJSON *sched = cJSON_AddObjectToObject(root, "temperature_schedule");
  cJSON *pts = sched ? cJSON_AddArrayToObject(sched, "points") : NULL;
  if (!pts) return NULL;
  const int w = r->schedule_width;
  for (int k = 0; k < r->n_schedule; k++) {
    cJSON *pt = cJSON_CreateArray(), *x;
    if (!pt) return NULL;
    cJSON_AddItemToArray(pts, pt);
    if (!(x = cJSON_CreateNumber((double)r->schedule_len[k]))) return NULL;
    cJSON_AddItemToArray(pt, x);
    x = r->schedule_per_layer ? cJSON_CreateDoubleArray(r->schedule_tau + (size_t)k * w, w)
                              : cJSON_CreateNumber(r->schedule_tau[k]);
    if (!x) return NULL;
    cJSON_AddItemToArray(pt, x);
  }
  return sched;
}

cJSON *cp_rule_to_json(const cp_rule *r) {
  cJSON *root = cJSON_CreateObject(), *sub;
  if (!root) goto fail;
  /* Key order: the spec's example. */
  if (r->n_temperature == 1 && !r->temperature_per_layer) {
    if (!add_num(root, "temperature", r->temperature[0])) goto fail;
  } else if (r->n_temperature >= 1) {
    if (!(sub = cJSON_CreateDoubleArray(r->temperature, r->n_temperature))) goto fail;
    cJSON_AddItemToObject(root, "temperature", sub);
  }
  if (r->n_schedule > 0 && !(sub = schedule_to_json(root, r))) goto fail;
  if (r->temperature_scope != CP_TEMP_SCOPE_ENCODER &&
      !add_str(root, "temperature_scope", SCOPE_NAMES[r->temperature_scope]))
    goto fail;
  if (r->alibi_mode != CP_ALIBI_NONE) {
    if (!(sub = cJSON_AddObjectToObject(root, "alibi_scale"))) goto fail;
    if (!add_str(sub, "mode", ALIBI_NAMES[r->alibi_mode - CP_ALIBI_STATIC])) goto fail;
    if (r->alibi_mode == CP_ALIBI_STATIC && !add_num(sub, "factor", r->alibi_factor)) goto fail;
  }
  if (r->has_lambda) {
    if (!(sub = cJSON_AddObjectToObject(root, "lambda_mask"))) goto fail;
    if (!add_num(sub, "n_global", (double)r->n_global) || !add_num(sub, "n_local", (double)r->n_local))
      goto fail;
  }
  if (r->distance_ceiling > 0 && !add_num(root, "distance_ceiling", (double)r->distance_ceiling)) goto fail;
  if (r->has_top_k) {
    if (!(sub = cJSON_AddObjectToObject(root, "top_k"))) goto fail;
    if (!add_num(sub, "k", r->top_k)) goto fail;
    if (r->top_k_from_layer != 0 && !add_num(sub, "from_layer", r->top_k_from_layer)) goto fail;
    if (r->top_k_distance != 0 && !add_num(sub, "distance", (double)r->top_k_distance)) goto fail;
    if (r->top_k_rows != CP_TOPK_ROWS_DECODE && !add_str(sub, "rows", ROWS_NAMES[r->top_k_rows])) goto fail;
  }
  if (r->fire_threshold > 0 && !add_num(root, "fire_threshold", r->fire_threshold)) goto fail;
  if (r->train_len > 0 && !add_num(root, "train_len", (double)r->train_len)) goto fail;
  return root;
fail:
  cJSON_Delete(root);
  cp_nomem("rule: serialising");
  return NULL;
}

/* Integral values print as integers (never 1e+15); others with the shortest of %.15g / %.17g
 * that reads back to the same double. */
static void put_number(cp_strbuf *s, double d) {
  char buf[40];
  if (d == floor(d) && fabs(d) <= EXACT_INT_MAX) {
    snprintf(buf, sizeof buf, "%lld", (long long)d);
  } else {
    snprintf(buf, sizeof buf, "%.15g", d);
    if (strtod(buf, NULL) != d) snprintf(buf, sizeof buf, "%.17g", d);
  }
  cp_strbuf_str(s, buf);
}

/* Writes the tree of cp_rule_to_json: only objects, arrays, numbers and our own ASCII
 * keywords occur, so strings need no escaping. */
static void put_item(cp_strbuf *s, const cJSON *it) {
  if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
    bool obj = cJSON_IsObject(it);
    cp_strbuf_str(s, obj ? "{" : "[");
    for (const cJSON *c = it->child; c; c = c->next) {
      if (obj) {
        cp_strbuf_str(s, "\"");
        cp_strbuf_str(s, c->string);
        cp_strbuf_str(s, "\":");
      }
      put_item(s, c);
      if (c->next) cp_strbuf_str(s, ",");
    }
    cp_strbuf_str(s, obj ? "}" : "]");
  } else if (cJSON_IsNumber(it)) {
    put_number(s, it->valuedouble);
  } else {
    cp_strbuf_str(s, "\"");
    cp_strbuf_str(s, it->valuestring);
    cp_strbuf_str(s, "\"");
  }
}

char *cp_rule_to_string(const cp_rule *rule) {
  cJSON *json = cp_rule_to_json(rule);
  if (!json) return NULL;
  cp_strbuf s = {0};
  put_item(&s, json);
  cJSON_Delete(json);
  if (s.oom) {
    cp_strbuf_free(&s);
    cp_nomem("rule: serialising");
    return NULL;
  }
  return s.s;
}
