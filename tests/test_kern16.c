/* The 16-bit weight kernels (engine/kern16.h), each version forced in turn: dot products of F16
 * and BF16 rows with float32 vectors against a float64 reference on sizes that are not multiples
 * of 8 (and rows at an odd byte offset), within the float32 error bound of a K-term sum; the AVX2
 * and portable versions give the same bits; widening is exact for every 16-bit pattern. The
 * reference decodes the 16-bit patterns itself (ldexp), not through formats/.
 * The Q8_0 kernels (engine/kernq8.h) likewise: the GEMV of 1-4 activation rows (a short tile)
 * against a float64 dot with the blocks' weights, on odd numbers of blocks and rows (a last
 * partial tile) from an odd byte offset, within the float32 bound; both versions the same bits;
 * block decoding exact for every F16 scale.
 * The prefill tile product (engine/kerntile.h) on tiles of 1-9 rows by 1-7 weight rows, kc not a
 * multiple of 8, padded strides: within the float32 bound of a float64 dot and of the plain float
 * path (OpenBLAS sgemm, which multiplied these tiles before); both versions the same bits; a row
 * the same bits whether it is multiplied alone or inside a tile (no dependence on its block). */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/formats/tensor.h"
#include "engine/kern16.h"
#include "engine/kernq8.h"
#include "engine/kerntile.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next32(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}
static double uniform(void) { return (next32() & 0xffffff) / 16777216.0 * 2 - 1; } /* [-1, 1) */

/* The value of a 16-bit pattern, in double; NaN for NaN patterns. */
static double ref16(uint16_t h, cp_dtype dt) {
  int sign = h >> 15;
  double v;
  if (dt == CP_BF16) {
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    if (e == 0xff) return m ? NAN : (sign ? -INFINITY : INFINITY);
    v = e ? ldexp(128 + m, e - 127 - 7) : ldexp(m, -126 - 7);
  } else {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return m ? NAN : (sign ? -INFINITY : INFINITY);
    v = e ? ldexp(1024 + m, e - 15 - 10) : ldexp(m, -14 - 10);
  }
  return sign ? -v : v;
}

