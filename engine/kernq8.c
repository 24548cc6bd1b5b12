/* Kernels on Q8_0 weights (engine/kernq8.h): an AVX2 + FMA + F16C version and a portable one with
 * the same accumulation order, so both give the same bits (fmaf is the fused multiply-add the
 * vector version does lane by lane). */
#include "engine/kernq8.h"

#include <math.h>

#include "ctxpatch/base/le.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/kern16.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define Q8_X86 1
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------- portable */

static float dot_portable(const unsigned char *w /* [nb] blocks */, const float *x /* [32 nb] */, int nb) {
  float acc[CP_Q8_BLOCK] = {0};
  for (int b = 0; b < nb; b++, w += CP_Q8_BLOCK_BYTES, x += CP_Q8_BLOCK) {
    const float d = cp_f16_to_f32(cp_le16(w));
    const signed char *q = (const signed char *)w + 2;
    for (int j = 0; j < CP_Q8_BLOCK; j++) acc[j] = fmaf(d * (float)q[j], x[j], acc[j]);
  }
  float t[8];
  for (int j = 0; j < 8; j++) t[j] = (acc[j] + acc[j + 16]) + (acc[j + 8] + acc[j + 24]);
  return cp_k16_reduce8(t);
}

/* ---------------------------------------------------------------- AVX2 + FMA + F16C */

#ifdef Q8_X86
#define Q8_TARGET __attribute__((target("avx2,fma,f16c")))

/* Weights j .. j+7 of the block at w: d * q, exact. */
Q8_TARGET static inline __m256 weights8(const unsigned char *w, __m256 d, int j) {
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + 2 + j)))));
}

/* How far ahead of the block being multiplied dot_avx2 prefetches, in bytes. Decode reads every
 * weight once, from 4 KiB pages of the file mapping that the hardware prefetcher does not cross;
 * 2 KiB ahead read the 1B's layer matrices 1.10-1.15x faster per CPU-second than none (512 B
 * 1.07x, 8 KiB 1.10x; bench/bench_q8_dot.c layer, docs/perf.md "Q8_0 decode (issue 34, second
 * pass)"). A prefetch past the end of the mapping does not fault. */
enum { Q8_PREFETCH = 2048 };

Q8_TARGET static float dot_avx2(const unsigned char *w, const float *x, int nb) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int b = 0; b < nb; b++, w += CP_Q8_BLOCK_BYTES, x += CP_Q8_BLOCK) {
    _mm_prefetch((const char *)w + Q8_PREFETCH, _MM_HINT_T0);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(cp_le16(w)));
    a0 = _mm256_fmadd_ps(weights8(w, d, 0), _mm256_loadu_ps(x), a0);
    a1 = _mm256_fmadd_ps(weights8(w, d, 8), _mm256_loadu_ps(x + 8), a1);
    a2 = _mm256_fmadd_ps(weights8(w, d, 16), _mm256_loadu_ps(x + 16), a2);
    a3 = _mm256_fmadd_ps(weights8(w, d, 24), _mm256_loadu_ps(x + 24), a3);
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
  return cp_k16_reduce8(t);
}

Q8_TARGET static void widen_avx2(float *dst, const unsigned char *src, size_t nblocks) {
  for (size_t i = 0; i < nblocks; i++, src += CP_Q8_BLOCK_BYTES, dst += CP_Q8_BLOCK) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(cp_le16(src)));
    for (int j = 0; j < CP_Q8_BLOCK; j += 8) _mm256_storeu_ps(dst + j, weights8(src, d, j));
  }
}
#endif

/* ---------------------------------------------------------------- entry points */

void cp_q8_gemv(float *C, int ldc, const void *W, int n, int K, const float *A, int lda, int m, int accumulate) {
  const int nb = K / CP_Q8_BLOCK;
  const size_t row_bytes = (size_t)nb * CP_Q8_BLOCK_BYTES;
#ifdef Q8_X86
  const int avx2 = cp_k16_isa_in_use() == CP_K16_AVX2;
#endif
  /* W row outermost: it is read from memory once and stays in L1 for the m activation rows */
  for (int i = 0; i < n; i++) {
    const unsigned char *w = (const unsigned char *)W + (size_t)i * row_bytes;
    for (int r = 0; r < m; r++) {
      const float *x = A + (size_t)r * lda;
      float d;
#ifdef Q8_X86
      if (avx2) d = dot_avx2(w, x, nb);
      else
#endif
        d = dot_portable(w, x, nb);
      float *y = C + (size_t)r * ldc + i;
      *y = accumulate ? *y + d : d;
    }
  }
}

void cp_q8_widen(float *dst, const void *src, size_t nblocks) {
#ifdef Q8_X86
  if (cp_k16_isa_in_use() == CP_K16_AVX2) {
    widen_avx2(dst, src, nblocks);
    return;
  }
#endif
  (void)cp_convert_to_f32(dst, src, CP_Q8_0, (uint64_t)nblocks * CP_Q8_BLOCK); /* whole blocks: cannot fail */
}
