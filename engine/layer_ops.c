/* Row arithmetic of the CPU engine on the thread pool: see engine/layer_ops.h. */
#include "engine/layer_ops.h"

#include <cblas.h>
#include <math.h>

#include "base/sanitizer.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/kern16.h"
#include "engine/kernq8.h"
#include "engine/kerntile.h"

/* GEMM tiles: C in [GEMM_MB, GEMM_NB] blocks, one per pool item; an F16/BF16/quant weight block is
 * widened GEMM_KB columns at a time into the worker's scratch ([GEMM_NB, GEMM_KB] floats, 512 KiB:
 * about an L2), so no float32 copy of a weight matrix ever exists. */
enum { GEMM_MB = 128, GEMM_NB = 256, GEMM_KB = 512, ROW_CHUNK = 64 };
/* A tile of at most this many rows (decode's one row, a short last tile) multiplies F16/BF16 and
 * Q8_0 weights directly (cp_k16_gemv, engine/kern16.h; cp_q8_gemv, engine/kernq8.h): a widened
 * tile would be used too few times to pay for the widening. The choice depends on the tile's rows
 * only, which do not depend on where a pass starts (row_align), so a row's result does not either. */
enum { GEMV_MAX_ROWS = 4 };
_Static_assert(GEMM_NB * GEMM_KB <= CP_POOL_SCRATCH_FLOATS, "weight tile must fit the pool's scratch");
_Static_assert(CP_OPS_ROW_ALIGN % GEMM_MB == 0 && CP_OPS_FFN_CHUNK % GEMM_MB == 0, "row blocks must align");

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct {
  cp_pool *pool;
  int64_t M;
  int N, K;
  const float *A;
  int lda;
  const void *W; /* [N, K] of wtype */
  cp_dtype wtype;
  const float *b;
  float *C;
  int ldc;
  bool accumulate;
} gemm_job;

/* The tile kernel (engine/kerntile.h) for prefill tiles, or OpenBLAS sgemm. Sanitizer builds take
 * sgemm: the instrumented kernel made their test tier 1.8x slower (855 -> 1529 s in CI), while
 * test_kern16 still runs the kernel itself under the sanitizers. */
static bool use_tiles(void) { return !CP_ASAN && cp_k16_direct(); }

static void gemm_item(void *ctx, size_t item, int worker) {
  const gemm_job *g = ctx;
  size_t nbn = (size_t)(g->N + GEMM_NB - 1) / GEMM_NB;
  int64_t m0 = (int64_t)(item / nbn) * GEMM_MB;
  int n0 = (int)(item % nbn) * GEMM_NB;
  int mc = (int)min64(GEMM_MB, g->M - m0), nc = g->N - n0 < GEMM_NB ? g->N - n0 : GEMM_NB;
  float *C = g->C + (size_t)m0 * g->ldc + n0;
  const float *A = g->A + (size_t)m0 * g->lda;
  const bool w16 = g->wtype == CP_F16 || g->wtype == CP_BF16, q8 = g->wtype == CP_Q8_0;
  if (q8 && mc <= GEMV_MAX_ROWS && cp_k16_direct()) {
    cp_q8_gemv(C, g->ldc, (const unsigned char *)g->W + (size_t)n0 * cp_dtype_span(CP_Q8_0, (uint64_t)g->K),
               nc, g->K, A, g->lda, mc, g->accumulate);
  } else if (w16 && mc <= GEMV_MAX_ROWS && cp_k16_direct()) {
    const size_t row_bytes = 2 * (size_t)g->K;
    for (int r = 0; r < mc; r++)
      cp_k16_gemv(C + (size_t)r * g->ldc, (const unsigned char *)g->W + (size_t)n0 * row_bytes, g->wtype,
                  (size_t)g->K, nc, g->K, A + (size_t)r * g->lda, g->accumulate);
  } else if (g->wtype == CP_F32 && use_tiles()) {
    /* the tile kernel in the same K blocks as the widened path below, so a stored matrix and its
     * float32 copy give the same bits */
    const float *W = (const float *)g->W + (size_t)n0 * g->K;
    for (int k0 = 0; k0 < g->K; k0 += GEMM_KB)
      cp_tile_gemm(C, g->ldc, A + k0, g->lda, mc, W + k0, g->K, nc, (int)min64(GEMM_KB, g->K - k0),
                   k0 > 0 || g->accumulate);
  } else if (g->wtype == CP_F32) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mc, nc, g->K, 1.0f, A, g->lda,
                (const float *)g->W + (size_t)n0 * g->K, g->K, g->accumulate ? 1.0f : 0.0f, C, g->ldc);
  } else {
    /* Stored F16/BF16, or GGUF Q8_0/Q4_0/Q4_K blocks: widen (decode) W[n0 .. n0+nc, k0 .. k0+kc]
     * into the worker's tile, multiply, add the next K block on top. Products and sums stay
     * float32. A row is K elements in row_bytes (whole blocks: K is a multiple of the block,
     * checked at open, and so are k0 and kc since GEMM_KB is a multiple of 32 and 256). */
    float *tile = cp_pool_scratch(g->pool, worker); /* [nc, kc] */
    const size_t row_bytes = (size_t)cp_dtype_span(g->wtype, (uint64_t)g->K);
    const unsigned char *W = (const unsigned char *)g->W + (size_t)n0 * row_bytes;
    for (int k0 = 0; k0 < g->K; k0 += GEMM_KB) {
      int kc = g->K - k0 < GEMM_KB ? g->K - k0 : GEMM_KB;
      const size_t at = (size_t)cp_dtype_span(g->wtype, (uint64_t)k0);
      for (int r = 0; r < nc; r++) /* F16/BF16 and whole blocks always widen: cannot fail */
        if (w16 && cp_k16_direct()) /* exact either way; the vector widening is faster */
          cp_k16_widen(tile + (size_t)r * kc, W + (size_t)r * row_bytes + at, g->wtype, (size_t)kc);
        else if (q8 && cp_k16_direct())
          cp_q8_widen(tile + (size_t)r * kc, W + (size_t)r * row_bytes + at, (size_t)kc / CP_Q8_BLOCK);
        else
          (void)cp_convert_to_f32(tile + (size_t)r * kc, W + (size_t)r * row_bytes + at, g->wtype, (uint64_t)kc);
      if (use_tiles()) /* engine/kerntile.h; CTXPATCH_WEIGHTS=f32: sgemm, as before */
        cp_tile_gemm(C, g->ldc, A + k0, g->lda, mc, tile, kc, nc, kc, k0 > 0 || g->accumulate);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mc, nc, kc, 1.0f, A + k0, g->lda, tile, kc,
                    k0 > 0 || g->accumulate ? 1.0f : 0.0f, C, g->ldc);
    }
  }
  if (g->b)
    for (int r = 0; r < mc; r++)
      for (int c = 0; c < nc; c++) C[(size_t)r * g->ldc + c] += g->b[n0 + c];
}