/* A random finite pattern of magnitude up to about 4 (F16 sometimes subnormal). */
static uint16_t rand16(cp_dtype dt) {
  double v = uniform() * 4;
  if (dt == CP_F16 && next32() % 8 == 0) v *= 1e-6; /* subnormal F16 */
  float f = (float)v;
  if (dt == CP_F16) return cp_f32_to_f16(f);
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

static const char *isa_name(cp_k16_isa isa) { return isa == CP_K16_AVX2 ? "avx2" : "portable"; }

/* y = W x for one (dtype, n, K) on the forced version; returns y [n] (caller frees). */
static float *run_gemv(cp_k16_isa isa, const unsigned char *W, cp_dtype dt, int n, int K, const float *x,
                       const float *y0) {
  float *y = malloc((size_t)n * sizeof *y);
  if (!y) return NULL;
  memcpy(y, y0, (size_t)n * sizeof *y);
  CHECK(cp_k16_force_isa(isa) == 0);
  cp_k16_gemv(y, W, dt, (size_t)K + 3, n, K, x, y0[0] != 0); /* rows padded by 3 elements */
  return y;
}

static void check_gemv(cp_dtype dt, int n, int K, int have_avx2) {
  const size_t ld = (size_t)K + 3;
  unsigned char *buf = malloc(2 * ld * (size_t)n + 1), *W = buf + 1; /* an odd byte offset */
  float *x = malloc((size_t)K * sizeof *x), y0[2][64];
  for (size_t i = 0; i < ld * (size_t)n; i++) {
    uint16_t h = rand16(dt);
    memcpy(W + 2 * i, &h, 2);
  }
  for (int k = 0; k < K; k++) x[k] = (float)uniform();
  for (int r = 0; r < n; r++) y0[0][r] = 0, y0[1][r] = (float)uniform() + 2; /* plain, then accumulate */
  for (int acc = 0; acc < 2; acc++) {
    float *got[2] = {NULL, NULL};
    for (int v = 0; v < 1 + have_avx2; v++) {
      cp_k16_isa isa = v ? CP_K16_AVX2 : CP_K16_PORTABLE;
      float *y = got[v] = run_gemv(isa, W, dt, n, K, x, y0[acc]);
      for (int r = 0; r < n && y; r++) {
        double want = acc ? y0[acc][r] : 0, mag = fabs(want);
        for (int k = 0; k < K; k++) {
          uint16_t h;
          memcpy(&h, W + 2 * ((size_t)r * ld + (size_t)k), 2);
          want += ref16(h, dt) * x[k], mag += fabs(ref16(h, dt) * x[k]);
        }
        /* a K-term float32 sum (plus the accumulate's add): |error| <= (K + 2) u sum|terms| */
        double bound = (K + 2) * ldexp(1, -24) * mag + 1e-30;
        CHECK_MSG(fabs(y[r] - want) <= bound, "%s %s n %d K %d acc %d row %d: %.9g vs %.9g (bound %g)", isa_name(isa),
                  cp_dtype_name(dt), n, K, acc, r, y[r], want, bound);
      }
    }
    if (got[0] && got[1])
      CHECK_MSG(memcmp(got[0], got[1], (size_t)n * sizeof(float)) == 0, "%s n %d K %d: avx2 and portable differ",
                cp_dtype_name(dt), n, K);
    free(got[0]), free(got[1]);
  }
  free(buf), free(x);
}

/* Every 16-bit pattern widens exactly (NaN to NaN), from an odd byte offset, in every version. */
static void check_widen(cp_dtype dt, int have_avx2) {
  unsigned char *src = malloc(2 * 65536 + 1);
  float *dst = malloc(65536 * sizeof *dst);
  for (uint32_t i = 0; i < 65536; i++) {
    uint16_t h = (uint16_t)i;
    memcpy(src + 1 + 2 * i, &h, 2);
  }
  for (int v = 0; v < 1 + have_avx2; v++) {
    CHECK(cp_k16_force_isa(v ? CP_K16_AVX2 : CP_K16_PORTABLE) == 0);
    cp_k16_widen(dst, src + 1, dt, 65535); /* an odd count: the vector loop's tail */
    int bad = 0;
    for (uint32_t i = 0; i < 65535; i++) {
      double want = ref16((uint16_t)i, dt);
      if (isnan(want) ? !isnan(dst[i]) : (double)dst[i] != want || !signbit(dst[i]) != !signbit(want)) bad++;
    }
    CHECK_MSG(bad == 0, "%s widen %s: %d patterns wrong", isa_name(v ? CP_K16_AVX2 : CP_K16_PORTABLE),
              cp_dtype_name(dt), bad);
  }
  free(src), free(dst);
}

/* ---------------------------------------------------------------- Q8_0 */

/* n random Q8_0 rows of nb blocks at W: F16 scales of magnitude 1e-4 .. 1 (some negative), every
 * int8 value including -128. */
static void rand_q8(unsigned char *W, int n, int nb) {
  for (int i = 0; i < n * nb; i++) {
    unsigned char *b = W + (size_t)i * CP_Q8_BLOCK_BYTES;
    uint16_t h = cp_f32_to_f16((float)(uniform() * pow(10, -4 * fabs(uniform()))));
    b[0] = (unsigned char)h, b[1] = (unsigned char)(h >> 8);
    for (int j = 0; j < CP_Q8_BLOCK; j++) b[2 + j] = (unsigned char)next32();
  }
}

/* Weight j of block b (little-endian scale, decoded by ref16). */
static double ref_q8(const unsigned char *blk, int j) {
  return ref16((uint16_t)(blk[0] | blk[1] << 8), CP_F16) * (signed char)blk[2 + j];
}

/* Runs cp_q8_gemv on the forced version: C [m, n] (ldc n + 1) starting from C0; caller frees. */
static float *run_q8(cp_k16_isa isa, const unsigned char *W, int n, int K, const float *x, int ldx, int m,
                     const float *C0, int acc) {
  float *C = malloc((size_t)m * (size_t)(n + 1) * sizeof *C);
  if (!C) return NULL;
  memcpy(C, C0, (size_t)m * (size_t)(n + 1) * sizeof *C);
  CHECK(cp_k16_force_isa(isa) == 0);
  cp_q8_gemv(C, n + 1, W, n, K, x, ldx, m, acc);
  return C;
}

static void check_q8_gemv(int n, int nb, int m, int have_avx2) {
  const int K = nb * CP_Q8_BLOCK, ldx = K + 5;
  unsigned char *buf = malloc((size_t)n * (size_t)nb * CP_Q8_BLOCK_BYTES + 1), *W = buf + 1;
  float *x = malloc((size_t)m * (size_t)ldx * sizeof *x), *C0 = malloc((size_t)m * (size_t)(n + 1) * sizeof *C0);
  rand_q8(W, n, nb);
  for (int i = 0; i < m * ldx; i++) x[i] = (float)uniform();
  for (int i = 0; i < m * (n + 1); i++) C0[i] = (float)uniform();
  for (int acc = 0; acc < 2; acc++) {
    float *got[2] = {NULL, NULL};
    for (int v = 0; v < 1 + have_avx2; v++) {
      cp_k16_isa isa = v ? CP_K16_AVX2 : CP_K16_PORTABLE;
      float *C = got[v] = run_q8(isa, W, n, K, x, ldx, m, C0, acc);
      for (int r = 0; r < m && C; r++)
        for (int i = 0; i < n; i++) {
          double want = acc ? C0[(size_t)r * (n + 1) + i] : 0, mag = fabs(want);
          for (int k = 0; k < K; k++) {
            double t = ref_q8(W + ((size_t)i * nb + k / CP_Q8_BLOCK) * CP_Q8_BLOCK_BYTES, k % CP_Q8_BLOCK) *
                       x[(size_t)r * ldx + k];
            want += t, mag += fabs(t);
          }
          /* a K-term float32 sum of exact products (plus the accumulate's add) */
          double bound = (K + 2) * ldexp(1, -24) * mag + 1e-30;
          CHECK_MSG(fabs(C[(size_t)r * (n + 1) + i] - want) <= bound,
                    "q8 %s n %d nb %d m %d acc %d [%d, %d]: %.9g vs %.9g (bound %g)", isa_name(isa), n, nb, m, acc, r,
                    i, C[(size_t)r * (n + 1) + i], want, bound);
        }
      /* the column after each row of C is not written */
      for (int r = 0; r < m && C; r++) CHECK(C[(size_t)r * (n + 1) + n] == C0[(size_t)r * (n + 1) + n]);
    }
    if (got[0] && got[1])
      CHECK_MSG(memcmp(got[0], got[1], (size_t)m * (size_t)(n + 1) * sizeof(float)) == 0,
                "q8 n %d nb %d m %d: avx2 and portable differ", n, nb, m);
    free(got[0]), free(got[1]);
  }
  free(buf), free(x), free(C0);
}

/* Every F16 scale with int8 values -128, -1, 1, 127 and a random one decodes exactly (NaN to NaN),
 * from an odd byte offset, in every version. */
static void check_q8_widen(int have_avx2) {
  const size_t nblocks = 65536;
  unsigned char *src = malloc(nblocks * CP_Q8_BLOCK_BYTES + 1), *s = src + 1;
  float *dst = malloc(nblocks * CP_Q8_BLOCK * sizeof *dst);
  for (size_t i = 0; i < nblocks; i++) {
    unsigned char *b = s + i * CP_Q8_BLOCK_BYTES;
    b[0] = (unsigned char)i, b[1] = (unsigned char)(i >> 8);
    for (int j = 0; j < CP_Q8_BLOCK; j++)
      b[2 + j] = (unsigned char)(j < 4 ? (uint32_t)(int[]){-128, -1, 1, 127}[j] : next32());
  }
  for (int v = 0; v < 1 + have_avx2; v++) {
    CHECK(cp_k16_force_isa(v ? CP_K16_AVX2 : CP_K16_PORTABLE) == 0);
    cp_q8_widen(dst, s, nblocks);
    size_t bad = 0;
    for (size_t i = 0; i < nblocks * CP_Q8_BLOCK; i++) {
      double want = ref_q8(s + i / CP_Q8_BLOCK * CP_Q8_BLOCK_BYTES, (int)(i % CP_Q8_BLOCK));
      if (isnan(want) ? !isnan(dst[i]) : (double)dst[i] != want) bad++;
    }
    CHECK_MSG(bad == 0, "%s q8 widen: %zu values wrong", isa_name(v ? CP_K16_AVX2 : CP_K16_PORTABLE), bad);
  }
  free(src), free(dst);
}

/* ---------------------------------------------------------------- prefill tiles */

/* C [m, n] (ldc n + 2) from C0 = (acc ? C0 : 0) + A W^T on the forced version; caller frees. */
static float *run_tile(cp_k16_isa isa, const float *A, int lda, int m, const float *W, int ldw, int n, int kc,
                       const float *C0, int acc) {
  const size_t count = (size_t)m * (size_t)(n + 2);
  float *C = malloc(count * sizeof *C);
  if (!C) return NULL;
  memcpy(C, C0, count * sizeof *C);
  CHECK(cp_k16_force_isa(isa) == 0);
  cp_tile_gemm(C, n + 2, A, lda, m, W, ldw, n, kc, acc);
  return C;
}

static void check_tile(int m, int n, int kc, int have_avx2) {
  const int lda = kc + 3, ldw = kc + 5, ldc = n + 2;
  float *A = malloc((size_t)m * (size_t)lda * sizeof *A), *W = malloc((size_t)n * (size_t)ldw * sizeof *W);
  float *C0 = malloc((size_t)m * (size_t)ldc * sizeof *C0);
  for (int i = 0; i < m * lda; i++) A[i] = (float)uniform();
  for (int i = 0; i < n * ldw; i++) W[i] = (float)(uniform() * 3);
  for (int i = 0; i < m * ldc; i++) C0[i] = (float)uniform();
  for (int acc = 0; acc < 2; acc++) {
    float *got[2] = {NULL, NULL};
    for (int v = 0; v < 1 + have_avx2; v++) {
      cp_k16_isa isa = v ? CP_K16_AVX2 : CP_K16_PORTABLE;
      float *C = got[v] = run_tile(isa, A, lda, m, W, ldw, n, kc, C0, acc);
      for (int r = 0; r < m && C; r++) {
        for (int i = 0; i < n; i++) {
          double want = acc ? C0[(size_t)r * ldc + i] : 0, mag = fabs(want);
          for (int k = 0; k < kc; k++) {
            double t = (double)A[(size_t)r * lda + k] * W[(size_t)i * ldw + k];
            want += t, mag += fabs(t);
          }
          double bound = (kc + 2) * ldexp(1, -24) * mag + 1e-30;
          CHECK_MSG(fabs(C[(size_t)r * ldc + i] - want) <= bound,
                    "tile %s m %d n %d kc %d acc %d [%d, %d]: %.9g vs %.9g (bound %g)", isa_name(isa), m, n, kc, acc, r,
                    i, C[(size_t)r * ldc + i], want, bound);
        }
        for (int i = n; i < ldc; i++) CHECK(C[(size_t)r * ldc + i] == C0[(size_t)r * ldc + i]); /* not written */
      }
    }
    if (got[0] && got[1])
      CHECK_MSG(memcmp(got[0], got[1], (size_t)m * ldc * sizeof(float)) == 0,
                "tile m %d n %d kc %d: avx2 and portable differ", m, n, kc);
    /* the plain float path: sgemm, within the bound of each (both are K-term float32 sums) */
    float *blas = malloc((size_t)m * ldc * sizeof *blas);
    memcpy(blas, C0, (size_t)m * ldc * sizeof *blas);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, kc, 1.0f, A, lda, W, ldw, acc ? 1.0f : 0.0f, blas, ldc);
    for (int r = 0; r < m && got[0]; r++)
      for (int i = 0; i < n; i++) {
        double mag = acc ? fabs(C0[(size_t)r * ldc + i]) : 0;
        for (int k = 0; k < kc; k++) mag += fabs((double)A[(size_t)r * lda + k] * W[(size_t)i * ldw + k]);
        double bound = 2 * (kc + 2) * ldexp(1, -24) * mag + 1e-30;
        CHECK_MSG(fabs((double)got[0][(size_t)r * ldc + i] - blas[(size_t)r * ldc + i]) <= bound,
                  "tile m %d n %d kc %d [%d, %d]: %.9g vs sgemm %.9g", m, n, kc, r, i, got[0][(size_t)r * ldc + i],
                  blas[(size_t)r * ldc + i]);
      }
    free(blas);
    /* AVX2: row r alone (a 1-row tile, or rows r.. to the end) gives the bits it had in the tile */
    for (int r = 0; r < m && have_avx2 && got[1]; r += 2) {
      float *one = run_tile(CP_K16_AVX2, A + (size_t)r * lda, lda, m - r, W, ldw, n, kc, C0 + (size_t)r * ldc, acc);
      if (one)
        CHECK_MSG(memcmp(one, got[1] + (size_t)r * ldc, (size_t)(m - r) * ldc * sizeof(float)) == 0,
                  "tile m %d n %d kc %d: rows from %d differ with the tile's start", m, n, kc, r);
      free(one);
    }
    free(got[0]), free(got[1]);
  }
  free(A), free(W), free(C0);
}

