/* Floor: model. The attention rule: the one place where the semantics of
 * ../shared/spec/attention-rules.md (and docs/attention-decisions.md) live.
 *
 * A cp_rule is the parsed JSON object. Engines never interpret the JSON themselves: for each
 * attention call they ask cp_rule_plan() for a cp_attn_plan and use the helpers below, so the
 * CPU engine, the CUDA engine, the ONNX writer and the bakers share every decision.
 */
#ifndef CTXPATCH_RULE_H
#define CTXPATCH_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CP_RULE_MAX_LAYERS 512
/* Largest top_k.k a rule may ask for. LM-Infinite keeps a handful of middle tokens (k of 5 in
 * the paper); every engine worker holds scratch of k values, so an unbounded k fails for memory
 * before any key is seen. The engines also use min(k, keys) at run time. */
#define CP_RULE_MAX_TOP_K 4096
/* Bounds of a temperature_schedule: points, and taus in all (points x per-layer taus), so a
 * cp_rule stays a fixed-size value (the taus take at most 32 KB). */
#define CP_RULE_MAX_SCHEDULE_POINTS 256
#define CP_RULE_MAX_SCHEDULE_VALUES 4096

typedef enum { CP_TEMP_SCOPE_ENCODER, CP_TEMP_SCOPE_SELF, CP_TEMP_SCOPE_ALL } cp_temp_scope;
typedef enum { CP_ALIBI_NONE, CP_ALIBI_STATIC, CP_ALIBI_DYNAMIC, CP_ALIBI_PROGRESSIVE } cp_alibi_mode;
typedef enum { CP_TOPK_ROWS_DECODE, CP_TOPK_ROWS_ALL } cp_topk_rows;

typedef struct {
  int n_temperature;                       /* 0: none; 1: one tau; >1: one per layer */
  double temperature[CP_RULE_MAX_LAYERS];  /* each > 0 */
  cp_temp_scope temperature_scope;         /* default ENCODER; also the schedule's scope */

  /* temperature_schedule (exclusive with temperature): tau(T) from n_schedule points
   * (schedule_len[k], schedule_tau[k * schedule_width + layer]); see cp_plan_tau_at. */
  int n_schedule;                                       /* 0: none; else 1..MAX_SCHEDULE_POINTS */
  int schedule_width;                                   /* taus per point: 1, or one per layer */
  bool schedule_per_layer;                              /* each point's tau was a list: its size
                                                           must be the depth of every stack in scope */
  int64_t schedule_len[CP_RULE_MAX_SCHEDULE_POINTS];    /* L_k: strictly increasing, >= 1 */
  double schedule_tau[CP_RULE_MAX_SCHEDULE_VALUES];     /* [n_schedule, schedule_width], each > 0 */

  cp_alibi_mode alibi_mode;
  double alibi_factor;                     /* static factor, >= 1 */

  bool has_lambda;
  int64_t n_global, n_local;               /* n_local >= 1 */

  int64_t distance_ceiling;                /* 0: none given (lambda_mask implies n_local) */

  bool has_top_k;
  int top_k;                               /* 1 <= k <= CP_RULE_MAX_TOP_K */
  int top_k_from_layer;                    /* default 0 */
  int64_t top_k_distance;                  /* 0: default D / 2 */
  cp_topk_rows top_k_rows;                 /* default DECODE */

  double fire_threshold;                   /* 0: none */
  int64_t train_len;                       /* 0: none (use the model's) */

  /* The temperature was given as a list: one value per layer, so its length must equal the
   * depth of every stack in scope, also when it has one value ([x] is not x). */
  bool temperature_per_layer;
} cp_rule;

/* The identity rule (an empty JSON object). */
void cp_rule_init(cp_rule *rule);
/* True when the rule changes no logit: also for temperature 1, static factor 1, or top_k
 * without lambda_mask (docs/attention-decisions.md item 13). */
bool cp_rule_is_identity(const cp_rule *rule);

/* Parses the JSON text form. Unknown keys, wrong types and out-of-range values are refused with
 * CP_ERULE_* codes and a message naming `what` and the key. */
int cp_rule_parse(cp_rule *out, const char *text, size_t len, const char *what);
int cp_rule_load(cp_rule *out, const char *path);
/* Canonical compact JSON text (fixed key order, only non-default fields); the caller frees it.
 * Parsing the output gives back an equal rule. */
