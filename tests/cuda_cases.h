/* Shared by tests/test_cuda_consistency.c (the CUDA device) and tests/test_cuda_emulated.c (the
 * same kernel source run on host threads): one attention call per (rule, shape, head dim, input
 * type), built once with its tables (cp_attn_tables_build) and run by the CUDA backend and by the
 * CPU engine's streaming kernel (the oracle, engine/attention_cpu.h), compared by normalised
 * error (max |cuda - cpu| / max |cpu|) with a threshold per output: attention output, P_max,
 * entropy, logit std. */
#ifndef CTXPATCH_TESTS_CUDA_CASES_H
#define CTXPATCH_TESTS_CUDA_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/rule.h"
#include "test.h"
#include "engine/attention_cpu.h"
#include "engine/pool.h"

/* The backend under test, and the heads per call (query heads; half as many key/value heads,
 * or as many for T5). */
static int (*cuda_call)(const cp_attn_call *c, const cp_cuda_opts *opts);
static int case_heads = 4;
static int case_fire_layers = 1; /* hidden layers of the FIRE cases' MLP (2: the paper's) */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float urand(void) { /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

static float bf16_round(float f) { /* round to nearest even bfloat16, back as float */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

static double norm_err(const float *got, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d > num || d != d) num = d;
    if (fabs((double)ref[i]) > den) den = fabs((double)ref[i]);
  }
  return den > 0 ? num / den : num;
}

static float *rand_buf(size_t n, float amp, bool bf16) {
  float *b = malloc((n ? n : 1) * sizeof *b);
  if (!b) abort();
  for (size_t i = 0; i < n; i++) b[i] = bf16 ? bf16_round(amp * urand()) : amp * urand();
  return b;
}

typedef struct {
  const char *name;
  cp_attn_pos pos;
  const char *rule;     /* JSON */
  cp_attn_kind kind;
  bool t5_model;        /* encoder-decoder rule model */
  int window;           /* the model's sliding window on the planned layer (Gemma 2), 0: none */
  float softcap;        /* attention logit soft-cap (Gemma 2), 0: none */
} rule_case;

static const rule_case CASES[] = {
    {"rope identity", CP_ATTN_POS_ROPE, "{}", CP_ATTN_DECODER_SELF, false, 0, 0},
    {"rope temperature", CP_ATTN_POS_ROPE, "{\"temperature\": 0.8}", CP_ATTN_DECODER_SELF, false, 0, 0},
    {"rope lambda (implied ceiling)", CP_ATTN_POS_ROPE, "{\"lambda_mask\": {\"n_global\": 4, \"n_local\": 40}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"rope ceiling", CP_ATTN_POS_ROPE, "{\"distance_ceiling\": 50}", CP_ATTN_DECODER_SELF, false, 0, 0},
    {"rope top_k decode", CP_ATTN_POS_ROPE,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 16}, \"top_k\": {\"k\": 3, \"rows\": \"decode\"}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi identity", CP_ATTN_POS_ALIBI, "{}", CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi static", CP_ATTN_POS_ALIBI, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2.0}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi dynamic", CP_ATTN_POS_ALIBI, "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": 48}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi progressive", CP_ATTN_POS_ALIBI, "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": 48}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi lambda + ceiling + tau", CP_ATTN_POS_ALIBI,
     "{\"lambda_mask\": {\"n_global\": 3, \"n_local\": 70}, \"distance_ceiling\": 30, \"temperature\": 0.9}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"fire identity", CP_ATTN_POS_FIRE, "{}", CP_ATTN_DECODER_SELF, false, 0, 0},
    {"fire threshold", CP_ATTN_POS_FIRE, "{\"fire_threshold\": 100}", CP_ATTN_DECODER_SELF, false, 0, 0},
    {"fire lambda", CP_ATTN_POS_FIRE, "{\"lambda_mask\": {\"n_global\": 1, \"n_local\": 33}}", CP_ATTN_DECODER_SELF,
     false, 0, 0},
    {"t5 decoder lambda", CP_ATTN_POS_T5, "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 20}, \"temperature_scope\": \"self\", \"temperature\": 0.7}",
     CP_ATTN_DECODER_SELF, true, 0, 0},
    {"t5 encoder", CP_ATTN_POS_T5, "{\"temperature\": 0.75}", CP_ATTN_ENCODER_SELF, true, 0, 0},
    {"t5 encoder ceiling", CP_ATTN_POS_T5, "{\"distance_ceiling\": 20}", CP_ATTN_ENCODER_SELF, true, 0, 0},
    {"rope top_k all rows", CP_ATTN_POS_ROPE,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 16}, \"top_k\": {\"k\": 3, \"rows\": \"all\"}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi top_k", CP_ATTN_POS_ALIBI,
     "{\"lambda_mask\": {\"n_global\": 3, \"n_local\": 20}, \"top_k\": {\"k\": 5, \"rows\": \"all\", \"distance\": 12}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"fire top_k", CP_ATTN_POS_FIRE,
     "{\"lambda_mask\": {\"n_global\": 1, \"n_local\": 24}, \"top_k\": {\"k\": 4, \"rows\": \"all\"}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"t5 top_k decode", CP_ATTN_POS_T5,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 10}, \"top_k\": {\"k\": 2}}",
     CP_ATTN_DECODER_SELF, true, 0, 0},
    {"cross", CP_ATTN_POS_NONE, "{\"temperature\": 0.8, \"temperature_scope\": \"all\"}", CP_ATTN_CROSS, true, 0, 0},
    /* temperature_schedule: each row its own 1/tau (causal T = i + 1 spans the segments; layer 1
     * of a per-layer schedule; the top-k candidates of a row share its tau; T = keys elsewhere). */
    {"rope schedule", CP_ATTN_POS_ROPE, "{\"temperature_schedule\": {\"points\": [[8, 1.0], [40, 0.6], [90, 0.8]]}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"alibi schedule top_k layers", CP_ATTN_POS_ALIBI,
     "{\"temperature_schedule\": {\"points\": [[4, [1.0, 0.9]], [64, [0.7, 0.5]]]}, "
     "\"lambda_mask\": {\"n_global\": 3, \"n_local\": 20}, \"top_k\": {\"k\": 4, \"rows\": \"all\"}}",
     CP_ATTN_DECODER_SELF, false, 0, 0},
    {"t5 encoder schedule", CP_ATTN_POS_T5, "{\"temperature_schedule\": {\"points\": [[16, 1.0], [64, 0.6]]}}",
     CP_ATTN_ENCODER_SELF, true, 0, 0},
    {"cross schedule", CP_ATTN_POS_NONE,
     "{\"temperature_schedule\": {\"points\": [[8, 0.9], [128, 0.5]]}, \"temperature_scope\": \"all\"}",
     CP_ATTN_CROSS, true, 0, 0},
    /* Gemma 2: the layer's sliding window intersected with the rule's masks, logits soft-capped
     * after the temperature (decision 17). */
    {"gemma2 window softcap", CP_ATTN_POS_ROPE, "{\"temperature\": 0.8}", CP_ATTN_DECODER_SELF, false, 24, 0.5f},
    {"gemma2 window lambda top_k", CP_ATTN_POS_ROPE,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 16}, \"top_k\": {\"k\": 3, \"rows\": \"all\"}}",
     CP_ATTN_DECODER_SELF, false, 40, 0.5f},
};

