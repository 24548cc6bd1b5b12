/* Element types (names, sizes), shape arithmetic with overflow checks, and the f16/bf16/f32
 * conversions: see include/ctxpatch/formats/tensor.h. */
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/tensor.h"

#include <assert.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "formats/gguf_quant.h"

static const struct {
  const char *name;
  size_t size;
} dtype_info[CP_DTYPE_COUNT] = {
    [CP_F64] = {"F64", 8},     [CP_F32] = {"F32", 4},        [CP_F16] = {"F16", 2},
    [CP_BF16] = {"BF16", 2},   [CP_F8_E4M3] = {"F8_E4M3", 1}, [CP_F8_E5M2] = {"F8_E5M2", 1},
    [CP_I64] = {"I64", 8},     [CP_I32] = {"I32", 4},        [CP_I16] = {"I16", 2},
    [CP_I8] = {"I8", 1},       [CP_U8] = {"U8", 1},          [CP_BOOL] = {"BOOL", 1},
};

size_t cp_dtype_size(cp_dtype dtype) { return (unsigned)dtype < CP_DTYPE_COUNT ? dtype_info[dtype].size : 0; }

bool cp_dtype_is_block(cp_dtype dtype) { return dtype == CP_Q4_0 || dtype == CP_Q8_0 || dtype == CP_Q4_K; }

/* The ggml type info of a block format (its id is dtype - CP_DTYPE_BLOCK_BASE). */
static const gguf_type_info *block_info(cp_dtype dtype) {
  return cp_dtype_is_block(dtype) ? gguf_type((uint32_t)(dtype - CP_DTYPE_BLOCK_BASE)) : NULL;
}

uint32_t cp_dtype_block(cp_dtype dtype) {
  const gguf_type_info *ti = block_info(dtype);
  return ti ? ti->block : (unsigned)dtype < CP_DTYPE_COUNT ? 1u : 0u;
}

uint64_t cp_dtype_span(cp_dtype dtype, uint64_t count) {
  const gguf_type_info *ti = block_info(dtype);
  if (!ti) return count * cp_dtype_size(dtype);
  assert(count % ti->block == 0);
  return count / ti->block * ti->size;
}

const char *cp_dtype_name(cp_dtype dtype) {
  const gguf_type_info *ti = block_info(dtype);
  if (ti) return ti->name;
  return (unsigned)dtype < CP_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

int cp_dtype_from_name(cp_dtype *out, const char *name) {
  for (int i = 0; i < CP_DTYPE_COUNT; i++) {
    if (strcmp(dtype_info[i].name, name) == 0) {
      *out = (cp_dtype)i;
      return 0;
    }
  }
  return CP_EUNSUPPORTED;
}

bool cp_dtype_is_float(cp_dtype dtype) {
  return dtype == CP_F64 || dtype == CP_F32 || dtype == CP_F16 || dtype == CP_BF16 ||
         dtype == CP_F8_E4M3 || dtype == CP_F8_E5M2;
}

int cp_shape_numel(uint64_t *out, int ndim, const int64_t *shape) {
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || !cp_mul_u64(&n, n, (uint64_t)shape[i]) || n > (uint64_t)INT64_MAX)
      return CP_EOVERFLOW;
  }
  *out = n;
  return 0;
}

