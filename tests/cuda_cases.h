/* Shared by tests/test_cuda_consistency.c (the CUDA device) and tests/test_cuda_emulated.c (the
 * same kernel source run on host threads): one attention call per (rule, shape, head dim, input
 * type), the CUDA backend against the CPU engine's streaming kernel (the oracle,
 * engine/attention_cpu.h), compared by normalised error (max |cuda - cpu| / max |cpu|) with a
 * threshold per output: attention output, P_max, entropy, logit std. */
#ifndef CTXPATCH_TESTS_CUDA_CASES_H
#define CTXPATCH_TESTS_CUDA_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/converters/rule.h"
#include "test.h"
#include "engine/attention_cpu.h"
#include "engine/pool.h"

/* The backend under test, and the heads per call (query heads; half as many key/value heads,
 * or as many for T5). */
static int (*cuda_call)(const cp_cuda_attn_call *c);
static int case_heads = 4;

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
  att_pos pos;
  const char *rule;     /* JSON */
  cp_attn_kind kind;
  bool t5_model;        /* encoder-decoder rule model */
} rule_case;

static const rule_case CASES[] = {
    {"rope identity", ATT_POS_ROPE, "{}", CP_ATTN_DECODER_SELF, false},
    {"rope temperature", ATT_POS_ROPE, "{\"temperature\": 0.8}", CP_ATTN_DECODER_SELF, false},
    {"rope lambda (implied ceiling)", ATT_POS_ROPE, "{\"lambda_mask\": {\"n_global\": 4, \"n_local\": 40}}",
     CP_ATTN_DECODER_SELF, false},
    {"rope ceiling", ATT_POS_ROPE, "{\"distance_ceiling\": 50}", CP_ATTN_DECODER_SELF, false},
    {"rope top_k decode", ATT_POS_ROPE,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 16}, \"top_k\": {\"k\": 3, \"rows\": \"decode\"}}",
     CP_ATTN_DECODER_SELF, false},
    {"alibi identity", ATT_POS_ALIBI, "{}", CP_ATTN_DECODER_SELF, false},
    {"alibi static", ATT_POS_ALIBI, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2.0}}",
     CP_ATTN_DECODER_SELF, false},
    {"alibi dynamic", ATT_POS_ALIBI, "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": 48}",
     CP_ATTN_DECODER_SELF, false},
    {"alibi progressive", ATT_POS_ALIBI, "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": 48}",
     CP_ATTN_DECODER_SELF, false},
    {"alibi lambda + ceiling + tau", ATT_POS_ALIBI,
     "{\"lambda_mask\": {\"n_global\": 3, \"n_local\": 70}, \"distance_ceiling\": 30, \"temperature\": 0.9}",
     CP_ATTN_DECODER_SELF, false},
    {"fire identity", ATT_POS_FIRE, "{}", CP_ATTN_DECODER_SELF, false},
    {"fire threshold", ATT_POS_FIRE, "{\"fire_threshold\": 100}", CP_ATTN_DECODER_SELF, false},
    {"fire lambda", ATT_POS_FIRE, "{\"lambda_mask\": {\"n_global\": 1, \"n_local\": 33}}", CP_ATTN_DECODER_SELF,
     false},
    {"t5 decoder lambda", ATT_POS_T5, "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 20}, \"temperature_scope\": \"self\", \"temperature\": 0.7}",
     CP_ATTN_DECODER_SELF, true},
    {"t5 encoder", ATT_POS_T5, "{\"temperature\": 0.75}", CP_ATTN_ENCODER_SELF, true},
    {"t5 encoder ceiling", ATT_POS_T5, "{\"distance_ceiling\": 20}", CP_ATTN_ENCODER_SELF, true},
    {"rope top_k all rows", ATT_POS_ROPE,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 16}, \"top_k\": {\"k\": 3, \"rows\": \"all\"}}",
     CP_ATTN_DECODER_SELF, false},
    {"alibi top_k", ATT_POS_ALIBI,
     "{\"lambda_mask\": {\"n_global\": 3, \"n_local\": 20}, \"top_k\": {\"k\": 5, \"rows\": \"all\", \"distance\": 12}}",
     CP_ATTN_DECODER_SELF, false},
    {"fire top_k", ATT_POS_FIRE,
     "{\"lambda_mask\": {\"n_global\": 1, \"n_local\": 24}, \"top_k\": {\"k\": 4, \"rows\": \"all\"}}",
     CP_ATTN_DECODER_SELF, false},
    {"t5 top_k decode", ATT_POS_T5,
     "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 10}, \"top_k\": {\"k\": 2}}",
     CP_ATTN_DECODER_SELF, true},
    {"cross", ATT_POS_NONE, "{\"temperature\": 0.8, \"temperature_scope\": \"all\"}", CP_ATTN_CROSS, true},
};

