/* The choice behind engine/kernq8.c (docs/perf.md "Q8_0 kernels"): three AVX2 designs of a Q8_0 row
 * times a float32 activation row, timed on N rows of 2048 (64 blocks) in CPU time (best of REPS),
 * with their error against a float64 dot:
 *   float  the weights d * q widened to float32 in registers, FMA with the float32 activations
 *          (the engine's kernel)
 *   int8   the activations quantised per block to int8 (llama.cpp's vec_dot_q8_0_q8_0 design:
 *          sign trick, maddubs, madd, one FMA a block)
 *   int16  the activations quantised per block to int16 (pmaddwd, one FMA a block)
 * ./bench_q8_dot [N [REPS]] (N 32768: 71 MB of weights, from memory; N 256: 0.6 MB, from cache).
 *
 * ./bench_q8_dot layer [REPS [LAYERS]] (docs/perf.md "Q8_0 decode (issue 34, second pass)"): the
 * engine's decode GEMV, cp_q8_gemv of this tree, on one activation row times the seven matrices of
 * LAYERS (default 2) layers of the 1B Llama 3.2 shape (q, k, v, o 2048 wide, gate and up 8192 x
 * 2048, down 2048 x 8192: 65 MB of Q8_0 a layer, beyond the L3), in 4 KiB pages like the GGUF's
 * file mapping (MADV_NOHUGEPAGE); with an older kernq8.c linked as cp_q8_gemv_old (-DOLD_GEMV)
 * that one too, then the int8 design above (for scale) and a two-row float design (tried, not
 * taken), interleaved in each of REPS rounds; GB of weights per CPU-second, best and median; the
 * float designs' outputs must have the same bits (exit 1 if not).
 * Not built by CMake; from the repo root after a build (REV the commit of the old kernel):
 *   git show REV:engine/kernq8.c >/tmp/old_kernq8.c
 *   cc -O2 -Iinclude -I. -c -Dcp_q8_gemv=cp_q8_gemv_old -Dcp_q8_widen=cp_q8_widen_old \
 *      -o /tmp/old_q8.o /tmp/old_kernq8.c
 *   cc -O2 -Iinclude -I. -DOLD_GEMV -o bench_q8_dot bench/bench_q8_dot.c /tmp/old_q8.o \
 *      build/libctxpatch_engine.a build/libctxpatch_formats.a build/libctxpatch_base.a -lm -lpthread
 * (without OLD: drop -DOLD_GEMV and the .o). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "engine/kernq8.h"

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

AVX2 static float dot_int8(const uint8_t *w, const int8_t *xq, const float *xs, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; b++, w += 34, xq += 32) {
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
  return v == 0 ? dot_float(w, a->x) : v == 1 ? dot_int8(w, a->q8, a->s8, NB) : dot_int16(w, a->q16, a->s16);
}

/* ---------------------------------------------------------------- layer: the engine's GEMV */

#ifdef OLD_GEMV
void cp_q8_gemv_old(float *C, int ldc, const void *W, int n, int K, const float *A, int lda, int m, int accumulate);
#endif

enum { SHAPES = 7, KMAX = 8192, LAYER_ROWS = 23552 };
static const int shape[SHAPES][2] = {/* n rows, K: q, k, v, o, gate, up, down */
                                     {2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                                     {8192, 2048}, {8192, 2048}, {2048, 8192}};
enum { VARIANTS = 4 };
static const char *layer_names[VARIANTS] = {"cp_q8_gemv (this tree)", "cp_q8_gemv_old (OLD_GEMV)",
                                            "int8 design (for scale)", "two rows at once (tried)"};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Tried for decode and not taken (docs/perf.md "Q8_0 decode (issue 34, second pass)"): two weight
 * rows at once, each 8 activations loaded once for both, prefetching 2 KiB ahead in each row as
 * the engine does; each row's lanes and sum are dot_float's, so the bits are the engine's. */
AVX2 static void dot2_float(float *y /* [2] */, const uint8_t *w, const uint8_t *v, const float *x, int nb) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  for (int b = 0; b < nb; b++, w += 34, v += 34, x += 32) {
    _mm_prefetch((const char *)w + 2048, _MM_HINT_T0);
    _mm_prefetch((const char *)v + 2048, _MM_HINT_T0);
    const __m256 d = _mm256_set1_ps(scale(w)), e = _mm256_set1_ps(scale(v));
    __m256 xj = _mm256_loadu_ps(x);
    a0 = _mm256_fmadd_ps(weights8(w, d, 0), xj, a0), b0 = _mm256_fmadd_ps(weights8(v, e, 0), xj, b0);
    xj = _mm256_loadu_ps(x + 8);
    a1 = _mm256_fmadd_ps(weights8(w, d, 8), xj, a1), b1 = _mm256_fmadd_ps(weights8(v, e, 8), xj, b1);
    xj = _mm256_loadu_ps(x + 16);
    a2 = _mm256_fmadd_ps(weights8(w, d, 16), xj, a2), b2 = _mm256_fmadd_ps(weights8(v, e, 16), xj, b2);
    xj = _mm256_loadu_ps(x + 24);
    a3 = _mm256_fmadd_ps(weights8(w, d, 24), xj, a3), b3 = _mm256_fmadd_ps(weights8(v, e, 24), xj, b3);
  }
  y[0] = hsum(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3)));
  y[1] = hsum(_mm256_add_ps(_mm256_add_ps(b0, b2), _mm256_add_ps(b1, b3)));
}

