/* The CUDA attention kernel without a GPU: the kernel source of engine/cuda/attention.cu run on
 * host threads (tests/cuda_emulate.cpp), driven through the same host side as the device
 * (cp_cuda_attention_on: rule tables, tile ranges, bfloat16 conversion), against the CPU engine
 * for every rule of tests/cuda_cases.h. Smaller shapes than the device test (each block is 128
 * host threads meeting at barriers), still not multiples of the tiles: 1, 20 .. 130 rows, a
 * decode row, a chunk at a KV-cache offset; head dims 64, 128, 40 (not a multiple of the lanes)
 * and 200 (the 8-lanes-per-row variant); float and bfloat16. Runs in every build, CUDA or not. */
#include "cuda_cases.h"
#include "engine/cuda_attention.h"

const cpcu_backend *cpcu_emulated_backend(void); /* tests/cuda_emulate.cpp */

static int emulated(const cp_attn_call *c, const cp_cuda_opts *opts) {
  return cp_cuda_attention_on(cpcu_emulated_backend(), c, opts);
}

int main(void) {
  cuda_call = emulated;
  case_heads = 2; /* still grouped-query: 2 query heads on 1 key/value head */
  cp_pool *pool = NULL;
  if (cp_pool_create(&pool, 2)) {
    fprintf(stderr, "pool: %s\n", cp_error_message());
    return 1;
  }
  /* Every rule on a chunk at a KV-cache offset spanning two row tiles and three key tiles; the
   * other shapes, head dims and bfloat16 on a few rules (each block costs 128 host threads). */
  for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) run_case(pool, &CASES[ci], (shape){30, 37, 67}, 64, false);
  const struct {
    const char *rule;
    shape sh;
    int dh;
    bool bf16;
  } MORE[] = {
      {"rope identity", {0, 1, 1}, 64, false},
      {"rope lambda (implied ceiling)", {0, 130, 130}, 64, false}, /* tiles the Lambda mask skips */
      {"t5 decoder lambda", {0, 70, 70}, 64, false},
      {"alibi progressive", {40, 1, 41}, 64, false}, /* a decode row */
      {"t5 encoder", {0, 33, 33}, 64, false},
      {"t5 encoder ceiling", {0, 45, 45}, 64, false},
      {"rope ceiling", {0, 70, 70}, 64, true},
      {"fire identity", {0, 33, 33}, 128, false},
      {"alibi static", {0, 33, 33}, 40, true},
      {"fire threshold", {0, 20, 20}, 200, false},
      {"cross", {0, 33, 33}, 64, true},
      {"rope schedule", {40, 1, 41}, 64, false}, /* a decode row: T = 41 as in a one-shot pass */
      {"alibi schedule top_k layers", {0, 70, 70}, 64, true},
  };
  for (size_t x = 0; x < sizeof MORE / sizeof *MORE; x++)
    for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
      if (!strcmp(CASES[ci].name, MORE[x].rule)) run_case(pool, &CASES[ci], MORE[x].sh, MORE[x].dh, MORE[x].bf16);
  /* The paper's FIRE MLP (two hidden layers, docs/fire-layout.md) under every FIRE rule, and a
   * one-row decode call and bfloat16 inputs. */
  printf("compared %d calls, worst normalised error %.3g\n", n_checked, worst_err);
  const int n_one = n_checked;
  worst_err = 0;
  case_fire_layers = 2;
  for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++)
    if (CASES[ci].pos == CP_ATTN_POS_FIRE) {
      run_case(pool, &CASES[ci], (shape){30, 37, 67}, 64, false);
      if (!strcmp(CASES[ci].name, "fire identity")) {
        run_case(pool, &CASES[ci], (shape){40, 1, 41}, 64, false);
        run_case(pool, &CASES[ci], (shape){0, 33, 33}, 128, true);
      }
    }
  case_fire_layers = 1;
  printf("two-hidden-layer FIRE: compared %d calls, worst normalised error %.3g\n", n_checked - n_one, worst_err);
  cp_pool_free(pool);
  return test_finish();
}
