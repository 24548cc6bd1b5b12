/* Kernels on 16-bit weights (engine/kern16.h): an AVX2 + FMA + F16C version and a portable one
 * with the same accumulation order, so both give the same bits (fmaf is the fused multiply-add the
 * vector version does lane by lane). */
#include "engine/kern16.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/error.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define K16_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

enum { LANES = 32 };

/* ---------------------------------------------------------------- the choice */

static cp_k16_isa cpu_isa = CP_K16_PORTABLE, forced_isa;
static int direct = 1;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void detect_cpu(void) {
#ifdef K16_X86
  __builtin_cpu_init();
  /* F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports knows no "f16c" */
  unsigned a, b, c, d;
  bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) cpu_isa = CP_K16_AVX2;
#endif
}

static cp_k16_isa cpu(void) {
  pthread_once(&cpu_once, detect_cpu);
  return cpu_isa;
}

cp_k16_isa cp_k16_isa_in_use(void) { return forced_isa ? forced_isa : cpu(); }

int cp_k16_force_isa(cp_k16_isa isa) {
  if (isa == CP_K16_AVX2 && cpu() != CP_K16_AVX2) return -1;
  forced_isa = isa;
  return 0;
}

int cp_k16_read_env(void) {
  const char *v = getenv("CTXPATCH_WEIGHTS");
  if (!v || !*v || !strcmp(v, "16")) {
    direct = 1;
  } else if (!strcmp(v, "f32")) {
    direct = 0;
  } else {
    return cp_error_set(CP_EARG, "CTXPATCH_WEIGHTS: '%.40s' is neither 16 (the default) nor f32", v);
  }
  return 0;
}

int cp_k16_direct(void) { return direct; }

/* ---------------------------------------------------------------- portable */

/* src may sit at any byte offset in a file mapping: read through memcpy. */
static void widen_portable(float *dst, const unsigned char *src, cp_dtype dtype, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    if (dtype == CP_BF16) {
      uint32_t u = (uint32_t)h << 16;
      memcpy(dst + i, &u, 4);
    } else {
      dst[i] = cp_f16_to_f32(h);
    }
  }
}

static float dot_portable(const unsigned char *w /* [K] 16-bit */, cp_dtype dtype, int K, const float *x /* [K] */) {
  float acc[LANES] = {0}, wf[LANES], xt[LANES];
  int k = 0;
  for (; k + LANES <= K; k += LANES) {
    widen_portable(wf, w + 2 * (size_t)k, dtype, LANES);
    for (int j = 0; j < LANES; j++) acc[j] = fmaf(wf[j], x[k + j], acc[j]);
  }
  if (k < K) { /* the tail, zeros beyond K */
    memset(wf, 0, sizeof wf);
    memset(xt, 0, sizeof xt);
    widen_portable(wf, w + 2 * (size_t)k, dtype, (size_t)(K - k));
    memcpy(xt, x + k, (size_t)(K - k) * sizeof *xt);
    for (int j = 0; j < LANES; j++) acc[j] = fmaf(wf[j], xt[j], acc[j]);
  }
  float t[8];
  for (int j = 0; j < 8; j++) t[j] = (acc[j] + acc[j + 16]) + (acc[j + 8] + acc[j + 24]);
  return cp_k16_reduce8(t);
}

/* ---------------------------------------------------------------- AVX2 + FMA + F16C */

#ifdef K16_X86
#define K16_TARGET __attribute__((target("avx2,fma,f16c")))

K16_TARGET static inline __m256 load8(const unsigned char *p /* [8] 16-bit */, int bf16) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

/* How far ahead of the 64 bytes being multiplied dot_avx2 prefetches: decode reads every weight
 * once, from 4 KiB pages of the file mapping that the hardware prefetcher does not cross (as
 * kernq8.c's Q8_PREFETCH; docs/perf.md "Q8_0 decode (issue 34, second pass)"). A prefetch past
 * the end of the mapping does not fault. */
enum { K16_PREFETCH = 2048 };

K16_TARGET static float dot_avx2(const unsigned char *w /* [K] 16-bit */, int bf16, int K, const float *x /* [K] */) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int k = 0;
  for (; k + LANES <= K; k += LANES) {
    _mm_prefetch((const char *)w + 2 * (size_t)k + K16_PREFETCH, _MM_HINT_T0);
    a0 = _mm256_fmadd_ps(load8(w + 2 * (size_t)k, bf16), _mm256_loadu_ps(x + k), a0);
    a1 = _mm256_fmadd_ps(load8(w + 2 * (size_t)k + 16, bf16), _mm256_loadu_ps(x + k + 8), a1);
    a2 = _mm256_fmadd_ps(load8(w + 2 * (size_t)k + 32, bf16), _mm256_loadu_ps(x + k + 16), a2);
    a3 = _mm256_fmadd_ps(load8(w + 2 * (size_t)k + 48, bf16), _mm256_loadu_ps(x + k + 24), a3);
  }
  if (k < K) {
    unsigned char wt[2 * LANES] = {0};
    float xt[LANES] = {0};
    memcpy(wt, w + 2 * (size_t)k, 2 * (size_t)(K - k));
    memcpy(xt, x + k, (size_t)(K - k) * sizeof *xt);
    a0 = _mm256_fmadd_ps(load8(wt, bf16), _mm256_loadu_ps(xt), a0);
    a1 = _mm256_fmadd_ps(load8(wt + 16, bf16), _mm256_loadu_ps(xt + 8), a1);
    a2 = _mm256_fmadd_ps(load8(wt + 32, bf16), _mm256_loadu_ps(xt + 16), a2);
    a3 = _mm256_fmadd_ps(load8(wt + 48, bf16), _mm256_loadu_ps(xt + 24), a3);
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
  return cp_k16_reduce8(t);
}

K16_TARGET static void widen_avx2(float *dst, const unsigned char *src, cp_dtype dtype, size_t count) {
  const int bf16 = dtype == CP_BF16;
  size_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, load8(src + 2 * i, bf16));
  widen_portable(dst + i, src + 2 * i, dtype, count - i);
}
#endif

/* ---------------------------------------------------------------- entry points */

void cp_k16_gemv(float *y, const void *W, cp_dtype dtype, size_t ldw, int n, int K, const float *x, int accumulate) {
  const unsigned char *w = W;
#ifdef K16_X86
  if (cp_k16_isa_in_use() == CP_K16_AVX2) {
    for (int r = 0; r < n; r++) {
      float d = dot_avx2(w + 2 * (size_t)r * ldw, dtype == CP_BF16, K, x);
      y[r] = accumulate ? y[r] + d : d;
    }
    return;
  }
#endif
  for (int r = 0; r < n; r++) {
    float d = dot_portable(w + 2 * (size_t)r * ldw, dtype, K, x);
    y[r] = accumulate ? y[r] + d : d;
  }
}

void cp_k16_widen(float *dst, const void *src, cp_dtype dtype, size_t count) {
#ifdef K16_X86
  if (cp_k16_isa_in_use() == CP_K16_AVX2) {
    widen_avx2(dst, src, dtype, count);
    return;
  }
#endif
  widen_portable(dst, src, dtype, count);
}
