/* CPU float32 reference engine (include/ctxpatch/engine/engine.h): embedding, the layer stacks of every
 * family, KV cache, greedy decoding and statistics. The attention itself is in attention_cpu.c,
 * the row arithmetic (matrix products, norms, FFN, RoPE) in layer_ops.c;
 * every rule decision comes from rule.h (cp_rule_plan and the cp_plan_* helpers). */
#include "ctxpatch/engine/engine.h"

#include <assert.h>
#include <cblas.h> /* openblas_set_num_threads */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/attention_cpu.h"
#include "engine/device_engine.h"
#include "engine/layer_ops.h"
#include "engine/pool.h"


#define MAX_TOKENS ((int64_t)1 << 28)

struct cp_engine {
  const cp_model *m;
  cp_rule rule;
  cp_rule_model rm;
  cp_engine_params p;
  cp_pool *pool;
  /* Statistics of the last forward with params.stats. */
  int n_modules;
  cp_attn_kind *st_kind;
  int *st_layer;
  float *st_pmax, *st_ent;
  float *st_lstd; /* NULL unless params.logit_stats */
  bool collect; /* inside a forward that collects */
  cp_arena work; /* per-call attention tables and kernel scratch, reset per call: no allocation per
                    decode step once it has grown to the call size */
  const cp_device_ops *dev_ops; /* params.device CUDA: the device engine runs every pass ... */
  cp_device_engine *dev;        /* ... (engine/device_engine.h); NULL on the CPU */
};

/* One layer's cache: keys (rotated for RoPE), values, and unrotated keys where the rule needs
 * them (RoPE with a ceiling or top-k). */
typedef struct {
  float *k, *v, *k_raw; /* [cap, Hkv*dh] */
  int64_t cap;
  bool ready;           /* cross-attention caches: filled once per encoder output */
} kv_t;

/* Per-pass activations for n rows. */
typedef struct {
  int64_t n;
  float *x, *h, *tmp;           /* [n, D] */
  float *q, *qraw, *qfar, *qtopk, *att; /* [n, H*dh] */
  float *up, *gate;             /* [CP_OPS_FFN_CHUNK, d_ff] */
} bufs_t;

/* ---------------------------------------------------------------- small helpers */

