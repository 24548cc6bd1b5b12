/* The CUDA backend of cp_engine (engine/backend.h; params.device = CP_DEVICE_CUDA): the primitives
 * under the engine's passes (engine/engine_run.c) with every tensor on the device. Weights are uploaded
 * once (each distinct array once: tied embeddings share); projections and the LM head are cuBLAS
 * GEMMs; attention is the fused rule-aware kernel of engine/cuda/attention.cu through
 * cp_cuda_attention_resident (its tables resolved on the host by rule.h, as for the CPU);
 * norms, activations, biases, residuals and RoPE are the small kernels of engine/cuda/kernels.cu;
 * the KV caches live on the device; a generation copies back only the last row's logits.
 *
 * Plain C against the CUDA runtime API and cuBLAS, so that tests/test_cuda_engine_emulated.c
 * compiles this same file against the host shim of tests/cuda_shim/ (CPCU_SHIM) and checks its
 * allocations, copies, launches and GEMM arguments in CI without a GPU.
 *
 * GEMM layout: the engine's matrices are row-major. Y[M, N] = X[M, K] W^T with W [N, K]: read
 * column-major, W is K x N (ld K), X is K x M (ld its row stride) and Y is N x M (ld its row
 * stride), so Y = op_T(W) * X is cublasGemmEx(T, N, m = N, n = M, k = K, W, lda = K, X, ldb,
 * Y, ldc) with fp32 data and CUBLAS_COMPUTE_32F (no TF32: the CPU engine is the oracle).
 *
 * Not (yet) on the device, and said so: the non-finite checks of q, k and v (only the logits are
 * checked, on the host); overlapping streams for the two sides of a certification; weights in their
 * stored dtype (the host model keeps F16/BF16 and GGUF quant blocks as stored; upload_widened widens
 * them to float32 on the way up, so the device holds float32 for the fp32 GEMMs). */
#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/arena.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/engine/attn_call.h"
#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda_attention.h"
#include "engine/backend.h"

#ifdef CPCU_SHIM
const cpcu_backend *cpcu_shim_backend(void); /* tests/cuda_shim/shim_backend.c */
#define ATTN_BACKEND() cpcu_shim_backend()
#else
#define ATTN_BACKEND() cp_cuda_runtime_backend()
#endif

typedef struct {
  float *w, *b; /* [n_out, n_in], [n_out] or NULL */
  int n_out, n_in;
} dlin;

typedef struct {
  float *w, *b; /* [D], [D] or NULL */
} dnorm;

typedef struct {
  dnorm attn_norm, cross_norm, ffn_norm;
  dnorm post_attn_norm, post_ffn_norm; /* Gemma 2, or w NULL */
  dnorm q_norm, k_norm;                /* [dh] (Qwen3), or w NULL */
  dlin q, k, v, o, cq, ck, cv, co, gate, up, down;
} dlayer;

typedef struct {
  dlayer *layers; /* [n_layers] */
  dnorm final_norm;
} dstack;

typedef struct {
  cp_engine *owner;
  const cp_model *m;
  const cp_rule *rule;     /* the owner's, live */
  const cp_rule_model *rm; /* the owner's */
  const cpcu_backend *be;
  cudaStream_t stream;
  cublasHandle_t blas;
  /* Uploaded weights: host array (any stored dtype) -> device copy (F32). */
  const void **w_host;
  float **w_dev;
  size_t n_w, cap_w;
  float *embed, *pos_embed, *lm_head; /* [V, D], [train_len, D] or NULL, [V, D] */
  double *rope_inv;                   /* [rope_dims / 2]: m->rope.inv (model/rope.c), or NULL */
  dnorm embed_norm;
  dstack enc, dec;
  cp_arena work; /* the attention call's host tables, reset per call */
  char desc[512];
} cuda_engine;

/* ---------------------------------------------------------------- runtime helpers */

