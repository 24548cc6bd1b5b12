/* The CPU backend of the engine (engine/backend.h): host float32 buffers, the thread pool, and the
 * primitives the passes of engine_run.c call: the embedding, the layer stack of every family with
 * its attention modules and KV caches, the final norm and the output head. The attention itself is
 * in attention_cpu.c, the row arithmetic (matrix products, norms, FFN, RoPE) in layer_ops.c; every
 * rule decision comes from rule.h (cp_rule_plan and the cp_plan_* helpers). */
#include <assert.h>
#include <cblas.h> /* openblas_set_num_threads */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/arena.h"
#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/attention_cpu.h"
#include "engine/backend.h"
#include "engine/kern16.h"
#include "engine/layer_ops.h"
#include "engine/pool.h"

typedef struct {
  cp_engine *owner;
  const cp_model *m;
  const cp_rule *rule;     /* the owner's, live */
  const cp_rule_model *rm; /* the owner's */
  cp_pool *pool;
  cp_arena work; /* per-call attention tables and kernel scratch, reset per call: no allocation per
                    decode step once it has grown to the call size */
} cpu_backend;

/* ---------------------------------------------------------------- memory */

static void *cpu_alloc(void *be, int64_t a, int64_t b, size_t elem) {
  (void)be;
  assert(elem == sizeof(float)); /* the host backend holds floats only (cp_backend_ops.device) */
  uint64_t n;
  if (a < 0 || b < 0 || !cp_mul_u64(&n, (uint64_t)a, (uint64_t)b) || !cp_mul_u64(&n, n, elem) || n > SIZE_MAX) {
    cp_error_set(CP_EOVERFLOW, "engine: buffer of %lld x %lld floats is too large", (long long)a, (long long)b);
    return NULL;
  }
  float *p = malloc(n ? (size_t)n : 1);
  if (!p) cp_nomem("engine: %lld x %lld floats", (long long)a, (long long)b);
  return p;
}

static void cpu_free(void *be, void *p) {
  (void)be;
  free(p);
}

/* ---------------------------------------------------------------- attention modules */

/* Non-finite weights must fail the run: the attention kernel turns a NaN score row into zeros,
 * so NaN q or k weights would otherwise give finite, plausible logits. One sum per row and head
 * (a NaN or Inf element makes it non-finite) keeps the check off the per-element hot loop. */
static int check_finite(const float *x /* [rows, ld] */, int64_t rows, int heads, int dh, int ld, int layer,
                        const char *what, int64_t row0) {
  for (int64_t r = 0; r < rows; r++)
    for (int h = 0; h < heads; h++) {
      const float *p = x + (size_t)r * (size_t)ld + (size_t)h * (size_t)dh;
      float s = 0;
      for (int i = 0; i < dh; i++) s += p[i] * 0.0f; /* 0 for finite, NaN for NaN or Inf */
      if (s != 0) return cp_engine_nonfinite_error(layer, h, row0 + r, what);
    }
  return 0;
}

int cp_engine_nonfinite_error(int layer, int head, int64_t row, const char *what) {
  return cp_error_set(
      CP_EMODEL_NONFINITE,
      "engine: layer %d head %d row %lld: non-finite %s (NaN or Inf weights? see inspect --check-values)", layer, head,
      (long long)row, what);
}

/* Projects hin [n, D] into p->q and finds the keys and values the module attends to:
 * self-attention appends the rows' to mc->kv at q_off (Qwen3 normalises q and k per head, MPT
 * clamps q, k and v), cross-attention reads cross->kv[layer], projecting the encoder states on
 * first use. */
