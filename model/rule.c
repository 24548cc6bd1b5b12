/* Semantics of a cp_rule (../shared/spec/attention-rules.md and docs/attention-decisions.md):
 * which rule parts apply to one attention call, the visibility and distance helpers engines
 * share, and the model-side positional terms (T5 buckets, ALiBi slopes, FIRE input).
 * Parsing and serialising live in rule_json.c. */
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/rule.h"

#include <assert.h>
#include <math.h>
#include <string.h>

void cp_rule_init(cp_rule *rule) {
  memset(rule, 0, sizeof *rule);
  rule->temperature_scope = CP_TEMP_SCOPE_ENCODER;
  rule->alibi_mode = CP_ALIBI_NONE;
  rule->alibi_factor = 1.0;
  rule->top_k_rows = CP_TOPK_ROWS_DECODE;
}

/* True when the rule changes no logit of any model: an empty object, or only fields without
 * effect on their own (temperature 1, a schedule whose every tau is 1, static factor 1, temperature_scope, train_len, top_k
 * without lambda_mask). Engines may skip rule work then. */
bool cp_rule_is_identity(const cp_rule *r) {
  for (int l = 0; l < r->n_temperature; l++)
    if (r->temperature[l] != 1.0) return false;
  for (int x = 0; x < r->n_schedule * r->schedule_width; x++) /* tau(T) = 1 at every T */
    if (r->schedule_tau[x] != 1.0) return false;
  if (r->alibi_mode == CP_ALIBI_DYNAMIC || r->alibi_mode == CP_ALIBI_PROGRESSIVE) return false;
  if (r->alibi_mode == CP_ALIBI_STATIC && r->alibi_factor != 1.0) return false;
  return !r->has_lambda && r->distance_ceiling == 0 && r->fire_threshold == 0;
}

/* ---- rule x model ---- */

static int64_t effective_train_len(const cp_rule *r, const cp_rule_model *m) {
  return r->train_len > 0 ? r->train_len : m->train_len;
}

/* Whether a temperature applies to this attention kind (decision 2). */
static bool temperature_in_scope(const cp_rule *r, const cp_rule_model *m, cp_attn_kind kind) {
  if (!m->is_encoder_decoder) return kind != CP_ATTN_CROSS; /* every self-attention */
  switch (r->temperature_scope) {
  case CP_TEMP_SCOPE_ENCODER:
    return kind == CP_ATTN_ENCODER_SELF;
  case CP_TEMP_SCOPE_SELF:
    return kind != CP_ATTN_CROSS;
  case CP_TEMP_SCOPE_ALL:
    return true;
  }
  return false;
}

/* Decision 1: a per-layer list (temperature, or the taus of each schedule point) indexes layers
 * within their stack, so it must match the depth of every stack it reaches (cross-attention
 * layers are the decoder's). */
static int check_depths(const cp_rule *r, const cp_rule_model *m, const char *what, const char *key, int n) {
  const struct {
    bool in_scope;
    const char *name;
    int depth;
  } stacks[] = {
      {m->is_encoder_decoder && temperature_in_scope(r, m, CP_ATTN_ENCODER_SELF), "encoder", m->n_layers_encoder},
      {temperature_in_scope(r, m, CP_ATTN_DECODER_SELF), "decoder", m->n_layers_decoder},
      {m->is_encoder_decoder && temperature_in_scope(r, m, CP_ATTN_CROSS), "decoder (cross-attention)",
       m->n_layers_decoder},
  };
  for (size_t s = 0; s < sizeof stacks / sizeof stacks[0]; s++)
    if (stacks[s].in_scope && stacks[s].depth != n)
      return cp_error_set(CP_ERULE_MODEL, "%s: %s has %d values but the %s has %d layers", what, key, n,
                          stacks[s].name, stacks[s].depth);
  return 0;
}

/* A schedule built in code (calibration) holds what the parser would have accepted. */
static int check_schedule(const cp_rule *r, const char *what) {
  if (r->n_temperature > 0)
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule': a rule has temperature or "
                        "temperature_schedule, not both", what);
  if (r->n_schedule > CP_RULE_MAX_SCHEDULE_POINTS || r->schedule_width < 1 ||
      r->schedule_width > CP_RULE_MAX_LAYERS ||
      (int64_t)r->n_schedule * r->schedule_width > CP_RULE_MAX_SCHEDULE_VALUES)
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule': %d points of %d taus (want at most "
                        "%d points and %d taus in all)", what, r->n_schedule, r->schedule_width,
                        CP_RULE_MAX_SCHEDULE_POINTS, CP_RULE_MAX_SCHEDULE_VALUES);
  for (int k = 0; k < r->n_schedule; k++) {
    if (r->schedule_len[k] < 1 || (k > 0 && r->schedule_len[k] <= r->schedule_len[k - 1]))
      return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule.points[%d]': length %lld is not >= 1 "
                          "and above the previous point's", what, k, (long long)r->schedule_len[k]);
    for (int l = 0; l < r->schedule_width; l++) {
      double t = r->schedule_tau[k * r->schedule_width + l];
      if (!(t > 0) || !isfinite(t))
        return cp_error_set(CP_ERULE_VALUE, "%s: key 'temperature_schedule.points[%d]': tau %g is not a "
                            "number > 0", what, k, t);
    }
  }
  return 0;
}