static int cu_fail(cudaError_t err, const char *what) {
  return cp_error_set(CP_ECUDA, "cuda engine: %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

static int blas_fail(cublasStatus_t st, const char *what) {
  return cp_error_set(CP_ECUDA, "cuda engine: %s: %s", what, cublasGetStatusString(st));
}

static int kern_fail(const char *why) { return cp_error_set(CP_ECUDA, "cuda engine: %s", why); }

/* A device array of a x b elements of `elem` bytes (sizes checked), or NULL with the error set. */
static void *dalloc(int64_t a, int64_t b, size_t elem) {
  uint64_t n;
  if (a < 0 || b < 0 || !cp_mul_u64(&n, (uint64_t)a, (uint64_t)b) || !cp_mul_u64(&n, n, elem) || n > SIZE_MAX) {
    cp_error_set(CP_EOVERFLOW, "cuda engine: buffer of %lld x %lld elements is too large", (long long)a, (long long)b);
    return NULL;
  }
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, n ? (size_t)n : 1);
  if (err != cudaSuccess) {
    cu_fail(err, "cudaMalloc");
    return NULL;
  }
  return p;
}

static void dfree(void *p) {
  if (p) cudaFree(p);
}

static int upload(cuda_engine *d, void *dst, const void *src, size_t bytes) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, d->stream);
  return err == cudaSuccess ? 0 : cu_fail(err, "copy to the device");
}

/* Copies device memory to the host and waits for it (and for everything queued before it). */
static int download(cuda_engine *d, void *dst, const void *src, size_t bytes) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, d->stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(d->stream);
  return err == cudaSuccess ? 0 : cu_fail(err, "copy to the host");
}

static int dcopy(cuda_engine *d, void *dst, const void *src, size_t bytes) {
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->stream);
  return err == cudaSuccess ? 0 : cu_fail(err, "copy on the device");
}

/* ---------------------------------------------------------------- weights */

typedef struct {
  cuda_engine *d;
  int rc;
} upload_ctx;

static float *weight_of(const cuda_engine *d, const void *host) {
  if (!host) return NULL;
  for (size_t i = 0; i < d->n_w; i++)
    if (d->w_host[i] == host) return d->w_dev[i];
  return NULL;
}

/* An F16/BF16 or GGUF quant-block matrix (cp_model_open_stored) is widened on the host a chunk at a time and each chunk
 * copied before the buffer is reused: the device holds F32 (cuBLAS's SGEMM path). */
static int upload_widened(cuda_engine *d, float *dev, const void *w, cp_dtype dtype, size_t count) {
  enum { CHUNK = 1 << 20 };
  float *tmp = malloc((count < CHUNK ? count : CHUNK) * sizeof *tmp);
  CP_CHECK_ALLOC(tmp, "cuda engine: widening a weight");
  int rc = 0;
  for (size_t at = 0; at < count && !rc; at += CHUNK) {
    size_t n = count - at < CHUNK ? count - at : CHUNK;
    cudaError_t err;
    if ((rc = cp_convert_to_f32(tmp, (const char *)w + cp_dtype_span(dtype, at), dtype, n)) == 0 &&
        (rc = upload(d, dev + at, tmp, n * sizeof *tmp)) == 0 &&
        (err = cudaStreamSynchronize(d->stream)) != cudaSuccess)
      rc = cu_fail(err, "copy to the device");
  }
  free(tmp);
  return rc;
}

static void upload_weight(void *ctx, const void *w, cp_dtype dtype, size_t count) {
  upload_ctx *u = ctx;
  cuda_engine *d = u->d;
  if (u->rc || weight_of(d, w)) return;
  if (d->n_w == d->cap_w) { /* two arrays of one capacity: both grow from the same count */
    size_t cap_h = d->cap_w, cap_p = d->cap_w;
    if ((u->rc = CP_ARRAY_RESERVE(d->w_host, cap_h, d->n_w + 1, "cuda engine: weight table")) < 0 ||
        (u->rc = CP_ARRAY_RESERVE(d->w_dev, cap_p, d->n_w + 1, "cuda engine: weight table")) < 0)
      return;
    d->cap_w = cap_h;
  }
  float *dev = dalloc((int64_t)count, 1, sizeof(float));
  if (!dev) {
    u->rc = cp_error_code();
    return;
  }
  d->w_host[d->n_w] = w, d->w_dev[d->n_w++] = dev;
  u->rc = dtype == CP_F32 ? upload(d, dev, w, count * sizeof(float)) : upload_widened(d, dev, w, dtype, count);
}