typedef struct {
  int64_t q_off, n_q, n_keys;
} shape;

static int n_checked;
static double worst_err; /* the largest of the four errors over the calls compared (printed by the tests) */

/* Random FIRE MLP of width 32 for case_heads <= 4 heads (what fire points into); wm, bm with
 * case_fire_layers 2. */
typedef struct {
  float w1[32], b1[32], wm[32 * 32], bm[32], w2[4 * 32], b2[4];
} fire_weights;

/* The call of `rc` on random tensors, drawn in a fixed order (q, k, v, FIRE MLP, then the RoPE
 * or T5 extras): tables from the rule, random vectors standing in for the RoPE rotations (the
 * kernels take q and k as rotated), a random T5 table. call_free frees it. */
static int case_call(cp_attn_call *c, const cp_attn_plan *plan, const rule_case *rc, shape sh, int dh, bool bf16,
                     const double *slopes /* [H] */, cp_fire_mlp *fire, fire_weights *fw) {
  const int H = case_heads, Hkv = rc->pos == CP_ATTN_POS_T5 ? H : H / 2, NB = 32, MD = 128, W = 32;
  const size_t qn = (size_t)sh.n_q * H * dh, kn = (size_t)sh.n_keys * Hkv * dh;
  const float amp = rc->pos == CP_ATTN_POS_T5 ? 0.25f : 1.0f; /* T5's c = 1 */
  memset(c, 0, sizeof *c);
  c->plan = plan;
  c->H = H, c->Hkv = Hkv, c->dh = dh;
  c->q_off = sh.q_off, c->n_q = sh.n_q, c->n_keys = sh.n_keys, c->last_prompt_row = sh.q_off + sh.n_q - 1;
  c->scale = rc->pos == CP_ATTN_POS_T5 ? 1.0f : 1.0f / sqrtf((float)dh);
  c->pos = rc->pos;
  c->softcap = rc->softcap;
  c->q = rand_buf(qn, amp, bf16), c->k = rand_buf(kn, amp, bf16), c->v = rand_buf(kn, 1.0f, bf16);
  const bool two = case_fire_layers == 2;
  *fire = (cp_fire_mlp){.w1 = fw->w1, .b1 = fw->b1, .wm = two ? fw->wm : NULL, .bm = two ? fw->bm : NULL,
                        .w2 = fw->w2, .b2 = fw->b2, .width = W, .layers = two ? 2 : 1, .c = 0.5, .L = 64.0};
  for (int w = 0; w < W; w++) fw->w1[w] = 2.0f * urand(), fw->b1[w] = 0.5f * urand();
  for (int w = 0; w < H * W; w++) fw->w2[w] = 0.5f * urand();
  for (int h = 0; h < H; h++) fw->b2[h] = urand();
  if (two) /* drawn after the one-layer weights, so the other cases keep their draws */
    for (int w = 0; w < W * W; w++) fw->wm[w] = 0.25f * urand(), fw->bm[w % W] = 0.5f * urand();
  c->slopes = slopes, c->fire = fire;
  if (rc->pos == CP_ATTN_POS_T5)
    c->t5_table = rand_buf((size_t)NB * H, 2.0f, false), c->t5_num_buckets = NB, c->t5_max_distance = MD;
  int rc_tab = cp_attn_tables_build(c);
  if (rc_tab) return rc_tab;
  if (rc->pos == CP_ATTN_POS_ROPE) {
    bool far = c->tab.rope_far >= 0;
    if (far || plan->top_k) c->k_raw = rand_buf(kn, 1.0f, bf16);
    if (far) c->q_far = rand_buf(qn, 1.0f, bf16);
    if (plan->top_k) c->q_topk = rand_buf(qn, 1.0f, bf16);
  }
  return 0;
}