/* A learned absolute position table (GPT-2) is added to the input once: attention has no
 * positional term, so every rule part that acts on one has nothing to act on. Temperature, its
 * schedule, lambda_mask and top_k (k, from_layer, rows) are position-free and apply. */
static int check_learned_pos(const cp_rule *r, const cp_rule_model *m, const char *what) {
  const char *fam = m->family ? m->family : "this", *why = NULL, *key = NULL;
  if (r->distance_ceiling > 0)
    key = "distance_ceiling", why = "there is no distance in attention to clamp";
  else if (r->has_top_k && r->top_k_distance > 0)
    key = "top_k.distance", why = "top-k logits have no distance term to evaluate";
  else if (r->alibi_mode != CP_ALIBI_NONE)
    key = "alibi_scale", why = "there are no ALiBi slopes to scale";
  else if (r->fire_threshold > 0)
    key = "fire_threshold", why = "there is no FIRE bias to threshold";
  if (!key) return 0;
  return cp_error_set(CP_ERULE_MODEL, "%s: %s cannot apply to a %s model: its positions are a learned absolute "
                      "table added to the input, so %s", what, key, fam, why);
}

int cp_rule_check_model(const cp_rule *r, const cp_rule_model *m, const char *what) {
  assert(m->n_layers_encoder >= 0 && m->n_layers_decoder >= 0);
  int rc;
  if ((r->n_temperature > 1 || r->temperature_per_layer) &&
      (rc = check_depths(r, m, what, "temperature", r->n_temperature)))
    return rc;
  if (r->n_schedule > 0) {
    if ((rc = check_schedule(r, what))) return rc;
    if ((r->schedule_width > 1 || r->schedule_per_layer) &&
        (rc = check_depths(r, m, what, "each temperature_schedule point", r->schedule_width)))
      return rc;
  }
  /* Rules built in code (CLI options, calibration) pass here too, not only parsed ones. */
  if (r->has_top_k && (r->top_k < 1 || r->top_k > CP_RULE_MAX_TOP_K))
    return cp_error_set(CP_ERULE_VALUE, "%s: key 'top_k.k': %d is not in [1, %d]", what, r->top_k, CP_RULE_MAX_TOP_K);
  if (m->learned_pos && (rc = check_learned_pos(r, m, what))) return rc;
  if (r->alibi_mode != CP_ALIBI_NONE && !m->has_alibi)
    return cp_error_set(CP_ERULE_MODEL, "%s: alibi_scale needs a model with ALiBi biases; this one has none", what);
  if (r->fire_threshold > 0 && !m->has_fire)
    return cp_error_set(CP_ERULE_MODEL, "%s: fire_threshold needs a FIRE model; this one is not", what);
  if ((r->alibi_mode == CP_ALIBI_DYNAMIC || r->alibi_mode == CP_ALIBI_PROGRESSIVE) &&
      effective_train_len(r, m) <= 0)
    return cp_error_set(CP_ERULE_MODEL,
                        "%s: alibi_scale mode \"%s\" needs a training length: give train_len in the "
                        "rule (the model has none)",
                        what, r->alibi_mode == CP_ALIBI_DYNAMIC ? "dynamic" : "progressive");
  return 0;
}

/* This layer's points of the rule's schedule in the piecewise form of cp_tau_schedule. */
static void plan_schedule(cp_tau_schedule *s, const cp_rule *r, int layer) {
  const int w = r->schedule_width, l = w == 1 ? 0 : layer;
  assert(r->n_schedule <= CP_RULE_MAX_SCHEDULE_POINTS && l < w); /* cp_rule_check_model */
  s->n = r->n_schedule;
  s->t1 = s->lo = s->hi = r->schedule_tau[l];
  for (int k = 0; k < s->n; k++) {
    const double t = r->schedule_tau[k * w + l];
    s->lo = t < s->lo ? t : s->lo;
    s->hi = t > s->hi ? t : s->hi;
    s->log_len[k] = log((double)r->schedule_len[k]);
  }
  for (int k = 0; k + 1 < s->n; k++)
    s->slope[k] = (r->schedule_tau[(k + 1) * w + l] - r->schedule_tau[k * w + l]) /
                  (s->log_len[k + 1] - s->log_len[k]);
}

