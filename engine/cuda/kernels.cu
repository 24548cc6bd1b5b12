/* Small kernels of the CUDA engine: see engine/cuda/kernels.h. Each thread owns independent
 * elements (a grid-stride loop) or, for the norms, one whole row, so none needs shared memory or
 * a barrier: that keeps them a line-by-line mirror of engine/layer_ops.c and lets
 * tests/cuda_emulate_kernels.cpp run them as plain loops on the host. A row per thread is the
 * correctness baseline, not the fast path (a block-per-row reduction is future work, docs/cuda.md). */
#include "engine/cuda/kernels.h"

#ifndef CPCU_EMULATE /* tests/cuda_emulate_kernels.cpp supplies its own launch and index shim */
#include <cuda_runtime.h>
#define CPCU_LAUNCH(kernel, blocks, threads, stream, ...) \
  kernel<<<(blocks), (threads), 0, (cudaStream_t)(stream)>>>(__VA_ARGS__)
#endif

#include <math.h>
#include <stdio.h>

namespace {

constexpr int NT = 256;         /* threads per block */
constexpr int64_t MAXB = 65535; /* blocks per launch; grid-stride loops cover the rest */

inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + NT - 1) / NT;
  return (unsigned)(b < 1 ? 1 : b > MAXB ? MAXB : b);
}

#define CPCU_FOR(i, n) \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)blockDim.x * gridDim.x)

