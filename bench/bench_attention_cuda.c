/* Times the fused CUDA attention kernel (include/ctxpatch/engine/cuda.h) for one (rule, length, head
 * dim) on random bfloat16 inputs and prints one JSON line. Driven by bench_attention_cuda.py,
 * which runs PyTorch's kernels on the same GPU in the same run. Not a test.
 *
 *   bench_attention_cuda --rule NAME --len L --dh D [--heads H] [--reps R] [--f32] [--stats]
 *
 * Rules: causal, temperature, alibi, alibi-static, alibi-dynamic, alibi-progressive, t5, rope,
 * lambda (RoPE, Lambda mask n_global 4 n_local 2048, implied ceiling), ceiling (RoPE, D 2048),
 * fire. TFLOP/s counts 4 L^2 dh H / 2 (dense causal) for every rule, as FlashAttention's
 * benchmarks do, so rows compare times; "visible_pairs" says how much work the rule leaves. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/rule.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

static float *rand_buf(size_t n) {
  float *b = malloc(n * sizeof *b);
  if (!b) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) b[i] = urand();
  return b;
}

int main(int argc, char **argv) {
  const char *rule_name = "causal";
  int64_t L = 4096;
  int dh = 128, H = 16, reps = 10;
  bool bf16 = true, stats = false;
  for (int a = 1; a < argc; a++) {
    const char *v = a + 1 < argc ? argv[a + 1] : "";
    if (!strcmp(argv[a], "--rule")) rule_name = v, a++;
    else if (!strcmp(argv[a], "--len")) L = atoll(v), a++;
    else if (!strcmp(argv[a], "--dh")) dh = atoi(v), a++;
    else if (!strcmp(argv[a], "--heads")) H = atoi(v), a++;
    else if (!strcmp(argv[a], "--reps")) reps = atoi(v), a++;
    else if (!strcmp(argv[a], "--f32")) bf16 = false;
    else if (!strcmp(argv[a], "--stats")) stats = true;
    else {
      fprintf(stderr, "bench_attention_cuda: unknown argument %s\n", argv[a]);
      return 2;
    }
  }
  char why[512];
  if (!cp_cuda_available(why, sizeof why)) {
    fprintf(stderr, "bench_attention_cuda: no CUDA device: %s\n", why);
    return 77;
  }

  static const struct {
    const char *name, *json;
    cp_attn_pos pos;
  } RULES[] = {
      {"causal", "{}", CP_ATTN_POS_NONE},
      {"temperature", "{\"temperature\": 0.8}", CP_ATTN_POS_NONE},
      {"alibi", "{}", CP_ATTN_POS_ALIBI},
      {"alibi-static", "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}", CP_ATTN_POS_ALIBI},
      {"alibi-dynamic", "{\"alibi_scale\": {\"mode\": \"dynamic\"}}", CP_ATTN_POS_ALIBI},
      {"alibi-progressive", "{\"alibi_scale\": {\"mode\": \"progressive\"}}", CP_ATTN_POS_ALIBI},
      {"t5", "{}", CP_ATTN_POS_T5},
      {"rope", "{}", CP_ATTN_POS_ROPE},
      {"lambda", "{\"lambda_mask\": {\"n_global\": 4, \"n_local\": 2048}}", CP_ATTN_POS_ROPE},
      {"ceiling", "{\"distance_ceiling\": 2048}", CP_ATTN_POS_ROPE},
      {"fire", "{}", CP_ATTN_POS_FIRE},
  };
  int ri = -1;
  for (size_t x = 0; x < sizeof RULES / sizeof *RULES; x++)
    if (!strcmp(RULES[x].name, rule_name)) ri = (int)x;
  if (ri < 0) {
    fprintf(stderr, "bench_attention_cuda: unknown rule %s\n", rule_name);
    return 2;
  }
  const cp_attn_pos pos = RULES[ri].pos;
  cp_rule rule;
  cp_rule_model rm = {false, 0, 1, 4096, pos == CP_ATTN_POS_ALIBI, pos == CP_ATTN_POS_FIRE, false, NULL, NULL, 0};
  if (cp_rule_parse(&rule, RULES[ri].json, strlen(RULES[ri].json), rule_name) ||
      cp_rule_check_model(&rule, &rm, rule_name)) {
    fprintf(stderr, "bench_attention_cuda: %s\n", cp_error_message());
    return 1;
  }
  cp_attn_plan plan;
  cp_rule_plan(&plan, &rule, &rm, CP_ATTN_DECODER_SELF, 0);

  const size_t n = (size_t)L * H * dh;
  float *q = rand_buf(n), *k = rand_buf(n), *v = rand_buf(n), *out = malloc(n * sizeof *out);
  float *qfar = NULL, *kraw = NULL, *t5 = NULL, *st = NULL;
  double slopes[256];
  float fw1[32], fb1[32], *fw2 = rand_buf((size_t)H * 32), *fb2 = rand_buf((size_t)H);
  for (int w = 0; w < 32; w++) fw1[w] = urand(), fb1[w] = urand();
  cp_fire_mlp fire = {.w1 = fw1, .b1 = fb1, .w2 = fw2, .b2 = fb2, .width = 32, .layers = 1, .c = 1.0, .L = 4096.0};
  cp_alibi_slopes(slopes, H > 256 ? 256 : H, 8.0);

  cp_attn_call c;
  memset(&c, 0, sizeof c);
  c.plan = &plan;
  c.H = H, c.Hkv = H, c.dh = dh;
  c.q_off = 0, c.n_q = L, c.n_keys = L, c.last_prompt_row = L - 1;
  c.scale = 1.0f / sqrtf((float)dh);
  c.q = q, c.k = k, c.v = v, c.out = out;
  c.pos = pos;
  if (pos == CP_ATTN_POS_T5) {
    t5 = rand_buf((size_t)32 * H);
    c.t5_table = t5, c.t5_num_buckets = 32, c.t5_max_distance = 128;
  }
  c.slopes = slopes, c.fire = &fire;
  if (cp_attn_tables_build(&c)) {
    fprintf(stderr, "bench_attention_cuda: %s\n", cp_error_message());
    return 1;
  }
  if (c.tab.rope_far >= 0) {
    qfar = rand_buf(n), kraw = rand_buf(n);
    c.q_far = qfar, c.k_raw = kraw;
  }
  if (stats) {
    st = malloc((size_t)2 * H * L * sizeof *st);
    c.row_pmax = st, c.row_ent = st + (size_t)H * L;
  }
  double ms = 0;
  const cp_cuda_opts opts = {bf16, reps, &ms};
  int rc = cp_cuda_attention(&c, &opts);
  cp_attn_tables_free(&c.tab);
  if (rc) {
    fprintf(stderr, "bench_attention_cuda: %s\n", cp_error_message());
    return 1;
  }
  double visible = 0;
  for (int64_t i = 0; i < L; i++) {
    int64_t lo[2], hi[2];
    int nr = cp_plan_visible_ranges(&plan, i, L, lo, hi);
    for (int x = 0; x < nr; x++) visible += (double)(hi[x] - lo[x]);
  }
  double flops = 4.0 * (double)L * (double)L * dh * H / 2.0;
  printf("{\"impl\": \"ctxpatch\", \"rule\": \"%s\", \"len\": %lld, \"dh\": %d, \"heads\": %d, \"dtype\": \"%s\", "
         "\"stats\": %s, \"ms\": %.4f, \"tflops\": %.2f, \"visible_pairs\": %.0f, \"device\": \"%s\"}\n",
         rule_name, (long long)L, dh, H, bf16 ? "bf16" : "f32", stats ? "true" : "false", ms,
         flops / (ms * 1e-3) / 1e12, visible, why);
  free(q), free(k), free(v), free(out), free(qfar), free(kraw), free(t5), free(st), free(fw2), free(fb2);
  return 0;
}