static dlin dlin_of(const cuda_engine *d, const cp_linear *L) {
  dlin o = {weight_of(d, L->w), weight_of(d, L->b), L->n_out, L->n_in};
  return o;
}

static dnorm dnorm_of(const cuda_engine *d, const cp_norm_weights *w) {
  dnorm o = {weight_of(d, w->w), weight_of(d, w->b)};
  return o;
}

static int map_stack(cuda_engine *d, dstack *ds, const cp_stack *st) {
  ds->layers = calloc((size_t)st->n_layers + 1, sizeof *ds->layers);
  CP_CHECK_ALLOC(ds->layers, "cuda engine: layers");
  for (int l = 0; l < st->n_layers; l++) {
    const cp_layer *ly = &st->layers[l];
    dlayer *o = &ds->layers[l];
    o->attn_norm = dnorm_of(d, &ly->attn_norm), o->cross_norm = dnorm_of(d, &ly->cross_norm);
    o->ffn_norm = dnorm_of(d, &ly->ffn_norm);
    o->post_attn_norm = dnorm_of(d, &ly->post_attn_norm), o->post_ffn_norm = dnorm_of(d, &ly->post_ffn_norm);
    o->q_norm = dnorm_of(d, &ly->q_norm), o->k_norm = dnorm_of(d, &ly->k_norm);
    o->q = dlin_of(d, &ly->q), o->k = dlin_of(d, &ly->k), o->v = dlin_of(d, &ly->v), o->o = dlin_of(d, &ly->o);
    o->cq = dlin_of(d, &ly->cq), o->ck = dlin_of(d, &ly->ck), o->cv = dlin_of(d, &ly->cv);
    o->co = dlin_of(d, &ly->co);
    o->gate = dlin_of(d, &ly->gate), o->up = dlin_of(d, &ly->up), o->down = dlin_of(d, &ly->down);
  }
  ds->final_norm = dnorm_of(d, &st->final_norm);
  return 0;
}

/* ---------------------------------------------------------------- row operations */

/* C[M, n_out] (row stride ldc) = (accumulate ? C : 0) + A[M, n_in] (row stride lda) W^T + b:
 * see the GEMM layout at the top. */
static int linear(cuda_engine *d, float *C /* [M, ldc] */, int ldc, const float *A /* [M, lda] */, int lda, int64_t M,
                  const dlin *L, bool accumulate) {
  const float one = 1.0f, zero = 0.0f;
  char why[256] = "";
  for (int64_t r0 = 0; r0 < M; r0 += CP_CUDA_GEMM_ROWS) {
    const int mr = (int)(M - r0 < CP_CUDA_GEMM_ROWS ? M - r0 : CP_CUDA_GEMM_ROWS);
    float *Cr = C + (size_t)r0 * ldc;
    cublasStatus_t st = cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, L->n_out, mr, L->n_in, &one, L->w, CUDA_R_32F,
                                     L->n_in, A + (size_t)r0 * lda, CUDA_R_32F, lda, accumulate ? &one : &zero, Cr,
                                     CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, "cublasGemmEx");
    if (L->b && cpcu_k_bias(d->stream, Cr, ldc, L->b, mr, L->n_out, why, sizeof why)) return kern_fail(why);
  }
  return 0;
}

static int norm_rows(cuda_engine *d, const dnorm *w, const float *x /* [n, D] */, float *y /* [n, D] */, int64_t n) {
  const cp_model *m = d->m;
  char why[256] = "";
  if (cpcu_k_norm(d->stream, y, x, w->w, w->b, n, m->d_model, m->norm == CP_NORM_LAYER, m->norm_eps, why, sizeof why))
    return kern_fail(why);
  return 0;
}

