/* Attention rules: JSON parsing (every refusal with its code), canonical serialisation and
 * round trips, plans for T5 and decoder-only models, the per-element helpers (hand-worked from
 * the spec's text), and T5 buckets / ALiBi slopes against tests/goldens/t5_buckets.json
 * (made by PyTorch with tests/reference/make_bucket_golden.py). */
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "model/rule_json.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

static bool rule_eq(const cp_rule *a, const cp_rule *b) {
  if (a->n_temperature != b->n_temperature || a->temperature_per_layer != b->temperature_per_layer) return false;
  for (int l = 0; l < a->n_temperature; l++)
    if (a->temperature[l] != b->temperature[l]) return false;
  if (a->n_schedule != b->n_schedule || a->schedule_width != b->schedule_width ||
      a->schedule_per_layer != b->schedule_per_layer)
    return false;
  for (int k = 0; k < a->n_schedule; k++)
    if (a->schedule_len[k] != b->schedule_len[k]) return false;
  for (int x = 0; x < a->n_schedule * a->schedule_width; x++)
    if (a->schedule_tau[x] != b->schedule_tau[x]) return false;
  return a->temperature_scope == b->temperature_scope && a->alibi_mode == b->alibi_mode &&
         a->alibi_factor == b->alibi_factor && a->has_lambda == b->has_lambda &&
         a->n_global == b->n_global && a->n_local == b->n_local &&
         a->distance_ceiling == b->distance_ceiling && a->has_top_k == b->has_top_k &&
         a->top_k == b->top_k && a->top_k_from_layer == b->top_k_from_layer &&
         a->top_k_distance == b->top_k_distance && a->top_k_rows == b->top_k_rows &&
         a->fire_threshold == b->fire_threshold && a->train_len == b->train_len;
}

static int parse_str(cp_rule *r, const char *text) { return cp_rule_parse(r, text, strlen(text), "rule.json"); }

/* Parses, serialises, parses again: the rule and the text must be stable. Returns the text. */
static char *round_trip(const char *text) {
  cp_rule a, b;
  CHECK_RC(0, parse_str(&a, text));
  char *s1 = cp_rule_to_string(&a);
  CHECK(s1 != NULL);
  if (!s1) return NULL;
  CHECK_RC(0, parse_str(&b, s1));
  CHECK_MSG(rule_eq(&a, &b), "round trip of %s via %s", text, s1);
  char *s2 = cp_rule_to_string(&b);
  CHECK(s2 && strcmp(s1, s2) == 0);
  /* cp_rule_to_json gives the same tree (cJSON may print numbers its own way, so parse it). */
  cJSON *j = cp_rule_to_json(&a);
  CHECK(j != NULL);
  cp_rule c;
  CHECK_RC(0, cp_rule_from_json(&c, j, "tree"));
  CHECK(rule_eq(&a, &c));
  cJSON_Delete(j);
  free(s2);
  return s1;
}

static const char *SPEC_EXAMPLE =
    "{\n"
    "  \"temperature\":     0.8,\n"
    "  \"temperature_scope\": \"encoder\",\n"
    "  \"alibi_scale\":     {\"mode\": \"static\", \"factor\": 2.0},\n"
    "  \"lambda_mask\":     {\"n_global\": 10, \"n_local\": 256},\n"
    "  \"distance_ceiling\": 256,\n"
    "  \"top_k\":           {\"k\": 5, \"from_layer\": 1, \"distance\": 128, \"rows\": \"decode\"},\n"
    "  \"fire_threshold\":  512,\n"
    "  \"train_len\":       256\n"
    "}\n";

static void test_spec_example(void) {
  cp_rule r;
  CHECK_RC(0, parse_str(&r, SPEC_EXAMPLE));
  CHECK(r.n_temperature == 1 && r.temperature[0] == 0.8);
  CHECK(r.temperature_scope == CP_TEMP_SCOPE_ENCODER);
  CHECK(r.alibi_mode == CP_ALIBI_STATIC && r.alibi_factor == 2.0);
  CHECK(r.has_lambda && r.n_global == 10 && r.n_local == 256);
  CHECK(r.distance_ceiling == 256);
  CHECK(r.has_top_k && r.top_k == 5 && r.top_k_from_layer == 1 && r.top_k_distance == 128 &&
        r.top_k_rows == CP_TOPK_ROWS_DECODE);
  CHECK(r.fire_threshold == 512.0 && r.train_len == 256);
  CHECK(!cp_rule_is_identity(&r));

  /* The same with the per-layer form of temperature. */
  char text[1024];
  const char *p = strstr(SPEC_EXAMPLE, "0.8");
  snprintf(text, sizeof text, "%.*s[1.0, 0.9, 0.8]%s", (int)(p - SPEC_EXAMPLE), SPEC_EXAMPLE, p + 3);
  cp_rule q;
  CHECK_RC(0, parse_str(&q, text));
  CHECK(q.n_temperature == 3 && q.temperature[0] == 1.0 && q.temperature[1] == 0.9 &&
        q.temperature[2] == 0.8);
  CHECK(q.has_top_k && q.top_k == 5 && q.train_len == 256);

  /* Canonical text: spec key order, defaults (scope "encoder", rows "decode") left out,
   * integers as integers. */
  char *s = cp_rule_to_string(&r);
  CHECK_MSG(s && strcmp(s, "{\"temperature\":0.8,\"alibi_scale\":{\"mode\":\"static\",\"factor\":2},"
                           "\"lambda_mask\":{\"n_global\":10,\"n_local\":256},\"distance_ceiling\":256,"
                           "\"top_k\":{\"k\":5,\"from_layer\":1,\"distance\":128},\"fire_threshold\":512,"
                           "\"train_len\":256}") == 0,
            "got %s", s ? s : "(null)");
  free(s);
  s = cp_rule_to_string(&q);
  CHECK_MSG(s && strncmp(s, "{\"temperature\":[1,0.9,0.8],\"alibi_scale\"", 40) == 0, "got %s", s ? s : "(null)");
  free(s);
}