static float *alloc_f(int64_t a, int64_t b) {
  uint64_t n;
  if (a < 0 || b < 0 || !cp_mul_u64(&n, (uint64_t)a, (uint64_t)b) || !cp_mul_u64(&n, n, sizeof(float)) ||
      n > SIZE_MAX) {
    cp_error_set(CP_EOVERFLOW, "engine: buffer of %lld x %lld floats is too large", (long long)a, (long long)b);
    return NULL;
  }
  float *p = malloc(n ? (size_t)n : 1);
  if (!p) cp_nomem("engine: %lld x %lld floats", (long long)a, (long long)b);
  return p;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

void cp_engine_params_init(cp_engine_params *p) {
  memset(p, 0, sizeof *p);
  p->threads = 0;
  p->stats = false;
}

const char *cp_attn_kind_name(cp_attn_kind kind) {
  switch (kind) {
    case CP_ATTN_ENCODER_SELF: return "encoder_self";
    case CP_ATTN_DECODER_SELF: return "decoder_self";
    case CP_ATTN_CROSS: return "cross";
  }
  return "?";
}

/* Whether this layer's RoPE keys must also be kept unrotated. */
static bool rope_needs_raw(const cp_engine *e, cp_attn_kind kind, int layer) {
  if (e->m->pos != CP_POS_ROPE || kind == CP_ATTN_CROSS) return false;
  cp_attn_plan plan;
  cp_rule_plan(&plan, &e->rule, &e->rm, kind, layer);
  return plan.ceiling != INT64_MAX || plan.top_k;
}

/* ---------------------------------------------------------------- caches and buffers */

static void kv_free(kv_t *kv) {
  free(kv->k);
  free(kv->v);
  free(kv->k_raw);
  memset(kv, 0, sizeof *kv);
}

static int kv_alloc(kv_t *kv, int64_t cap, int width, bool raw) {
  memset(kv, 0, sizeof *kv);
  kv->cap = cap;
  kv->k = alloc_f(cap, width);
  kv->v = alloc_f(cap, width);
  kv->k_raw = raw ? alloc_f(cap, width) : NULL;
  if (!kv->k || !kv->v || (raw && !kv->k_raw)) {
    kv_free(kv);
    return cp_error_code() ? cp_error_code() : CP_ENOMEM;
  }
  return 0;
}

static void bufs_free(bufs_t *b) {
  free(b->x), free(b->h), free(b->tmp), free(b->q), free(b->qraw), free(b->qfar), free(b->qtopk);
  free(b->att), free(b->up), free(b->gate);
  memset(b, 0, sizeof *b);
}

/* raw: some layer keeps unrotated RoPE queries (rope_needs_raw), the only user of qraw, qfar and
 * qtopk; three [n, H*dh] arrays that an identity or temperature rule does not pay for. */
static int bufs_alloc(bufs_t *b, const cp_model *m, int64_t n, bool raw) {
  memset(b, 0, sizeof *b);
  int64_t qd = (int64_t)m->n_heads * m->d_head;
  b->n = n;
  b->x = alloc_f(n, m->d_model);
  b->h = alloc_f(n, m->d_model);
  b->tmp = alloc_f(n, m->d_model);
  b->q = alloc_f(n, qd);
  bool rope = m->pos == CP_POS_ROPE && raw; /* unrotated, far and top-k queries are RoPE-only */
  b->qraw = rope ? alloc_f(n, qd) : NULL;
  b->qfar = rope ? alloc_f(n, qd) : NULL;
  b->qtopk = rope ? alloc_f(n, qd) : NULL;
  b->att = alloc_f(n, qd);
  b->up = alloc_f(min64(n, CP_OPS_FFN_CHUNK), m->d_ff);
  b->gate = m->gated_ffn ? alloc_f(min64(n, CP_OPS_FFN_CHUNK), m->d_ff) : NULL;
  if (!b->x || !b->h || !b->tmp || !b->q || (rope && (!b->qraw || !b->qfar || !b->qtopk)) || !b->att || !b->up ||
      (m->gated_ffn && !b->gate)) {
    bufs_free(b);
    return CP_ENOMEM;
  }
  return 0;
}

/* ---------------------------------------------------------------- attention modules */

/* Adds this call's per-row statistics to module `module`. */
static void record_stats(cp_engine *e, int module, const float *rp, const float *re, const float *rs,
                         int64_t n_q) {
  const int H = e->m->n_heads;
  for (int h = 0; h < H; h++) {
    double sp = 0, se = 0, ss = 0;
    for (int64_t r = 0; r < n_q; r++) sp += rp[(size_t)h * n_q + r], se += re[(size_t)h * n_q + r];
    e->st_pmax[(size_t)module * H + h] = (float)(sp / (double)n_q);
    e->st_ent[(size_t)module * H + h] = (float)(se / (double)n_q);
    if (rs) {
      for (int64_t r = 0; r < n_q; r++) ss += rs[(size_t)h * n_q + r];
      e->st_lstd[(size_t)module * H + h] = (float)(ss / (double)n_q);
    }
  }
}

static int stats_module(const cp_engine *e, cp_attn_kind kind, int layer) {
  int nE = e->m->encoder.n_layers, nD = e->m->decoder.n_layers;
  switch (kind) {
    case CP_ATTN_ENCODER_SELF: return layer;
    case CP_ATTN_DECODER_SELF: return nE + layer;
    case CP_ATTN_CROSS: return nE + nD + layer;
  }
  return 0;
}

typedef struct {
  const float *enc; /* [n_enc, D] final encoder states */
  int64_t n_enc;
  kv_t *kv;         /* [decoder layers] */
} cross_t;

/* Non-finite weights must fail the run: the attention kernel turns a NaN score row into zeros,
 * so NaN q or k weights would otherwise give finite, plausible logits. One sum per row and head
 * (a NaN or Inf element makes it non-finite) keeps the check off the per-element hot loop. */
static int check_finite(const float *x /* [rows, ld] */, int64_t rows, int heads, int dh, int ld,
                        int layer, const char *what, int64_t row0) {
  for (int64_t r = 0; r < rows; r++)
    for (int h = 0; h < heads; h++) {
      const float *p = x + (size_t)r * (size_t)ld + (size_t)h * (size_t)dh;
      float s = 0;
      for (int i = 0; i < dh; i++) s += p[i] * 0.0f; /* 0 for finite, NaN for NaN or Inf */
      if (s != 0)
        return layer < 0
                   ? cp_error_set(CP_EMODEL_NONFINITE, "engine: row %lld: non-finite %s",
                                  (long long)(row0 + r), what)
                   : cp_error_set(CP_EMODEL_NONFINITE,
                                  "engine: layer %d head %d row %lld: non-finite %s (NaN or Inf "
                                  "weights? see inspect --check-values)",
                                  layer, h, (long long)(row0 + r), what);
    }
  return 0;
}

/* Projects hin [n, D] into b->q and finds the keys and values the module attends to:
 * self-attention appends the rows' to `kv` at q_off (MPT clamps q, k and v), cross-attention
 * reads cross->kv[layer], projecting the encoder states on first use. */
static int project_qkv(const float **K, const float **V, int64_t *n_keys, cp_engine *e, const cp_layer *ly,
                        int layer, cp_attn_kind kind, const float *hin, int64_t n, int64_t q_off, kv_t *kv,
                        const cross_t *cross, bufs_t *b) {
  const cp_model *m = e->m;
  const int D = m->d_model, qd = m->n_heads * m->d_head, kvd = m->n_kv_heads * m->d_head;
  const int H = m->n_heads, Hkv = m->n_kv_heads, dh = m->d_head;
  int rc;
  if (kind == CP_ATTN_CROSS) {
    cp_ops_linear(e->pool, b->q, qd, hin, D, n, &ly->cq, false);
    kv_t *ckv = &cross->kv[layer];
    if (!ckv->ready) {
      cp_ops_linear(e->pool, ckv->k, kvd, cross->enc, D, cross->n_enc, &ly->ck, false);
      cp_ops_linear(e->pool, ckv->v, kvd, cross->enc, D, cross->n_enc, &ly->cv, false);
      if ((rc = check_finite(ckv->k, cross->n_enc, Hkv, dh, kvd, layer, "cross-attention key", 0)) ||
          (rc = check_finite(ckv->v, cross->n_enc, Hkv, dh, kvd, layer, "cross-attention value", 0)))
        return rc;
      ckv->ready = true;
    }
    *n_keys = cross->n_enc;
    *K = ckv->k, *V = ckv->v;
    return check_finite(b->q, n, H, dh, qd, layer, "cross-attention query", q_off);
  }
  cp_ops_linear(e->pool, b->q, qd, hin, D, n, &ly->q, false);
  assert(q_off + n <= kv->cap);
  float *kc = kv->k + (size_t)q_off * kvd, *vc = kv->v + (size_t)q_off * kvd;
  cp_ops_linear(e->pool, kc, kvd, hin, D, n, &ly->k, false);
  cp_ops_linear(e->pool, vc, kvd, hin, D, n, &ly->v, false);
  /* Before MPT's clamp, which maps NaN to a bound. */
  if ((rc = check_finite(b->q, n, H, dh, qd, layer, "attention query", q_off)) ||
      (rc = check_finite(kc, n, Hkv, dh, kvd, layer, "attention key", q_off)) ||
      (rc = check_finite(vc, n, Hkv, dh, kvd, layer, "attention value", q_off)))
    return rc;
  if (m->clip_qkv > 0) { /* MPT clamps the fused qkv output */
    float cl = m->clip_qkv;
    for (size_t i = 0; i < (size_t)n * qd; i++) b->q[i] = fminf(fmaxf(b->q[i], -cl), cl);
    for (size_t i = 0; i < (size_t)n * kvd; i++) kc[i] = fminf(fmaxf(kc[i], -cl), cl), vc[i] = fminf(fmaxf(vc[i], -cl), cl);
  }
  *n_keys = q_off + n;
  *K = kv->k, *V = kv->v;
  return 0;
}

/* RoPE: rotates the call's n new rows of q and k (at q_off) to their positions, keeping the
 * unrotated copies the rule needs, and sets the far query (pairs whose distance the ceiling
 * changes score R(tab.rope_far) q against the unrotated key, decision 6) and the top-k query. */
static void rope_call(cp_engine *e, cp_attn_call *c, kv_t *kv, bufs_t *b) {
  const cp_model *m = e->m;
  const int H = m->n_heads, qd = H * m->d_head, kvd = m->n_kv_heads * m->d_head;
  const int64_t n = c->n_q, q_off = c->q_off;
  const bool raw = rope_needs_raw(e, c->plan->kind, c->plan->layer);
  float *kc = kv->k + (size_t)q_off * kvd;
  if (raw) {
    assert(kv->k_raw);
    memcpy(kv->k_raw + (size_t)q_off * kvd, kc, (size_t)n * kvd * sizeof *kc);
    memcpy(b->qraw, b->q, (size_t)n * qd * sizeof *b->q);
    c->k_raw = kv->k_raw;
  }
  cp_ops_rope_rows(e->pool, e->m, b->q, qd, H, n, q_off, false);
  cp_ops_rope_rows(e->pool, e->m, kc, kvd, m->n_kv_heads, n, q_off, false);
  if (c->tab.rope_far >= 0) {
    assert(raw);
    memcpy(b->qfar, b->qraw, (size_t)n * qd * sizeof *b->q);
    cp_ops_rope_rows(e->pool, e->m, b->qfar, qd, H, n, c->tab.rope_far, true);
    c->q_far = b->qfar;
  }
  if (c->plan->top_k) {
    assert(raw);
    memcpy(b->qtopk, b->qraw, (size_t)n * qd * sizeof *b->q);
    cp_ops_rope_rows(e->pool, e->m, b->qtopk, qd, H, n, c->plan->top_k_distance, true);
    c->q_topk = b->qtopk;
  }
}

/* One attention module: projections from hin [n, D], positional terms, streaming attention,
 * output projection into out [n, D]. Self-attention appends the rows' keys/values to `kv` at
 * q_off; cross-attention reads (and on first use fills) cross->kv[layer]. */
static int attention_module(cp_engine *e, const cp_stack *st, int layer, cp_attn_kind kind, const float *hin,
                            int64_t n, int64_t q_off, kv_t *kv, const cross_t *cross, int64_t last_prompt_row,
                            bufs_t *b, float *out) {
  const cp_model *m = e->m;
  const cp_layer *ly = &st->layers[layer];
  const size_t Hn = (size_t)m->n_heads * (size_t)n;
  const float *K, *V;
  int64_t n_keys;
  float *stats = NULL; /* [2 or 3, H, n]: pmax, entropy, logit std */
  cp_attn_plan plan;
  cp_attn_call c;
  cp_rule_plan(&plan, &e->rule, &e->rm, kind, layer);
  int rc = project_qkv(&K, &V, &n_keys, e, ly, layer, kind, hin, n, q_off, kv, cross, b);
  if (rc) return rc;
  cp_arena_reset(&e->work); /* the last call's tables and scratch are done with */
  rc = cp_attn_call_for_model(&c, m, st, &plan, q_off, n, n_keys, last_prompt_row, &e->work);
  if (rc) return rc;
  c.q = b->q, c.k = K, c.v = V, c.out = b->att;
  if (c.pos == CP_ATTN_POS_ROPE) rope_call(e, &c, kv, b);
  if (e->collect) {
    stats = cp_attn_scratch(&c, (e->st_lstd ? 3 : 2) * (Hn ? Hn : 1), sizeof *stats);
    CP_CHECK_ALLOC_GOTO(stats, "engine: attention statistics");
    c.row_pmax = stats, c.row_ent = stats + Hn, c.row_lstd = e->st_lstd ? stats + 2 * Hn : NULL;
  }
  if ((rc = cp_cpu_attention(e->pool, &c))) goto done;
  if (e->collect) record_stats(e, stats_module(e, kind, layer), c.row_pmax, c.row_ent, c.row_lstd, n);
  cp_ops_linear(e->pool, out, m->d_model, b->att, m->n_heads * m->d_head, n, kind == CP_ATTN_CROSS ? &ly->co : &ly->o, false);
done:
  cp_attn_tables_free(&c.tab); /* in e->work: kept for the next call */
  return rc;
}

/* ---------------------------------------------------------------- stacks */

/* One layer's state for the residual layout's ops (ctxpatch/model/layer_layout.h): the slots are
 * b->x, b->h and b->tmp. */
typedef struct {
  cp_engine *e;
  const cp_stack *st;
  int l;
  cp_attn_kind kind;
  int64_t n, q_off, last_prompt_row;
  kv_t *kv;
  const cross_t *cross;
  bufs_t *b;
} layer_ctx;

static float *slot(const layer_ctx *c, cp_slot s) { return s == CP_SLOT_X ? c->b->x : s == CP_SLOT_H ? c->b->h : c->b->tmp; }

static int op_norm(void *ctx, cp_layer_norm which, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  const cp_layer *ly = &c->st->layers[c->l];
  const cp_norm_weights *w = which == CP_LAYER_NORM_ATTN ? &ly->attn_norm : which == CP_LAYER_NORM_CROSS ? &ly->cross_norm : &ly->ffn_norm;
  cp_ops_norm_rows(c->e->pool, c->e->m, w, slot(c, src), slot(c, dst), c->n);
  return 0;
}
static int op_attn(void *ctx, bool cross, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  return attention_module(c->e, c->st, c->l, cross ? CP_ATTN_CROSS : c->kind, slot(c, src), c->n, c->q_off,
                          cross ? NULL : c->kv, cross ? c->cross : NULL, c->last_prompt_row, c->b, slot(c, dst));
}
static int op_add(void *ctx, cp_slot dst, cp_slot a, cp_slot b) {
  layer_ctx *c = ctx;
  float *y = slot(c, dst);
  const float *u = slot(c, a), *v = slot(c, b);
  for (size_t i = 0; i < (size_t)c->n * (size_t)c->e->m->d_model; i++) y[i] = u[i] + v[i];
  return 0;
}
static int op_copy(void *ctx, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  memcpy(slot(c, dst), slot(c, src), (size_t)c->n * (size_t)c->e->m->d_model * sizeof(float));
  return 0;
}
static int op_ffn_add(void *ctx, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  cp_ops_ffn(c->e->pool, c->e->m, &c->st->layers[c->l], slot(c, src), slot(c, dst), c->n, c->b->up, c->b->gate);
  return 0;
}
static const cp_layer_ops k_layer_ops = {op_norm, op_attn, op_add, op_copy, op_ffn_add};

/* Runs the layers of `st` over x [n, D] in place. kvs: one cache per layer, or (shared) one
 * scratch cache reused by every layer when `shared_kv`. */
static int run_stack(cp_engine *e, const cp_stack *st, cp_attn_kind kind, int64_t n, int64_t q_off, kv_t *kvs,
                     bool shared_kv, const cross_t *cross, int64_t last_prompt_row, bufs_t *b) {
  int rc = 0;
  for (int l = 0; l < st->n_layers && rc == 0; l++) {
    layer_ctx c = {e, st, l, kind, n, q_off, last_prompt_row, shared_kv ? kvs : &kvs[l], cross, b};
    rc = cp_layer_run(&k_layer_ops, &c, cp_model_residual(e->m), cross != NULL);
  }
  return rc;
}

/* x [n, D] = the embeddings of ids [n], plus the learned position rows q_off .. q_off+n-1 when
 * the model has a position table (GPT-2 wpe; check_inputs keeps them inside it). */
static void embed(const cp_engine *e, float *x, const int64_t *ids, int64_t n, int64_t q_off) {
  const size_t D = (size_t)e->m->d_model;
  const float *wpe = e->m->pos_embed;
  assert(!wpe || q_off + n <= e->m->train_len);
  for (int64_t r = 0; r < n; r++) {
    float *row = x + (size_t)r * D;
    /* F32, or F16/BF16 / GGUF quant blocks as stored (a row is whole blocks): widens */
    const size_t row_bytes = (size_t)cp_dtype_span(e->m->embed_dtype, (uint64_t)D);
    (void)cp_convert_to_f32(row, (const unsigned char *)e->m->embed + (size_t)ids[r] * row_bytes, e->m->embed_dtype, D);
    if (wpe)
      for (size_t i = 0; i < D; i++) row[i] += wpe[(size_t)(q_off + r) * D + i];
  }
}

/* Final norm and output head for rows [r0, n) of b->x into logits [n - r0, V]; a non-finite
 * logit fails the run (CP_EMODEL_NONFINITE). */
static int head(cp_engine *e, const cp_stack *st, bufs_t *b, int64_t n, int64_t r0, float *logits /* [n - r0, V] */) {
  const cp_model *m = e->m;
  const size_t D = (size_t)m->d_model;
  assert(n - r0 <= b->n);
  cp_ops_norm_rows(e->pool, e->m, &st->final_norm, b->x + r0 * D, b->h, n - r0);
  if (m->lm_head_scale != 1.0f)
    for (size_t i = 0; i < (size_t)(n - r0) * D; i++) b->h[i] *= m->lm_head_scale;
  cp_linear L = {m->lm_head, NULL, m->vocab, m->d_model, m->lm_head_dtype};
  cp_ops_linear(e->pool, logits, m->vocab, b->h, m->d_model, n - r0, &L, false);
  return check_finite(logits, n - r0, 1, m->vocab, m->vocab, -1, "logits", r0);
}

/* ---------------------------------------------------------------- engine */

int cp_engine_set_rule(cp_engine *e, const cp_rule *rule) {
  assert(e);
  const cp_model *model = e->m;
  /* A patched artifact carries its rule (model.h): it applies unless the caller brings its own;
   * stacking two rules has no defined meaning, so that is refused. */
  bool caller_rule = rule && !cp_rule_is_identity(rule);
  if (caller_rule && model->has_metadata_rule)
    return cp_error_set(CP_ERULE_MODEL, "rule: the model is a patched artifact whose config.json 'ctxpatch.rule' "
                                        "already applies a rule; refusing to combine it with another one");
  cp_rule next;
  if (caller_rule) next = *rule;
  else if (model->has_metadata_rule) next = model->metadata_rule;
  else cp_rule_init(&next);
  int rc = cp_rule_check_model(&next, &e->rm, "rule");
  if (rc) return rc;
  /* Every plan is derived from e->rule at each forward (cp_rule_plan), so swapping it is all. */
  e->rule = next;
  return 0;
}

/* The statistics tables: one slot per attention module, in stats_module order. */
static int alloc_stats(cp_engine *e) {
  const cp_model *model = e->m;
  int nmod = model->encoder.n_layers + model->decoder.n_layers +
             (model->family == CP_FAMILY_T5 ? model->decoder.n_layers : 0);
  size_t cells = (size_t)nmod * (size_t)model->n_heads + 1;
  CP_CHECK_ALLOC(e->st_kind = calloc((size_t)nmod + 1, sizeof *e->st_kind), "engine: statistics");
  CP_CHECK_ALLOC(e->st_layer = calloc((size_t)nmod + 1, sizeof *e->st_layer), "engine: statistics");
  CP_CHECK_ALLOC(e->st_pmax = calloc(cells, sizeof *e->st_pmax), "engine: statistics");
  CP_CHECK_ALLOC(e->st_ent = calloc(cells, sizeof *e->st_ent), "engine: statistics");
  if (e->p.stats && e->p.logit_stats)
    CP_CHECK_ALLOC(e->st_lstd = calloc(cells, sizeof *e->st_lstd), "engine: statistics");
  for (int l = 0; l < model->encoder.n_layers; l++)
    e->st_kind[stats_module(e, CP_ATTN_ENCODER_SELF, l)] = CP_ATTN_ENCODER_SELF,
    e->st_layer[stats_module(e, CP_ATTN_ENCODER_SELF, l)] = l;
  for (int l = 0; l < model->decoder.n_layers; l++) {
    e->st_kind[stats_module(e, CP_ATTN_DECODER_SELF, l)] = CP_ATTN_DECODER_SELF;
    e->st_layer[stats_module(e, CP_ATTN_DECODER_SELF, l)] = l;
    if (model->family == CP_FAMILY_T5) {
      e->st_kind[stats_module(e, CP_ATTN_CROSS, l)] = CP_ATTN_CROSS;
      e->st_layer[stats_module(e, CP_ATTN_CROSS, l)] = l;
    }
  }
  return 0;
}

void cp_engine_record_device_stats(cp_engine *e, cp_attn_kind kind, int layer, const float *rp, const float *re,
                                   const float *rs, int64_t n_q) {
  record_stats(e, stats_module(e, kind, layer), rp, re, e->st_lstd ? rs : NULL, n_q);
}

bool cp_engine_wants_logit_std(const cp_engine *e) { return e->st_lstd != NULL; }

const char *cp_engine_device(const cp_engine *e) { return e->dev ? e->dev_ops->describe(e->dev) : "cpu"; }

int cp_engine_create(cp_engine **out, const cp_model *model, const cp_rule *rule, const cp_engine_params *params) {
  const cp_device_ops *dev = NULL;
  if (params && params->device == CP_DEVICE_CUDA) {
#ifdef CTXPATCH_WITH_CUDA
    dev = &cp_cuda_engine_ops;
#else
    *out = NULL;
    return cp_error_set(CP_EUNSUPPORTED, "--device cuda: this build has no CUDA (configure with -DCTXPATCH_CUDA=ON)");
#endif
  }
  return cp_engine_create_on(out, model, rule, params, dev);
}

int cp_engine_create_on(cp_engine **out, const cp_model *model, const cp_rule *rule, const cp_engine_params *params,
                        const cp_device_ops *dev) {
  assert(out && model);
  *out = NULL;
  cp_engine *e = calloc(1, sizeof *e);
  int rc = 0;
  CP_CHECK_ALLOC(e, "engine");
  e->m = model;
  if (params) e->p = *params;
  else cp_engine_params_init(&e->p);
  cp_model_rule_model(&e->rm, model);
  if ((rc = cp_engine_set_rule(e, rule))) goto done;
  int threads = e->p.threads;
  if (threads <= 0) {
    int n = cp_cpu_count(); /* the affinity mask and SLURM_CPUS_PER_TASK, not the machine's cores */
    threads = n < 256 ? n : 256;
  }
  /* Our pool splits every product; OpenBLAS's own threads would compete with it. */
  openblas_set_num_threads(1);
  if ((rc = cp_pool_create(&e->pool, threads))) goto done;
  e->n_modules = 0;
  if ((rc = alloc_stats(e))) goto done;
  if (dev) {
    e->dev_ops = dev;
    if ((rc = dev->create(&e->dev, e, model, &e->rule, &e->rm, e->st_lstd != NULL))) goto done;
  }
  *out = e;
  e = NULL;
done:
  cp_engine_free(e);
  return rc;
}

void cp_engine_free(cp_engine *e) {
  if (!e) return;
  if (e->dev) e->dev_ops->destroy(e->dev);
  cp_pool_free(e->pool);
  cp_arena_free(&e->work);
  free(e->st_kind);
  free(e->st_layer);
  free(e->st_pmax);
  free(e->st_ent);
  free(e->st_lstd);
  free(e);
}

int64_t cp_engine_output_rows(const cp_engine *e, int64_t n_ids, int64_t n_dec) {
  if (e->m->family == CP_FAMILY_T5) return n_dec > 0 ? n_dec : 1;
  return n_ids;
}

static bool any_layer_needs_raw(const cp_engine *e, const cp_stack *st, cp_attn_kind kind) {
  for (int l = 0; l < st->n_layers; l++)
    if (rope_needs_raw(e, kind, l)) return true;
  return false;
}

/* Validates inputs; for T5 resolves the decoder input (default [decoder_start_token_id]).
 * n_new: tokens a generation adds after the prompt (0 for a forward pass); a learned position
 * table must hold every position the run embeds. */
static int check_inputs(const cp_engine *e, const int64_t *ids, int64_t n_ids, const int64_t **dec_ids,
                        int64_t *n_dec, int64_t *start_id, int n_new) {
  const cp_model *m = e->m;
  int rc = cp_model_check_ids(m, ids, n_ids, "input ids");
  if (rc) return rc;
  if (n_ids > MAX_TOKENS) return cp_error_set(CP_EMODEL_INPUT, "input ids: %lld tokens is above the limit", (long long)n_ids);
  /* the last generated token is never embedded */
  if ((rc = cp_model_check_positions(m, n_ids + (n_new > 0 ? n_new - 1 : 0), n_new > 0 ? "generate" : "input ids")))
    return rc;
  if (m->family != CP_FAMILY_T5) return 0;
  if (!*dec_ids || *n_dec <= 0) {
    /* T5 starts decoding from decoder_start_token_id, which is the pad id in every T5. */
    int start = m->cfg->decoder_start_token_id >= 0 ? m->cfg->decoder_start_token_id : m->cfg->pad_token_id;
    if (start < 0 || start >= m->vocab)
      return cp_error_set(CP_EMODEL_INPUT, "decoder ids: none given and the config has no decoder_start_token_id");
    *start_id = start;
    *dec_ids = start_id;
    *n_dec = 1;
  }
  if (*n_dec > MAX_TOKENS) return cp_error_set(CP_EMODEL_INPUT, "decoder ids: too many tokens");
  return cp_model_check_ids(m, *dec_ids, *n_dec, "decoder ids");
}

/* T5 encoder: enc [n, D] = final-normed encoder states. */
static int run_encoder(cp_engine *e, const int64_t *ids, int64_t n, float *enc) {
  const cp_model *m = e->m;
  bufs_t b;
  kv_t kv;
  int rc = bufs_alloc(&b, m, n, false); /* T5: no RoPE */
  if (rc) return rc;
  if ((rc = kv_alloc(&kv, n, m->n_kv_heads * m->d_head, false))) {
    bufs_free(&b);
    return rc;
  }
  embed(e, b.x, ids, n, 0);
  rc = run_stack(e, &m->encoder, CP_ATTN_ENCODER_SELF, n, 0, &kv, true, NULL, n - 1, &b);
  if (!rc) cp_ops_norm_rows(e->pool, e->m, &m->encoder.final_norm, b.x, enc, n);
  kv_free(&kv);
  bufs_free(&b);
  return rc;
}

static int alloc_cross(cross_t *cr, const cp_model *m, const float *enc, int64_t n_enc) {
  cr->enc = enc;
  cr->n_enc = n_enc;
  cr->kv = calloc((size_t)m->decoder.n_layers, sizeof *cr->kv);
  CP_CHECK_ALLOC(cr->kv, "engine");
  for (int l = 0; l < m->decoder.n_layers; l++) {
    int rc = kv_alloc(&cr->kv[l], n_enc, m->n_kv_heads * m->d_head, false);
    if (rc) return rc;
  }
  return 0;
}

static void free_cross(cross_t *cr, const cp_model *m) {
  if (cr->kv)
    for (int l = 0; l < m->decoder.n_layers; l++) kv_free(&cr->kv[l]);
  free(cr->kv);
  cr->kv = NULL;
}

/* The head in blocks of CP_ENGINE_LOGIT_BLOCK rows through fn. */
static int head_blocks(cp_engine *e, bufs_t *b, int64_t n, cp_engine_logits_fn fn, void *ctx) {
  const cp_model *m = e->m;
  float *block = alloc_f(min64(n, CP_ENGINE_LOGIT_BLOCK), m->vocab);
  int rc = block ? 0 : cp_error_code();
  for (int64_t r0 = 0; rc == 0 && r0 < n; r0 += CP_ENGINE_LOGIT_BLOCK) {
    int64_t r1 = min64(n, r0 + CP_ENGINE_LOGIT_BLOCK);
    /* head() normalises rows [r0, r1) of b->x into b->h and writes their logits */
    if ((rc = head(e, &m->decoder, b, r1, r0, block)) == 0) rc = fn(ctx, block, r0, r1 - r0);
  }
  free(block);
  return rc;
}

static int forward(cp_engine *e, float *logits, cp_engine_logits_fn fn, void *ctx, const int64_t *ids,
                   int64_t n_ids, const int64_t *dec_ids, int64_t n_dec) {
  const cp_model *m = e->m;
  int64_t start_id;
  int rc = check_inputs(e, ids, n_ids, &dec_ids, &n_dec, &start_id, 0);
  if (rc) return rc;
  bool t5 = m->family == CP_FAMILY_T5;
  const int64_t *xids = t5 ? dec_ids : ids;
  int64_t n = t5 ? n_dec : n_ids;
  float *enc = NULL;
  cross_t cross = {0};
  bufs_t b = {0};
  kv_t kv = {0};
  e->collect = e->p.stats;
  if (e->collect) e->n_modules = 0;
  if (e->dev) {
    /* The device engine hands back whole logits: blocks are cut from them on the host (O(L x V)
     * host memory under --device cuda, unlike the CPU path). */
    float *all = logits;
    if (fn && !(all = alloc_f(n, m->vocab))) {
      rc = cp_error_code();
      goto done;
    }
    rc = e->dev_ops->forward(e->dev, all, ids, n_ids, dec_ids, n_dec, e->collect);
    for (int64_t r0 = 0; fn && rc == 0 && r0 < n; r0 += CP_ENGINE_LOGIT_BLOCK)
      rc = fn(ctx, all + r0 * m->vocab, r0, min64(n, r0 + CP_ENGINE_LOGIT_BLOCK) - r0);
    if (fn) free(all);
    goto done;
  }

  if (t5) {
    if (!(enc = alloc_f(n_ids, m->d_model))) {
      rc = cp_error_code();
      goto done;
    }
    if ((rc = run_encoder(e, ids, n_ids, enc))) goto done;
    if ((rc = alloc_cross(&cross, m, enc, n_ids))) goto done;
  }
  if ((rc = bufs_alloc(&b, m, n, any_layer_needs_raw(e, &m->decoder, CP_ATTN_DECODER_SELF)))) goto done;
  if ((rc = kv_alloc(&kv, n, m->n_kv_heads * m->d_head, any_layer_needs_raw(e, &m->decoder, CP_ATTN_DECODER_SELF))))
    goto done;
  embed(e, b.x, xids, n, 0);
  if (m->embed_norm.w) cp_ops_norm_rows(e->pool, e->m, &m->embed_norm, b.x, b.x, n);
  if ((rc = run_stack(e, &m->decoder, CP_ATTN_DECODER_SELF, n, 0, &kv, true, t5 ? &cross : NULL, n - 1, &b)))
    goto done;
  if (logits && (rc = head(e, &m->decoder, &b, n, 0, logits))) goto done;
  if (fn && (rc = head_blocks(e, &b, n, fn, ctx))) goto done;
done:
  if (!rc && e->collect)
    e->n_modules = m->encoder.n_layers + m->decoder.n_layers + (t5 ? m->decoder.n_layers : 0);
  e->collect = false;
  free(enc);
  free_cross(&cross, m);
  bufs_free(&b);
  kv_free(&kv);
  return rc;
}

int cp_engine_forward(cp_engine *e, float *logits, const int64_t *ids, int64_t n_ids, const int64_t *dec_ids,
                      int64_t n_dec) {
  return forward(e, logits, NULL, NULL, ids, n_ids, dec_ids, n_dec);
}

int cp_engine_forward_blocks(cp_engine *e, cp_engine_logits_fn fn, void *ctx, const int64_t *ids, int64_t n_ids,
                             const int64_t *dec_ids, int64_t n_dec) {
  assert(fn);
  return forward(e, NULL, fn, ctx, ids, n_ids, dec_ids, n_dec);
}

static int64_t argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* One decode step: rows [0, rows) of `in` at positions q_off.. through the decoder against the
 * caches, the last row's logits into logits [vocab]. b is sized for the prefill, the largest step. */
static int decode_step(cp_engine *e, bufs_t *b, kv_t *kvs, const cross_t *cross, const int64_t *in, int64_t rows,
                       int64_t q_off, int64_t last_prompt_row, float *logits /* [vocab] */) {
  const cp_model *m = e->m;
  const cp_stack *st = &m->decoder;
  embed(e, b->x, in, rows, q_off);
  if (m->embed_norm.w) cp_ops_norm_rows(e->pool, e->m, &m->embed_norm, b->x, b->x, rows);
  int rc = run_stack(e, st, CP_ATTN_DECODER_SELF, rows, q_off, kvs, false, cross, last_prompt_row, b);
  if (rc) return rc;
  return head(e, st, b, rows, rows - 1, logits);
}

int cp_engine_generate(cp_engine *e, int64_t *out, int64_t *n_out, float *step_logits, const int64_t *ids,
                       int64_t n_ids, const int64_t *dec_ids, int64_t n_dec, int n_new, bool stop_at_eos) {
  const cp_model *m = e->m;
  *n_out = 0;
  if (n_new < 0) return cp_error_set(CP_EARG, "engine: negative number of tokens to generate");
  int64_t start_id;
  int rc = check_inputs(e, ids, n_ids, &dec_ids, &n_dec, &start_id, n_new);
  if (rc) return rc;
  if (n_new == 0) return 0;
  if (e->dev) {
    e->collect = false;
    return e->dev_ops->generate(e->dev, out, n_out, step_logits, ids, n_ids, dec_ids, n_dec, n_new, stop_at_eos);
  }
  bool t5 = m->family == CP_FAMILY_T5;
  const int64_t *xids = t5 ? dec_ids : ids;
  int64_t n = t5 ? n_dec : n_ids;
  int64_t cap = n + n_new;
  const cp_stack *st = &m->decoder;
  float *enc = NULL, *logits = NULL;
  cross_t cross = {0};
  bufs_t b = {0};
  kv_t *kvs = calloc((size_t)st->n_layers + 1, sizeof *kvs);
  e->collect = false;
  CP_CHECK_ALLOC(kvs, "engine: generate");
  /* The loop's buffers are allocated here, for the largest step (the n-row prefill) and the full
   * cache (n + n_new rows), so the loop itself allocates nothing per token. (The attention call
   * below it still builds its per-call tables and scratch: attention_module, cp_cpu_attention.) */
  for (int l = 0; l < st->n_layers; l++)
    if ((rc = kv_alloc(&kvs[l], cap, m->n_kv_heads * m->d_head, rope_needs_raw(e, CP_ATTN_DECODER_SELF, l))))
      goto done;
  if ((rc = bufs_alloc(&b, m, n, any_layer_needs_raw(e, st, CP_ATTN_DECODER_SELF)))) goto done;
  CP_CHECK_ALLOC_GOTO(logits = alloc_f(1, m->vocab), "engine: generate");
  if (t5) {
    CP_CHECK_ALLOC_GOTO(enc = alloc_f(n_ids, m->d_model), "engine: generate");
    if ((rc = run_encoder(e, ids, n_ids, enc))) goto done;
    if ((rc = alloc_cross(&cross, m, enc, n_ids))) goto done;
  }
  /* Prefill, then one row per step against the cache. */
  int64_t tok = 0;
  for (int step = 0; step < n_new; step++) {
    int64_t rows = step == 0 ? n : 1, q_off = step == 0 ? 0 : n + step - 1;
    if ((rc = decode_step(e, &b, kvs, t5 ? &cross : NULL, step == 0 ? xids : &tok, rows, q_off, n - 1, logits)))
      goto done;
    tok = argmax(logits, m->vocab);
    if (step_logits) memcpy(step_logits + (size_t)*n_out * m->vocab, logits, (size_t)m->vocab * sizeof *logits);
    out[(*n_out)++] = tok;
    if (stop_at_eos && m->cfg->eos_token_id >= 0 && tok == m->cfg->eos_token_id) break;
  }
done:
  bufs_free(&b);
  for (int l = 0; l < st->n_layers; l++) kv_free(&kvs[l]);
  free(kvs);
  free(enc);
  free(logits);
  free_cross(&cross, m);
  return rc;
}

void cp_engine_get_stats(cp_engine_stats *out, const cp_engine *e) {
  out->n_modules = e->n_modules;
  out->n_heads = e->m->n_heads;
  out->kind = e->st_kind;
  out->layer = e->st_layer;
  out->pmax = e->st_pmax;
  out->entropy = e->st_ent;
  out->logit_std = e->st_lstd;
}

double cp_engine_stats_mean(const cp_engine_stats *st, cp_attn_kind kind, int want_entropy) {
  double sum = 0;
  int n = 0;
  for (int m = 0; m < st->n_modules; m++) {
    if (st->kind[m] != kind) continue;
    const float *v = (want_entropy ? st->entropy : st->pmax) + (size_t)m * st->n_heads;
    for (int h = 0; h < st->n_heads; h++) sum += v[h], n++;
  }
  return n ? sum / n : NAN;
}