char *cp_rule_to_string(const cp_rule *rule);

/* ---- what one attention call needs ---- */

typedef enum {
  CP_ATTN_ENCODER_SELF, /* bidirectional (T5 encoder) */
  CP_ATTN_DECODER_SELF, /* causal (T5 decoder, every decoder-only model) */
  CP_ATTN_CROSS,        /* T5 cross-attention: no positional term, never masked */
} cp_attn_kind;

typedef struct {
  bool is_encoder_decoder; /* T5 */
  int n_layers_encoder;    /* T5 encoder depth; decoder-only: 0 */
  int n_layers_decoder;    /* T5 decoder depth; decoder-only: number of layers */
  int64_t train_len;       /* model's L_train (the rule's train_len overrides) */
  bool has_alibi;          /* the model's positional term is ALiBi (alibi_scale applies) */
  bool has_fire;           /* the model's positional term is FIRE (fire_threshold applies) */
  bool learned_pos;        /* learned absolute positions added to the input (GPT-2): attention has
                              no distance term, so distance_ceiling and top_k.distance cannot apply
                              and the ceiling that lambda_mask implies is none */
  const char *family;      /* family name for messages (cp_family_name), or NULL */
  /* Decoder self-attention layer l sees only keys i - j < sliding_window when
   * layer_sliding[l] (borrowed from the config); NULL / 0: no layer slides. */
  const bool *layer_sliding;
  int64_t sliding_window;
} cp_rule_model;

/* The piecewise form of one layer's temperature schedule, as every engine and the ONNX exporter
 * compute it (cp_plan_tau_at, in double):
 *   tau(T) = t1 + sum_{k=0}^{n-2} slope[k] * clamp(log T - log_len[k], 0, log_len[k+1] - log_len[k])
 * with log_len[k] = log L_k and slope[k] = (t_{k+1} - t_k) / (log L_{k+1} - log L_k). It is
 * t1 for T <= L_1, linear in log T between points, and the last tau (to rounding) for T >= L_n:
 * the spec's interpolation written as a sum, so that a graph of Log, Sub, Clip, Mul and Add
 * nodes computes the same function. The sum is then clipped to [lo, hi], the range of the
 * layer's taus: exact arithmetic never leaves it, rounding can (a last tau of 1e-300 after a
 * tau of 3 would sum to 0), and tau must stay > 0. T < 1 counts as 1. */
typedef struct {
  int n;                                          /* points; 0: no schedule in this call */
  double t1;                                      /* the first point's tau */
  double lo, hi;                                  /* smallest and largest tau of the points */
  double log_len[CP_RULE_MAX_SCHEDULE_POINTS];    /* [n] log L_k */
  double slope[CP_RULE_MAX_SCHEDULE_POINTS];      /* [n - 1] tau per unit of log T in segment k */
} cp_tau_schedule;

typedef struct {
  cp_attn_kind kind;
  int layer;
  float inv_tau;            /* 1 / tau for this call (1 when out of scope); with a schedule 1, and
                               each row's 1/tau comes from cp_plan_row_inv_tau */
  double tau;               /* the constant tau of inv_tau (1 when out of scope or scheduled) */
  cp_tau_schedule sched;    /* temperature_schedule in scope: this layer's points; else n = 0 */
  bool causal;
  bool lambda;              /* Lambda mask active for this call */
  int64_t n_global, n_local;
  int64_t ceiling;          /* INT64_MAX when none */
  bool top_k;               /* top-k middle tokens active in this layer */
  int k;
  int64_t top_k_distance;
  cp_topk_rows top_k_rows;
  cp_alibi_mode alibi_mode;
  double alibi_factor;      /* static factor, or 1 */
  int64_t train_len;        /* effective L_train for dynamic / progressive */
  double fire_threshold;    /* 0: use the model's L */
  int64_t window;           /* the model's sliding window on this layer (keys i - j < window), 0: none;
                               intersected with the causal and Lambda masks (decision 17) */
} cp_attn_plan;