void cp_ops_linear(cp_pool *pool, float *C, int ldc, const float *A, int lda, int64_t M, const cp_linear *L,
                   bool accumulate) {
  if (M <= 0) return;
  gemm_job g = {pool, M, L->n_out, L->n_in, A, lda, L->w, L->dtype, L->b, C, ldc, accumulate};
  size_t items = (size_t)((M + GEMM_MB - 1) / GEMM_MB) * (size_t)((L->n_out + GEMM_NB - 1) / GEMM_NB);
  cp_pool_run(pool, items, gemm_item, &g);
}

typedef struct {
  const cp_norm_weights *w;
  const float *x;
  float *y;
  int64_t n;
  int D;      /* row width */
  bool layer; /* LayerNorm (mean removed), else RMSNorm */
  float eps;
} norm_job;

static void norm_item(void *ctx, size_t item, int worker) {
  (void)worker;
  const norm_job *j = ctx;
  const int D = j->D;
  int64_t r0 = (int64_t)item * ROW_CHUNK, r1 = min64(r0 + ROW_CHUNK, j->n);
  for (int64_t r = r0; r < r1; r++) {
    const float *x = j->x + (size_t)r * D;
    float *y = j->y + (size_t)r * D;
    double mean = 0, var = 0;
    if (j->layer) {
      for (int d = 0; d < D; d++) mean += x[d];
      mean /= D;
    }
    for (int d = 0; d < D; d++) var += ((double)x[d] - mean) * ((double)x[d] - mean);
    var /= D;
    float inv = (float)(1.0 / sqrt(var + (double)j->eps));
    for (int d = 0; d < D; d++) {
      float v = (float)((double)x[d] - mean) * inv * j->w->w[d];
      y[d] = j->w->b ? v + j->w->b[d] : v;
    }
  }
}

void cp_ops_norm_rows(cp_pool *pool, const cp_model *m, const cp_norm_weights *w, const float *x, float *y,
                      int64_t n) {
  norm_job j = {w, x, y, n, m->d_model, m->norm == CP_NORM_LAYER, m->norm_eps};
  cp_pool_run(pool, (size_t)((n + ROW_CHUNK - 1) / ROW_CHUNK), norm_item, &j);
}

void cp_ops_head_norm_rows(cp_pool *pool, const cp_model *m, const cp_norm_weights *w, float *x, int n_heads,
                           int64_t n) {
  /* Rows of heads are contiguous: n rows of n_heads heads are n * n_heads rows of d_head. OLMo 2
   * norms the whole row (Olmo2Attention.forward: q_norm(q_proj(x)) before the head split). */
  norm_job j = m->qk_norm_whole ? (norm_job){w, x, x, n, n_heads * m->d_head, false, m->norm_eps}
                                : (norm_job){w, x, x, n * n_heads, m->d_head, false, m->norm_eps};
  cp_pool_run(pool, (size_t)((j.n + ROW_CHUNK - 1) / ROW_CHUNK), norm_item, &j);
}

