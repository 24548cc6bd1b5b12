/* Kernels on 16-bit (F16, BF16) weights for the CPU engine, private to engine/: dot products of
 * weight rows with float32 vectors (the decode GEMV) and the widening of weight rows to float32
 * (the prefill GEMM's tiles, multiplied by engine/kerntile.h). Each has an AVX2 + FMA + F16C version,
 * chosen at run time by cpuid, and a portable C version.
 *
 * Accumulation order (both versions, so they give the same bits): a dot product of K elements
 * keeps 32 float32 lanes; lane j accumulates w[k] * x[k] for k = j mod 32 with a fused
 * multiply-add, in increasing k; the last K mod 32 elements are one more step with zeros beyond K.
 * The lanes are then summed in a fixed tree: t[j] = (lane j + lane j+16) + (lane j+8 + lane j+24)
 * for j < 8, then (t0+t4 + t2+t6) + (t1+t5 + t3+t7). Widening is exact. */
#ifndef CTXPATCH_ENGINE_KERN16_H
#define CTXPATCH_ENGINE_KERN16_H

#include <stddef.h>

#include "ctxpatch/formats/tensor.h"

typedef enum {
  CP_K16_PORTABLE = 1, /* the C version */
  CP_K16_AVX2 = 2,     /* AVX2 + FMA + F16C */
} cp_k16_isa;

/* The version in use: the fastest the CPU has, unless cp_k16_force_isa chose one. */
cp_k16_isa cp_k16_isa_in_use(void);
/* Forces a version (tests and benches compare them); 0 goes back to the CPU's choice. Returns
 * -1 (nothing changed) when the CPU lacks the version asked for. Not thread-safe: call it between
 * runs. */
int cp_k16_force_isa(cp_k16_isa isa);

/* Whether the engine multiplies 16-bit weights directly (the default; prefill tiles and float32
 * weights by engine/kerntile.h) or, as before issue 34, always widens them into float32 tiles for
 * OpenBLAS sgemm, float32 weights too (CTXPATCH_WEIGHTS=f32, for comparison).
 * cp_k16_read_env reads the variable (unset or "16": direct; "f32": widened tiles) and returns 0,
 * or CP_EARG with the error set for any other value. Called by the CPU engine's create. */
int cp_k16_read_env(void);
int cp_k16_direct(void);

/* y[r] = (accumulate ? y[r] : 0) + dot(W row r, x) for r in [0, n): W [n, ldw] of dtype (F16 or
 * BF16), rows of K elements. */
void cp_k16_gemv(float *y /* [n] */, const void *W /* [n, ldw] */, cp_dtype dtype, size_t ldw, int n, int K,
                 const float *x /* [K] */, int accumulate);
/* dst[i] = src[i] widened to float32 (exact) for i in [0, count); dtype F16 or BF16. */
void cp_k16_widen(float *dst /* [count] */, const void *src /* [count] */, cp_dtype dtype, size_t count);

/* The fixed tree that ends every dot product here and in engine/kernq8.h: the sum of 8 lanes. */
static inline float cp_k16_reduce8(const float *t /* [8] */) {
  float u0 = t[0] + t[4], u1 = t[1] + t[5], u2 = t[2] + t[6], u3 = t[3] + t[7];
  return (u0 + u2) + (u1 + u3);
}

#endif