/* As cp_ops_head_norm_rows: RMSNorm of each of the n_heads heads of n rows of x, in place (the
 * row kernel over n * n_heads rows of d_head). */
static int head_norm_rows(cuda_engine *d, const dnorm *w, float *x /* [n, n_heads * dh] */, int n_heads, int64_t n) {
  const cp_model *m = d->m;
  char why[256] = "";
  if (cpcu_k_norm(d->stream, x, x, w->w, NULL, n * n_heads, m->d_head, 0, m->norm_eps, why, sizeof why))
    return kern_fail(why);
  return 0;
}

static int add(cuda_engine *d, float *y, const float *a, const float *b, int64_t n) {
  char why[256] = "";
  return cpcu_k_add(d->stream, y, a, b, n, why, sizeof why) ? kern_fail(why) : 0;
}

/* dst[n, D] += FFN(h[n, D]) (dst = it without accumulate), CP_CUDA_FFN_CHUNK rows at a time, as cp_ops_ffn. */
static int ffn(cuda_engine *d, const dlayer *ly, const float *h, float *dst, int64_t n, cp_pass *b, bool accumulate) {
  const cp_model *m = d->m;
  const int D = m->d_model, F = m->d_ff;
  char why[256] = "";
  int rc;
  for (int64_t r0 = 0; r0 < n; r0 += CP_CUDA_FFN_CHUNK) {
    int64_t nr = n - r0 < CP_CUDA_FFN_CHUNK ? n - r0 : CP_CUDA_FFN_CHUNK;
    if ((rc = linear(d, b->up, F, h + (size_t)r0 * D, D, nr, &ly->up, false))) return rc;
    if (m->gated_ffn && (rc = linear(d, b->gate, F, h + (size_t)r0 * D, D, nr, &ly->gate, false))) return rc;
    if (cpcu_k_act(d->stream, b->up, m->gated_ffn ? b->gate : NULL, nr * F, (int)m->act, why, sizeof why))
      return kern_fail(why);
    if ((rc = linear(d, dst + (size_t)r0 * D, D, b->up, F, nr, &ly->down, accumulate))) return rc;
  }
  return 0;
}

static int rope_rows(cuda_engine *d, float *x, int ld, int n_heads, int64_t n, int64_t pos0, bool fixed) {
  const cp_model *m = d->m;
  char why[256] = "";
  const double ms = fixed ? m->rope.mscale * m->rope.mscale : m->rope.mscale; /* as cp_ops_rope_rows */
  if (cpcu_k_rope(d->stream, x, ld, n_heads, m->d_head, m->rope_dims, d->rope_inv, m->rope_scale, ms, n, pos0, fixed,
                  why, sizeof why))
    return kern_fail(why);
  return 0;
}

/* As project_qkv of engine_cpu.c: q of hin [n, D] into b->q; self-attention appends k, v to kv
 * at q_off (Qwen3 normalises q and k per head, MPT clamps them), cross-attention projects the encoder
 * states on first use. */