static void test_identity(void) {
  cp_rule r;
  cp_rule_init(&r);
  CHECK(cp_rule_is_identity(&r));
  CHECK(r.temperature_scope == CP_TEMP_SCOPE_ENCODER && r.alibi_mode == CP_ALIBI_NONE &&
        r.top_k_rows == CP_TOPK_ROWS_DECODE && r.n_temperature == 0);
  CHECK_RC(0, parse_str(&r, "{}"));
  CHECK(cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, " { } "));
  char *s = cp_rule_to_string(&r);
  CHECK(s && strcmp(s, "{}") == 0);
  free(s);
  /* Fields with no effect on their own keep the rule an identity. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": 1, \"temperature_scope\": \"all\", \"train_len\": 9,"
                            " \"alibi_scale\": {\"mode\": \"static\", \"factor\": 1}, \"top_k\": {\"k\": 3}}"));
  CHECK(cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [1, 1, 0.99]}"));
  CHECK(!cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"dynamic\"}}"));
  CHECK(!cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, "{\"distance_ceiling\": 4}"));
  CHECK(!cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, "{\"fire_threshold\": 4}"));
  CHECK(!cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, "{\"lambda_mask\": {\"n_global\": 0, \"n_local\": 4}}"));
  CHECK(!cp_rule_is_identity(&r));
}

static void test_accepts(void) {
  cp_rule r;
  /* Integral numbers in any spelling are integers. */
  CHECK_RC(0, parse_str(&r, "{\"distance_ceiling\": 256.0, \"train_len\": 2.56e2}"));
  CHECK(r.distance_ceiling == 256 && r.train_len == 256);
  CHECK_RC(0, parse_str(&r, "{\"train_len\": 9007199254740992}"));
  CHECK(r.train_len == 9007199254740992LL);
  /* [x] is a per-layer list of one value (checked against the depth); x is one tau. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.7]}"));
  CHECK(r.n_temperature == 1 && r.temperature[0] == 0.7 && r.temperature_per_layer);
  CHECK_RC(0, parse_str(&r, "{\"temperature\": 0.7}"));
  CHECK(r.n_temperature == 1 && !r.temperature_per_layer);
  /* top_k.k is bounded: N accepted, N + 1 refused (2^31 - 1 once passed and then failed for memory). */
  char topk[96];
  snprintf(topk, sizeof topk, "{\"top_k\": {\"k\": %d}}", CP_RULE_MAX_TOP_K);
  CHECK_RC(0, parse_str(&r, topk));
  CHECK(r.top_k == CP_RULE_MAX_TOP_K);
  snprintf(topk, sizeof topk, "{\"top_k\": {\"k\": %d}}", CP_RULE_MAX_TOP_K + 1);
  CHECK_RC(CP_ERULE_VALUE, parse_str(&r, topk));
  CHECK(strstr(cp_error_message(), "top_k.k") != NULL);
  CHECK_RC(CP_ERULE_VALUE, parse_str(&r, "{\"top_k\": {\"k\": 2147483647}}"));
  CHECK_RC(0, parse_str(&r, "{\"temperature_scope\": \"self\"}"));
  CHECK(r.temperature_scope == CP_TEMP_SCOPE_SELF);
  CHECK_RC(0, parse_str(&r, "{\"temperature_scope\": \"all\"}"));
  CHECK(r.temperature_scope == CP_TEMP_SCOPE_ALL);
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"progressive\"}}"));
  CHECK(r.alibi_mode == CP_ALIBI_PROGRESSIVE && r.alibi_factor == 1.0);
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"factor\": 1.5, \"mode\": \"static\"}}"));
  CHECK(r.alibi_mode == CP_ALIBI_STATIC && r.alibi_factor == 1.5);
  /* top_k defaults. */
  CHECK_RC(0, parse_str(&r, "{\"top_k\": {\"k\": 2}}"));
  CHECK(r.has_top_k && r.top_k == 2 && r.top_k_from_layer == 0 && r.top_k_distance == 0 &&
        r.top_k_rows == CP_TOPK_ROWS_DECODE && !r.has_lambda);
  CHECK_RC(0, parse_str(&r, "{\"top_k\": {\"k\": 2, \"rows\": \"all\", \"from_layer\": 0}}"));
  CHECK(r.top_k_rows == CP_TOPK_ROWS_ALL && r.top_k_from_layer == 0);
  CHECK_RC(0, parse_str(&r, "{\"fire_threshold\": 512.5, \"lambda_mask\": {\"n_local\": 1, \"n_global\": 0}}"));
  CHECK(r.fire_threshold == 512.5 && r.n_local == 1 && r.n_global == 0);
  /* The longest per-layer list. */
  char big[8 * CP_RULE_MAX_LAYERS + 64];
  size_t n = (size_t)snprintf(big, sizeof big, "{\"temperature\": [");
  for (int l = 0; l < CP_RULE_MAX_LAYERS; l++)
    n += (size_t)snprintf(big + n, sizeof big - n, "%s0.5", l ? "," : "");
  snprintf(big + n, sizeof big - n, "]}");
  CHECK_RC(0, parse_str(&r, big));
  CHECK(r.n_temperature == CP_RULE_MAX_LAYERS && r.temperature[CP_RULE_MAX_LAYERS - 1] == 0.5);
  /* One more is refused. */
  n = strlen(big) - 2;
  snprintf(big + n, sizeof big - n, ",0.5]}");
  CHECK_RC(CP_ERULE_VALUE, parse_str(&r, big));
}

typedef struct {
  const char *text;
  int code;
  const char *in_message; /* substring the message must contain, or NULL */
} refusal;