void cp_rule_plan(cp_attn_plan *out, const cp_rule *r, const cp_rule_model *m, cp_attn_kind kind,
                  int layer) {
  assert(layer >= 0);
  memset(out, 0, sizeof *out);
  out->kind = kind;
  out->layer = layer;

  out->inv_tau = 1.0f;
  out->tau = 1.0;
  if (r->n_temperature > 0 && temperature_in_scope(r, m, kind)) {
    assert(r->n_temperature == 1 || layer < r->n_temperature); /* cp_rule_check_model */
    out->tau = r->temperature[r->n_temperature == 1 ? 0 : layer];
    out->inv_tau = (float)(1.0 / out->tau);
  }
  if (r->n_schedule > 0 && temperature_in_scope(r, m, kind)) plan_schedule(&out->sched, r, layer);

  out->causal = kind == CP_ATTN_DECODER_SELF;
  /* The model's own sliding window (Gemma 2's sliding layers) stays whatever the rule: the rule's
   * masks are intersected with it (decision 17). */
  if (out->causal && m->layer_sliding && m->sliding_window > 0 && layer < CP_RULE_MAX_LAYERS &&
      m->layer_sliding[layer])
    out->window = m->sliding_window;
  /* Lambda only for causal attention (spec; decision 4). */
  out->lambda = r->has_lambda && out->causal;
  if (out->lambda) {
    out->n_global = r->n_global;
    out->n_local = r->n_local;
  }

  /* Cross-attention and learned-position models have no positional term in attention, so no
   * ceiling (decision 5). Elsewhere the default
   * D = n_local follows from lambda_mask being given, also where the mask itself does not
   * apply (T5 encoder). */
  out->ceiling = INT64_MAX;
  if (kind != CP_ATTN_CROSS && !m->learned_pos) { /* learned positions: no distance term */
    if (r->distance_ceiling > 0)
      out->ceiling = r->distance_ceiling;
    else if (r->has_lambda)
      out->ceiling = r->n_local;
  }

  /* Without an active Lambda mask nothing is hidden, so top_k has nothing to pick from. */
  out->top_k = r->has_top_k && out->lambda && layer >= r->top_k_from_layer;
  if (out->top_k) {
    out->k = r->top_k;
    out->top_k_distance = r->top_k_distance > 0 ? r->top_k_distance : out->ceiling / 2;
    out->top_k_rows = r->top_k_rows;
  }

  out->alibi_mode = r->alibi_mode;
  out->alibi_factor = r->alibi_mode == CP_ALIBI_STATIC ? r->alibi_factor : 1.0;
  out->train_len = effective_train_len(r, m);
  out->fire_threshold = r->fire_threshold;
}

/* ---- per-element helpers ---- */

double cp_plan_tau_at(const cp_attn_plan *p, int64_t T) {
  const cp_tau_schedule *s = &p->sched;
  if (s->n == 0) return p->tau;
  const double lt = log((double)(T > 1 ? T : 1));
  double tau = s->t1;
  for (int k = 0; k + 1 < s->n; k++) {
    /* The clamp as the ONNX graph's Clip computes it: min(max(x, 0), width). */
    double x = lt - s->log_len[k], w = s->log_len[k + 1] - s->log_len[k];
    x = x > 0 ? x : 0;
    x = x < w ? x : w;
    tau += s->slope[k] * x;
  }
  return tau < s->lo ? s->lo : tau > s->hi ? s->hi : tau;
}

int64_t cp_plan_tau_length(const cp_attn_plan *p, int64_t i, int64_t n_keys) {
  return p->causal ? i + 1 : n_keys;
}

float cp_plan_row_inv_tau(const cp_attn_plan *p, int64_t i, int64_t n_keys) {
  if (p->sched.n == 0) return p->inv_tau;
  return (float)(1.0 / cp_plan_tau_at(p, cp_plan_tau_length(p, i, n_keys)));
}

bool cp_plan_visible(const cp_attn_plan *p, int64_t i, int64_t j) {
  if (p->causal && j > i) return false;
  if (p->window > 0 && i - j >= p->window) return false;
  if (p->lambda) return j < p->n_global || i - j < p->n_local;
  return true;
}