static void call_free(cp_attn_call *c) {
  free((void *)c->q), free((void *)c->k), free((void *)c->v), free((void *)c->q_far), free((void *)c->q_topk);
  free((void *)c->k_raw), free((void *)c->t5_table);
  cp_attn_tables_free(&c->tab);
}

static void run_case(cp_pool *pool, const rule_case *rc, shape sh, int dh, bool bf16) {
  const int H = case_heads;
  cp_rule rule;
  static const bool sliding[2] = {false, true}; /* the planned layer 1 slides when the case has a window */
  cp_rule_model rm = {rc->t5_model, rc->t5_model ? 2 : 0, 2, 64, rc->pos == CP_ATTN_POS_ALIBI, rc->pos == CP_ATTN_POS_FIRE,
                      false, NULL, rc->window > 0 ? sliding : NULL, rc->window};
  if (cp_rule_parse(&rule, rc->rule, strlen(rc->rule), rc->name) ||
      cp_rule_check_model(&rule, &rm, rc->name)) {
    CHECK_MSG(0, "%s: rule refused: %s", rc->name, cp_error_message());
    return;
  }
  cp_attn_plan plan;
  cp_rule_plan(&plan, &rule, &rm, rc->kind, 1);
  if (rc->kind == CP_ATTN_ENCODER_SELF) sh.q_off = 0, sh.n_keys = sh.n_q; /* bidirectional: all rows */
  if (rc->kind == CP_ATTN_CROSS) sh.q_off = 0, sh.n_keys = sh.n_q + 17;  /* cross: its own key count */
  const size_t qn = (size_t)sh.n_q * H * dh, sn = (size_t)H * sh.n_q;

  double slopes[8];
  cp_alibi_slopes(slopes, H, 8.0);
  cp_fire_mlp fire;
  fire_weights fw;
  cp_attn_call c;
  int crc = case_call(&c, &plan, rc, sh, dh, bf16, slopes, &fire, &fw);
  CHECK_MSG(crc == 0, "%s: tables: %s", rc->name, cp_error_message());
  float *out_c = calloc(qn, sizeof(float)), *out_g = calloc(qn, sizeof(float));
  float *st_c = calloc(3 * sn, sizeof(float)), *st_g = calloc(3 * sn, sizeof(float));
  c.out = out_c, c.row_pmax = st_c, c.row_ent = st_c + sn, c.row_lstd = st_c + 2 * sn;
  int cpu_rc = crc ? crc : cp_cpu_attention(pool, &c);
  CHECK_MSG(cpu_rc == 0, "%s: cpu: %s", rc->name, cp_error_message());

  cp_attn_call g = c; /* the same call, its own outputs */
  g.out = out_g, g.row_pmax = st_g, g.row_ent = st_g + sn, g.row_lstd = st_g + 2 * sn;
  const cp_cuda_opts opts = {bf16, 0, NULL};
  int grc = cpu_rc ? cpu_rc : cuda_call(&g, &opts);
  CHECK_MSG(grc == 0, "%s: cuda: %s", rc->name, cp_error_message());
  if (grc == 0) {
    double eo = norm_err(out_g, out_c, qn), ep = norm_err(st_g, st_c, sn);
    double ee = norm_err(st_g + sn, st_c + sn, sn), es = norm_err(st_g + 2 * sn, st_c + 2 * sn, sn);
    /* fp32 accumulation on both sides, different summation orders and exp implementations;
     * bfloat16 runs feed the CPU the same rounded inputs, so the same thresholds apply. */
    const double to = 1e-4, tp = 1e-4, te = 1e-4, ts = 1e-4;
    CHECK_MSG(eo <= to && ep <= tp && ee <= te && es <= ts,
              "%s: dh %d %s q_off %lld n_q %lld n_keys %lld: error out %.3g pmax %.3g entropy %.3g lstd %.3g",
              rc->name, dh, bf16 ? "bf16" : "f32", (long long)sh.q_off, (long long)sh.n_q, (long long)sh.n_keys, eo,
              ep, ee, es);
    n_checked++;
    worst_err = fmax(worst_err, fmax(fmax(eo, ep), fmax(ee, es)));
  }
  call_free(&c);
  free(out_c), free(out_g), free(st_c), free(st_g);
}

#endif
