/* The choice behind engine/kernq8.c (docs/perf.md "Q8_0 kernels"): three AVX2 designs of a Q8_0 row
 * times a float32 activation row, timed on N rows of 2048 (64 blocks) in CPU time (best of REPS),
 * with their error against a float64 dot:
 *   float  the weights d * q widened to float32 in registers, FMA with the float32 activations
 *          (the engine's kernel)
 *   int8   the activations quantised per block to int8 (llama.cpp's vec_dot_q8_0_q8_0 design:
 *          sign trick, maddubs, madd, one FMA a block)
 *   int16  the activations quantised per block to int16 (pmaddwd, one FMA a block)
 * Not built by CMake: cc -O2 -o bench_q8_dot bench/bench_q8_dot.c -lm && ./bench_q8_dot [N [REPS]]
 * (N 32768: 71 MB of weights, from memory; N 256: 0.6 MB, from cache). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
enum { K = 2048, NB = K / 32, ROW = NB * 34 };

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

AVX2 static float hsum(__m256 a) {
  float t[8];
  _mm256_storeu_ps(t, a);
  return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

AVX2 static float scale(const uint8_t *w) {
  uint16_t h;
  memcpy(&h, w, 2);
  return _cvtsh_ss(h);
}

AVX2 static __m256 weights8(const uint8_t *w, __m256 d, int j) {
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + 2 + j)))));
}

AVX2 static float dot_float(const uint8_t *w, const float *x) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int b = 0; b < NB; b++, w += 34, x += 32) {
    __m256 d = _mm256_set1_ps(scale(w));
    a0 = _mm256_fmadd_ps(weights8(w, d, 0), _mm256_loadu_ps(x), a0);
    a1 = _mm256_fmadd_ps(weights8(w, d, 8), _mm256_loadu_ps(x + 8), a1);
    a2 = _mm256_fmadd_ps(weights8(w, d, 16), _mm256_loadu_ps(x + 16), a2);
    a3 = _mm256_fmadd_ps(weights8(w, d, 24), _mm256_loadu_ps(x + 24), a3);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
}

AVX2 static float dot_int8(const uint8_t *w, const int8_t *xq, const float *xs) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < NB; b++, w += 34, xq += 32) {
    __m256i qw = _mm256_loadu_si256((const __m256i *)(w + 2)), qx = _mm256_loadu_si256((const __m256i *)xq);
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale(w) * xs[b]),
                          _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1))), acc);
  }
  return hsum(acc);
}

AVX2 static float dot_int16(const uint8_t *w, const int16_t *xq, const float *xs) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < NB; b++, w += 34, xq += 32) {
    __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 2)));
    __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 18)));
    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256((const __m256i *)xq)),
                                 _mm256_madd_epi16(w1, _mm256_loadu_si256((const __m256i *)(xq + 16))));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale(w) * xs[b]), _mm256_cvtepi32_ps(p), acc);
  }
  return hsum(acc);
}

typedef struct {
  const float *x;
  int8_t q8[K];
  int16_t q16[K];
  float s8[NB], s16[NB];
} act;

AVX2 static float dot(int v, const uint8_t *w, const act *a) {
  return v == 0 ? dot_float(w, a->x) : v == 1 ? dot_int8(w, a->q8, a->s8) : dot_int16(w, a->q16, a->s16);
}

AVX2 int main(int argc, char **argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 32768, reps = argc > 2 ? atoi(argv[2]) : 5;
  uint8_t *W = malloc((size_t)ROW * (size_t)n);
  float *x = malloc(K * sizeof *x), *y = malloc((size_t)n * sizeof *y);
  static act a;
  srand(1);
  for (size_t i = 0; i < (size_t)ROW * (size_t)n; i++) W[i] = (uint8_t)rand();
  for (size_t b = 0; b < (size_t)n * NB; b++) {
    uint16_t h = _cvtss_sh(0.001f * (float)(1 + rand() % 100), 0);
    memcpy(W + b * 34, &h, 2);
  }
  for (int k = 0; k < K; k++) x[k] = (float)rand() / (float)RAND_MAX - 0.5f;
  a.x = x;
  for (int b = 0; b < NB; b++) {
    float m = 0;
    for (int j = 0; j < 32; j++) m = fmaxf(m, fabsf(x[b * 32 + j]));
    a.s8[b] = m / 127, a.s16[b] = m / 32767;
    for (int j = 0; j < 32; j++) {
      a.q8[b * 32 + j] = (int8_t)lrintf(x[b * 32 + j] / a.s8[b]);
      a.q16[b * 32 + j] = (int16_t)lrintf(x[b * 32 + j] / a.s16[b]);
    }
  }
  const char *names[3] = {"float", "int8", "int16"};
  for (int v = 0; v < 3; v++) {
    double best = 1e30, worst = 0;
    for (int it = 0; it < reps; it++) {
      double t0 = cpu_s();
      for (int r = 0; r < n; r++) y[r] = dot(v, W + (size_t)r * ROW, &a);
      best = fmin(best, cpu_s() - t0);
    }
    for (int r = 0; r < n && r < 100; r++) { /* error / sum |terms| against float64 */
      const uint8_t *w = W + (size_t)r * ROW;
      double s = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        double t = (double)scale(w + k / 32 * 34) * (int8_t)w[k / 32 * 34 + 2 + k % 32] * x[k];
        s += t, mag += fabs(t);
      }
      worst = fmax(worst, fabs(y[r] - s) / mag);
    }
    printf("%-5s  %.2f ms CPU  %.2f GB/CPU-s  worst |error| / sum |terms| %.2e\n", names[v], best * 1e3,
           (double)ROW * n / best / 1e9, worst);
  }
  free(W), free(x), free(y);
  return 0;
}