/* Checks the rule fits the model (per-layer list lengths of temperature and of each schedule
 * point, alibi_scale only on ALiBi models, fire_threshold only on FIRE models, a training length
 * for dynamic/progressive ALiBi, no distance_ceiling or top_k.distance on a learned-position
 * model): CP_ERULE_MODEL otherwise. Rules built in code are checked as
 * the parser would (CP_ERULE_VALUE): top_k.k, and a schedule's bounds, order, taus and its
 * exclusion of temperature. */
int cp_rule_check_model(const cp_rule *rule, const cp_rule_model *model, const char *what);
/* Resolves the rule for one attention call. The rule must have passed cp_rule_check_model. */
void cp_rule_plan(cp_attn_plan *out, const cp_rule *rule, const cp_rule_model *model,
                  cp_attn_kind kind, int layer);

/* tau at length T (>= 1; smaller T counts as 1): the schedule's piecewise form above when the
 * plan has one, else the constant p->tau. */
double cp_plan_tau_at(const cp_attn_plan *plan, int64_t T);
/* The length T a softmax row sees (spec, temperature_schedule): i + 1 for a causal row i (the
 * same in a one-shot pass and in a decode step with a cache), else n_keys (bidirectional and
 * cross-attention rows). */
int64_t cp_plan_tau_length(const cp_attn_plan *plan, int64_t i, int64_t n_keys);
/* 1 / tau of row i in a pass with n_keys keys, as the engines multiply logits by it:
 * (float)(1 / cp_plan_tau_at(T)) with a schedule, plan->inv_tau without. */
float cp_plan_row_inv_tau(const cp_attn_plan *plan, int64_t i, int64_t n_keys);

/* Key j visible to query i (causal, Lambda and the layer's window), before top-k additions. */
bool cp_plan_visible(const cp_attn_plan *plan, int64_t i, int64_t j);
/* Key j is hidden only by the Lambda mask (a top-k candidate): j <= i, j >= n_global,
 * i - j >= n_local, and inside the layer's window when it has one. */
bool cp_plan_lambda_hidden(const cp_attn_plan *plan, int64_t i, int64_t j);
/* Whether row i (of a pass whose last prompt row is last_prompt_row) gets top-k additions. */
bool cp_plan_topk_row(const cp_attn_plan *plan, int64_t i, int64_t last_prompt_row);
/* The keys of row i among [0, n_keys) that cp_plan_visible admits, as at most two ascending,
 * disjoint, non-empty ranges [lo[r], hi[r]); returns their count. Streaming engines use it to
 * skip hidden key blocks without testing every key (implemented in attention_ranges.c). */
int cp_plan_visible_ranges(const cp_attn_plan *plan, int64_t i, int64_t n_keys, int64_t lo[2],
                           int64_t hi[2]);
/* The keys of row i among [0, n_keys) that cp_plan_lambda_hidden admits, as one range
 * [*lo, *hi) (empty when *lo >= *hi). */
/* Sorts the intervals [lo[k], hi[k]) by start and merges overlapping or touching ones in
 * place; returns the merged count (for per-tile unions of the rows' visible ranges). */
int cp_ranges_merge(int64_t *lo, int64_t *hi, int n);
void cp_plan_hidden_range(const cp_attn_plan *plan, int64_t i, int64_t n_keys, int64_t *lo,
                          int64_t *hi);
/* Distance after the ceiling: min(d, D) for d >= 0; sign-preserving for bidirectional r. */
int64_t cp_plan_distance(const cp_attn_plan *plan, int64_t d);
/* ALiBi slope divisor F for query row i in a pass with n_keys keys in total. */
double cp_plan_alibi_divisor(const cp_attn_plan *plan, int64_t i, int64_t n_keys);

/* ---- positional terms (model facts, shared by every engine) ---- */

/* HF T5 relative bucket of relative position r = j - i. */
int cp_t5_bucket(int64_t r, bool bidirectional, int num_buckets, int max_distance);
/* ALiBi slopes of the BLOOM/MPT rule with max bias `max_bias` (8 for BLOOM). */
void cp_alibi_slopes(double *out /* [n_heads] */, int n_heads, double max_bias);
/* FIRE MLP input psi(d) / psi(max(L, i)), psi(x) = log(c x + 1); 0 when the normaliser is 0. */
double cp_fire_input(int64_t d, int64_t i, double c, double L);

#endif
