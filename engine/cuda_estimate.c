/* Device memory of the CUDA engine, before it allocates (cp_cuda_engine_bytes,
 * include/ctxpatch/engine/cuda.h), and the list of weights it uploads (engine/backend.h).
 * F16/BF16 and GGUF block matrices count at their stored size plus one widening scratch
 * (cp_cuda_widen_floats).
 * In every build: the CLI checks a run against the device's free memory and the tests check the
 * estimate against what the emulated engine really allocates. The pass sizes here are those of
 * engine/engine_run.c for a device backend (pass_alloc, kv_alloc; an upper bound: RoPE's three
 * unrotated queries are counted whether or not a layer keeps raw keys), the attention call's
 * tables in engine/cuda_attention.c; change them together. */
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/backend.h"

static void lin(const cp_linear *L, cp_cuda_weight_fn fn, void *ctx) {
  if (!L->w) return;
  fn(ctx, L->w, L->dtype, (size_t)L->n_out * (size_t)L->n_in);
  if (L->b) fn(ctx, L->b, CP_F32, (size_t)L->n_out);
}

static void norm(const cp_norm_weights *w, size_t D, cp_cuda_weight_fn fn, void *ctx) {
  if (w->w) fn(ctx, w->w, CP_F32, D);
  if (w->b) fn(ctx, w->b, CP_F32, D);
}

/* qn, kn: the widths of q_norm and k_norm (d_head, or OLMo 2's whole H*dh and Hkv*dh). */
static void stack(const cp_stack *st, size_t D, size_t qn, size_t kn, cp_cuda_weight_fn fn, void *ctx) {
  for (int l = 0; l < st->n_layers; l++) {
    const cp_layer *ly = &st->layers[l];
    norm(&ly->attn_norm, D, fn, ctx);
    norm(&ly->cross_norm, D, fn, ctx);
    norm(&ly->ffn_norm, D, fn, ctx);
    norm(&ly->post_attn_norm, D, fn, ctx);
    norm(&ly->post_ffn_norm, D, fn, ctx);
    norm(&ly->q_norm, qn, fn, ctx);
    norm(&ly->k_norm, kn, fn, ctx);
    const cp_linear *L[] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->cq, &ly->ck, &ly->cv, &ly->co, &ly->gate, &ly->up, &ly->down};
    for (size_t i = 0; i < sizeof L / sizeof *L; i++) lin(L[i], fn, ctx);
  }
  norm(&st->final_norm, D, fn, ctx);
}

void cp_cuda_for_each_weight(const cp_model *m, cp_cuda_weight_fn fn, void *ctx) {
  const size_t D = (size_t)m->d_model, V = (size_t)m->vocab;
  fn(ctx, m->embed, m->embed_dtype, V * D);
  if (m->pos_embed) fn(ctx, m->pos_embed, CP_F32, (size_t)m->train_len * D);
  norm(&m->embed_norm, D, fn, ctx);
  fn(ctx, m->lm_head, m->lm_head_dtype, V * D);
  const size_t dh = (size_t)m->d_head, qn = m->qk_norm_whole ? (size_t)m->n_heads * dh : dh,
               kn = m->qk_norm_whole ? (size_t)m->n_kv_heads * dh : dh;
  stack(&m->encoder, D, qn, kn, fn, ctx);
  stack(&m->decoder, D, qn, kn, fn, ctx);
}

cp_dtype cp_cuda_device_dtype(cp_dtype stored) {
  return stored == CP_F16 || stored == CP_BF16 || cp_dtype_is_block(stored) ? stored : CP_F32;
}

/* Kept as stored on the device and widened into the scratch for each GEMM. */
static bool widened(cp_dtype t) { return cp_cuda_device_dtype(t) != CP_F32; }