static void test_refusals(void) {
  static const refusal cases[] = {
      /* syntax and encoding */
      {"", CP_ERULE_JSON, NULL},
      {"{", CP_ERULE_JSON, NULL},
      {"{\"temperature\": }", CP_ERULE_JSON, NULL},
      {"{\"temperature\": 0.8,}", CP_ERULE_JSON, NULL},
      {"{\"temperature\": 0.8} x", CP_ERULE_JSON, NULL},
      {"{\"temperature\": NaN}", CP_ERULE_JSON, NULL},
      {"{\"train_len\": 0x10}", CP_ERULE_JSON, NULL},
      {"{\"temperature_scope\": \"enc\xff\"}", CP_ERULE_JSON, NULL},
      {"{\"temperature_scope\": \"\xc3\x28\"}", CP_ERULE_JSON, NULL},
      /* duplicate keys, at any level */
      {"{\"temperature\": 0.8, \"temperature\": 0.9}", CP_ERULE_KEY, "temperature"},
      {"{\"top_k\": {\"k\": 1, \"k\": 2}}", CP_ERULE_KEY, "'k'"},
      /* nesting deeper than 16 */
      {"{\"temperature\": [[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]}", CP_ERULE_VALUE, "deeper than 16"},
      /* unknown keys, at any level */
      {"{\"temprature\": 0.8}", CP_ERULE_KEY, "'temprature'"},
      {"{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2, \"slope\": 1}}", CP_ERULE_KEY, "'slope'"},
      {"{\"alibi_scale\": {\"mode\": \"dynamic\", \"factor\": 2}}", CP_ERULE_KEY, "'factor'"},
      {"{\"alibi_scale\": {\"mode\": \"progressive\", \"train_len\": 2}}", CP_ERULE_KEY, "'train_len'"},
      {"{\"lambda_mask\": {\"n_global\": 1, \"n_local\": 2, \"n_far\": 3}}", CP_ERULE_KEY, "'n_far'"},
      {"{\"top_k\": {\"k\": 1, \"layers\": 2}}", CP_ERULE_KEY, "'layers'"},
      /* not an object */
      {"[]", CP_ERULE_VALUE, NULL},
      {"0.8", CP_ERULE_VALUE, NULL},
      {"null", CP_ERULE_VALUE, NULL},
      /* temperature */
      {"{\"temperature\": 0}", CP_ERULE_VALUE, "'temperature': 0 "},
      {"{\"temperature\": -0.5}", CP_ERULE_VALUE, "-0.5"},
      {"{\"temperature\": -0.0}", CP_ERULE_VALUE, "temperature"},
      {"{\"temperature\": 1e400}", CP_ERULE_VALUE, "temperature"},
      {"{\"temperature\": \"0.8\"}", CP_ERULE_VALUE, "\"0.8\""},
      {"{\"temperature\": true}", CP_ERULE_VALUE, "true"},
      {"{\"temperature\": null}", CP_ERULE_VALUE, "null"},
      {"{\"temperature\": {}}", CP_ERULE_VALUE, "an object"},
      {"{\"temperature\": []}", CP_ERULE_VALUE, "0 values"},
      {"{\"temperature\": [1, 0]}", CP_ERULE_VALUE, "'temperature[1]': 0 "},
      {"{\"temperature\": [1, \"x\"]}", CP_ERULE_VALUE, "temperature[1]"},
      {"{\"temperature\": [1, [0.5]]}", CP_ERULE_VALUE, "temperature[1]"},
      /* temperature_scope */
      {"{\"temperature_scope\": \"decoder\"}", CP_ERULE_VALUE, "\"decoder\""},
      {"{\"temperature_scope\": \"Encoder\"}", CP_ERULE_VALUE, "temperature_scope"},
      {"{\"temperature_scope\": 1}", CP_ERULE_VALUE, "temperature_scope"},
      /* alibi_scale */
      {"{\"alibi_scale\": 2.0}", CP_ERULE_VALUE, "'alibi_scale': 2 "},
      {"{\"alibi_scale\": {}}", CP_ERULE_VALUE, "mode"},
      {"{\"alibi_scale\": {\"factor\": 2}}", CP_ERULE_VALUE, "mode"},
      {"{\"alibi_scale\": {\"mode\": \"linear\"}}", CP_ERULE_VALUE, "\"linear\""},
      {"{\"alibi_scale\": {\"mode\": \"static\"}}", CP_ERULE_VALUE, "factor"},
      {"{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 0.5}}", CP_ERULE_VALUE, "'alibi_scale.factor': 0.5"},
      {"{\"alibi_scale\": {\"mode\": \"static\", \"factor\": \"2\"}}", CP_ERULE_VALUE, "alibi_scale.factor"},
      /* lambda_mask */
      {"{\"lambda_mask\": [10, 256]}", CP_ERULE_VALUE, "lambda_mask"},
      {"{\"lambda_mask\": {\"n_local\": 256}}", CP_ERULE_VALUE, "n_global"},
      {"{\"lambda_mask\": {\"n_global\": 10}}", CP_ERULE_VALUE, "n_local"},
      {"{\"lambda_mask\": {\"n_global\": 10, \"n_local\": 0}}", CP_ERULE_VALUE, "'lambda_mask.n_local': 0"},
      {"{\"lambda_mask\": {\"n_global\": 10, \"n_local\": 8.5}}", CP_ERULE_VALUE, "'lambda_mask.n_local': 8.5"},
      {"{\"lambda_mask\": {\"n_global\": -1, \"n_local\": 8}}", CP_ERULE_VALUE, "'lambda_mask.n_global': -1"},
      {"{\"lambda_mask\": {\"n_global\": 0, \"n_local\": 9007199254740994}}", CP_ERULE_VALUE, "n_local"},
      {"{\"lambda_mask\": {\"n_global\": 0, \"n_local\": 1e300}}", CP_ERULE_VALUE, "n_local"},
      /* distance_ceiling */
      {"{\"distance_ceiling\": 0}", CP_ERULE_VALUE, "'distance_ceiling': 0"},
      {"{\"distance_ceiling\": 8.5}", CP_ERULE_VALUE, "'distance_ceiling': 8.5"},
      {"{\"distance_ceiling\": -256}", CP_ERULE_VALUE, "-256"},
      {"{\"distance_ceiling\": \"256\"}", CP_ERULE_VALUE, "distance_ceiling"},
      /* top_k */
      {"{\"top_k\": 5}", CP_ERULE_VALUE, "top_k"},
      {"{\"top_k\": {}}", CP_ERULE_VALUE, "\"k\""},
      {"{\"top_k\": {\"from_layer\": 1}}", CP_ERULE_VALUE, "\"k\""},
      {"{\"top_k\": {\"k\": 0}}", CP_ERULE_VALUE, "'top_k.k': 0"},
      {"{\"top_k\": {\"k\": 2.5}}", CP_ERULE_VALUE, "'top_k.k': 2.5"},
      {"{\"top_k\": {\"k\": 3000000000}}", CP_ERULE_VALUE, "top_k.k"},
      {"{\"top_k\": {\"k\": 1, \"from_layer\": -1}}", CP_ERULE_VALUE, "'top_k.from_layer': -1"},
      {"{\"top_k\": {\"k\": 1, \"distance\": 0}}", CP_ERULE_VALUE, "'top_k.distance': 0"},
      {"{\"top_k\": {\"k\": 1, \"distance\": 12.5}}", CP_ERULE_VALUE, "'top_k.distance': 12.5"},
      {"{\"top_k\": {\"k\": 1, \"rows\": \"prompt\"}}", CP_ERULE_VALUE, "\"prompt\""},
      {"{\"top_k\": {\"k\": 1, \"rows\": null}}", CP_ERULE_VALUE, "top_k.rows"},
      /* fire_threshold, train_len */
      {"{\"fire_threshold\": 0}", CP_ERULE_VALUE, "'fire_threshold': 0"},
      {"{\"fire_threshold\": -512}", CP_ERULE_VALUE, "fire_threshold"},
      {"{\"train_len\": 0}", CP_ERULE_VALUE, "'train_len': 0"},
      {"{\"train_len\": 1.5}", CP_ERULE_VALUE, "'train_len': 1.5"},
      {"{\"train_len\": [256]}", CP_ERULE_VALUE, "train_len"},
      /* temperature_schedule */
#define SCHED(pts) "{\"temperature_schedule\": {\"points\": " pts "}}"
      {"{\"temperature\": 0.8, \"temperature_schedule\": {\"points\": [[4, 1]]}}", CP_ERULE_VALUE, "not both"},
      {"{\"temperature_schedule\": {\"points\": [[4, 1]]}, \"temperature\": [0.8]}", CP_ERULE_VALUE, "not both"},
      {"{\"temperature_schedule\": [[4, 1]]}", CP_ERULE_VALUE, "'temperature_schedule': an array is not an object"},
      {"{\"temperature_schedule\": {}}", CP_ERULE_VALUE, "missing \"points\""},
      {"{\"temperature_schedule\": {\"points\": [[4, 1]], \"kind\": \"log\"}}", CP_ERULE_KEY, "'kind'"},
      {SCHED("{}"), CP_ERULE_VALUE, "'temperature_schedule.points': an object"},
      {SCHED("[]"), CP_ERULE_VALUE, "0 points"},
      {SCHED("[4, 1]"), CP_ERULE_VALUE, "'temperature_schedule.points[0]': 4 is not a [length, tau] pair"},
      {SCHED("[[4]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0]': an array"},
      {SCHED("[[4, 1, 2]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0]'"},
      {SCHED("[[4, 1], null]"), CP_ERULE_VALUE, "'temperature_schedule.points[1]': null"},
      {SCHED("[[0, 1]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][0]': 0 is not a length"},
      {SCHED("[[-3, 1]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][0]': -3"},
      {SCHED("[[4.5, 1]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][0]': 4.5"},
      {SCHED("[[\"4\", 1]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][0]': \"4\""},
      {SCHED("[[1e300, 1]]"), CP_ERULE_VALUE, "points[0][0]"},
      {SCHED("[[9007199254740994, 1]]"), CP_ERULE_VALUE, "points[0][0]"},
      {SCHED("[[4, 1], [4, 0.9]]"), CP_ERULE_VALUE, "'temperature_schedule.points[1][0]': length 4 is not above the previous point's 4"},
      {SCHED("[[8, 1], [16, 0.9], [12, 0.8]]"), CP_ERULE_VALUE, "points[2][0]': length 12"},
      {SCHED("[[4, 0]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1]': 0 is not a number > 0"},
      {SCHED("[[4, 1], [8, -0.5]]"), CP_ERULE_VALUE, "'temperature_schedule.points[1][1]': -0.5"},
      {SCHED("[[4, \"1\"]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1]': \"1\""},
      {SCHED("[[4, null]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1]': null"},
      {SCHED("[[4, {}]]"), CP_ERULE_VALUE, "points[0][1]': an object"},
      {SCHED("[[4, 1e400]]"), CP_ERULE_VALUE, "points[0][1]': inf"},
      /* Regressions from fuzz_rule: a zero-width log segment (both logs 36.62...) made tau NaN;
       * taus above 1e30 let a segment's slope overflow. */
      {SCHED("[[8014398509881980, 1], [8014398509881984, 3]]"), CP_ERULE_VALUE,
       "'temperature_schedule.points[1][0]': length 8014398509881984 is too close to the previous point's 8014398509881980"},
      {SCHED("[[4, 1], [8, 1.5e30]]"), CP_ERULE_VALUE, "'temperature_schedule.points[1][1]': 1.4999999999999999e+30 is not a number > 0 and <= 1e30"},
      {SCHED("[[4, [1, 2e30]]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1][1]'"},
      {SCHED("[[4, 1], [8, [0.9]]]"), CP_ERULE_VALUE, "'temperature_schedule.points[1][1]': a list of 1 taus, but point 0 has one tau"},
      {SCHED("[[4, [1, 0.9]], [8, [0.9]]]"), CP_ERULE_VALUE, "points[1][1]': a list of 1 taus, but point 0 has a list of 2 taus"},
      {SCHED("[[4, [1, 0.9]], [8, 0.9]]"), CP_ERULE_VALUE, "points[1][1]': one tau, but point 0 has a list of 2 taus"},
      {SCHED("[[4, [1, 0.9]], [8, \"x\"]]"), CP_ERULE_VALUE, "points[1][1]': \"x\""},
      {SCHED("[[4, []]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1]': a list of 0 taus"},
      {SCHED("[[4, [1, 0]]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1][1]': 0"},
      {SCHED("[[4, [1, [0.5]]]]"), CP_ERULE_VALUE, "'temperature_schedule.points[0][1][1]': an array"},
#undef SCHED
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cp_rule r;
    r.n_temperature = 77; /* must be reset on failure */
    int rc = parse_str(&r, cases[c].text);
    CHECK_MSG(rc == cases[c].code, "%s: got %s want %s (%s)", cases[c].text, cp_err_name(rc),
              cp_err_name(cases[c].code), cp_error_message());
    CHECK_MSG(strncmp(cp_error_message(), "rule.json: ", 11) == 0, "%s: message '%s'", cases[c].text,
              cp_error_message());
    if (cases[c].in_message)
      CHECK_MSG(strstr(cp_error_message(), cases[c].in_message) != NULL, "%s: message '%s' lacks '%s'",
                cases[c].text, cp_error_message(), cases[c].in_message);
    CHECK_MSG(r.n_temperature == 0 && cp_rule_is_identity(&r), "%s: out not reset", cases[c].text);
  }
  /* An embedded NUL ends nothing: the length is what counts. */
  cp_rule r;
  CHECK_RC(CP_ERULE_JSON, cp_rule_parse(&r, "{}\0{}", 5, "rule.json"));
  CHECK_RC(0, cp_rule_parse(&r, "{}\0{}", 2, "rule.json"));
}

static void test_round_trips(void) {
  static const struct {
    const char *in, *canonical;
  } cases[] = {
      {"{}", "{}"},
      {"{\"temperature\": 0.1}", "{\"temperature\":0.1}"},
      {"{\"temperature\": 0.3333333333333333}", "{\"temperature\":0.33333333333333331}"},
      {"{\"temperature\": [0.5]}", "{\"temperature\":[0.5]}"},
      {"{\"temperature\": 0.5}", "{\"temperature\":0.5}"},
      {"{\"temperature\": [2, 1e-3, 0.123456789012345678]}", "{\"temperature\":[2,0.001,0.12345678901234568]}"},
      {"{\"temperature_scope\": \"all\", \"temperature\": 0.75}",
       "{\"temperature\":0.75,\"temperature_scope\":\"all\"}"},
      {"{\"temperature_scope\": \"self\", \"temperature_schedule\": {\"points\": [[256, 1.0], [1024, 0.75], [2048, 0.65]]}}",
       "{\"temperature_schedule\":{\"points\":[[256,1],[1024,0.75],[2048,0.65]]},\"temperature_scope\":\"self\"}"},
      {"{\"temperature_schedule\": {\"points\": [[1, [1, 0.5]], [4.0e3, [0.3333333333333333, 2]]]}}",
       "{\"temperature_schedule\":{\"points\":[[1,[1,0.5]],[4000,[0.33333333333333331,2]]]}}"},
      {"{\"temperature_schedule\": {\"points\": [[7, [0.9]]]}}", "{\"temperature_schedule\":{\"points\":[[7,[0.9]]]}}"},
      {"{\"temperature_scope\": \"encoder\"}", "{}"},
      {"{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": 1000000000000000}",
       "{\"alibi_scale\":{\"mode\":\"dynamic\"},\"train_len\":1000000000000000}"},
      {"{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 1.25}}",
       "{\"alibi_scale\":{\"mode\":\"static\",\"factor\":1.25}}"},
      {"{\"alibi_scale\": {\"mode\": \"progressive\"}}", "{\"alibi_scale\":{\"mode\":\"progressive\"}}"},
      {"{\"top_k\": {\"rows\": \"all\", \"k\": 3, \"distance\": 64, \"from_layer\": 0}}",
       "{\"top_k\":{\"k\":3,\"distance\":64,\"rows\":\"all\"}}"},
      {"{\"train_len\": 4096, \"lambda_mask\": {\"n_local\": 4096, \"n_global\": 0}, \"distance_ceiling\": "
       "9007199254740992}",
       "{\"lambda_mask\":{\"n_global\":0,\"n_local\":4096},\"distance_ceiling\":9007199254740992,\"train_len\":4096}"},
      {"{\"fire_threshold\": 1e-300}", "{\"fire_threshold\":1e-300}"},
      {"{\"fire_threshold\": 5e15}", "{\"fire_threshold\":5000000000000000}"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char *s = round_trip(cases[c].in);
    CHECK_MSG(s && strcmp(s, cases[c].canonical) == 0, "%s: got %s want %s", cases[c].in, s ? s : "(null)",
              cases[c].canonical);
    free(s);
  }
  free(round_trip(SPEC_EXAMPLE));
  /* A 512-layer list of awkward values. */
  cp_rule r, q;
  cp_rule_init(&r);
  r.n_temperature = CP_RULE_MAX_LAYERS;
  r.temperature_per_layer = true;
  for (int l = 0; l < r.n_temperature; l++) r.temperature[l] = 1.0 / (l + 3) + 1e-17 * l;
  char *s = cp_rule_to_string(&r);
  CHECK(s != NULL);
  CHECK_RC(0, parse_str(&q, s));
  CHECK(rule_eq(&r, &q));
  free(s);
}

static void test_load(void) {
  char dir[] = "/tmp/ctxpatch_test_rule_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[128];
  snprintf(path, sizeof path, "%s/rule.json", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("{\"temperature\": 0.9, \"lambda_mask\": {\"n_global\": 4, \"n_local\": 32}}", f);
  fclose(f);
  cp_rule r;
  CHECK_RC(0, cp_rule_load(&r, path));
  CHECK(r.n_temperature == 1 && r.temperature[0] == 0.9 && r.n_local == 32);
  f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("{\"lambda_mask\": {\"n_global\": 4, \"n_local\": 3.5}}", f);
  fclose(f);
  CHECK_RC(CP_ERULE_VALUE, cp_rule_load(&r, path));
  CHECK(strstr(cp_error_message(), path) != NULL);
  unlink(path);
  CHECK_RC(CP_ENOTFOUND, cp_rule_load(&r, path));
  rmdir(dir);
}

static const cp_rule_model T5 = {.is_encoder_decoder = true, .n_layers_encoder = 3, .n_layers_decoder = 2,
                                 .train_len = 512};
static const cp_rule_model GPT = {.is_encoder_decoder = false, .n_layers_encoder = 0, .n_layers_decoder = 4,
                                  .train_len = 0, .has_alibi = true};

static void test_check_model(void) {
  {
    /* positional rules only on the models that have that positional term */
    cp_rule r;
    CHECK_RC(0, cp_rule_parse(&r, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}", 48, "r.json"));
    CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r.json"));
    CHECK(strstr(cp_error_message(), "alibi_scale") != NULL);
    CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r.json"));
    CHECK_RC(0, cp_rule_parse(&r, "{\"fire_threshold\": 12}", 22, "r.json"));
    CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r.json"));
    cp_rule_model fire = GPT;
    fire.has_alibi = false;
    fire.has_fire = true;
    CHECK_RC(0, cp_rule_check_model(&r, &fire, "r.json"));
  }
  cp_rule r;
  /* Per-layer lists must match every stack in scope (decision 1). */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.9, 0.8, 0.7]}"));
  CHECK_RC(0, cp_rule_check_model(&r, &T5, "r")); /* scope encoder: 3 layers */
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r"));
  CHECK(strstr(cp_error_message(), "3 values") && strstr(cp_error_message(), "4 layers"));
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.9, 0.8, 0.7], \"temperature_scope\": \"self\"}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r"));
  CHECK(strstr(cp_error_message(), "3 values") && strstr(cp_error_message(), "decoder has 2 layers"));
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.9, 0.8], \"temperature_scope\": \"all\"}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r"));
  CHECK(strstr(cp_error_message(), "encoder has 3 layers"));
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.9, 0.8, 0.7, 0.6], \"temperature_scope\": \"encoder\"}"));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r")); /* decoder-only: scope ignored (decision 2) */
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r"));
  cp_rule_model t5_equal = {.is_encoder_decoder = true, .n_layers_encoder = 2, .n_layers_decoder = 2};
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.9, 0.8], \"temperature_scope\": \"all\"}"));
  CHECK_RC(0, cp_rule_check_model(&r, &t5_equal, "r"));
  /* One tau (a number) fits anything. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": 0.5, \"temperature_scope\": \"all\"}"));
  CHECK_RC(0, cp_rule_check_model(&r, &T5, "r"));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r"));
  /* A list of one is a per-layer list: it fits a one-layer stack only (it once applied to every layer). */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.5], \"temperature_scope\": \"all\"}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r"));
  CHECK(strstr(cp_error_message(), "1 values") && strstr(cp_error_message(), "4 layers"));
  cp_rule_model one_layer = GPT;
  one_layer.n_layers_decoder = 1;
  CHECK_RC(0, cp_rule_check_model(&r, &one_layer, "r"));
  /* dynamic / progressive need a training length from the rule or the model. */
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"dynamic\"}}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r"));
  CHECK(strstr(cp_error_message(), "train_len") != NULL);
  cp_rule_model alibi_512 = GPT;
  alibi_512.train_len = 512;
  CHECK_RC(0, cp_rule_check_model(&r, &alibi_512, "r"));
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"progressive\"}}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r"));
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": 64}"));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r"));
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}"));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r"));
}

