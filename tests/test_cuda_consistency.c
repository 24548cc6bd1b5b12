/* Backend consistency (issue 7): the fused CUDA attention kernel against the CPU engine's
 * streaming kernel for every positional term and every rule the kernel implements
 * (tests/cuda_cases.h), on random tensors and shapes that are not multiples of the tiles
 * (1, 63, 64, 65, 1000 rows; a decode row and a chunk with a KV-cache offset; GQA), head dims 64
 * and 128, float and bfloat16 inputs; then the whole CUDA engine against the CPU engine on the
 * Qwen3 golden model (per-head q/k norm, explicit head_dim), whose norm no attention case reaches.
 *
 * Skips (77) with the reason when built without CUDA or when no device is present (CI);
 * tests/test_cuda_emulated.c runs the same kernel source on the host there. */
#include "cuda_cases.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/import/model.h"

/* The whole CUDA engine against the CPU engine on a golden model whose layers use a primitive the
 * attention cases above do not reach (Qwen3: the per-head q/k RMSNorm before RoPE, explicit
 * head_dim 32): logits of a 56-token forward (past its 32-token training length) under the identity
 * and a temperature, within the goldens' 1e-4. */
static void engine_case(const char *model, const char *rule_json) {
  char path[2400];
  snprintf(path, sizeof path, "%.2000s/tests/goldens/engine/models/%s", test_env("CTXPATCH_SOURCE_DIR"), model);
  cp_model *m = NULL;
  cp_rule rule;
  CHECK_RC(0, cp_rule_parse(&rule, rule_json, strlen(rule_json), "test rule"));
  CHECK_RC(0, cp_model_open_stored(&m, path));
  if (!m) return;
  enum { N = 56 };
  int64_t ids[N];
  for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % m->vocab;
  float *out[2] = {NULL, NULL};
  for (int dev = 0; dev < 2; dev++) {
    cp_engine_params p;
    cp_engine_params_init(&p);
    p.threads = 2;
    p.device = dev ? CP_DEVICE_CUDA : CP_DEVICE_CPU;
    cp_engine *e = NULL;
    CHECK_RC(0, cp_engine_create(&e, m, &rule, &p));
    if (!e) continue;
    out[dev] = malloc((size_t)N * m->vocab * sizeof(float));
    if (out[dev]) CHECK_RC(0, cp_engine_forward(e, out[dev], ids, N, NULL, 0));
    cp_engine_free(e);
  }
  if (out[0] && out[1]) {
    double err = norm_err(out[1], out[0], (size_t)N * m->vocab);
    CHECK_MSG(err <= 1e-4, "%s %s: cuda vs cpu logits %.3g", model, rule_json, err);
    printf("engine %s %s: cuda vs cpu logits, normalised error %.3g\n", model, rule_json, err);
  }
  free(out[0]);
  free(out[1]);
  cp_model_free(m);
}

int main(void) {
  char why[512];
  bool have = cp_cuda_available(why, sizeof why);
#ifndef CTXPATCH_WITH_CUDA
  (void)have;
  test_skip("built without CUDA");
#endif
  if (!have) {
    char msg[600];
    snprintf(msg, sizeof msg, "no CUDA device (%s)", why);
    test_skip(msg);
  }
  printf("device: %s\n", why);
  cuda_call = cp_cuda_attention;
  cp_pool *pool = NULL;
  if (cp_pool_create(&pool, 2)) {
    fprintf(stderr, "pool: %s\n", cp_error_message());
    return 1;
  }
  const shape shapes[] = {{0, 1, 1}, {0, 63, 63}, {0, 64, 64}, {0, 65, 65}, {0, 1000, 1000},
                          {999, 1, 1000}, {500, 65, 565}};
  const int dhs[] = {64, 128};
  for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
      for (int di = 0; di < 2; di++)
        for (int b = 0; b < 2; b++) run_case(pool, &CASES[ci], shapes[si], dhs[di], b);
  printf("compared %d calls, worst normalised error %.3g\n", n_checked, worst_err);
  const int n_one = n_checked;
  worst_err = 0;
  case_fire_layers = 2; /* the paper's two-hidden-layer FIRE MLP under every FIRE rule */
  for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
    for (size_t si = 0; CASES[ci].pos == CP_ATTN_POS_FIRE && si < sizeof shapes / sizeof *shapes; si++)
      for (int b = 0; b < 2; b++) run_case(pool, &CASES[ci], shapes[si], 64, b);
  case_fire_layers = 1;
  printf("two-hidden-layer FIRE: compared %d calls, worst normalised error %.3g\n", n_checked - n_one, worst_err);
  cp_pool_free(pool);
  engine_case("qwen3", "{}");
  engine_case("qwen3", "{\"temperature\": 0.8, \"lambda_mask\": {\"n_global\": 2, \"n_local\": 8}}");
  return test_finish();
}
