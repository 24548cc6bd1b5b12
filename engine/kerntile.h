/* The prefill GEMM's tile product for the CPU engine, private to engine/: a tile of activation rows
 * times a tile of weight rows already widened to float32 (F16/BF16 by engine/kern16.h, Q8_0 by
 * engine/kernq8.h, other GGUF quants by formats/), both with K contiguous.
 *
 * The AVX2 + FMA version (chosen as engine/kern16.h chooses: cp_k16_isa_in_use) is a dot-product
 * micro-kernel on blocks of up to 4 activation rows by 3 weight rows held in 12 registers, reading
 * the tiles where they lie: no packing, unlike OpenBLAS's sgemm (docs/perf.md "Prefill tiles").
 * Accumulation: each output keeps 8 float32 lanes, lane j summing A[r, k] * W[i, k] for k = j mod 8
 * with a fused multiply-add in increasing k (zeros past kc), then the lanes are summed as
 * ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)) and added to C. The block shape does not enter, so an
 * output's bits depend on its row and column only, never on where a tile or a pass starts.
 * The portable version (other CPUs) is plain C in the same order, so the same bits; on x86 without
 * AVX2 it is slow (fmaf is a libm call there), as engine/kern16.h's is. */
#ifndef CTXPATCH_ENGINE_KERNTILE_H
#define CTXPATCH_ENGINE_KERNTILE_H

/* C[r, i] = (accumulate ? C[r, i] : 0) + sum over k < kc of A[r, k] * W[i, k], for r < m, i < n. */
void cp_tile_gemm(float *C /* [m, ldc] */, int ldc, const float *A /* [m, lda] */, int lda, int m,
                  const float *W /* [n, ldw] */, int ldw, int n, int kc, int accumulate);

#endif
