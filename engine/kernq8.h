/* Kernels on GGUF Q8_0 weights for the CPU engine, private to engine/: the decode GEMV straight on
 * the blocks, and their decoding to float32 (the prefill GEMM's tiles, multiplied by
 * engine/kerntile.h). Each has an AVX2 + FMA + F16C version and a portable C version, chosen as engine/kern16.h
 * chooses (cp_k16_isa_in_use), with the same bits.
 *
 * A Q8_0 block is 34 bytes: an F16 scale d, then 32 int8 q; weight j is d * q[j], exact in float32
 * (11 by 8 significant bits) and equal to formats/gguf_quant.c's decoding. The GEMV multiplies
 * those float32 weights with float32 activations in kern16.h's order: lane j (of 32) accumulates
 * weight j of every block with a fused multiply-add, blocks in increasing order, and the lanes are
 * summed by kern16.h's tree. The activations are not quantised (llama.cpp quantises them to int8
 * per block for an integer dot product: faster, but its error is about 1e-3 of a dot's terms;
 * docs/perf.md "Q8_0 kernels" has the measured choice). */
#ifndef CTXPATCH_ENGINE_KERNQ8_H
#define CTXPATCH_ENGINE_KERNQ8_H

#include <stddef.h>

enum { CP_Q8_BLOCK = 32, CP_Q8_BLOCK_BYTES = 34 };

/* C[r, i] = (accumulate ? C[r, i] : 0) + dot(W row i, A row r) for i in [0, n), r in [0, m);
 * W [n, K / 32 blocks], K a multiple of 32. */
void cp_q8_gemv(float *C /* [m, ldc] */, int ldc, const void *W /* [n, K / 32 blocks] */, int n, int K,
                const float *A /* [m, lda] */, int lda, int m, int accumulate);
/* dst[i] = weight i of the nblocks blocks at src (exact). */
void cp_q8_widen(float *dst /* [32 * nblocks] */, const void *src /* [nblocks] blocks */, size_t nblocks);

#endif