/* IEEE half bits to float, exactly as formats/dtype.c (subnormals included). */
__device__ inline float half_bits(unsigned h) {
  const unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (e == 0) { /* zero or subnormal: man * 2^-24, exact in float */
    const float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (e == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  return __uint_as_float(sign | ((e + 112u) << 23) | (man << 13));
}

/* A little-endian half at p (block fields are not 2-byte aligned in general). */
__device__ inline float half_at(const unsigned char *p) { return half_bits((unsigned)p[0] | ((unsigned)p[1] << 8)); }

/* Element j of a GGUF block at b, as formats/gguf_quant.c's dequantisers compute it (the same float
 * operations, each rounded: __fmul_rn / __fsub_rn keep nvcc from fusing Q4_K's d1 * q - m1). */
__device__ inline float block_at(const unsigned char *b, int t, unsigned j) {
  if (t == CPCU_W_Q8_0) return half_at(b) * (float)(signed char)b[2 + j]; /* 34 bytes: d, 32 x int8 */
  if (t == CPCU_W_Q4_0) { /* 18 bytes: d, 16 bytes of nibbles (low: 0..15, high: 16..31) */
    const int q = j < 16 ? b[2 + j] & 0x0f : b[2 + j - 16] >> 4;
    return half_at(b) * (float)(q - 8);
  }
  /* Q4_K, 144 bytes: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles; each 64
   * elements are 32 bytes of nibbles, low then high, with sub-blocks is and is + 1 */
  const unsigned c = j / 64, w = j % 64, is = 2 * c + (w >= 32);
  const unsigned char *sc6 = b + 4, qb = b[16 + 32 * c + w % 32];
  unsigned sc, m;
  if (is < 4) {
    sc = sc6[is] & 63u, m = sc6[is + 4] & 63u;
  } else {
    sc = (sc6[is + 4] & 0x0fu) | ((unsigned)(sc6[is - 4] >> 6) << 4);
    m = (sc6[is + 4] >> 4) | ((unsigned)(sc6[is] >> 6) << 4);
  }
  const float d1 = __fmul_rn(half_at(b), (float)sc), m1 = __fmul_rn(half_at(b + 2), (float)m);
  return __fsub_rn(__fmul_rn(d1, (float)(w < 32 ? qb & 0x0f : qb >> 4)), m1);
}

/* Element i of a weight of type t (CPCU_W_*), widened exactly as formats/dtype.c and
 * formats/gguf_quant.c do on the host. */
__device__ inline float weight_at(const void *w, int t, size_t i) {
  if (t == CPCU_W_F32) return ((const float *)w)[i];
  if (t == CPCU_W_Q8_0 || t == CPCU_W_Q4_0)
    return block_at((const unsigned char *)w + i / 32 * (t == CPCU_W_Q8_0 ? 34 : 18), t, (unsigned)(i % 32));
  if (t == CPCU_W_Q4_K) return block_at((const unsigned char *)w + i / 256 * 144, t, (unsigned)(i % 256));
  const unsigned h = ((const unsigned short *)w)[i];
  if (t == CPCU_W_BF16) return __uint_as_float(h << 16);
  return half_bits(h);
}

__global__ void k_embed(float *x, const void *embed, int t, const int64_t *ids, const float *pe, int64_t pos0,
                        int64_t n, int D) {
  CPCU_FOR(i, n * D) {
    const int64_t r = i / D, d = i % D;
    float v = weight_at(embed, t, (size_t)ids[r] * D + d);
    if (pe) v += pe[(size_t)(pos0 + r) * D + d];
    x[i] = v;
  }
}

__global__ void k_widen(float *dst, const void *src, int t, int64_t n) {
  CPCU_FOR(i, n) dst[i] = weight_at(src, t, (size_t)i);
}

/* One thread per (row, head): the sum of x * 0 is 0 for finite values, NaN for a NaN or Inf, as
 * check_finite of engine_cpu.c. */
__global__ void k_nonfinite(unsigned long long *first, const float *x, int64_t n, int heads, int dh, int ld,
                            unsigned long long tag) {
  CPCU_FOR(i, n * heads) {
    const float *p = x + (size_t)(i / heads) * ld + (size_t)(i % heads) * dh;
    float s = 0;
    for (int d = 0; d < dh; d++) s += p[d] * 0.0f;
    if (s != 0) atomicMin(first, tag + (unsigned long long)i);
  }
}

__global__ void k_norm(float *y, const float *x, const float *w, const float *b, int64_t n, int D, int layer,
                       float eps) {
  CPCU_FOR(r, n) {
    const float *xr = x + (size_t)r * D;
    float *yr = y + (size_t)r * D;
    double mean = 0, var = 0;
    if (layer) {
      for (int d = 0; d < D; d++) mean += xr[d];
      mean /= D;
    }
    for (int d = 0; d < D; d++) var += ((double)xr[d] - mean) * ((double)xr[d] - mean);
    var /= D;
    const float inv = (float)(1.0 / sqrt(var + (double)eps));
    for (int d = 0; d < D; d++) {
      const float v = (float)((double)xr[d] - mean) * inv * w[d];
      yr[d] = b ? v + b[d] : v;
    }
  }
}

__global__ void k_bias(float *C, int ldc, const float *b, int64_t M, int N) {
  CPCU_FOR(i, M * N) C[(size_t)(i / N) * ldc + i % N] += b[i % N];
}

/* cp_act: 0 relu, 1 gelu (erf), 2 gelu (tanh), 3 silu; as layer_ops.c's act(). */
__device__ inline float act_of(int a, float x) {
  switch (a) {
    case 0: return x > 0 ? x : 0.0f;
    case 1: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case 2: return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case 3: return x / (1.0f + expf(-x));
  }
  return x;
}

__global__ void k_act(float *up, const float *gate, int64_t n, int a) {
  CPCU_FOR(i, n) up[i] = gate ? act_of(a, gate[i]) * up[i] : act_of(a, up[i]);
}

__global__ void k_add(float *y, const float *a, const float *b, int64_t n) {
  CPCU_FOR(i, n) y[i] = a[i] + b[i];
}

__global__ void k_scale(float *x, int64_t n, float s) {
  CPCU_FOR(i, n) x[i] *= s;
}

__global__ void k_clamp(float *x, int64_t n, float c) {
  CPCU_FOR(i, n) x[i] = fminf(fmaxf(x[i], -c), c);
}

/* One thread per (row, frequency a): all heads of the row at that frequency, as rope_rotate, with
 * the model's frequency table inv [rot / 2] (model/rope.c) and cos/sin scale mscale. */
__global__ void k_rope(float *x, int ld, int n_heads, int dh, int rot, const double *inv, double scale, double mscale,
                       int64_t n, int64_t pos0, int fixed) {
  const int half = rot / 2;
  CPCU_FOR(i, n * half) {
    const int64_t r = i / half;
    const int a = (int)(i % half);
    const double t = (double)(fixed ? pos0 : pos0 + r) / scale;
    const double ang = t * inv[a], c = cos(ang) * mscale, s = sin(ang) * mscale;
    for (int hh = 0; hh < n_heads; hh++) {
      float *v = x + (size_t)r * ld + (size_t)hh * dh;
      const double x1 = v[a], x2 = v[a + half];
      v[a] = (float)(x1 * c - x2 * s);
      v[a + half] = (float)(x2 * c + x1 * s);
    }
  }
}

#ifdef CPCU_EMULATE
int launched(const char *, char *, size_t) { return 0; }
#else
int launched(const char *what, char *why, size_t wn) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return 0;
  if (why && wn) snprintf(why, wn, "%s kernel: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
  return -1;
}
#endif

} // namespace

extern "C" int cpcu_k_embed(void *s, float *x, const void *embed, int t, const int64_t *ids, const float *pe,
                            int64_t pos0, int64_t n, int D, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_embed, blocks_for(n * D), NT, s, x, embed, t, ids, pe, pos0, n, D);
  return launched("embedding", why, wn);
}