int main(void) {
  const int have_avx2 = cp_k16_force_isa(CP_K16_AVX2) == 0;
  printf("AVX2 + FMA + F16C: %s\n", have_avx2 ? "yes (both versions tested)" : "no (portable only)");
  const int Ks[] = {1, 7, 31, 33, 63, 67, 257, 1001};
  const int ns[] = {1, 13, 37};
  const cp_dtype dts[] = {CP_F16, CP_BF16};
  for (int d = 0; d < 2; d++) {
    for (size_t i = 0; i < sizeof Ks / sizeof *Ks; i++)
      for (size_t j = 0; j < sizeof ns / sizeof *ns; j++) check_gemv(dts[d], ns[j], Ks[i], have_avx2);
    check_widen(dts[d], have_avx2);
  }
  const int nbs[] = {1, 3, 5, 64, 67}, q8_ns[] = {1, 13, 37}, ms[] = {1, 3, 4};
  for (size_t i = 0; i < sizeof nbs / sizeof *nbs; i++)
    for (size_t j = 0; j < sizeof q8_ns / sizeof *q8_ns; j++)
      for (size_t k = 0; k < sizeof ms / sizeof *ms; k++) check_q8_gemv(q8_ns[j], nbs[i], ms[k], have_avx2);
  check_q8_widen(have_avx2);
  const int tile_ms[] = {1, 4, 5, 9}, tile_ns[] = {1, 3, 7}, kcs[] = {1, 8, 13, 64, 517};
  for (size_t i = 0; i < sizeof tile_ms / sizeof *tile_ms; i++)
    for (size_t j = 0; j < sizeof tile_ns / sizeof *tile_ns; j++)
      for (size_t k = 0; k < sizeof kcs / sizeof *kcs; k++) check_tile(tile_ms[i], tile_ns[j], kcs[k], have_avx2);
  cp_k16_force_isa(0);
  return test_finish();
}
