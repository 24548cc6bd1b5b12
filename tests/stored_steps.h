/* Helpers of the tests on models kept as stored (test_model_stored.c: F16/BF16;
 * test_model_stored_quant.c: GGUF blocks): what the matrices hold, greedy steps with a chosen kernel
 * version, and the distance of two logits arrays. Static: each test binary compiles its copy. */
#ifndef CTXPATCH_TESTS_STORED_STEPS_H
#define CTXPATCH_TESTS_STORED_STEPS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ctxpatch/engine/engine.h"
#include "ctxpatch/import/model.h"
#include "engine/kern16.h"
#include "test.h"

/* Bytes of every matrix of m as it is held (embedding, untied head, each layer's linears). */
static uint64_t matrix_bytes(const cp_model *m) {
  uint64_t n = (uint64_t)m->vocab * cp_dtype_span(m->embed_dtype, (uint64_t)m->d_model);
  if (m->lm_head != m->embed) n += (uint64_t)m->vocab * cp_dtype_span(m->lm_head_dtype, (uint64_t)m->d_model);
  for (int l = 0; l < m->decoder.n_layers; l++) {
    const cp_layer *ly = &m->decoder.layers[l];
    const cp_linear *lin[7] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
    for (int i = 0; i < 7; i++)
      if (lin[i]->w) n += (uint64_t)lin[i]->n_out * cp_dtype_span(lin[i]->dtype, (uint64_t)lin[i]->n_in);
  }
  return n;
}

/* The logits [n_new, vocab] of n_new greedy steps after the n_prompt-token prompt `ids`, with the
 * kernels of version isa (0: the CPU's) and CTXPATCH_WEIGHTS=weights (NULL: unset); caller frees. */
static float *steps_of(const cp_model *m, const int64_t *ids, int64_t n_prompt, int64_t n_new, cp_k16_isa isa,
                       const char *weights) {
  cp_engine *e = NULL;
  float *out = calloc((size_t)n_new * (size_t)m->vocab, sizeof *out);
  int64_t *gen = calloc((size_t)n_new, sizeof *gen), n_out = 0;
  if (weights) setenv("CTXPATCH_WEIGHTS", weights, 1);
  CHECK(cp_k16_force_isa(isa) == 0);
  CHECK_RC(0, cp_engine_create(&e, m, NULL, NULL));
  if (e && out && gen) CHECK_RC(0, cp_engine_generate(e, gen, &n_out, out, ids, n_prompt, NULL, 0, n_new, false));
  CHECK(n_out == n_new);
  cp_engine_free(e);
  free(gen);
  unsetenv("CTXPATCH_WEIGHTS");
  cp_k16_force_isa(0);
  return out;
}

/* max |a - b| / max(1, |b|) over n */
static double rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i])));
  return worst;
}

#endif