extern "C" int cpcu_k_widen(void *s, float *dst, const void *src, int t, int64_t n, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_widen, blocks_for(n), NT, s, dst, src, t, n);
  return launched("widen", why, wn);
}

extern "C" int cpcu_k_nonfinite(void *s, unsigned long long *first, const float *x, int64_t n, int heads, int dh,
                                int ld, unsigned long long tag, char *why, size_t wn) {
  if (n <= 0 || heads <= 0) return 0;
  CPCU_LAUNCH(k_nonfinite, blocks_for(n * heads), NT, s, first, x, n, heads, dh, ld, tag);
  return launched("non-finite check", why, wn);
}

extern "C" int cpcu_k_norm(void *s, float *y, const float *x, const float *w, const float *b, int64_t n, int D,
                           int layer, float eps, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_norm, blocks_for(n), NT, s, y, x, w, b, n, D, layer, eps);
  return launched("norm", why, wn);
}

extern "C" int cpcu_k_bias(void *s, float *C, int ldc, const float *b, int64_t M, int N, char *why, size_t wn) {
  if (M <= 0 || N <= 0) return 0;
  CPCU_LAUNCH(k_bias, blocks_for(M * N), NT, s, C, ldc, b, M, N);
  return launched("bias", why, wn);
}

extern "C" int cpcu_k_act(void *s, float *up, const float *gate, int64_t n, int a, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_act, blocks_for(n), NT, s, up, gate, n, a);
  return launched("activation", why, wn);
}

extern "C" int cpcu_k_add(void *s, float *y, const float *a, const float *b, int64_t n, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_add, blocks_for(n), NT, s, y, a, b, n);
  return launched("add", why, wn);
}

extern "C" int cpcu_k_scale(void *s, float *x, int64_t n, float c, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_scale, blocks_for(n), NT, s, x, n, c);
  return launched("scale", why, wn);
}

extern "C" int cpcu_k_clamp(void *s, float *x, int64_t n, float c, char *why, size_t wn) {
  if (n <= 0) return 0;
  CPCU_LAUNCH(k_clamp, blocks_for(n), NT, s, x, n, c);
  return launched("clamp", why, wn);
}

extern "C" int cpcu_k_rope(void *s, float *x, int ld, int n_heads, int dh, int rot, const double *inv, double scale,
                           double mscale, int64_t n, int64_t pos0, int fixed, char *why, size_t wn) {
  if (n <= 0 || rot < 2) return 0;
  CPCU_LAUNCH(k_rope, blocks_for(n * (rot / 2)), NT, s, x, ld, n_heads, dh, rot, inv, scale, mscale, n, pos0, fixed);
  return launched("rope", why, wn);
}