int cp_shape_nbytes(uint64_t *out, cp_dtype dtype, int ndim, const int64_t *shape) {
  uint64_t n;
  if (cp_shape_numel(&n, ndim, shape) < 0 || !cp_mul_u64(&n, n, cp_dtype_size(dtype)) ||
      n > (uint64_t)INT64_MAX)
    return CP_EOVERFLOW;
  *out = n;
  return 0;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float cp_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t cp_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float cp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    /* subnormal: value = man * 2^-24 */
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t cp_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
  if (abs < 0x38800000u) {                                   /* subnormal or zero in f16 */
    if (abs < 0x33000000u) return (uint16_t)sign;
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = abs - 0x38000000u; /* rebias exponent 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

#define LANES(x) (0x0001000100010001ull * (uint64_t)(x)) /* x in each 16-bit lane of a word */

/* cp_f32_to_f16 makes every F16 NaN sign | 0x7e00, cp_f32_to_bf16 sets a BF16 NaN's quiet bit
 * 0x40. Four at a time: a lane is a NaN when its magnitude passes the infinity's (0x7c00,
 * 0x7f80), i.e. when adding 0x3ff (0x7f) to it sets bit 15 (no carry leaves the lane); words
 * without one, nearly all, are copied. */
void cp_half_canon(uint16_t *o, const uint16_t *h, size_t n, bool f16) {
  const uint64_t add = f16 ? LANES(0x3ff) : LANES(0x7f);
  size_t k = 0;
#ifdef __SSE2__
  /* eight at a time: the magnitudes (0..0x7fff) compare as signed 16-bit values */
  const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(f16 ? 0x7c00 : 0x7f80);
  const __m128i sign = _mm_set1_epi16((short)0x8000), quiet = _mm_set1_epi16(f16 ? 0x7e00 : 0x40);
  for (; k + 8 <= n; k += 8) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(h + k));
    __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(x, mag), inf);
    if (_mm_movemask_epi8(nan)) {
      __m128i fixed = f16 ? _mm_or_si128(_mm_and_si128(x, sign), quiet) : _mm_or_si128(x, quiet);
      x = _mm_or_si128(_mm_and_si128(nan, fixed), _mm_andnot_si128(nan, x));
    }
    _mm_storeu_si128((__m128i *)(void *)(o + k), x);
  }
#endif
  for (; k + 4 <= n; k += 4) {
    uint64_t x;
    memcpy(&x, h + k, 8);
    uint64_t nan = ((x & LANES(0x7fff)) + add) & LANES(0x8000);
    if (nan) {
      uint64_t mask = (nan >> 15) * 0xffffu;
      x = f16 ? (x & ~mask) | (mask & ((x & LANES(0x8000)) | LANES(0x7e00))) : x | (mask & LANES(0x40));
    }
    memcpy(o + k, &x, 8);
  }
  for (; k < n; k++) {
    uint16_t v = h[k];
    if (f16 && (v & 0x7fffu) > 0x7c00u) v = (uint16_t)((v & 0x8000u) | 0x7e00u);
    if (!f16 && (v & 0x7fffu) > 0x7f80u) v = (uint16_t)(v | 0x40u);
    o[k] = v;
  }
}

int cp_convert_to_f32(float *dst, const void *src, cp_dtype dtype, uint64_t count) {
  const unsigned char *p = src;
  switch (dtype) {
  case CP_F32:
    memcpy(dst, src, count * 4);
    return 0;
  case CP_F64:
    for (uint64_t i = 0; i < count; i++) {
      double d;
      memcpy(&d, p + i * 8, 8);
      dst[i] = (float)d;
    }
    return 0;
  case CP_F16:
    for (uint64_t i = 0; i < count; i++) {
      uint16_t h;
      memcpy(&h, p + i * 2, 2);
      dst[i] = cp_f16_to_f32(h);
    }
    return 0;
  case CP_BF16:
    /* a shift per element, branch-free: the engine widens BF16 weight tiles through here in
     * every matrix product (engine/layer_ops.c) */
    for (uint64_t i = 0; i < count; i++) {
      uint16_t h;
      memcpy(&h, p + i * 2, 2);
      uint32_t u = (uint32_t)h << 16;
      memcpy(dst + i, &u, 4);
    }
    return 0;
  case CP_Q4_0:
  case CP_Q8_0:
  case CP_Q4_K: {
    const gguf_type_info *ti = block_info(dtype);
    if (count % ti->block)
      return cp_error_set(CP_EARG, "cannot decode %llu elements of %s: not whole blocks of %u", (unsigned long long)count,
                          ti->name, ti->block);
    gguf_dequant_blocks(dst, p, (uint32_t)(dtype - CP_DTYPE_BLOCK_BASE), (size_t)(count / ti->block));
    return 0;
  }
  default:
    return cp_error_set(CP_EUNSUPPORTED, "cannot widen dtype %s to F32", cp_dtype_name(dtype));
  }
}