static uint64_t widen_stack(const cp_stack *st) {
  uint64_t most = 0;
  for (int l = 0; l < st->n_layers; l++) {
    const cp_layer *ly = &st->layers[l];
    const cp_linear *L[] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->cq, &ly->ck, &ly->cv, &ly->co, &ly->gate, &ly->up, &ly->down};
    for (size_t i = 0; i < sizeof L / sizeof *L; i++)
      if (L[i]->w && widened(L[i]->dtype) && (uint64_t)L[i]->n_out * (uint64_t)L[i]->n_in > most)
        most = (uint64_t)L[i]->n_out * (uint64_t)L[i]->n_in;
  }
  return most;
}

uint64_t cp_cuda_widen_floats(const cp_model *m) {
  uint64_t n = widen_stack(&m->encoder), dec = widen_stack(&m->decoder);
  if (dec > n) n = dec;
  if (m->lm_head && widened(m->lm_head_dtype)) { /* the head runs in blocks of rows that fit */
    const uint64_t D = (uint64_t)m->d_model, head = (uint64_t)m->vocab * D;
    if (n == 0) n = head < CP_CUDA_WIDEN_HEAD ? head : CP_CUDA_WIDEN_HEAD;
    if (D > n) n = D;
  }
  return n;
}

typedef struct {
  const void **seen;
  size_t n, cap;
  uint64_t bytes; /* F16/BF16 and blocks as stored, everything else as F32 */
  bool overflow, nomem;
} weight_sum;

static void add_weight(void *ctx, const void *w, cp_dtype dtype, size_t count) {
  weight_sum *s = ctx;
  uint64_t b;
  for (size_t i = 0; i < s->n; i++)
    if (s->seen[i] == w) return;
  if (CP_ARRAY_RESERVE(s->seen, s->cap, s->n + 1, "cuda: memory estimate") < 0) {
    s->nomem = true;
    return;
  }
  s->seen[s->n++] = w;
  const cp_dtype dev = cp_cuda_device_dtype(dtype);
  if (cp_dtype_is_block(dev)) b = cp_dtype_span(dev, (uint64_t)count); /* bounded by the tensor's size */
  else if (!cp_mul_u64(&b, (uint64_t)count, cp_dtype_size(dev))) s->overflow = true;
  if (s->overflow || !cp_add_u64(&s->bytes, s->bytes, b))
    s->overflow = true;
}

/* a * b * c + acc, false on overflow. */
static bool mac(uint64_t *acc, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x;
  return cp_mul_u64(&x, a, b) && cp_mul_u64(&x, x, c) && cp_add_u64(acc, *acc, x);
}

/* One pass of n rows: x, h, tmp [n, D]; q and att [n, H*dh] (RoPE: qraw, qfar, qtopk too); the
 * FFN chunk's up (and gate) [min(n, chunk), d_ff]; the ids [n]. */
static bool pass_bytes(uint64_t *acc, const cp_model *m, uint64_t n) {
  const uint64_t qd = (uint64_t)m->n_heads * (uint64_t)m->d_head;
  const uint64_t chunk = n < CP_CUDA_FFN_CHUNK ? n : CP_CUDA_FFN_CHUNK;
  const uint64_t nq = m->pos == CP_POS_ROPE ? 5 : 2;
  return mac(acc, 3 * n, (uint64_t)m->d_model, 4) && mac(acc, nq * n, qd, 4) &&
         mac(acc, chunk * (m->gated_ffn ? 2 : 1), (uint64_t)m->d_ff, 4) && mac(acc, n, 8, 1);
}

/* Caches of `layers` layers for cap positions: keys, values (RoPE: unrotated keys too). */
static bool kv_bytes(uint64_t *acc, const cp_model *m, uint64_t layers, uint64_t cap, bool rope) {
  const uint64_t kvd = (uint64_t)m->n_kv_heads * (uint64_t)m->d_head;
  return mac(acc, layers * (rope ? 3 : 2), cap, kvd * 4);
}