typedef struct {
  int64_t q_off, n_q, n_keys;
} shape;

static int n_checked;

static void run_case(cp_pool *pool, const rule_case *rc, shape sh, int dh, bool bf16) {
  const int H = case_heads, Hkv = rc->pos == ATT_POS_T5 ? H : H / 2, NB = 32, MD = 128, W = 32;
  cp_rule rule;
  cp_rule_model rm = {rc->t5_model, rc->t5_model ? 2 : 0, 2, 64, rc->pos == ATT_POS_ALIBI, rc->pos == ATT_POS_FIRE};
  if (cp_rule_parse(&rule, rc->rule, strlen(rc->rule), rc->name) ||
      cp_rule_check_model(&rule, &rm, rc->name)) {
    CHECK_MSG(0, "%s: rule refused: %s", rc->name, cp_error_message());
    return;
  }
  cp_attn_plan plan;
  cp_rule_plan(&plan, &rule, &rm, rc->kind, 1);
  if (rc->kind == CP_ATTN_ENCODER_SELF) sh.q_off = 0, sh.n_keys = sh.n_q; /* bidirectional: all rows */
  if (rc->kind == CP_ATTN_CROSS) sh.q_off = 0, sh.n_keys = sh.n_q + 17;  /* cross: its own key count */
  const int64_t n_q = sh.n_q, n_keys = sh.n_keys;
  const size_t qn = (size_t)n_q * H * dh, kn = (size_t)n_keys * Hkv * dh, sn = (size_t)H * n_q;
  const float amp = rc->pos == ATT_POS_T5 ? 0.25f : 1.0f; /* T5's c = 1 */

  float *q = rand_buf(qn, amp, bf16), *k = rand_buf(kn, amp, bf16), *v = rand_buf(kn, 1.0f, bf16);
  float *qfar = NULL, *qtopk = NULL, *kraw = NULL, *t5tab = NULL, *t5bias = NULL;
  int64_t *dprime = NULL;
  double slopes[8];
  float t5topk[8];
  cp_alibi_slopes(slopes, H, 8.0);
  float fw1[32], fb1[32], fw2[4 * 32], fb2[4];
  cp_fire_mlp fire = {fw1, fb1, fw2, fb2, W, 0.5, 64.0};
  for (int w = 0; w < W; w++) fw1[w] = 2.0f * urand(), fb1[w] = 0.5f * urand();
  for (int w = 0; w < H * W; w++) fw2[w] = 0.5f * urand();
  for (int h = 0; h < H; h++) fb2[h] = urand();

  att_call c;
  memset(&c, 0, sizeof c);
  c.plan = &plan;
  c.H = H, c.Hkv = Hkv, c.dh = dh;
  c.q_off = sh.q_off, c.n_q = n_q, c.n_keys = n_keys, c.last_prompt_row = sh.q_off + n_q - 1;
  c.scale = rc->pos == ATT_POS_T5 ? 1.0f : 1.0f / sqrtf((float)dh);
  c.q = q, c.k = k, c.v = v;
  if (plan.causal) {
    dprime = malloc((size_t)n_keys * sizeof *dprime);
    for (int64_t d = 0; d < n_keys; d++) dprime[d] = cp_plan_distance(&plan, d);
    c.dprime = dprime;
  }
  cp_cuda_attn_call g;
  memset(&g, 0, sizeof g);
  g.pos = CP_CUDA_POS_NONE;
  switch (rc->pos) {
    case ATT_POS_NONE:
      break;
    case ATT_POS_ROPE: {
      /* The kernels take q and k as rotated; random vectors stand in for the rotations. */
      c.pos = ATT_POS_ROPE, g.pos = CP_CUDA_POS_ROPE;
      bool far = false;
      for (int64_t d = 0; d < n_keys; d++) far |= dprime[d] != d;
      if (far || plan.top_k) kraw = rand_buf(kn, 1.0f, bf16);
      if (far) qfar = rand_buf(qn, 1.0f, bf16), c.q_far = qfar, c.k_raw = kraw;
      if (plan.top_k) qtopk = rand_buf(qn, 1.0f, bf16), c.q_topk = qtopk, c.k_raw = kraw;
      break;
    }
    case ATT_POS_ALIBI:
      c.pos = ATT_POS_ALIBI, g.pos = CP_CUDA_POS_ALIBI;
      c.slopes = slopes;
      break;
    case ATT_POS_FIRE:
      c.pos = ATT_POS_FIRE, g.pos = CP_CUDA_POS_FIRE;
      c.fire = &fire;
      c.fire_L = plan.fire_threshold > 0 ? plan.fire_threshold : fire.L;
      break;
    case ATT_POS_T5: {
      c.pos = ATT_POS_T5, g.pos = CP_CUDA_POS_T5;
      t5tab = rand_buf((size_t)NB * H, 2.0f, false);
      if (plan.causal) { /* as engine/engine_cpu.c builds it */
        t5bias = malloc((size_t)H * n_keys * sizeof *t5bias);
        for (int64_t d = 0; d < n_keys; d++) {
          int bk = cp_t5_bucket(-dprime[d], false, NB, MD);
          for (int h = 0; h < H; h++) t5bias[(size_t)h * n_keys + d] = t5tab[(size_t)bk * H + h];
        }
        if (plan.top_k) {
          int bk = cp_t5_bucket(-plan.top_k_distance, false, NB, MD);
          for (int h = 0; h < H; h++) t5topk[h] = t5tab[(size_t)bk * H + h];
          c.t5_topk_bias = t5topk;
        }
      } else {
        int64_t w = 2 * n_keys - 1;
        t5bias = malloc((size_t)H * w * sizeof *t5bias);
        for (int64_t r = -(n_keys - 1); r <= n_keys - 1; r++) {
          int bk = cp_t5_bucket(cp_plan_distance(&plan, r), true, NB, MD);
          for (int h = 0; h < H; h++) t5bias[(size_t)h * w + (size_t)(r + n_keys - 1)] = t5tab[(size_t)bk * H + h];
        }
      }
      c.t5_bias = t5bias;
      break;
    }
  }
  float *out_c = calloc(qn, sizeof(float)), *out_g = calloc(qn, sizeof(float));
  float *st_c = calloc(3 * sn, sizeof(float)), *st_g = calloc(3 * sn, sizeof(float));
  c.out = out_c, c.row_pmax = st_c, c.row_ent = st_c + sn, c.row_lstd = st_c + 2 * sn;
  int cpu_rc = cp_cpu_attention(pool, &c);
  CHECK_MSG(cpu_rc == 0, "%s: cpu: %s", rc->name, cp_error_message());

  g.plan = &plan;
  g.H = H, g.Hkv = Hkv, g.dh = dh;
  g.q_off = sh.q_off, g.n_q = n_q, g.n_keys = n_keys, g.last_prompt_row = c.last_prompt_row;
  g.scale = c.scale, g.bf16 = bf16;
  g.q = q, g.k = k, g.v = v, g.q_far = c.q_far, g.q_topk = c.q_topk, g.k_raw = c.k_raw;
  g.t5_table = t5tab, g.t5_num_buckets = NB, g.t5_max_distance = MD;
  g.slopes = slopes, g.fire = &fire, g.fire_L = c.fire_L;
  g.out = out_g, g.row_pmax = st_g, g.row_ent = st_g + sn, g.row_lstd = st_g + 2 * sn;

  int grc = cuda_call(&g);
  CHECK_MSG(grc == 0, "%s: cuda: %s", rc->name, cp_error_message());
  if (grc == 0) {
    double eo = norm_err(out_g, out_c, qn), ep = norm_err(st_g, st_c, sn);
    double ee = norm_err(st_g + sn, st_c + sn, sn), es = norm_err(st_g + 2 * sn, st_c + 2 * sn, sn);
    /* fp32 accumulation on both sides, different summation orders and exp implementations;
     * bfloat16 runs feed the CPU the same rounded inputs, so the same thresholds apply. */
    const double to = 1e-4, tp = 1e-4, te = 1e-4, ts = 1e-4;
    CHECK_MSG(eo <= to && ep <= tp && ee <= te && es <= ts,
              "%s: dh %d %s q_off %lld n_q %lld n_keys %lld: error out %.3g pmax %.3g entropy %.3g lstd %.3g",
              rc->name, dh, bf16 ? "bf16" : "f32", (long long)sh.q_off, (long long)n_q, (long long)n_keys, eo, ep,
              ee, es);
    n_checked++;
  }
  free(q), free(k), free(v), free(qfar), free(qtopk), free(kraw), free(t5tab), free(t5bias), free(dprime);
  free(out_c), free(out_g), free(st_c), free(st_g);
}

#endif