static float act(cp_act a, float x) {
  switch (a) {
    case CP_ACT_RELU: return x > 0 ? x : 0.0f;
    case CP_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case CP_ACT_GELU_TANH: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case CP_ACT_SILU: return x / (1.0f + expf(-x));
  }
  return x;
}

typedef struct {
  cp_act a;
  float *up;
  const float *gate;
  int64_t n;
} act_job;

static void act_item(void *ctx, size_t item, int worker) {
  (void)worker;
  const act_job *j = ctx;
  int64_t i0 = (int64_t)item * 4096, i1 = min64(i0 + 4096, j->n);
  for (int64_t i = i0; i < i1; i++) j->up[i] = j->gate ? act(j->a, j->gate[i]) * j->up[i] : act(j->a, j->up[i]);
}

void cp_ops_ffn(cp_pool *pool, const cp_model *m, const cp_layer *ly, const float *h, float *dst, int64_t n,
                float *up, float *gate, bool accumulate) {
  const int D = m->d_model, F = m->d_ff;
  for (int64_t r0 = 0; r0 < n; r0 += CP_OPS_FFN_CHUNK) {
    int64_t nr = min64(CP_OPS_FFN_CHUNK, n - r0);
    cp_ops_linear(pool, up, F, h + (size_t)r0 * D, D, nr, &ly->up, false);
    if (m->gated_ffn) cp_ops_linear(pool, gate, F, h + (size_t)r0 * D, D, nr, &ly->gate, false);
    act_job aj = {m->act, up, m->gated_ffn ? gate : NULL, nr * F};
    cp_pool_run(pool, (size_t)((aj.n + 4095) / 4096), act_item, &aj);
    cp_ops_linear(pool, dst + (size_t)r0 * D, D, up, F, nr, &ly->down, accumulate);
  }
}

/* ---------------------------------------------------------------- RoPE */

/* Rotates the first rope_dims of each of n_heads head vectors in x (row stride ld) by
 * `pos` positions (divided by the linear scaling factor) at the model's frequencies
 * (tab: the call's table, model/rope.h; yarn and longrope also scale cos and sin), rotate-half layout as HF.
 * Angles in double like the PyTorch reference. */
static void rope_rotate(const cp_model *m, const cp_rope_table *tab, double div, float *x, int n_heads, double pos,
                        double ms) {
  const int half = m->rope_dims / 2, dh = m->d_head;
  const double t = pos / div;
  for (int a = 0; a < half; a++) {
    double ang = t * tab->inv[a], c = cos(ang) * ms, s = sin(ang) * ms;
    for (int hh = 0; hh < n_heads; hh++) {
      float *v = x + (size_t)hh * dh;
      double x1 = v[a], x2 = v[a + half];
      v[a] = (float)(x1 * c - x2 * s);
      v[a + half] = (float)(x2 * c + x1 * s);
    }
  }
}

typedef struct {
  const cp_model *m;
  const cp_rope_table *tab; /* the layer's and the call's (cp_model_rope_at) */
  double div;               /* its position divisor */
  float *x;
  int ld, n_heads;
  int64_t n;
  int64_t pos0;   /* row r rotates by pos0 + r ... */
  bool fixed;     /* ... or every row by pos0 */
} rope_job;

static void rope_item(void *ctx, size_t item, int worker) {
  (void)worker;
  const rope_job *j = ctx;
  int64_t r0 = (int64_t)item * ROW_CHUNK, r1 = min64(r0 + ROW_CHUNK, j->n);
  /* A fixed rotation is relative: the query meets an unrotated key, so it carries both sides'
   * cos/sin factor (yarn: mscale^2, as q R(i)^T R(j) k scaled on each side). */
  const double ms = j->fixed ? j->tab->mscale * j->tab->mscale : j->tab->mscale;
  for (int64_t r = r0; r < r1; r++)
    rope_rotate(j->m, j->tab, j->div, j->x + (size_t)r * j->ld, j->n_heads,
                (double)(j->fixed ? j->pos0 : j->pos0 + r), ms);
}

void cp_ops_rope_rows(cp_pool *pool, const cp_model *m, const cp_rope_table *tab, double div, float *x, int ld,
                      int n_heads, int64_t n, int64_t pos0, bool fixed) {
  rope_job j = {m, tab, div, x, ld, n_heads, n, pos0, fixed};
  cp_pool_run(pool, (size_t)((n + ROW_CHUNK - 1) / ROW_CHUNK), rope_item, &j);
}