/* What one attention call of n_q rows over n_keys keys uploads and gets back
 * (engine/cuda_attention.c in resident mode): row and tile ranges, distances, per-row tables,
 * top-k tables, the positional term's tables, three statistics per head and row; each of at most
 * 28 slices rounded up to 256 bytes; twice all that, as the engine's buffer for them grows by
 * doubling (cp_cuda_attn_bufs). */
static bool call_bytes(uint64_t *acc, const cp_model *m, uint64_t n_q, uint64_t n_keys) {
  const uint64_t H = (uint64_t)m->n_heads;
  uint64_t fire = 0;
  for (int i = 0; i < m->n_fire; i++) {
    const uint64_t W = (uint64_t)m->fire[i].width;
    uint64_t w = W * (3 + H) + H + (m->fire[i].layers == 2 ? W * (W + 1) : 0); /* + the W x W middle layer */
    if (w > fire) fire = w;
  }
  uint64_t one = 0;
  return mac(&one, n_q, 96 + 16 * H, 1) && mac(&one, n_keys, 12, 1) &&
         mac(&one, (uint64_t)(m->t5_num_buckets > 0 ? m->t5_num_buckets : 0), H, 4) && mac(&one, H, 8, 1) &&
         mac(&one, fire, 4, 1) && mac(&one, 28, 256, 1) && mac(acc, one, 2, 1);
}

int cp_cuda_engine_bytes(uint64_t *weights, uint64_t *run, const cp_model *m, int64_t n_ids, int64_t n_dec,
                         int64_t n_new) {
  *weights = 0, *run = 0;
  if (n_ids < 0 || n_dec < 0 || n_new < 0)
    return cp_error_set(CP_EARG, "cuda: memory estimate: negative length");
  weight_sum s;
  memset(&s, 0, sizeof s);
  cp_cuda_for_each_weight(m, add_weight, &s);
  free(s.seen);
  if (s.nomem) return cp_nomem("cuda: memory estimate");
  /* the weights, the scratch a 16-bit or block matrix is widened into for its GEMM, the non-finite flag,
   * the RoPE tables (Gemma 3 has a second one for its sliding layers) */
  const uint64_t rope_pairs = m->pos == CP_POS_ROPE ? (uint64_t)(m->rope_dims / 2) * (m->rope_local.n > 0 ? 2 : 1) : 0;
  if (s.overflow || !mac(weights, cp_cuda_widen_floats(m), 4, 1) || !cp_add_u64(weights, *weights, s.bytes) ||
      !mac(weights, 1, 8, 1) || !mac(weights, rope_pairs, 8, 1))
    return cp_error_set(CP_EOVERFLOW, "cuda: memory estimate: the weights overflow 64 bits");
  const bool t5 = m->family == CP_FAMILY_T5, rope = m->pos == CP_POS_ROPE;
  const uint64_t ne = (uint64_t)n_ids, n = t5 ? (uint64_t)(n_dec > 0 ? n_dec : 1) : ne;
  const uint64_t cap = n + (uint64_t)n_new, L = (uint64_t)m->decoder.n_layers;
  uint64_t r = 0;
  bool ok = true;
  if (t5) /* encoder states, the encoder's own pass and cache, the cross-attention caches */
    ok = mac(&r, ne, (uint64_t)m->d_model, 4) && pass_bytes(&r, m, ne) && kv_bytes(&r, m, 1, ne, false) &&
         kv_bytes(&r, m, L, ne, false) && call_bytes(&r, m, ne, ne);
  /* the decoder's pass: one shared cache for a forward, one per layer for a generation; the
   * logits of every row (forward) or of the last (generation) */
  ok = ok && pass_bytes(&r, m, n) && kv_bytes(&r, m, n_new ? L : 1, cap, rope) &&
       mac(&r, n_new ? 1 : n, (uint64_t)m->vocab, 4) && call_bytes(&r, m, n, t5 && ne > cap ? ne : cap);
  if (!ok) return cp_error_set(CP_EOVERFLOW, "cuda: memory estimate: %lld tokens overflow 64 bits", (long long)n_ids);
  *run = r;
  return 0;
}