static int project_qkv(cuda_engine *d, const dlayer *ly, const cp_module_call *mc, const float *hin, const float **K,
                       const float **V, int64_t *n_keys) {
  const cp_model *m = d->m;
  const int D = m->d_model, qd = m->n_heads * m->d_head, kvd = m->n_kv_heads * m->d_head;
  const cp_cross *cross = mc->cross;
  const int64_t n = mc->n, q_off = mc->q_off;
  cp_kv *kv = mc->kv;
  cp_pass *b = mc->p;
  int rc;
  if (mc->kind == CP_ATTN_CROSS) {
    if ((rc = linear(d, b->q, qd, hin, D, n, &ly->cq, false))) return rc;
    cp_kv *ckv = &cross->kv[mc->layer];
    if (!ckv->ready) {
      if ((rc = linear(d, ckv->k, kvd, cross->enc, D, cross->n_enc, &ly->ck, false)) ||
          (rc = linear(d, ckv->v, kvd, cross->enc, D, cross->n_enc, &ly->cv, false)))
        return rc;
      ckv->ready = true;
    }
    *n_keys = cross->n_enc;
    *K = ckv->k, *V = ckv->v;
    return 0;
  }
  assert(q_off + n <= kv->cap);
  float *kc = kv->k + (size_t)q_off * kvd, *vc = kv->v + (size_t)q_off * kvd;
  if ((rc = linear(d, b->q, qd, hin, D, n, &ly->q, false)) || (rc = linear(d, kc, kvd, hin, D, n, &ly->k, false)) ||
      (rc = linear(d, vc, kvd, hin, D, n, &ly->v, false)))
    return rc;
  if (ly->q_norm.w && ((rc = head_norm_rows(d, &ly->q_norm, b->q, m->n_heads, n)) ||
                       (rc = head_norm_rows(d, &ly->k_norm, kc, m->n_kv_heads, n))))
    return rc;
  if (m->clip_qkv > 0) {
    char why[256] = "";
    if (cpcu_k_clamp(d->stream, b->q, n * qd, m->clip_qkv, why, sizeof why) ||
        cpcu_k_clamp(d->stream, kc, n * kvd, m->clip_qkv, why, sizeof why) ||
        cpcu_k_clamp(d->stream, vc, n * kvd, m->clip_qkv, why, sizeof why))
      return kern_fail(why);
  }
  *n_keys = q_off + n;
  *K = kv->k, *V = kv->v;
  return 0;
}

/* As rope_call of engine_cpu.c, on the device. */
static int rope_call(cuda_engine *d, cp_attn_call *c, cp_kv *kv, cp_pass *b) {
  const cp_model *m = d->m;
  const int H = m->n_heads, qd = H * m->d_head, kvd = m->n_kv_heads * m->d_head;
  const int64_t n = c->n_q, q_off = c->q_off;
  const size_t qbytes = (size_t)n * qd * sizeof(float);
  const bool raw = cp_engine_rope_needs_raw(m, d->rule, d->rm, c->plan->kind, c->plan->layer);
  float *kc = kv->k + (size_t)q_off * kvd;
  int rc;
  if (raw) {
    assert(kv->k_raw);
    if ((rc = dcopy(d, kv->k_raw + (size_t)q_off * kvd, kc, (size_t)n * kvd * sizeof(float))) ||
        (rc = dcopy(d, b->qraw, b->q, qbytes)))
      return rc;
    c->k_raw = kv->k_raw;
  }
  if ((rc = rope_rows(d, b->q, qd, H, n, q_off, false)) || (rc = rope_rows(d, kc, kvd, m->n_kv_heads, n, q_off, false)))
    return rc;
  if (c->tab.rope_far >= 0) {
    assert(raw);
    if ((rc = dcopy(d, b->qfar, b->qraw, qbytes)) || (rc = rope_rows(d, b->qfar, qd, H, n, c->tab.rope_far, true)))
      return rc;
    c->q_far = b->qfar;
  }
  if (c->plan->top_k) {
    assert(raw);
    if ((rc = dcopy(d, b->qtopk, b->qraw, qbytes)) ||
        (rc = rope_rows(d, b->qtopk, qd, H, n, c->plan->top_k_distance, true)))
      return rc;
    c->q_topk = b->qtopk;
  }
  return 0;
}

/* The device's copy of a stack's weights. */
static const dstack *dstack_of(const cuda_engine *d, const cp_stack *st) {
  return st == &d->m->encoder ? &d->enc : &d->dec;
}