static void test_plans_t5(void) {
  cp_rule r;
  cp_attn_plan p;
  /* Default scope "encoder": only encoder self-attention is tempered; per-layer values by
   * index within the stack. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.5, 0.25, 2], \"lambda_mask\": {\"n_global\": 2, \"n_local\": 8}}"));
  CHECK_RC(0, cp_rule_check_model(&r, &T5, "r"));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_ENCODER_SELF, 1);
  CHECK(p.kind == CP_ATTN_ENCODER_SELF && p.layer == 1 && p.inv_tau == 4.0f);
  CHECK(!p.causal && !p.lambda && !p.top_k);
  CHECK(p.ceiling == 8); /* default D = n_local, also where the mask does not apply */
  cp_rule_plan(&p, &r, &T5, CP_ATTN_ENCODER_SELF, 2);
  CHECK(p.inv_tau == 0.5f);
  cp_rule_plan(&p, &r, &T5, CP_ATTN_DECODER_SELF, 1);
  CHECK(p.inv_tau == 1.0f && p.causal && p.lambda && p.n_global == 2 && p.n_local == 8 && p.ceiling == 8);
  cp_rule_plan(&p, &r, &T5, CP_ATTN_CROSS, 1);
  CHECK(p.inv_tau == 1.0f && !p.causal && !p.lambda && p.ceiling == INT64_MAX);
  CHECK(p.train_len == 512 && p.alibi_mode == CP_ALIBI_NONE && p.alibi_factor == 1.0);

  /* "self": encoder and decoder self-attention, not cross. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": 0.8, \"temperature_scope\": \"self\"}"));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_ENCODER_SELF, 0);
  CHECK(p.inv_tau == (float)(1 / 0.8));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.inv_tau == (float)(1 / 0.8));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_CROSS, 0);
  CHECK(p.inv_tau == 1.0f);
  CHECK(p.ceiling == INT64_MAX && !p.lambda);
  /* "all": also cross-attention. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [0.5, 0.25], \"temperature_scope\": \"all\"}"));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_CROSS, 1);
  CHECK(p.inv_tau == 4.0f);
  cp_rule_plan(&p, &r, &T5, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.inv_tau == 2.0f);

  /* An explicit ceiling reaches encoder and decoder self-attention, never cross. */
  CHECK_RC(0, parse_str(&r, "{\"distance_ceiling\": 16, \"lambda_mask\": {\"n_global\": 0, \"n_local\": 4},"
                            " \"top_k\": {\"k\": 2}}"));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_ENCODER_SELF, 0);
  CHECK(p.ceiling == 16 && !p.top_k);
  cp_rule_plan(&p, &r, &T5, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.ceiling == 16 && p.top_k && p.k == 2 && p.top_k_distance == 8 && p.top_k_rows == CP_TOPK_ROWS_DECODE);
  cp_rule_plan(&p, &r, &T5, CP_ATTN_CROSS, 0);
  CHECK(p.ceiling == INT64_MAX && !p.top_k);
  /* Bidirectional clamping keeps the sign (decision 5). */
  cp_rule_plan(&p, &r, &T5, CP_ATTN_ENCODER_SELF, 0);
  CHECK(cp_plan_distance(&p, 5) == 5 && cp_plan_distance(&p, -5) == -5);
  CHECK(cp_plan_distance(&p, 16) == 16 && cp_plan_distance(&p, 17) == 16);
  CHECK(cp_plan_distance(&p, -16) == -16 && cp_plan_distance(&p, -17) == -16);
  CHECK(cp_plan_distance(&p, INT64_MIN) == -16 && cp_plan_distance(&p, INT64_MAX) == 16);
  /* Encoder self-attention sees everything, Lambda or not. */
  CHECK(cp_plan_visible(&p, 0, 100) && cp_plan_visible(&p, 100, 0) && !cp_plan_lambda_hidden(&p, 100, 0));
}