static int project_qkv(cpu_backend *c, const cp_module_call *mc, const float *hin, const float **K, const float **V,
                       int64_t *n_keys) {
  const cp_model *m = c->m;
  const int H = m->n_heads, Hkv = m->n_kv_heads, dh = m->d_head, D = m->d_model, qd = H * dh, kvd = Hkv * dh;
  const cp_layer *ly = &mc->st->layers[mc->layer];
  const cp_cross *cross = mc->cross;
  const int64_t n = mc->n, q_off = mc->q_off;
  const int layer = mc->layer;
  cp_kv *kv = mc->kv;
  cp_pass *p = mc->p;
  int rc;
  if (mc->kind == CP_ATTN_CROSS) {
    cp_ops_linear(c->pool, p->q, qd, hin, D, n, &ly->cq, false);
    cp_kv *ckv = &cross->kv[layer];
    if (!ckv->ready) {
      cp_ops_linear(c->pool, ckv->k, kvd, cross->enc, D, cross->n_enc, &ly->ck, false);
      cp_ops_linear(c->pool, ckv->v, kvd, cross->enc, D, cross->n_enc, &ly->cv, false);
      if ((rc = check_finite(ckv->k, cross->n_enc, Hkv, dh, kvd, layer, "cross-attention key", 0)) ||
          (rc = check_finite(ckv->v, cross->n_enc, Hkv, dh, kvd, layer, "cross-attention value", 0)))
        return rc;
      ckv->ready = true;
    }
    *n_keys = cross->n_enc;
    *K = ckv->k, *V = ckv->v;
    return check_finite(p->q, n, H, dh, qd, layer, "cross-attention query", q_off);
  }
  cp_ops_linear(c->pool, p->q, qd, hin, D, n, &ly->q, false);
  assert(q_off + n <= kv->cap);
  float *kc = kv->k + (size_t)q_off * kvd, *vc = kv->v + (size_t)q_off * kvd;
  cp_ops_linear(c->pool, kc, kvd, hin, D, n, &ly->k, false);
  cp_ops_linear(c->pool, vc, kvd, hin, D, n, &ly->v, false);
  /* Before MPT's clamp, which maps NaN to a bound. */
  if ((rc = check_finite(p->q, n, H, dh, qd, layer, "attention query", q_off)) ||
      (rc = check_finite(kc, n, Hkv, dh, kvd, layer, "attention key", q_off)) ||
      (rc = check_finite(vc, n, Hkv, dh, kvd, layer, "attention value", q_off)))
    return rc;
  if (ly->q_norm.w) { /* Qwen3: each head of q and k normalised before RoPE (rope_call) */
    cp_ops_head_norm_rows(c->pool, m, &ly->q_norm, p->q, H, n);
    cp_ops_head_norm_rows(c->pool, m, &ly->k_norm, kc, Hkv, n);
  }
  if (m->clip_qkv > 0) { /* MPT clamps the fused qkv output */
    float cl = m->clip_qkv;
    for (size_t i = 0; i < (size_t)n * qd; i++) p->q[i] = fminf(fmaxf(p->q[i], -cl), cl);
    for (size_t i = 0; i < (size_t)n * kvd; i++)
      kc[i] = fminf(fmaxf(kc[i], -cl), cl), vc[i] = fminf(fmaxf(vc[i], -cl), cl);
  }
  *n_keys = q_off + n;
  *K = kv->k, *V = kv->v;
  return 0;
}

/* RoPE: rotates the call's n new rows of q and k (at q_off) to their positions, keeping the
 * unrotated copies the rule needs, and sets the far query (pairs whose distance the ceiling
 * changes score R(tab.rope_far) q against the unrotated key, decision 6) and the top-k query. */
static void rope_call(cpu_backend *c, cp_attn_call *a, cp_kv *kv, cp_pass *p) {
  const cp_model *m = c->m;
  const int H = m->n_heads, qd = H * m->d_head, kvd = m->n_kv_heads * m->d_head;
  const int64_t n = a->n_q, q_off = a->q_off;
  const bool raw = cp_engine_rope_needs_raw(m, c->rule, c->rm, a->plan->kind, a->plan->layer);
  float *kc = kv->k + (size_t)q_off * kvd;
  cp_rope_table scratch;
  double div;
  /* the layer's table (Gemma 3's sliding layers have their own), by the call's length (dynamic / longrope) */
  const cp_rope_table *tab = cp_model_rope_at(m, a->plan->layer, q_off + n, &scratch, &div);
  if (raw) {
    assert(kv->k_raw);
    memcpy(kv->k_raw + (size_t)q_off * kvd, kc, (size_t)n * kvd * sizeof *kc);
    memcpy(p->qraw, p->q, (size_t)n * qd * sizeof *p->q);
    a->k_raw = kv->k_raw;
  }
  cp_ops_rope_rows(c->pool, m, tab, div, p->q, qd, H, n, q_off, false);
  cp_ops_rope_rows(c->pool, m, tab, div, kc, kvd, m->n_kv_heads, n, q_off, false);
  if (a->tab.rope_far >= 0) {
    assert(raw);
    memcpy(p->qfar, p->qraw, (size_t)n * qd * sizeof *p->q);
    cp_ops_rope_rows(c->pool, m, tab, div, p->qfar, qd, H, n, a->tab.rope_far, true);
    a->q_far = p->qfar;
  }
  if (a->plan->top_k) {
    assert(raw);
    memcpy(p->qtopk, p->qraw, (size_t)n * qd * sizeof *p->q);
    cp_ops_rope_rows(c->pool, m, tab, div, p->qtopk, qd, H, n, a->plan->top_k_distance, true);
    a->q_topk = p->qtopk;
  }
}

/* One attention module: projections from hin [n, D], positional terms, streaming attention,
 * output projection into out [n, D]. Self-attention appends the rows' keys/values to `kv` at
 * q_off; cross-attention reads (and on first use fills) cross->kv[layer]. */