/* As cpu_attention of engine_cpu.c: out [n, D] = the module's output for hin [n, D]. */
static int cuda_attention(void *be, const cp_module_call *mc, const float *hin, float *out) {
  cuda_engine *d = be;
  const cp_model *m = d->m;
  const int layer = mc->layer;
  const cp_attn_kind kind = mc->kind;
  const int64_t n = mc->n, q_off = mc->q_off;
  cp_pass *b = mc->p;
  const dlayer *ly = &dstack_of(d, mc->st)->layers[layer];
  const float *K = NULL, *V = NULL;
  int64_t n_keys = 0;
  cp_attn_plan plan;
  cp_attn_call c;
  cp_rule_plan(&plan, d->rule, d->rm, kind, layer);
  int rc = project_qkv(d, ly, mc, hin, &K, &V, &n_keys);
  if (rc) return rc;
  cp_arena_reset(&d->work);
  if ((rc = cp_attn_call_for_model(&c, m, mc->st, &plan, q_off, n, n_keys, mc->last_prompt_row, &d->work))) return rc;
  c.q = b->q, c.k = K, c.v = V, c.out = b->att;
  if (c.pos == CP_ATTN_POS_ROPE && (rc = rope_call(d, &c, mc->kv, b))) goto done;
  if (mc->collect && (rc = cp_engine_stats_rows(d->owner, &c))) goto done;
  /* The attention kernel runs on the legacy default stream, which waits for this blocking stream. */
  if ((rc = cp_cuda_attention_resident(d->be, &c))) goto done;
  if (mc->collect) cp_engine_record_stats(d->owner, &c);
  rc = linear(d, out, m->d_model, b->att, m->n_heads * m->d_head, n, kind == CP_ATTN_CROSS ? &ly->co : &ly->o, false);
done:
  cp_attn_tables_free(&c.tab);
  return rc;
}

/* ---------------------------------------------------------------- layers */

static int cuda_norm(void *be, const cp_stack *st, int layer, cp_layer_norm which, const float *x, float *y,
                     int64_t n) {
  cuda_engine *d = be;
  const dlayer *ly = &dstack_of(d, st)->layers[layer];
  const dnorm *w = which == CP_LAYER_NORM_ATTN        ? &ly->attn_norm
                   : which == CP_LAYER_NORM_CROSS     ? &ly->cross_norm
                   : which == CP_LAYER_NORM_POST_ATTN ? &ly->post_attn_norm
                   : which == CP_LAYER_NORM_POST_FFN  ? &ly->post_ffn_norm
                                                      : &ly->ffn_norm;
  return norm_rows(d, w, x, y, n);
}

static int cuda_add(void *be, float *y, const float *a, const float *b, int64_t count) {
  return add(be, y, a, b, count);
}

static int cuda_copy(void *be, float *dst, const float *src, int64_t count) {
  return dcopy(be, dst, src, (size_t)count * sizeof *dst);
}

static int cuda_ffn_add(void *be, cp_pass *p, const cp_stack *st, int layer, const float *h, float *dst, int64_t n,
                        bool accumulate) {
  cuda_engine *d = be;
  return ffn(d, &dstack_of(d, st)->layers[layer], h, dst, n, p, accumulate);
}

/* b->x [n, D] = embeddings of ids [n] (host, checked by the owner) at positions q_off.. */
static int cuda_embed(void *be, cp_pass *b, const int64_t *ids, int64_t n, int64_t q_off) {
  cuda_engine *d = be;
  const cp_model *m = d->m;
  char why[256] = "";
  int rc = upload(d, b->ids, ids, (size_t)n * sizeof *ids);
  if (rc) return rc;
  if (cpcu_k_embed(d->stream, b->x, d->embed, b->ids, d->pos_embed, q_off, n, m->d_model, why, sizeof why))
    return kern_fail(why);
  /* Gemma's sqrt(D) (a model with a scale has no position table, so scaling the sum is the CPU's order) */
  assert(m->embed_scale == 1.0f || !m->pos_embed);
  if (m->embed_scale != 1.0f && cpcu_k_scale(d->stream, b->x, n * m->d_model, m->embed_scale, why, sizeof why))
    return kern_fail(why);
  if (m->embed_norm.w) return norm_rows(d, &d->embed_norm, b->x, b->x, n);
  return 0;
}

static int cuda_final_norm(void *be, cp_pass *b, const cp_stack *st, float *dst, int64_t n) {
  cuda_engine *d = be;
  return norm_rows(d, &dstack_of(d, st)->final_norm, b->x, dst, n);
}

/* Final norm and LM head for rows [r0, n) of b->x into the device logits b->logits [n - r0, V],
 * copied to the host logits. */
