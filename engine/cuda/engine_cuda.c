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
 * Weights keep their stored dtype where cuBLAS's fp32 GEMM can use them exactly: F16/BF16 matrices
 * and GGUF Q8_0/Q4_0/Q4_K blocks stay as stored on the device and are widened into one scratch just
 * before each GEMM (linear); any other stored dtype is widened on the host at upload (upload_widened).
 *
 * Every copy, GEMM, kernel and attention call of an engine goes on the engine's own stream, so two
 * engines never meet on the legacy default stream (what still serialises them: docs/cuda.md). */
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
  const void *w; /* [n_out, n_in] of wtype (CPCU_W_*: F16/BF16/GGUF blocks as stored, else F32) */
  float *b;      /* [n_out] or NULL */
  int n_out, n_in, wtype;
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
  const void *host;
  void *dev;
  int type; /* CPCU_W_* */
} dweight;

/* One queued non-finite check of q, k or v (see check_finite). */
typedef struct {
  int layer, heads;
  int64_t row0;
  const char *what;
} fcheck;

typedef struct {
  cp_engine *owner;
  const cp_model *m;
  const cp_rule *rule;     /* the owner's, live */
  const cp_rule_model *rm; /* the owner's */
  const cpcu_backend *be;
  cudaStream_t stream;
  cublasHandle_t blas;
  /* Uploaded weights: host array (any stored dtype) -> device copy (F16/BF16/blocks as stored, else F32). */
  dweight *w;
  size_t n_w, cap_w;
  const void *embed, *lm_head; /* [V, D] of embed_type, lm_head_type */
  int embed_type, lm_head_type;
  float *pos_embed; /* [train_len, D] or NULL */
  float *wide;      /* [wide_n]: a 16-bit matrix's rows widened for one GEMM, or NULL */
  uint64_t wide_n;
  double *rope_inv; /* [rope_dims / 2]: the RoPE table of rope_len (model/rope.c), or NULL */
  /* dynamic / longrope: the call's table (cp_model_rope_at) on the host, uploaded when a call's
   * sequence length differs from the last one's (the layers of a pass share it); 0: m->rope. */
  cp_rope_table rope_now;
  int64_t rope_len;
  double *rope_local_inv; /* [rope_dims / 2]: Gemma 3's sliding layers' m->rope_local.inv, or NULL */
  dnorm embed_norm;
  dstack enc, dec;
  cp_arena work;          /* the attention call's host tables, reset per call */
  cp_cuda_attn_bufs attn; /* the attention calls' device tables and pinned statistics, kept across calls */
  /* Non-finite checks queued since the last wait: the device word holds the smallest failing code. */
  unsigned long long *first_bad; /* [1] device: FCHECK_NONE or (check index << FCHECK_SHIFT) + row * heads + head */
  fcheck *checks;
  size_t n_checks, cap_checks;
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

/* ---------------------------------------------------------------- non-finite q, k, v */

/* The CPU engine refuses NaN or Inf in q, k and v right after the projections (check_finite of
 * engine_cpu.c): the attention kernel turns a NaN score row into zeros, so the logits could stay
 * finite. The device runs the same per-row-and-head test without waiting: each check is queued
 * with an index, the kernel keeps the smallest failing code in first_bad, and the host reads it at
 * the next wait (the head's copy, the encoder's end), so the error names the first failure in the
 * CPU's order: the same layer, head, row and tensor. */
#define FCHECK_NONE (~0ULL)
enum { FCHECK_SHIFT = 40, FCHECK_MAX = 1 << 16 };

static int finite_reset(cuda_engine *d) {
  d->n_checks = 0;
  cudaError_t err = cudaMemsetAsync(d->first_bad, 0xff, sizeof *d->first_bad, d->stream);
  return err == cudaSuccess ? 0 : cu_fail(err, "cudaMemsetAsync");
}

/* Waits for the queued work and reports the first non-finite q, k or v, if any. */
static int finite_flush(cuda_engine *d) {
  unsigned long long code = FCHECK_NONE;
  if (!d->n_checks) return 0;
  cudaError_t err = cudaMemcpyAsync(&code, d->first_bad, sizeof code, cudaMemcpyDeviceToHost, d->stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(d->stream);
  if (err != cudaSuccess) return cu_fail(err, "copy to the host");
  const size_t at = (size_t)(code >> FCHECK_SHIFT);
  int rc = finite_reset(d);
  if (code == FCHECK_NONE || rc) return rc;
  assert(at < FCHECK_MAX);
  const fcheck *c = &d->checks[at];
  const uint64_t i = code & ((1ULL << FCHECK_SHIFT) - 1);
  return cp_engine_nonfinite_error(c->layer, (int)(i % (uint64_t)c->heads), c->row0 + (int64_t)(i / (uint64_t)c->heads),
                                   c->what);
}

/* Queues the check of x [n, ld] (heads of d_head values each) for rows row0.. */
static int check_finite(cuda_engine *d, const float *x, int64_t n, int heads, int ld, int layer, const char *what,
                        int64_t row0) {
  char why[256] = "";
  int rc;
  if (n <= 0) return 0;
  assert((uint64_t)n * (uint64_t)heads < (1ULL << FCHECK_SHIFT));
  if (d->n_checks == FCHECK_MAX && (rc = finite_flush(d))) return rc;
  if ((rc = CP_ARRAY_RESERVE(d->checks, d->cap_checks, d->n_checks + 1, "cuda engine: checks")) < 0) return rc;
  const unsigned long long tag = (unsigned long long)d->n_checks << FCHECK_SHIFT;
  d->checks[d->n_checks++] = (fcheck){layer, heads, row0, what};
  if (cpcu_k_nonfinite(d->stream, d->first_bad, x, n, heads, d->m->d_head, ld, tag, why, sizeof why))
    return kern_fail(why);
  return 0;
}

/* ---------------------------------------------------------------- weights */

typedef struct {
  cuda_engine *d;
  int rc;
} upload_ctx;

static const dweight *weight_entry(const cuda_engine *d, const void *host) {
  if (!host) return NULL;
  for (size_t i = 0; i < d->n_w; i++)
    if (d->w[i].host == host) return &d->w[i];
  return NULL;
}

static void *weight_of(const cuda_engine *d, const void *host) {
  const dweight *e = weight_entry(d, host);
  return e ? e->dev : NULL;
}

static int weight_type(const cuda_engine *d, const void *host) {
  const dweight *e = weight_entry(d, host);
  return e ? e->type : CPCU_W_F32;
}

/* A weight of a dtype the device has no widening kernel for is widened on the host a chunk at a time and each
 * chunk copied before the buffer is reused: the device holds F32 (F16/BF16 and GGUF blocks stay as stored,
 * widened per GEMM: see linear). */
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

/* CPCU_W_* of a device dtype (cp_cuda_device_dtype), and back. */
static const struct {
  cp_dtype dtype;
  int wtype;
} WTYPES[] = {{CP_F32, CPCU_W_F32},   {CP_F16, CPCU_W_F16},   {CP_BF16, CPCU_W_BF16},
              {CP_Q8_0, CPCU_W_Q8_0}, {CP_Q4_0, CPCU_W_Q4_0}, {CP_Q4_K, CPCU_W_Q4_K}};

static int wtype_of(cp_dtype t) {
  for (size_t i = 0; i < sizeof WTYPES / sizeof *WTYPES; i++)
    if (WTYPES[i].dtype == t) return WTYPES[i].wtype;
  assert(0 && "cp_cuda_device_dtype gave a dtype the device has no kernel for");
  return CPCU_W_F32;
}

static cp_dtype dtype_of(int wtype) {
  for (size_t i = 0; i < sizeof WTYPES / sizeof *WTYPES; i++)
    if (WTYPES[i].wtype == wtype) return WTYPES[i].dtype;
  return CP_F32;
}

static void upload_weight(void *ctx, const void *w, cp_dtype dtype, size_t count) {
  upload_ctx *u = ctx;
  cuda_engine *d = u->d;
  if (u->rc || weight_of(d, w)) return;
  if ((u->rc = CP_ARRAY_RESERVE(d->w, d->cap_w, d->n_w + 1, "cuda engine: weight table")) < 0) return;
  /* F16/BF16 and GGUF blocks stay as stored (half the device memory, or less); the rest is F32. */
  const cp_dtype dev_dtype = cp_cuda_device_dtype(dtype);
  const bool block = cp_dtype_is_block(dev_dtype);
  /* a block tensor's bytes were bounded when it was read */
  void *dev = block ? dalloc((int64_t)cp_dtype_span(dev_dtype, count), 1, 1)
                    : dalloc((int64_t)count, 1, cp_dtype_size(dev_dtype));
  if (!dev) {
    u->rc = cp_error_code();
    return;
  }
  d->w[d->n_w++] = (dweight){w, dev, wtype_of(dev_dtype)};
  if (dev_dtype != dtype) u->rc = upload_widened(d, dev, w, dtype, count);
  else u->rc = upload(d, dev, w, block ? (size_t)cp_dtype_span(dtype, count) : count * cp_dtype_size(dtype));
}

static dlin dlin_of(const cuda_engine *d, const cp_linear *L) {
  dlin o = {weight_of(d, L->w), weight_of(d, L->b), L->n_out, L->n_in, weight_type(d, L->w)};
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

/* C[M, nb] (row stride ldc) = (accumulate ? C : 0) + A[M, K] (row stride lda) W[nb, K]^T, fp32 W: see the GEMM
 * layout at the top; CP_CUDA_GEMM_ROWS rows of A at a time. */
static int gemm_rows(cuda_engine *d, float *C, int ldc, const float *A, int lda, int64_t M, const float *W, int nb,
                     int K, bool accumulate) {
  const float one = 1.0f, zero = 0.0f;
  for (int64_t r0 = 0; r0 < M; r0 += CP_CUDA_GEMM_ROWS) {
    const int mr = (int)(M - r0 < CP_CUDA_GEMM_ROWS ? M - r0 : CP_CUDA_GEMM_ROWS);
    cublasStatus_t st = cublasGemmEx(d->blas, CUBLAS_OP_T, CUBLAS_OP_N, nb, mr, K, &one, W, CUDA_R_32F, K,
                                     A + (size_t)r0 * lda, CUDA_R_32F, lda, accumulate ? &one : &zero,
                                     C + (size_t)r0 * ldc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, "cublasGemmEx");
  }
  return 0;
}

/* C[M, n_out] (row stride ldc) = (accumulate ? C : 0) + A[M, n_in] (row stride lda) W^T + b. A 16-bit or
 * GGUF block W is widened exactly into d->wide, as many of its rows at a time as fit (cp_cuda_widen_floats;
 * a row is whole blocks), just before their GEMM: cublasGemmEx takes A and B of one type, and narrowing the
 * activations would change the numerics, so the product stays the fp32 one the CPU engine computes. */
static int linear(cuda_engine *d, float *C /* [M, ldc] */, int ldc, const float *A /* [M, lda] */, int lda, int64_t M,
                  const dlin *L, bool accumulate) {
  const int K = L->n_in;
  char why[256] = "";
  int rc;
  if (L->wtype == CPCU_W_F32) {
    if ((rc = gemm_rows(d, C, ldc, A, lda, M, L->w, L->n_out, K, accumulate))) return rc;
  } else {
    assert(d->wide && d->wide_n >= (uint64_t)K);
    const int per = (int)(d->wide_n / (uint64_t)K < (uint64_t)L->n_out ? d->wide_n / (uint64_t)K : (uint64_t)L->n_out);
    for (int n0 = 0; n0 < L->n_out; n0 += per) {
      const int nb = L->n_out - n0 < per ? L->n_out - n0 : per;
      const void *rows = (const char *)L->w + (size_t)n0 * cp_dtype_span(dtype_of(L->wtype), (uint64_t)K);
      if (cpcu_k_widen(d->stream, d->wide, rows, L->wtype, (int64_t)nb * K, why, sizeof why)) return kern_fail(why);
      if ((rc = gemm_rows(d, C + n0, ldc, A, lda, M, d->wide, nb, K, accumulate))) return rc;
    }
  }
  if (L->b && cpcu_k_bias(d->stream, C, ldc, L->b, M, L->n_out, why, sizeof why)) return kern_fail(why);
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
 * row kernel over n * n_heads rows of d_head), or of each whole row with qk_norm_whole (OLMo 2). */
static int head_norm_rows(cuda_engine *d, const dnorm *w, float *x /* [n, n_heads * dh] */, int n_heads, int64_t n) {
  const cp_model *m = d->m;
  const bool whole = m->qk_norm_whole;
  char why[256] = "";
  if (cpcu_k_norm(d->stream, x, x, w->w, NULL, whole ? n : n * n_heads, whole ? n_heads * m->d_head : m->d_head, 0,
                  m->norm_eps, why, sizeof why))
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

/* The table of a call of sequence length seq_len into d->rope_inv (dynamic / longrope only; a
 * pageable source is staged before cudaMemcpyAsync returns, so rope_now may change after). */
static int rope_table(cuda_engine *d, int64_t seq_len) {
  if (!d->m->rope_by_length || seq_len == d->rope_len) return 0;
  double div;
  cp_model_rope_at(d->m, -1, seq_len, &d->rope_now, &div);
  d->rope_len = seq_len;
  return upload(d, d->rope_inv, d->rope_now.inv, (size_t)(d->m->rope_dims / 2) * sizeof(double));
}

/* As cp_ops_rope_rows at layer `layer`'s table (cp_model_rope_at): Gemma 3's sliding layers rotate
 * with rope_local_inv, every other layer with rope_inv (the call's, rope_table). */
static int rope_rows(cuda_engine *d, int layer, float *x, int ld, int n_heads, int64_t n, int64_t pos0, bool fixed) {
  const cp_model *m = d->m;
  char why[256] = "";
  double div;
  const cp_rope_table *tab = cp_model_rope_at(m, layer, d->rope_len, &d->rope_now, &div);
  const double ms = fixed ? tab->mscale * tab->mscale : tab->mscale; /* as cp_ops_rope_rows */
  if (cpcu_k_rope(d->stream, x, ld, n_heads, m->d_head, m->rope_dims,
                  tab == &m->rope_local ? d->rope_local_inv : d->rope_inv, div, ms, n, pos0, fixed, why, sizeof why))
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
  const int H = m->n_heads, Hkv = m->n_kv_heads, layer = mc->layer;
  int rc;
  if (mc->kind == CP_ATTN_CROSS) {
    if ((rc = linear(d, b->q, qd, hin, D, n, &ly->cq, false))) return rc;
    cp_kv *ckv = &cross->kv[layer];
    if (!ckv->ready) {
      if ((rc = linear(d, ckv->k, kvd, cross->enc, D, cross->n_enc, &ly->ck, false)) ||
          (rc = linear(d, ckv->v, kvd, cross->enc, D, cross->n_enc, &ly->cv, false)) ||
          (rc = check_finite(d, ckv->k, cross->n_enc, Hkv, kvd, layer, "cross-attention key", 0)) ||
          (rc = check_finite(d, ckv->v, cross->n_enc, Hkv, kvd, layer, "cross-attention value", 0)))
        return rc;
      ckv->ready = true;
    }
    *n_keys = cross->n_enc;
    *K = ckv->k, *V = ckv->v;
    return check_finite(d, b->q, n, H, qd, layer, "cross-attention query", q_off);
  }
  assert(q_off + n <= kv->cap);
  float *kc = kv->k + (size_t)q_off * kvd, *vc = kv->v + (size_t)q_off * kvd;
  if ((rc = linear(d, b->q, qd, hin, D, n, &ly->q, false)) || (rc = linear(d, kc, kvd, hin, D, n, &ly->k, false)) ||
      (rc = linear(d, vc, kvd, hin, D, n, &ly->v, false)))
    return rc;
  /* Before MPT's clamp, which maps NaN to a bound. */
  if ((rc = check_finite(d, b->q, n, H, qd, layer, "attention query", q_off)) ||
      (rc = check_finite(d, kc, n, Hkv, kvd, layer, "attention key", q_off)) ||
      (rc = check_finite(d, vc, n, Hkv, kvd, layer, "attention value", q_off)))
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
  int rc = rope_table(d, q_off + n);
  if (rc) return rc;
  if (raw) {
    assert(kv->k_raw);
    if ((rc = dcopy(d, kv->k_raw + (size_t)q_off * kvd, kc, (size_t)n * kvd * sizeof(float))) ||
        (rc = dcopy(d, b->qraw, b->q, qbytes)))
      return rc;
    c->k_raw = kv->k_raw;
  }
  if ((rc = rope_rows(d, c->plan->layer, b->q, qd, H, n, q_off, false)) ||
      (rc = rope_rows(d, c->plan->layer, kc, kvd, m->n_kv_heads, n, q_off, false)))
    return rc;
  if (c->tab.rope_far >= 0) {
    assert(raw);
    if ((rc = dcopy(d, b->qfar, b->qraw, qbytes)) ||
        (rc = rope_rows(d, c->plan->layer, b->qfar, qd, H, n, c->tab.rope_far, true)))
      return rc;
    c->q_far = b->qfar;
  }
  if (c->plan->top_k) {
    assert(raw);
    if ((rc = dcopy(d, b->qtopk, b->qraw, qbytes)) ||
        (rc = rope_rows(d, c->plan->layer, b->qtopk, qd, H, n, c->plan->top_k_distance, true)))
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
  /* On this engine's stream, after the projections queued there. */
  if ((rc = cp_cuda_attention_resident(d->be, &c, d->stream, &d->attn))) goto done;
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

static int cuda_scale(void *be, float *x, int64_t count, float f) {
  cuda_engine *d = be;
  char why[256] = "";
  return cpcu_k_scale(d->stream, x, count, f, why, sizeof why) ? kern_fail(why) : 0;
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
  if (cpcu_k_embed(d->stream, b->x, d->embed, d->embed_type, b->ids, d->pos_embed, q_off, n, m->d_model, why,
                   sizeof why))
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
  dlin L = {d->lm_head, NULL, V, D, d->lm_head_type};
  if ((rc = linear(d, dl, V, b->h, D, rows, &L, false)) ||
      (rc = download(d, logits, dl, (size_t)rows * V * sizeof *logits)))
    return rc;
  return finite_flush(d);
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

/* With `what`: waits and reports any failure, a non-finite q, k or v included. Without (the end of a
 * run, failed or not): waits and forgets the checks queued, so that the next run starts clean. */
static int cuda_sync(void *be, const char *what) {
  cuda_engine *d = be;
  cudaError_t err = d->stream ? cudaStreamSynchronize(d->stream) : cudaSuccess;
  if (!what) {
    if (d->first_bad && err == cudaSuccess) (void)finite_reset(d);
    return 0;
  }
  return err != cudaSuccess ? cu_fail(err, what) : finite_flush(d);
}

static void cuda_destroy(void *be) {
  cuda_engine *d = be;
  if (!d) return;
  if (d->stream) cudaStreamSynchronize(d->stream);
  for (size_t i = 0; i < d->n_w; i++) dfree(d->w[i].dev);
  dfree(d->rope_inv);
  dfree(d->rope_local_inv);
  dfree(d->wide);
  dfree(d->first_bad);
  cp_cuda_attn_bufs_free(d->be, &d->attn);
  free(d->checks);
  free(d->w);
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
  if (!(d->first_bad = dalloc(1, 1, sizeof *d->first_bad))) {
    rc = cp_error_code();
    goto done;
  }
  if ((rc = finite_reset(d))) goto done;
  upload_ctx u = {d, 0};
  cp_cuda_for_each_weight(m, upload_weight, &u);
  if ((rc = u.rc)) goto done;
  d->embed = weight_of(d, m->embed), d->pos_embed = weight_of(d, m->pos_embed), d->lm_head = weight_of(d, m->lm_head);
  d->embed_type = weight_type(d, m->embed), d->lm_head_type = weight_type(d, m->lm_head);
  if ((d->wide_n = cp_cuda_widen_floats(m)) > 0 && !(d->wide = dalloc((int64_t)d->wide_n, 1, sizeof(float)))) {
    rc = cp_error_code();
    goto done;
  }
  d->embed_norm = dnorm_of(d, &m->embed_norm);
  if ((rc = map_stack(d, &d->enc, &m->encoder)) || (rc = map_stack(d, &d->dec, &m->decoder))) goto done;
  /* The RoPE frequency table, as the CPU engine rotates with it (not recomputed on the device). */
  if (m->pos == CP_POS_ROPE && m->rope_dims >= 2 &&
      (!(d->rope_inv = dalloc(m->rope_dims / 2, 1, sizeof(double))) ||
       (rc = upload(d, d->rope_inv, m->rope.inv, (size_t)(m->rope_dims / 2) * sizeof(double))))) {
    if (!rc) rc = cp_error_code();
    goto done;
  }
  if (m->rope_local.n > 0 &&
      (!(d->rope_local_inv = dalloc(m->rope_dims / 2, 1, sizeof(double))) ||
       (rc = upload(d, d->rope_local_inv, m->rope_local.inv, (size_t)(m->rope_dims / 2) * sizeof(double))))) {
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
    .scale = cuda_scale,
    .final_norm = cuda_final_norm,
    .head = cuda_head,
};
