/* Boundary between the CUDA engine's host code (engine/cuda/engine_cuda.c, C) and its small kernels
 * (engine/cuda/kernels.cu): embedding, LayerNorm/RMSNorm, bias, activations, residual adds, MPT's
 * clamp and RoPE, each launched on the caller's stream. Internal to engine/.
 *
 * Every float pointer is a device pointer; `stream` is a cudaStream_t (void * keeps this header
 * free of CUDA types). Each function returns 0, or -1 with the runtime's reason in why[0..n).
 * tests/cuda_emulate_kernels.cpp compiles the same kernel source for the host
 * (tests/test_cuda_engine_emulated.c). Arithmetic mirrors engine/layer_ops.c (norm moments and
 * RoPE angles in double) so the two engines agree within the goldens' tolerance. */
#ifndef CTXPATCH_ENGINE_CUDA_KERNELS_H
#define CTXPATCH_ENGINE_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of a weight kept on the device as stored (engine_cuda.c's upload); the GGUF block
 * types' layouts are those of include/ctxpatch/formats/gguf.h (rows are whole blocks). */
enum { CPCU_W_F32 = 0, CPCU_W_F16 = 1, CPCU_W_BF16 = 2, CPCU_W_Q8_0 = 3, CPCU_W_Q4_0 = 4, CPCU_W_Q4_K = 5 };

/* x[r] = embed[ids[r]] widened from `wtype` (+ pos_embed[pos0 + r] unless NULL); ids already
 * checked on the host. */
int cpcu_k_embed(void *stream, float *x /* [n, D] */, const void *embed /* [V, D] of wtype */, int wtype,
                 const int64_t *ids /* [n] device */, const float *pos_embed /* [*, D] or NULL */,
                 int64_t pos0, int64_t n, int D, char *why, size_t wn);
/* dst = src widened exactly from F16, BF16 or a GGUF block type (wtype), as cp_convert_to_f32 (the
 * blocks as formats/gguf_quant.c's dequantisers); src starts on a block. */
int cpcu_k_widen(void *stream, float *dst /* [n] */, const void *src /* [n] of wtype */, int wtype, int64_t n,
                 char *why, size_t wn);
/* The CPU engine's refusal of non-finite q, k, v (engine_cpu.c check_finite), without a sync: for
 * each row r < n and head h of x, if the sum of x * 0 over the head's dh values is not 0 (a NaN or
 * Inf), *first = min(*first, tag + r * heads + h). The host reads *first back later and decodes
 * the tag, so the smallest code names the first failure in the CPU's order. */
int cpcu_k_nonfinite(void *stream, unsigned long long *first /* device */, const float *x /* [n, ld] */, int64_t n,
                     int heads, int dh, int ld, unsigned long long tag, char *why, size_t wn);
/* y = norm(x) per row: LayerNorm (layer != 0, w, b) or RMSNorm (b NULL); y may alias x. */
int cpcu_k_norm(void *stream, float *y /* [n, D] */, const float *x /* [n, D] */, const float *w /* [D] */,
                const float *b /* [D] or NULL */, int64_t n, int D, int layer, float eps, char *why, size_t wn);
/* C[r, c] += b[c] for r < M, c < N (row stride ldc). */
int cpcu_k_bias(void *stream, float *C /* [M, ldc] */, int ldc, const float *b /* [N] */, int64_t M, int N,
                char *why, size_t wn);
/* up = act(gate) * up (gate non-NULL) or act(up); act is a cp_act. */
int cpcu_k_act(void *stream, float *up /* [n] */, const float *gate /* [n] or NULL */, int64_t n, int act,
               char *why, size_t wn);
/* y = a + b elementwise (y may alias a or b). */
int cpcu_k_add(void *stream, float *y /* [n] */, const float *a /* [n] */, const float *b /* [n] */, int64_t n,
               char *why, size_t wn);
/* x *= s. */
int cpcu_k_scale(void *stream, float *x /* [n] */, int64_t n, float s, char *why, size_t wn);
/* x = min(max(x, -c), c). */
int cpcu_k_clamp(void *stream, float *x /* [n] */, int64_t n, float c, char *why, size_t wn);
/* Rotates the first `rot` dims of each of n_heads heads (head dim dh) of rows x[r] (stride ld) by
 * pos0 + r, or every row by pos0 when `fixed`: rotate-half layout, angle (pos / scale) inv[a], cos
 * and sin times mscale, as cp_ops_rope_rows. */
int cpcu_k_rope(void *stream, float *x /* [n, ld] */, int ld, int n_heads, int dh, int rot,
                const double *inv /* [rot / 2] device */, double scale, double mscale, int64_t n, int64_t pos0,
                int fixed, char *why, size_t wn);

#ifdef __cplusplus
}
#endif

#endif