static int cpu_attention(void *be, const cp_module_call *mc, const float *hin, float *out) {
  cpu_backend *c = be;
  const cp_model *m = c->m;
  const cp_stack *st = mc->st;
  const int layer = mc->layer;
  const cp_attn_kind kind = mc->kind;
  const int64_t n = mc->n, q_off = mc->q_off;
  cp_kv *kv = mc->kv;
  cp_pass *p = mc->p;
  const cp_layer *ly = &st->layers[layer];
  const float *K, *V;
  int64_t n_keys;
  cp_attn_plan plan;
  cp_attn_call a;
  cp_rule_plan(&plan, c->rule, c->rm, kind, layer);
  int rc = project_qkv(c, mc, hin, &K, &V, &n_keys);
  if (rc) return rc;
  cp_arena_reset(&c->work); /* the last call's tables and scratch are done with */
  rc = cp_attn_call_for_model(&a, m, st, &plan, q_off, n, n_keys, mc->last_prompt_row, &c->work);
  if (rc) return rc;
  a.q = p->q, a.k = K, a.v = V, a.out = p->att;
  if (a.pos == CP_ATTN_POS_ROPE) rope_call(c, &a, kv, p);
  if ((mc->collect && (rc = cp_engine_stats_rows(c->owner, &a))) || (rc = cp_cpu_attention(c->pool, &a))) goto done;
  if (mc->collect) cp_engine_record_stats(c->owner, &a);
  cp_ops_linear(c->pool, out, m->d_model, p->att, m->n_heads * m->d_head, n, kind == CP_ATTN_CROSS ? &ly->co : &ly->o,
                false);
done:
  cp_attn_tables_free(&a.tab); /* in c->work: kept for the next call */
  return rc;
}

/* ---------------------------------------------------------------- layers */

static const cp_norm_weights *layer_norm(const cp_layer *ly, cp_layer_norm which) {
  switch (which) {
    case CP_LAYER_NORM_ATTN: return &ly->attn_norm;
    case CP_LAYER_NORM_CROSS: return &ly->cross_norm;
    case CP_LAYER_NORM_FFN: return &ly->ffn_norm;
    case CP_LAYER_NORM_POST_ATTN: return &ly->post_attn_norm;
    case CP_LAYER_NORM_POST_FFN: return &ly->post_ffn_norm;
  }
  return &ly->ffn_norm;
}

static int cpu_norm(void *be, const cp_stack *st, int layer, cp_layer_norm which, const float *x, float *y, int64_t n) {
  const cpu_backend *c = be;
  cp_ops_norm_rows(c->pool, c->m, layer_norm(&st->layers[layer], which), x, y, n);
  return 0;
}

static int cpu_add(void *be, float *y, const float *a, const float *b, int64_t count) {
  (void)be;
  for (size_t i = 0; i < (size_t)count; i++) y[i] = a[i] + b[i];
  return 0;
}

static int cpu_scale(void *be, float *x, int64_t count, float f) {
  (void)be;
  for (size_t i = 0; i < (size_t)count; i++) x[i] *= f;
  return 0;
}

static int cpu_copy(void *be, float *dst, const float *src, int64_t count) {
  (void)be;
  memcpy(dst, src, (size_t)count * sizeof *dst);
  return 0;
}

static int cpu_ffn_add(void *be, cp_pass *p, const cp_stack *st, int layer, const float *h, float *dst, int64_t n,
                       bool accumulate) {
  const cpu_backend *c = be;
  cp_ops_ffn(c->pool, c->m, &st->layers[layer], h, dst, n, p->up, p->gate, accumulate);
  return 0;
}

/* p->x [n, D] = the embeddings of ids [n] (times Gemma's embed_scale), plus the learned position
 * rows q_off .. q_off+n-1 when the model has a position table (GPT-2 wpe; the input checks keep
 * them inside it), then BLOOM's embedding norm. */
static int cpu_embed(void *be, cp_pass *p, const int64_t *ids, int64_t n, int64_t q_off) {
  const cpu_backend *c = be;
  const cp_model *m = c->m;
  const size_t D = (size_t)m->d_model;
  const float *wpe = m->pos_embed;
  assert(!wpe || q_off + n <= m->train_len);
  for (int64_t r = 0; r < n; r++) {
    float *row = p->x + (size_t)r * D;
    /* F32, or F16/BF16 / GGUF quant blocks as stored (a row is whole blocks): widens */
    const size_t row_bytes = (size_t)cp_dtype_span(m->embed_dtype, (uint64_t)D);
    (void)cp_convert_to_f32(row, (const unsigned char *)m->embed + (size_t)ids[r] * row_bytes, m->embed_dtype, D);
    if (m->embed_scale != 1.0f)
      for (size_t i = 0; i < D; i++) row[i] *= m->embed_scale;
    if (wpe)
      for (size_t i = 0; i < D; i++) row[i] += wpe[(size_t)(q_off + r) * D + i];
  }
  if (m->embed_norm.w) cp_ops_norm_rows(c->pool, m, &m->embed_norm, p->x, p->x, n);
  return 0;
}

