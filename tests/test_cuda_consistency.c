/* Backend consistency (issue 7): the fused CUDA attention kernel against the CPU engine's
 * streaming kernel for every positional term and every rule the kernel implements
 * (tests/cuda_cases.h), on random tensors and shapes that are not multiples of the tiles
 * (1, 63, 64, 65, 1000 rows; a decode row and a chunk with a KV-cache offset; GQA), head dims 64
 * and 128, float and bfloat16 inputs.
 *
 * Skips (77) with the reason when built without CUDA or when no device is present (CI);
 * tests/test_cuda_emulated.c runs the same kernel source on the host there. */
#include "cuda_cases.h"

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
  return test_finish();
}
