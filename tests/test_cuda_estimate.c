/* cp_cuda_engine_bytes (include/ctxpatch/engine/cuda.h), the CUDA engine's memory estimate, in
 * every build: the weights of each probe model against the float count of its safetensors file
 * plus the engine's non-finite flag (every tensor the engine uploads, the tied LM head once; T5's
 * relative-bias table stays on the host), the growth of a run per token against the cache and activation sizes computed here from
 * the model's shape, and the refusals (negative or overflowing lengths). The estimate against
 * what the engine really allocates is test_cuda_engine_emulated's. */
#include <stdint.h>
#include <stdio.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/formats/safetensors.h"
#include "test.h"

static void one(const char *src, const char *name) {
  char dir[2048], file[2200];
  snprintf(dir, sizeof dir, "%.1900s/examples/probe-models/%s", src, name);
  snprintf(file, sizeof file, "%s/model.safetensors", dir);
  cp_model *m = NULL;
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_model_open(&m, dir));
  CHECK_RC(0, cp_st_open(&f, file));
  if (!m || !f) goto done;
  uint64_t floats = 0;
  for (size_t i = 0; i < cp_st_count(f); i++) floats += cp_st_tensor(f, i)->nbytes / cp_dtype_size(cp_st_tensor(f, i)->dtype);
  /* What the attention call uploads itself (per call, counted in the run): the T5 bias tables of
   * both stacks and the FIRE MLPs. */
  const cp_stack *st[] = {&m->encoder, &m->decoder};
  for (int i = 0; i < 2; i++)
    if (st[i]->rel_bias) floats -= (uint64_t)m->t5_num_buckets * m->n_heads;
  for (int i = 0; i < m->n_fire; i++) /* the MLP, and its scalars c and L (read on the host) */
    floats -= (uint64_t)m->fire[i].width * (2 + m->n_heads) + m->n_heads + 2 +
              (m->fire[i].layers == 2 ? (uint64_t)m->fire[i].width * (m->fire[i].width + 1) : 0);
  uint64_t w = 0, r1 = 0, r2 = 0;
  CHECK_RC(0, cp_cuda_engine_bytes(&w, &r1, m, 100, 10, 0));
  printf("%-12s weights %llu bytes (file: %llu floats)\n", name, (unsigned long long)w, (unsigned long long)floats);
  /* + the engine's 8-byte non-finite flag (float32 files: no widening scratch) and the RoPE table
   * (a double per rotated pair) */
  const uint64_t rope = m->pos == CP_POS_ROPE ? (uint64_t)(m->rope_dims / 2) * 8 : 0;
  CHECK_MSG(w == 4 * floats + 8 + rope, "%s: weights %llu bytes, the file holds %llu floats", name,
            (unsigned long long)w, (unsigned long long)floats);
  /* One more generated token adds one position to every decoder layer's cache (keys, values and,
   * for RoPE, unrotated keys) and 12 bytes to the attention call's per-key tables, counted twice
   * since the engine's table buffer grows by doubling (cp_cuda_attn_bufs; T5: the 100-key
   * cross-attention call stays the largest). */
  CHECK_RC(0, cp_cuda_engine_bytes(&w, &r1, m, 100, 10, 7));
  CHECK_RC(0, cp_cuda_engine_bytes(&w, &r2, m, 100, 10, 8));
  const uint64_t kvd = (uint64_t)m->n_kv_heads * m->d_head, per = m->pos == CP_POS_ROPE ? 3 : 2;
  const uint64_t want = (uint64_t)m->decoder.n_layers * per * kvd * 4 + (m->family == CP_FAMILY_T5 ? 0 : 2 * 12);
  CHECK_MSG(r2 - r1 == want, "%s: a token adds %llu bytes, want %llu", name, (unsigned long long)(r2 - r1),
            (unsigned long long)want);
  /* A forward holds the logits of every row: ten more rows add at least their logits. */
  if (m->family != CP_FAMILY_T5) {
    CHECK_RC(0, cp_cuda_engine_bytes(&w, &r1, m, 100, 0, 0));
    CHECK_RC(0, cp_cuda_engine_bytes(&w, &r2, m, 110, 0, 0));
    CHECK(r2 - r1 >= (uint64_t)10 * m->vocab * 4);
  }
  CHECK_RC(CP_EARG, cp_cuda_engine_bytes(&w, &r1, m, 5, 0, -1));
  CHECK_RC(CP_EOVERFLOW, cp_cuda_engine_bytes(&w, &r1, m, INT64_MAX / 4, 0, 0));
done:
  cp_st_free(f);
  cp_model_free(m);
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  const char *models[] = {"rope-probe", "alibi-probe", "fire-probe", "t5-probe"};
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) one(src, models[i]);
  return test_finish();
}