static int cuda_head(void *be, cp_pass *b, const cp_stack *st, int64_t n, int64_t r0, float *logits) {
  cuda_engine *d = be;
  const cp_model *m = d->m;
  const dstack *ds = dstack_of(d, st);
  const int D = m->d_model, V = m->vocab;
  const int64_t rows = n - r0;
  float *dl = b->logits;
  char why[256] = "";
  int rc;
  assert(rows <= b->head_rows);
  if ((rc = norm_rows(d, &ds->final_norm, b->x + (size_t)r0 * D, b->h, rows))) return rc;
  if (m->lm_head_scale != 1.0f && cpcu_k_scale(d->stream, b->h, rows * D, m->lm_head_scale, why, sizeof why))
    return kern_fail(why);
  dlin L = {d->lm_head, NULL, V, D};
  if ((rc = linear(d, dl, V, b->h, D, rows, &L, false))) return rc;
  return download(d, logits, dl, (size_t)rows * V * sizeof *logits);
}

/* ---------------------------------------------------------------- device checks */

/* The device's name, driver and runtime, and its free memory, or CP_ECUDA "no CUDA device present". */
static int probe_device(cuda_engine *d, size_t *free_b, size_t *total_b) {
  int count = 0, drv = 0, rtv = 0;
  struct cudaDeviceProp p;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return cp_error_set(CP_ECUDA, "--device cuda: no CUDA device present (%s)",
                        err == cudaSuccess ? "the runtime reports none" : cudaGetErrorString(err));
  if ((err = cudaSetDevice(0)) != cudaSuccess || (err = cudaGetDeviceProperties(&p, 0)) != cudaSuccess ||
      (err = cudaDriverGetVersion(&drv)) != cudaSuccess || (err = cudaRuntimeGetVersion(&rtv)) != cudaSuccess ||
      (err = cudaMemGetInfo(free_b, total_b)) != cudaSuccess)
    return cu_fail(err, "device query");
  snprintf(d->desc, sizeof d->desc, "cuda: %.256s (compute capability %d.%d), driver %d.%d, runtime %d.%d", p.name,
           p.major, p.minor, drv / 1000, drv % 1000 / 10, rtv / 1000, rtv % 1000 / 10);
  return 0;
}

/* Refuses a run whose estimate (cp_cuda_engine_bytes) exceeds the device's free memory. */
static int cuda_reserve(void *be, int64_t n_ids, int64_t n_dec, int64_t n_new) {
  cuda_engine *d = be;
  uint64_t w, run;
  size_t free_b = 0, total_b = 0;
  int rc = cp_cuda_engine_bytes(&w, &run, d->m, n_ids, n_dec, n_new);
  if (rc) return rc;
  cudaError_t err = cudaMemGetInfo(&free_b, &total_b);
  if (err != cudaSuccess) return cu_fail(err, "cudaMemGetInfo");
  if (run > free_b)
    return cp_nomem(
        "--device cuda: %lld tokens need %.1f MiB of device memory beyond the weights, %.1f MiB "
        "of %.1f MiB are free (%s)",
        (long long)(n_ids + n_dec + n_new), run / 1048576.0, free_b / 1048576.0, total_b / 1048576.0, d->desc);
  return 0;
}

/* ---------------------------------------------------------------- engine */

static void *cuda_alloc(void *be, int64_t a, int64_t b, size_t elem) {
  (void)be;
  return dalloc(a, b, elem);
}

static void cuda_free(void *be, void *p) {
  (void)be;
  dfree(p);
}

static int cuda_sync(void *be, const char *what) {
  cuda_engine *d = be;
  cudaError_t err = d->stream ? cudaStreamSynchronize(d->stream) : cudaSuccess;
  return err == cudaSuccess || !what ? 0 : cu_fail(err, what);
}

static void cuda_destroy(void *be) {
  cuda_engine *d = be;
  if (!d) return;
  if (d->stream) cudaStreamSynchronize(d->stream);
  for (size_t i = 0; i < d->n_w; i++) dfree(d->w_dev[i]);
  dfree(d->rope_inv);
  free(d->w_host), free(d->w_dev);
  free(d->enc.layers), free(d->dec.layers);
  if (d->blas) cublasDestroy(d->blas);
  if (d->stream) cudaStreamDestroy(d->stream);
  cp_arena_free(&d->work);
  free(d);
}

