/* The prefill tile product (engine/kerntile.h): an AVX2 + FMA dot-product micro-kernel and a
 * portable version with the same accumulation order, so both give the same bits (fmaf is the fused
 * multiply-add the vector version does lane by lane). */
#include "engine/kerntile.h"

#include <math.h>

#include "engine/kern16.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KT_X86 1
#include <immintrin.h>
#endif

enum { RM = 4, RN = 3, LANES = 8 }; /* the block: activation rows by weight rows (12 accumulators) */

/* ---------------------------------------------------------------- portable */

static float dot_portable(const float *a /* [kc] */, const float *w /* [kc] */, int kc) {
  float l[LANES] = {0};
  int k = 0;
  for (; k + LANES <= kc; k += LANES)
    for (int j = 0; j < LANES; j++) l[j] = fmaf(a[k + j], w[k + j], l[j]);
  if (k < kc) /* the tail, zeros beyond kc */
    for (int j = 0; j < LANES; j++) l[j] = k + j < kc ? fmaf(a[k + j], w[k + j], l[j]) : fmaf(0.0f, 0.0f, l[j]);
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static void gemm_portable(float *C, int ldc, const float *A, int lda, int m, const float *W, int ldw, int n, int kc,
                          int accumulate) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float *y = C + (size_t)i * ldc + j;
      const float d = dot_portable(A + (size_t)i * lda, W + (size_t)j * ldw, kc);
      *y = accumulate ? *y + d : d;
    }
}

/* ---------------------------------------------------------------- AVX2 + FMA */

#ifdef KT_X86
#define KT_TARGET __attribute__((target("avx2,fma")))
#define KT_INLINE KT_TARGET static inline __attribute__((always_inline))
/* the block loops unrolled whole: the accumulators must be registers, not a stack array */
#define KT_UNROLL _Pragma("GCC unroll 4")

/* The lane tree of kerntile.h: ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)). */
KT_INLINE float lanes_sum(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

/* One block of rm x rn outputs (constants after inlining, so the accumulators are registers). */
KT_INLINE void block(float *C, int ldc, const float *A, int lda, const float *W, int ldw, int kc, int accumulate,
                     int rm, int rn) {
  __m256 c[RM][RN];
  KT_UNROLL
  for (int i = 0; i < rm; i++) {
    KT_UNROLL
    for (int j = 0; j < rn; j++) c[i][j] = _mm256_setzero_ps();
  }
  int k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 w[RN];
    KT_UNROLL
    for (int j = 0; j < rn; j++) w[j] = _mm256_loadu_ps(W + (size_t)j * ldw + k);
    KT_UNROLL
    for (int i = 0; i < rm; i++) {
      const __m256 a = _mm256_loadu_ps(A + (size_t)i * lda + k);
      KT_UNROLL
      for (int j = 0; j < rn; j++) c[i][j] = _mm256_fmadd_ps(a, w[j], c[i][j]);
    }
  }
  if (k < kc) { /* the last kc mod 8: masked loads read nothing past a row, zeros add nothing */
    static const int ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const __m256i mask = _mm256_loadu_si256((const __m256i *)(ones + 8 - (kc - k)));
    __m256 w[RN];
    KT_UNROLL
    for (int j = 0; j < rn; j++) w[j] = _mm256_maskload_ps(W + (size_t)j * ldw + k, mask);
    KT_UNROLL
    for (int i = 0; i < rm; i++) {
      const __m256 a = _mm256_maskload_ps(A + (size_t)i * lda + k, mask);
      KT_UNROLL
      for (int j = 0; j < rn; j++) c[i][j] = _mm256_fmadd_ps(a, w[j], c[i][j]);
    }
  }
  KT_UNROLL
  for (int i = 0; i < rm; i++) {
    KT_UNROLL
    for (int j = 0; j < rn; j++) {
      float *y = C + (size_t)i * ldc + j;
      const float d = lanes_sum(c[i][j]);
      *y = accumulate ? *y + d : d;
    }
  }
}

/* Every block shape, each its own compiled copy. */
#define KT_SHAPE(rm, rn)                                                                                               \
  KT_TARGET static void block_##rm##x##rn(float *C, int ldc, const float *A, int lda, const float *W, int ldw, int kc, \
                                          int acc) {                                                                   \
    block(C, ldc, A, lda, W, ldw, kc, acc, rm, rn);                                                                    \
  }
KT_SHAPE(1, 1)
KT_SHAPE(1, 2)
KT_SHAPE(1, 3)
KT_SHAPE(2, 1)
KT_SHAPE(2, 2)
KT_SHAPE(2, 3)
KT_SHAPE(3, 1)
KT_SHAPE(3, 2)
KT_SHAPE(3, 3)
KT_SHAPE(4, 1)
KT_SHAPE(4, 2)
KT_SHAPE(4, 3)

typedef void (*block_fn)(float *, int, const float *, int, const float *, int, int, int);
static const block_fn shapes[RM][RN] = {
    {block_1x1, block_1x2, block_1x3},
    {block_2x1, block_2x2, block_2x3},
    {block_3x1, block_3x2, block_3x3},
    {block_4x1, block_4x2, block_4x3},
};

/* Weight rows outermost: RN rows of W (6 KiB at kc 512) stay in L1 while every activation row
 * block of the tile passes them. */
static void gemm_avx2(float *C, int ldc, const float *A, int lda, int m, const float *W, int ldw, int n, int kc,
                      int accumulate) {
  for (int j = 0; j < n; j += RN) {
    const int rn = n - j < RN ? n - j : RN;
    for (int i = 0; i < m; i += RM) {
      const int rm = m - i < RM ? m - i : RM;
      shapes[rm - 1][rn - 1](C + (size_t)i * ldc + j, ldc, A + (size_t)i * lda, lda, W + (size_t)j * ldw, ldw, kc,
                             accumulate);
    }
  }
}
#endif

void cp_tile_gemm(float *C, int ldc, const float *A, int lda, int m, const float *W, int ldw, int n, int kc,
                  int accumulate) {
#ifdef KT_X86
  if (cp_k16_isa_in_use() == CP_K16_AVX2) {
    gemm_avx2(C, ldc, A, lda, m, W, ldw, n, kc, accumulate);
    return;
  }
#endif
  gemm_portable(C, ldc, A, lda, m, W, ldw, n, kc, accumulate);
}