static int cpu_final_norm(void *be, cp_pass *p, const cp_stack *st, float *dst, int64_t n) {
  const cpu_backend *c = be;
  cp_ops_norm_rows(c->pool, c->m, &st->final_norm, p->x, dst, n);
  return 0;
}

/* Final norm and output head for rows [r0, n) of p->x into logits [n - r0, V]. */
static int cpu_head(void *be, cp_pass *p, const cp_stack *st, int64_t n, int64_t r0, float *logits) {
  const cpu_backend *c = be;
  const cp_model *m = c->m;
  const size_t D = (size_t)m->d_model;
  assert(n - r0 <= p->n);
  cp_ops_norm_rows(c->pool, m, &st->final_norm, p->x + r0 * D, p->h, n - r0);
  if (m->lm_head_scale != 1.0f)
    for (size_t i = 0; i < (size_t)(n - r0) * D; i++) p->h[i] *= m->lm_head_scale;
  cp_linear L = {m->lm_head, NULL, m->vocab, m->d_model, m->lm_head_dtype};
  cp_ops_linear(c->pool, logits, m->vocab, p->h, m->d_model, n - r0, &L, false);
  return 0;
}

/* ---------------------------------------------------------------- backend */

static void cpu_destroy(void *be) {
  cpu_backend *c = be;
  if (!c) return;
  cp_pool_free(c->pool);
  cp_arena_free(&c->work);
  free(c);
}

static int cpu_create(void **out, cp_engine *owner, const cp_model *m, const cp_rule *rule, const cp_rule_model *rm,
                      int threads) {
  *out = NULL;
  int rc = cp_k16_read_env(); /* CTXPATCH_WEIGHTS: 16-bit kernels or widened tiles */
  if (rc) return rc;
  cpu_backend *c = calloc(1, sizeof *c);
  CP_CHECK_ALLOC(c, "engine");
  c->owner = owner, c->m = m, c->rule = rule, c->rm = rm;
  if (threads <= 0) {
    int n = cp_cpu_count(); /* the affinity mask and SLURM_CPUS_PER_TASK, not the machine's cores */
    threads = n < 256 ? n : 256;
  }
  /* Our pool splits every product; OpenBLAS's own threads would compete with it. */
  openblas_set_num_threads(1);
  rc = cp_pool_create(&c->pool, threads);
  if (rc) {
    cpu_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

static const char *cpu_describe(const void *be) {
  (void)be;
  return "cpu";
}

/* No reserve (host memory) and no sync (nothing is queued). */
/* llama.cpp's K-shift (llama_memory_seq_add -> the cache's shift graph): the kept keys are
 * rotated once more by the position delta, not recomputed from unrotated keys. */
static int cpu_kv_shift(void *be, cp_kv *kv, int64_t keep, int64_t discard, int64_t n_past) {
  cpu_backend *c = be;
  const cp_model *m = c->m;
  const size_t w = (size_t)m->n_kv_heads * m->d_head;
  const int64_t n = n_past - keep - discard;
  assert(keep >= 0 && discard >= 0 && n >= 0 && n_past <= kv->cap && !kv->k_raw && !m->rope_by_length);
  memmove(kv->k + (size_t)keep * w, kv->k + (size_t)(keep + discard) * w, (size_t)n * w * sizeof *kv->k);
  memmove(kv->v + (size_t)keep * w, kv->v + (size_t)(keep + discard) * w, (size_t)n * w * sizeof *kv->v);
  /* one table for every layer and call: check_shift refuses Gemma 3's two and the by-length ones */
  cp_ops_rope_rows(c->pool, m, &m->rope, m->rope_scale, kv->k + (size_t)keep * w, (int)w, m->n_kv_heads, n, -discard,
                   true);
  return 0;
}

const cp_backend_ops cp_cpu_engine_ops = {
    .create = cpu_create,
    .destroy = cpu_destroy,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .device = false,
    .ffn_chunk = CP_OPS_FFN_CHUNK,
    .row_align = CP_OPS_ROW_ALIGN,
    .embed = cpu_embed,
    .norm = cpu_norm,
    .attention = cpu_attention,
    .kv_shift = cpu_kv_shift,
    .add = cpu_add,
    .copy = cpu_copy,
    .ffn_add = cpu_ffn_add,
    .scale = cpu_scale,
    .final_norm = cpu_final_norm,
    .head = cpu_head,
};
