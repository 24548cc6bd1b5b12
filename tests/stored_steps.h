/* Helpers of the tests on models kept as stored (test_model_stored.c: F16/BF16;
 * test_model_stored_quant.c: GGUF blocks): what the matrices hold, greedy steps with a chosen kernel
 * version, and the distance of two logits arrays. Static: each test binary compiles its copy. */
#ifndef CTXPATCH_TESTS_STORED_STEPS_H
#define CTXPATCH_TESTS_STORED_STEPS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Greedy decode of `stored` (matrices as stored) against `widened` (the same weights in float32),
 * n_new steps after the n_prompt ids: the direct kernels (portable), the widened tiles
 * (CTXPATCH_WEIGHTS=f32) both within 1e-4 of float32 and not equal to each other (so the switch
 * acts), and the AVX2 kernels equal to the portable ones bit for bit where the CPU has them.
 * `kernels` names the direct kernels and `reference` the float32 model in the messages. */
static void check_decode_kernels(const cp_model *stored, const cp_model *widened, const int64_t *ids, int64_t n_prompt,
                                 int64_t n_new, const char *kernels, const char *reference) {
  const int have_avx2 = cp_k16_force_isa(CP_K16_AVX2) == 0;
  cp_k16_force_isa(0);
  float *f32 = steps_of(widened, ids, n_prompt, n_new, 0, NULL);
  float *direct = steps_of(stored, ids, n_prompt, n_new, CP_K16_PORTABLE, NULL);
  float *tiles = steps_of(stored, ids, n_prompt, n_new, 0, "f32");
  float *vec = have_avx2 ? steps_of(stored, ids, n_prompt, n_new, CP_K16_AVX2, NULL) : NULL;
  const size_t n = (size_t)n_new * (size_t)stored->vocab;
  if (f32 && direct && tiles) {
    double d = rel_diff(direct, f32, n), t = rel_diff(tiles, f32, n);
    printf("decode logits vs %s: %s %.3g, widened tiles %.3g\n", reference, kernels, d, t);
    CHECK_MSG(d <= 1e-4, "%s: decode logits differ from %s by %g", kernels, reference, d);
    CHECK_MSG(t <= 1e-4, "widened tiles: decode logits differ from %s by %g", reference, t);
    CHECK_MSG(memcmp(direct, tiles, n * sizeof *direct) != 0, "CTXPATCH_WEIGHTS=f32 changed nothing");
  }
  if (vec && direct) CHECK_MSG(memcmp(vec, direct, n * sizeof *vec) == 0, "AVX2 and portable decode logits differ");
  free(f32), free(direct), free(tiles), free(vec);
}

#endif