/* One activation row times every matrix of the layers at W with variant v, outputs into y. */
AVX2 static void layer_pass(int v, const uint8_t *W, int layers, const float *x, const int8_t *q8, const float *s8,
                            float *y) {
  for (int l = 0; l < layers; l++)
    for (int s = 0; s < SHAPES; s++) {
      const int n = shape[s][0], nb = shape[s][1] / 32;
      if (v == 0) cp_q8_gemv(y, n, W, n, shape[s][1], x, shape[s][1], 1, 0);
#ifdef OLD_GEMV
      if (v == 1) cp_q8_gemv_old(y, n, W, n, shape[s][1], x, shape[s][1], 1, 0);
#endif
      if (v == 2)
        for (int r = 0; r < n; r++) y[r] = dot_int8(W + (size_t)r * nb * 34, q8, s8, nb);
      if (v == 3) /* n is even in every shape */
        for (int r = 0; r < n; r += 2) dot2_float(y + r, W + (size_t)r * nb * 34, W + (size_t)(r + 1) * nb * 34, x, nb);
      W += (size_t)n * nb * 34, y += n;
    }
}

AVX2 static int layer(int reps, int layers) {
  size_t bytes = 0;
  for (int s = 0; s < SHAPES; s++) bytes += (size_t)shape[s][0] * (size_t)(shape[s][1] / 32) * 34;
  bytes *= (size_t)layers;
  uint8_t *W = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (W == MAP_FAILED) return 1;
  madvise(W, bytes, MADV_NOHUGEPAGE); /* 4 KiB pages, as the GGUF's file mapping has */
  srand(1);
  for (size_t i = 0; i < bytes; i++) W[i] = (uint8_t)rand();
  for (size_t b = 0; b < bytes / 34; b++) {
    uint16_t h = _cvtss_sh(0.001f * (float)(1 + rand() % 100), 0);
    memcpy(W + b * 34, &h, 2);
  }
  static float x[KMAX], s8[KMAX / 32];
  static int8_t q8[KMAX];
  for (int k = 0; k < KMAX; k++) x[k] = (float)rand() / (float)RAND_MAX - 0.5f;
  for (int b = 0; b < KMAX / 32; b++) { /* the int8 design's activations: per block of 32 */
    float m = 0;
    for (int j = 0; j < 32; j++) m = fmaxf(m, fabsf(x[b * 32 + j]));
    s8[b] = m / 127;
    for (int j = 0; j < 32; j++) q8[b * 32 + j] = (int8_t)lrintf(x[b * 32 + j] / s8[b]);
  }
  float *y = calloc((size_t)VARIANTS * LAYER_ROWS * (size_t)layers, sizeof *y);
  double *t = malloc((size_t)VARIANTS * (size_t)reps * sizeof *t);
  int have[VARIANTS] = {1, 0, 1, 1};
#ifdef OLD_GEMV
  have[1] = 1;
#endif
  for (int it = 0; it < reps; it++)
    for (int v = 0; v < VARIANTS; v++) {
      if (!have[v]) continue;
      double t0 = cpu_s();
      layer_pass(v, W, layers, x, q8, s8, y + (size_t)v * LAYER_ROWS * layers);
      t[v * reps + it] = cpu_s() - t0;
    }
  printf("%d layers of the 1B's matrices, %.1f MB of Q8_0, one activation row, %d rounds interleaved\n", layers,
         (double)bytes / 1e6, reps);
  for (int v = 0; v < VARIANTS; v++) {
    if (!have[v]) continue;
    qsort(t + v * reps, (size_t)reps, sizeof *t, cmp_double);
    double best = t[v * reps], med = t[v * reps + reps / 2];
    printf("%-26s best %.2f ms CPU  %.2f GB/CPU-s   median %.2f ms  %.2f GB/CPU-s\n", layer_names[v], best * 1e3,
           (double)bytes / best / 1e9, med * 1e3, (double)bytes / med / 1e9);
  }
  const size_t outs = (size_t)LAYER_ROWS * layers;
  int same = (!have[1] || !memcmp(y, y + outs, outs * sizeof *y)) && !memcmp(y, y + 3 * outs, outs * sizeof *y);
  printf("outputs of this tree%s and of the two-row design: %s\n", have[1] ? ", the old one" : "",
         same ? "the same bits" : "DIFFERENT BITS");
  munmap(W, bytes), free(y), free(t);
  return !same;
}

AVX2 int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "layer")) return layer(argc > 2 ? atoi(argv[2]) : 5, argc > 3 ? atoi(argv[3]) : 2);
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