bool cp_plan_lambda_hidden(const cp_attn_plan *p, int64_t i, int64_t j) {
  return p->lambda && j <= i && j >= p->n_global && i - j >= p->n_local && (p->window <= 0 || i - j < p->window);
}

bool cp_plan_topk_row(const cp_attn_plan *p, int64_t i, int64_t last_prompt_row) {
  if (!p->top_k) return false;
  return p->top_k_rows == CP_TOPK_ROWS_ALL || i >= last_prompt_row;
}

int64_t cp_plan_distance(const cp_attn_plan *p, int64_t d) {
  if (d >= 0) return d < p->ceiling ? d : p->ceiling;
  return d > -p->ceiling ? d : -p->ceiling; /* never negates d: d may be INT64_MIN */
}

double cp_plan_alibi_divisor(const cp_attn_plan *p, int64_t i, int64_t n_keys) {
  double f;
  switch (p->alibi_mode) {
  case CP_ALIBI_STATIC:
    return p->alibi_factor;
  case CP_ALIBI_DYNAMIC:
    assert(p->train_len > 0);
    f = (double)n_keys / (double)p->train_len;
    return f > 1.0 ? f : 1.0;
  case CP_ALIBI_PROGRESSIVE:
    assert(p->train_len > 0);
    f = ((double)i + 1.0) / (double)p->train_len;
    return f > 1.0 ? f : 1.0;
  case CP_ALIBI_NONE:
    break;
  }
  return 1.0;
}

/* ---- positional terms ---- */

/* transformers' T5Attention._relative_position_bucket, step by step in the same float32
 * operations as PyTorch on CPU: n.float() / max_exact, log, / (float)math.log(max_distance /
 * max_exact) (a Python double), * (num_buckets - max_exact), truncation, clamp. PyTorch's
 * float32 log is not always correctly rounded; the log here is (correctly rounded in double,
 * then rounded to float), and tests/goldens/t5_buckets.json (made by PyTorch) checks the
 * buckets agree. Needs max_distance > max_exact >= 1. */
int cp_t5_bucket(int64_t r, bool bidirectional, int num_buckets, int max_distance) {
  int nb = num_buckets, base = 0;
  uint64_t n; /* |r| or -min(r, 0), without overflow at INT64_MIN */
  if (bidirectional) {
    nb /= 2;
    if (r > 0) base = nb;
    n = r < 0 ? (uint64_t)0 - (uint64_t)r : (uint64_t)r;
  } else {
    n = r < 0 ? (uint64_t)0 - (uint64_t)r : 0;
  }
  int max_exact = nb / 2;
  assert(max_exact >= 1 && max_distance > max_exact);
  if (n < (uint64_t)max_exact) return base + (int)n;
  float a = (float)n / (float)max_exact;
  float l = (float)log((double)a);
  float scale = (float)log((double)max_distance / (double)max_exact);
  float x = l / scale;
  x = x * (float)(nb - max_exact);
  /* bucket = max_exact + trunc(x), clamped to nb - 1; x >= 0 here. Compare before converting
   * so huge x never meets an out-of-range cast. */
  if (!(x < (float)(nb - 1 - max_exact))) return base + nb - 1;
  return base + max_exact + (int)x;
}

/* MPT's form: P = 2^ceil(log2 H), s_j = 2^(-j * max_bias / P), j = 1..P; when P != H the
 * heads take concat(s[1::2], s[::2])[:H], i.e. the even j first (BLOOM's p = P/2 slopes), then
 * the odd j (BLOOM's extra slopes). */
void cp_alibi_slopes(double *out, int n_heads, double max_bias) {
  assert(n_heads >= 1 && n_heads <= (1 << 24));
  int64_t P = 1;
  while (P < n_heads) P *= 2;
  if (P == n_heads) {
    for (int64_t j = 1; j <= P; j++) out[j - 1] = exp2(-(double)j * max_bias / (double)P);
    return;
  }
  int h = 0;
  for (int64_t j = 2; j <= P && h < n_heads; j += 2) out[h++] = exp2(-(double)j * max_bias / (double)P);
  for (int64_t j = 1; j <= P && h < n_heads; j += 2) out[h++] = exp2(-(double)j * max_bias / (double)P);
  assert(h == n_heads);
}

/* psi(x) = log(c x + 1) as the FIRE paper writes it. The caller passes d already clamped by
 * the ceiling (decision 9). */
double cp_fire_input(int64_t d, int64_t i, double c, double L) {
  double norm_at = (double)i > L ? (double)i : L;
  double den = log(c * norm_at + 1.0);
  if (den == 0.0) return 0.0;
  return log(c * (double)d + 1.0) / den;
}