static void test_plans_decoder_only(void) {
  cp_rule r;
  cp_attn_plan p;
  /* Decision 2: every self-attention layer, whatever the scope says. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": [1, 0.5, 0.5, 0.25], \"temperature_scope\": \"encoder\"}"));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.inv_tau == 1.0f && p.causal && !p.lambda && p.ceiling == INT64_MAX);
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 3);
  CHECK(p.inv_tau == 4.0f && p.layer == 3);
  /* Causal only, no Lambda: j <= i. */
  CHECK(cp_plan_visible(&p, 5, 5) && cp_plan_visible(&p, 5, 0) && !cp_plan_visible(&p, 5, 6));
  CHECK(!cp_plan_lambda_hidden(&p, 1000, 0));
  CHECK(cp_plan_distance(&p, 123456789) == 123456789);

  /* LM-Infinite: n_global 2, n_local 3, top_k from layer 1, default distance D/2 = 1. */
  CHECK_RC(0, parse_str(&r, "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 3},"
                            " \"top_k\": {\"k\": 4, \"from_layer\": 1}}"));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.lambda && p.ceiling == 3 && !p.top_k && !cp_plan_topk_row(&p, 10, 10));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 1);
  CHECK(p.lambda && p.top_k && p.k == 4 && p.top_k_distance == 1 && p.top_k_rows == CP_TOPK_ROWS_DECODE);
  /* Row i = 6: keys 0, 1 (global) and 4, 5, 6 (i - j < 3) visible; 2, 3 hidden; 7 in the future. */
  static const bool vis6[8] = {true, true, false, false, true, true, true, false};
  static const bool hid6[8] = {false, false, true, true, false, false, false, false};
  for (int j = 0; j < 8; j++) {
    CHECK_MSG(cp_plan_visible(&p, 6, j) == vis6[j], "visible(6, %d)", j);
    CHECK_MSG(cp_plan_lambda_hidden(&p, 6, j) == hid6[j], "hidden(6, %d)", j);
  }
  /* Row 2: all of 0..2 visible (0, 1 global; 2 local). */
  CHECK(cp_plan_visible(&p, 2, 0) && cp_plan_visible(&p, 2, 1) && cp_plan_visible(&p, 2, 2));
  /* rows "decode": prompt of T = 5 tokens, last prompt row 4; generated rows after it. */
  CHECK(!cp_plan_topk_row(&p, 3, 4) && cp_plan_topk_row(&p, 4, 4) && cp_plan_topk_row(&p, 9, 4));
  CHECK(cp_plan_distance(&p, 2) == 2 && cp_plan_distance(&p, 3) == 3 && cp_plan_distance(&p, 4) == 3);

  /* rows "all", explicit distance and ceiling; odd D rounds down for the default. */
  CHECK_RC(0, parse_str(&r, "{\"lambda_mask\": {\"n_global\": 0, \"n_local\": 7}, \"top_k\": {\"k\": 1, "
                            "\"rows\": \"all\"}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 2);
  CHECK(p.top_k && p.top_k_distance == 3 && cp_plan_topk_row(&p, 0, 4) && cp_plan_topk_row(&p, 3, 4));
  CHECK(!cp_plan_visible(&p, 7, 0) && cp_plan_visible(&p, 7, 1) && cp_plan_lambda_hidden(&p, 7, 0));
  CHECK_RC(0, parse_str(&r, "{\"lambda_mask\": {\"n_global\": 0, \"n_local\": 7}, \"distance_ceiling\": 9,"
                            " \"top_k\": {\"k\": 1, \"distance\": 5}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.ceiling == 9 && p.top_k_distance == 5);
  CHECK_RC(0, parse_str(&r, "{\"lambda_mask\": {\"n_global\": 0, \"n_local\": 7}, \"distance_ceiling\": 9,"
                            " \"top_k\": {\"k\": 1}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.top_k_distance == 4);
  /* top_k without lambda_mask: nothing hidden, no effect. */
  CHECK_RC(0, parse_str(&r, "{\"top_k\": {\"k\": 1}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(!p.top_k && !p.lambda && p.ceiling == INT64_MAX && !cp_plan_topk_row(&p, 5, 0));
  /* A ceiling without a mask. */
  CHECK_RC(0, parse_str(&r, "{\"distance_ceiling\": 100}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.ceiling == 100 && !p.lambda && cp_plan_visible(&p, 1000, 0));
  CHECK(cp_plan_distance(&p, 1000) == 100 && cp_plan_distance(&p, 0) == 0);

  /* ALiBi divisors. */
  CHECK_RC(0, parse_str(&r, "{}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(cp_plan_alibi_divisor(&p, 5000, 9000) == 1.0);
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2.5}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.alibi_factor == 2.5 && cp_plan_alibi_divisor(&p, 0, 1) == 2.5 && cp_plan_alibi_divisor(&p, 9, 99) == 2.5);
  /* dynamic: max(1, T / train_len) with T the keys in the pass (decision 8). */
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": 4}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.train_len == 4 && p.alibi_factor == 1.0);
  CHECK(cp_plan_alibi_divisor(&p, 0, 3) == 1.0 && cp_plan_alibi_divisor(&p, 0, 4) == 1.0);
  CHECK(cp_plan_alibi_divisor(&p, 0, 6) == 1.5 && cp_plan_alibi_divisor(&p, 5, 10) == 2.5);
  /* progressive: per row, max(1, (i + 1) / train_len). */
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": 4}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(cp_plan_alibi_divisor(&p, 0, 100) == 1.0 && cp_plan_alibi_divisor(&p, 3, 100) == 1.0);
  CHECK(cp_plan_alibi_divisor(&p, 4, 100) == 1.25 && cp_plan_alibi_divisor(&p, 9, 100) == 2.5);
  CHECK(cp_plan_alibi_divisor(&p, 6, 100) == 7.0 / 4.0);
  /* The model's training length when the rule has none; the rule's overrides it. */
  cp_rule_model gpt_len = GPT;
  gpt_len.train_len = 3;
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"dynamic\"}}"));
  cp_rule_plan(&p, &r, &gpt_len, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.train_len == 3 && cp_plan_alibi_divisor(&p, 0, 10) == 10.0 / 3.0);
  CHECK_RC(0, parse_str(&r, "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": 5}"));
  cp_rule_plan(&p, &r, &gpt_len, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.train_len == 5 && cp_plan_alibi_divisor(&p, 0, 10) == 2.0);
  /* fire_threshold passes through. */
  CHECK_RC(0, parse_str(&r, "{\"fire_threshold\": 96.5}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.fire_threshold == 96.5);
}

static void test_fire_input(void) {
  /* psi(d) / psi(max(L, i)), psi(x) = log(c x + 1). */
  CHECK(cp_fire_input(0, 5, 1.0, 3.0) == 0.0);
  CHECK(fabs(cp_fire_input(1, 1, 1.0, 3.0) - 0.5) < 1e-15);       /* log 2 / log 4 */
  CHECK(fabs(cp_fire_input(3, 7, 1.0, 3.0) - 2.0 / 3.0) < 1e-15); /* log 4 / log 8 */
  CHECK(fabs(cp_fire_input(7, 7, 1.0, 3.0) - 1.0) < 1e-15);
  CHECK(fabs(cp_fire_input(2, 2, 0.5, 6.0) - log(2.0) / log(4.0)) < 1e-15); /* c = 0.5 */
  CHECK(cp_fire_input(0, 0, 1.0, 0.0) == 0.0);                    /* normaliser 0 */
  CHECK(cp_fire_input(3, 0, 1.0, 0.0) == 0.0);
}

/* ---- goldens ---- */

static cJSON *load_golden(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  char *text = NULL;
  size_t len = 0;
  int rc = cp_read_file(&text, &len, test_path(src, "tests/goldens/t5_buckets.json"), 1u << 24);
  CHECK_RC(0, rc);
  if (rc) return NULL;
  cJSON *j = cJSON_ParseWithLength(text, len);
  free(text);
  CHECK(j != NULL);
  CHECK(j && cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "format_version")) == 1);
  return j;
}

static void test_t5_buckets(const cJSON *golden) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(golden, "t5_buckets");
  int n = cJSON_GetArraySize(list), bad = 0, big = 0;
  CHECK(n >= 1000);
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    int64_t r = (int64_t)cJSON_GetArrayItem(e, 0)->valuedouble;
    bool bidir = cJSON_GetArrayItem(e, 1)->valuedouble != 0;
    int nb = (int)cJSON_GetArrayItem(e, 2)->valuedouble;
    int maxd = (int)cJSON_GetArrayItem(e, 3)->valuedouble;
    int want = (int)cJSON_GetArrayItem(e, 4)->valuedouble;
    int got = cp_t5_bucket(r, bidir, nb, maxd);
    if (r >= 1000000 || r <= -1000000) big++;
    if (got != want) {
      if (bad++ < 10)
        fprintf(stderr, "t5 bucket r=%lld bidir=%d nb=%d maxd=%d: got %d want %d\n", (long long)r, bidir, nb,
                maxd, got, want);
    }
  }
  CHECK_MSG(bad == 0, "%d of %d buckets differ from PyTorch", bad, n);
  CHECK(big == 32); /* +-1e6 for 8 configurations x 2 directions */
  /* Beyond the golden: extremes stay in range and saturate. */
  CHECK(cp_t5_bucket(INT64_MIN, true, 32, 128) == 15);
  CHECK(cp_t5_bucket(INT64_MAX, true, 32, 128) == 31);
  CHECK(cp_t5_bucket(INT64_MIN, false, 32, 128) == 31);
  CHECK(cp_t5_bucket(INT64_MAX, false, 32, 128) == 0);
  /* Hand cases from HF's definition: causal buckets only look back; 0..max_exact-1 exact. */
  CHECK(cp_t5_bucket(0, true, 32, 128) == 0 && cp_t5_bucket(-7, true, 32, 128) == 7 &&
        cp_t5_bucket(7, true, 32, 128) == 23 && cp_t5_bucket(5, false, 32, 128) == 0 &&
        cp_t5_bucket(-15, false, 32, 128) == 15);
}

static void test_alibi_slopes(const cJSON *golden) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(golden, "alibi_slopes");
  int sets = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    int h = (int)cJSON_GetObjectItemCaseSensitive(e, "n_heads")->valuedouble;
    double mb = cJSON_GetObjectItemCaseSensitive(e, "max_bias")->valuedouble;
    const cJSON *f64 = cJSON_GetObjectItemCaseSensitive(e, "f64");
    const cJSON *f32 = cJSON_GetObjectItemCaseSensitive(e, "f32");
    CHECK(cJSON_GetArraySize(f64) == h && cJSON_GetArraySize(f32) == h);
    double got[64];
    CHECK(h <= 64);
    if (h > 64) continue;
    cp_alibi_slopes(got, h, mb);
    for (int k = 0; k < h; k++) {
      double w64 = cJSON_GetArrayItem(f64, k)->valuedouble, w32 = cJSON_GetArrayItem(f32, k)->valuedouble;
      /* float64 reference: a few ulp; HF's float32 code: float rounding (BLOOM accumulates it). */
      CHECK_MSG(fabs(got[k] - w64) <= 4e-16 * 8 * w64, "slopes H=%d max_bias=%g head %d: %.17g vs %.17g", h,
                mb, k, got[k], w64);
      CHECK_MSG(fabs(got[k] - w32) <= 2e-6 * w32, "slopes H=%d max_bias=%g head %d: %.17g vs f32 %.9g", h, mb,
                k, got[k], w32);
    }
    sets++;
  }
  CHECK(sets == 38);
  /* Hand cases from the spec: H = 8, max bias 8: 2^-1 .. 2^-8; H = 2: 2^-4, 2^-8; H = 3:
   * p = 2 slopes 2^-4, 2^-8, then 2^-2 (k = 1 of 2^(-4k/p)). */
  double s[8];
  cp_alibi_slopes(s, 8, 8.0);
  for (int k = 0; k < 8; k++) CHECK(s[k] == ldexp(1.0, -(k + 1)));
  cp_alibi_slopes(s, 3, 8.0);
  CHECK(s[0] == 0.0625 && s[1] == 0.00390625 && s[2] == 0.25);
  cp_alibi_slopes(s, 1, 8.0);
  CHECK(s[0] == 0.00390625);
}

/* tau(T) straight from the spec's sentence (first tau below L_1, last above L_n, in between
 * t_a + (t_b - t_a) (log T - log L_a) / (log L_b - log L_a)), written independently of the
 * piecewise sum cp_plan_tau_at evaluates. */
static double spec_tau(const int64_t *len, const double *tau, int n, double T) {
  if (T <= (double)len[0]) return tau[0];
  if (T >= (double)len[n - 1]) return tau[n - 1];
  int a = 0;
  while (!(T <= (double)len[a + 1])) a++;
  double la = log((double)len[a]), lb = log((double)len[a + 1]);
  return tau[a] + (tau[a + 1] - tau[a]) * (log(T) - la) / (lb - la);
}

static void test_schedule(void) {
  cp_rule r;
  /* The spec's example. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[256, 1.0], [1024, 0.75], [2048, 0.65]]}}"));
  CHECK(r.n_schedule == 3 && r.schedule_width == 1 && !r.schedule_per_layer && r.n_temperature == 0);
  CHECK(r.schedule_len[0] == 256 && r.schedule_len[2] == 2048 && r.schedule_tau[1] == 0.75);
  CHECK(!cp_rule_is_identity(&r));
  CHECK_RC(0, cp_rule_check_model(&r, &GPT, "r"));
  CHECK_RC(0, cp_rule_check_model(&r, &T5, "r"));
  cp_attn_plan p;
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 2);
  CHECK(p.sched.n == 3 && p.inv_tau == 1.0f && p.tau == 1.0 && p.sched.t1 == 1.0);
  /* Hand values: tau is 1 up to 256, 0.875 at 512 (halfway in log between 256 and 1024), 0.75 at
   * 1024, 0.7 at 1448.15 (halfway to 2048), 0.65 from 2048 on. */
  CHECK(cp_plan_tau_at(&p, 1) == 1.0 && cp_plan_tau_at(&p, 0) == 1.0 && cp_plan_tau_at(&p, -5) == 1.0);
  CHECK(cp_plan_tau_at(&p, 256) == 1.0);
  CHECK_MSG(fabs(cp_plan_tau_at(&p, 512) - 0.875) < 1e-15, "tau(512) %.17g", cp_plan_tau_at(&p, 512));
  CHECK(fabs(cp_plan_tau_at(&p, 1024) - 0.75) < 1e-15 && fabs(cp_plan_tau_at(&p, 2048) - 0.65) < 1e-15);
  CHECK(fabs(cp_plan_tau_at(&p, 1 << 20) - 0.65) < 1e-15 && fabs(cp_plan_tau_at(&p, INT64_MAX) - 0.65) < 1e-15);
  CHECK(cp_plan_tau_at(&p, 300) < 1.0 && cp_plan_tau_at(&p, 300) > cp_plan_tau_at(&p, 301));
  double worst = 0;
  for (int64_t T = 1; T <= 5000; T += 7) {
    double d = fabs(cp_plan_tau_at(&p, T) - spec_tau(r.schedule_len, r.schedule_tau, 3, (double)T));
    if (d > worst) worst = d;
  }
  CHECK_MSG(worst < 1e-15, "piecewise sum vs the spec's interpolation: %.3g", worst);
  /* The row's length: i + 1 for causal rows (one-shot or decode step alike), else the keys. */
  CHECK(cp_plan_tau_length(&p, 511, 4000) == 512 && cp_plan_tau_length(&p, 0, 1) == 1);
  CHECK(cp_plan_row_inv_tau(&p, 511, 9999) == (float)(1.0 / cp_plan_tau_at(&p, 512)));
  CHECK(cp_plan_row_inv_tau(&p, 511, 512) == cp_plan_row_inv_tau(&p, 511, 9999));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_ENCODER_SELF, 0);
  CHECK(p.sched.n == 3 && cp_plan_tau_length(&p, 3, 1024) == 1024);
  CHECK(cp_plan_row_inv_tau(&p, 0, 1024) == (float)(1.0 / cp_plan_tau_at(&p, 1024)));
  /* Scope: "encoder" (the default) leaves the T5 decoder and cross-attention alone. */
  cp_rule_plan(&p, &r, &T5, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.sched.n == 0 && cp_plan_tau_at(&p, 4096) == 1.0 && cp_plan_row_inv_tau(&p, 4095, 4096) == 1.0f);
  cp_rule_plan(&p, &r, &T5, CP_ATTN_CROSS, 0);
  CHECK(p.sched.n == 0);
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[8, 0.9], [64, 0.5]]}, \"temperature_scope\": \"all\"}"));
  cp_rule_plan(&p, &r, &T5, CP_ATTN_CROSS, 1);
  CHECK(p.sched.n == 2 && cp_plan_tau_length(&p, 0, 64) == 64 && fabs(cp_plan_tau_at(&p, 64) - 0.5) < 1e-15);
  /* Without a schedule the constant temperature is what every row gets. */
  CHECK_RC(0, parse_str(&r, "{\"temperature\": 0.8}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(p.sched.n == 0 && p.tau == 0.8 && cp_plan_tau_at(&p, 77) == 0.8 && cp_plan_row_inv_tau(&p, 9, 10) == p.inv_tau);
  CHECK(p.inv_tau == (float)(1.0 / 0.8));
  /* The sum stays inside the taus' range where rounding would leave it: 3 + (1e-300 - 3) is 0. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, 3], [8, 1e-300]]}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK_MSG(cp_plan_tau_at(&p, 8) == 1e-300 && cp_plan_tau_at(&p, 1000) == 1e-300 && cp_plan_tau_at(&p, 4) == 3,
            "tau(8) %g", cp_plan_tau_at(&p, 8));
  /* One point: a constant tau at every length. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[100, 0.7]]}}"));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(cp_plan_tau_at(&p, 1) == 0.7 && cp_plan_tau_at(&p, 100000) == 0.7);

  /* Per-layer taus: layer 1 of [[4, [1, 0.8]], [16, [0.5, 0.6]]] is 0.8 -> 0.6, 0.7 at 8. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, [1, 0.8]], [16, [0.5, 0.6]]]}}"));
  CHECK(r.n_schedule == 2 && r.schedule_width == 2 && r.schedule_per_layer && r.schedule_tau[3] == 0.6);
  cp_rule_model two = GPT;
  two.n_layers_decoder = 2;
  CHECK_RC(0, cp_rule_check_model(&r, &two, "r"));
  cp_rule_plan(&p, &r, &two, CP_ATTN_DECODER_SELF, 1);
  CHECK(cp_plan_tau_at(&p, 2) == 0.8 && fabs(cp_plan_tau_at(&p, 8) - 0.7) < 1e-15 &&
        fabs(cp_plan_tau_at(&p, 99) - 0.6) < 1e-15);
  cp_rule_plan(&p, &r, &two, CP_ATTN_DECODER_SELF, 0);
  CHECK(cp_plan_tau_at(&p, 4) == 1.0 && fabs(cp_plan_tau_at(&p, 8) - 0.75) < 1e-15);
  /* ... checked against the depth of every stack in scope, as a temperature list. */
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r"));
  CHECK_MSG(strstr(cp_error_message(), "temperature_schedule point has 2 values") &&
                strstr(cp_error_message(), "decoder has 4 layers"), "%s", cp_error_message());
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r")); /* encoder scope: 3 layers */
  CHECK(strstr(cp_error_message(), "encoder has 3 layers"));
  cp_rule_model t5_22 = {.is_encoder_decoder = true, .n_layers_encoder = 2, .n_layers_decoder = 2};
  CHECK_RC(0, cp_rule_check_model(&r, &t5_22, "r"));
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, [1, 0.8, 0.7]]]}, \"temperature_scope\": \"self\"}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &T5, "r"));
  CHECK(strstr(cp_error_message(), "decoder has 2 layers"));
  /* A list of one is per layer. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, [0.9]]]}}"));
  CHECK_RC(CP_ERULE_MODEL, cp_rule_check_model(&r, &GPT, "r"));
  cp_rule_model one = GPT;
  one.n_layers_decoder = 1;
  CHECK_RC(0, cp_rule_check_model(&r, &one, "r"));

  /* Identity: every tau 1, per layer too. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, 1], [64, 1.0]]}}"));
  CHECK(cp_rule_is_identity(&r));
  cp_rule_plan(&p, &r, &GPT, CP_ATTN_DECODER_SELF, 0);
  CHECK(cp_plan_tau_at(&p, 30) == 1.0 && cp_plan_row_inv_tau(&p, 29, 30) == 1.0f);
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, [1, 1]], [64, [1, 0.99]]]}}"));
  CHECK(!cp_rule_is_identity(&r));
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, [1, 1]], [64, [1, 1]]]}}"));
  CHECK(cp_rule_is_identity(&r));

  /* Rules built in code are checked as the parser checks: exclusive with temperature, order,
   * bounds, taus. */
  CHECK_RC(0, parse_str(&r, "{\"temperature_schedule\": {\"points\": [[4, 1], [64, 0.5]]}}"));
  cp_rule bad = r;
  bad.n_temperature = 1, bad.temperature[0] = 0.9;
  CHECK_RC(CP_ERULE_VALUE, cp_rule_check_model(&bad, &GPT, "code"));
  CHECK(strstr(cp_error_message(), "not both"));
  bad = r;
  bad.schedule_len[1] = 4;
  CHECK_RC(CP_ERULE_VALUE, cp_rule_check_model(&bad, &GPT, "code"));
  CHECK(strstr(cp_error_message(), "points[1]"));
  bad = r;
  bad.schedule_tau[1] = NAN;
  CHECK_RC(CP_ERULE_VALUE, cp_rule_check_model(&bad, &GPT, "code"));
  bad = r;
  bad.schedule_width = 0;
  CHECK_RC(CP_ERULE_VALUE, cp_rule_check_model(&bad, &GPT, "code"));
  bad = r;
  bad.n_schedule = CP_RULE_MAX_SCHEDULE_POINTS + 1;
  CHECK_RC(CP_ERULE_VALUE, cp_rule_check_model(&bad, &GPT, "code"));

  /* Bounds: CP_RULE_MAX_SCHEDULE_POINTS points, and CP_RULE_MAX_SCHEDULE_VALUES taus in all. */
  static char big[64 * CP_RULE_MAX_SCHEDULE_VALUES];
  size_t n = (size_t)snprintf(big, sizeof big, "{\"temperature_schedule\": {\"points\": [");
  for (int k = 0; k < CP_RULE_MAX_SCHEDULE_POINTS; k++)
    n += (size_t)snprintf(big + n, sizeof big - n, "%s[%d, %g]", k ? "," : "", 2 * k + 1, 1.0 / (k + 1));
  snprintf(big + n, sizeof big - n, "]}}");
  CHECK_RC(0, parse_str(&r, big));
  CHECK(r.n_schedule == CP_RULE_MAX_SCHEDULE_POINTS && r.schedule_len[CP_RULE_MAX_SCHEDULE_POINTS - 1] == 511);
  free(round_trip(big));
  snprintf(big + n, sizeof big - n, ",[9999, 1]]}}");
  CHECK_RC(CP_ERULE_VALUE, parse_str(&r, big));
  CHECK(strstr(cp_error_message(), "257 points"));
  /* 16 points of 256 per-layer taus fill the bound; 17 are refused. */
  const int W = CP_RULE_MAX_SCHEDULE_VALUES / 16;
  for (int pts = 16; pts <= 17; pts++) {
    n = (size_t)snprintf(big, sizeof big, "{\"temperature_schedule\": {\"points\": [");
    for (int k = 0; k < pts; k++) {
      n += (size_t)snprintf(big + n, sizeof big - n, "%s[%d, [", k ? "," : "", k + 1);
      for (int l = 0; l < W; l++) n += (size_t)snprintf(big + n, sizeof big - n, "%s0.5", l ? "," : "");
      n += (size_t)snprintf(big + n, sizeof big - n, "]]");
    }
    snprintf(big + n, sizeof big - n, "]}}");
    CHECK_RC(pts == 16 ? 0 : CP_ERULE_VALUE, parse_str(&r, big));
    if (pts == 16) CHECK(r.schedule_width == W && r.schedule_tau[CP_RULE_MAX_SCHEDULE_VALUES - 1] == 0.5);
    else CHECK(strstr(cp_error_message(), "17 points of 256 taus"));
  }
}

int main(void) {
  test_identity();
  test_spec_example();
  test_accepts();
  test_refusals();
  test_round_trips();
  test_schedule();
  test_load();
  test_check_model();
  test_plans_t5();
  test_plans_decoder_only();
  test_fire_input();
  cJSON *golden = load_golden();
  if (golden) {
    test_t5_buckets(golden);
    test_alibi_slopes(golden);
    cJSON_Delete(golden);
  }
  return test_finish();
}