static int cuda_create(void **out, cp_engine *owner, const cp_model *m, const cp_rule *rule, const cp_rule_model *rm,
                       int threads) {
  (void)threads; /* the device runs the passes; no host pool */
  *out = NULL;
  cuda_engine *d = calloc(1, sizeof *d);
  size_t free_b = 0, total_b = 0;
  uint64_t wbytes, run;
  int rc = 0;
  CP_CHECK_ALLOC(d, "cuda engine");
  d->owner = owner, d->m = m, d->rule = rule, d->rm = rm;
  d->be = ATTN_BACKEND();
  if ((rc = probe_device(d, &free_b, &total_b))) goto done;
  /* Estimate before allocating: the weights and a one-token pass must fit. */
  if ((rc = cp_cuda_engine_bytes(&wbytes, &run, m, 1, 1, 0))) goto done;
  if (wbytes + run > free_b) {
    rc = cp_nomem("--device cuda: the model needs %.1f MiB of device memory, %.1f MiB of %.1f MiB are free (%s)",
                  (wbytes + run) / 1048576.0, free_b / 1048576.0, total_b / 1048576.0, d->desc);
    goto done;
  }
  cudaError_t err = cudaStreamCreate(&d->stream);
  if (err != cudaSuccess) {
    d->stream = NULL;
    rc = cu_fail(err, "cudaStreamCreate");
    goto done;
  }
  cublasStatus_t st = cublasCreate(&d->blas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    d->blas = NULL;
    rc = blas_fail(st, "cublasCreate");
    goto done;
  }
  if ((st = cublasSetStream(d->blas, d->stream)) != CUBLAS_STATUS_SUCCESS) {
    rc = blas_fail(st, "cublasSetStream");
    goto done;
  }
  upload_ctx u = {d, 0};
  cp_cuda_for_each_weight(m, upload_weight, &u);
  if ((rc = u.rc)) goto done;
  d->embed = weight_of(d, m->embed), d->pos_embed = weight_of(d, m->pos_embed), d->lm_head = weight_of(d, m->lm_head);
  d->embed_norm = dnorm_of(d, &m->embed_norm);
  if ((rc = map_stack(d, &d->enc, &m->encoder)) || (rc = map_stack(d, &d->dec, &m->decoder))) goto done;
  /* The RoPE frequency table, as the CPU engine rotates with it (not recomputed on the device). */
  if (m->pos == CP_POS_ROPE && m->rope_dims >= 2 &&
      (!(d->rope_inv = dalloc(m->rope_dims / 2, 1, sizeof(double))) ||
       (rc = upload(d, d->rope_inv, m->rope.inv, (size_t)(m->rope_dims / 2) * sizeof(double))))) {
    if (!rc) rc = cp_error_code();
    goto done;
  }
  if ((err = cudaStreamSynchronize(d->stream)) != cudaSuccess) {
    rc = cu_fail(err, "uploading the weights");
    goto done;
  }
  *out = d;
  d = NULL;
done:
  cuda_destroy(d);
  return rc;
}

static const char *cuda_describe(const void *be) { return ((const cuda_engine *)be)->desc; }

const cp_backend_ops cp_cuda_engine_ops = {
    .create = cuda_create,
    .destroy = cuda_destroy,
    .describe = cuda_describe,
    .reserve = cuda_reserve,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .sync = cuda_sync,
    .device = true,
    .ffn_chunk = CP_CUDA_FFN_CHUNK,
    .row_align = CP_CUDA_ROW_ALIGN,
    .embed = cuda_embed,
    .norm = cuda_norm,
    .attention = cuda_attention,
    .add = cuda_add,
    .copy = cuda_copy,
    .ffn_add = cuda_ffn_add,
    .final_norm = cuda_final_norm,
    .head = cuda_head,
};
