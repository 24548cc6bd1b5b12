/* The engine's arithmetic on whole rows, each spread over the thread pool: matrix products
 * (OpenBLAS), LayerNorm/RMSNorm, the feed-forward block and RoPE rotations. Private to engine/. */
#ifndef CTXPATCH_ENGINE_LAYER_OPS_H
#define CTXPATCH_ENGINE_LAYER_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "engine/pool.h"

enum { CP_OPS_FFN_CHUNK = 256 }; /* rows of the FFN's hidden layer held at once */
/* Row blocks of a pass start at multiples of this from its first row (GEMM tiles, attention row
 * tiles, FFN chunks): the CPU's cp_backend_ops.row_align (a shared prefix is a multiple of it). */
enum { CP_OPS_ROW_ALIGN = 128 };

/* C[M, n_out] (row stride ldc) = (accumulate ? C : 0) + A[M, n_in] W^T + b. W is read in its
 * stored dtype (L->dtype: F32 directly, F16/BF16 widened and GGUF quant blocks decoded tile by
 * tile inside the product; F16/BF16 and Q8_0 tiles of at most 4 rows multiplied directly by the
 * kernels of engine/kern16.h and engine/kernq8.h, longer tiles by engine/kerntile.h's, F32 weights
 * too, unless CTXPATCH_WEIGHTS=f32: then OpenBLAS sgemm on widened tiles, as before issue 34). */
void cp_ops_linear(cp_pool *pool, float *C /* [M, ldc] */, int ldc, const float *A /* [M, lda] */, int lda,
                   int64_t M, const cp_linear *L, bool accumulate);
/* y = norm(x) row by row (the model's LayerNorm or RMSNorm); y may alias x. */
void cp_ops_norm_rows(cp_pool *pool, const cp_model *m, const cp_norm_weights *w, const float *x /* [n, D] */,
                      float *y /* [n, D] */, int64_t n);
/* x = RMSNorm(x) of each of the n_heads heads of n rows of x (d_head wide, weight w [d_head], eps
 * norm_eps): Qwen3's q_norm / k_norm, rows packed (stride n_heads * d_head). With m->qk_norm_whole
 * (OLMo 2) each whole row instead (weight w [n_heads * d_head]). */
void cp_ops_head_norm_rows(cp_pool *pool, const cp_model *m, const cp_norm_weights *w,
                           float *x /* [n, n_heads * d_head] */, int n_heads, int64_t n);
/* dst[n, D] += FFN(h[n, D]) (dst = it without `accumulate`), CP_OPS_FFN_CHUNK rows at a time
 * through up and gate ([CP_OPS_FFN_CHUNK, d_ff] each; gate unused unless the FFN is gated). */
void cp_ops_ffn(cp_pool *pool, const cp_model *m, const cp_layer *ly, const float *h, float *dst, int64_t n,
                float *up, float *gate, bool accumulate);
/* Rotates the first rope_dims of each of n_heads heads of rows x[r] (stride ld) by pos0 + r, or every
 * row by pos0 when `fixed` (a relative rotation of queries scored against unrotated keys: cos and
 * sin carry the table's mscale squared, once for each side), at the frequencies of `tab` with positions
 * divided by `div` (the layer's and the call's: cp_model_rope_at). */
void cp_ops_rope_rows(cp_pool *pool, const cp_model *m, const cp_rope_table *tab, double div, float *x, int ld,
                      int n_heads, int64_t n, int64_t pos0, bool fixed);

#endif
