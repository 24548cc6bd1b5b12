/* A weight's matrix transposed on its way into the ONNX writer (onnx_transpose.h). Two paths:
 * - with AVX2, 16-bit elements stored as given (an F16 or BF16 checkpoint exported in its own
 *   dtype): 32-row by 16-column tiles transposed in registers, NaNs rewritten there, and stored
 *   straight into the writer's staging buffer with non-temporal stores, a whole 64-byte line of
 *   an output row at a time;
 * - otherwise: 512 output rows at a time into a padded block, then cp_onnx_tensor_write (which
 *   converts).
 * Measured on the 2.29 GB bench checkpoint (docs/perf.md "Streaming exports at the limit"). */
#include "export/onnx/onnx_transpose.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/num.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define OT_X86 1
#include <immintrin.h>
#define OT_AVX2 __attribute__((target("avx2")))
#endif

/* Output rows of a block at a time, each TRANSPOSE_PAD elements longer than a row: weight shapes
 * are powers of two, and rows a power of two apart fall in the same cache sets (64 rows without
 * padding ran about 10x slower). */
#define TRANSPOSE_BLOCK 512
#define TRANSPOSE_PAD 32

static bool allow_avx2 = true;

void cp_og_transpose_allow_avx2(bool allow) { allow_avx2 = allow; }

/* ---------------------------------------------------------------- the block path */

#ifdef __SSE2__
/* The 8 x 8 16-bit elements at s (row stride ls) transposed to d (row stride ld): three rounds
 * of interleaves, 16 bytes a load and a store. */
static void t8x8_16(uint16_t *d, size_t ld, const uint16_t *s, size_t ls) {
  __m128i a[8], b[8], c[8];
  for (int k = 0; k < 8; k++) a[k] = _mm_loadu_si128((const __m128i *)(const void *)(s + (size_t)k * ls));
  for (int k = 0; k < 4; k++) {
    b[k] = _mm_unpacklo_epi16(a[2 * k], a[2 * k + 1]);     /* rows 2k, 2k+1: columns 0-3 */
    b[k + 4] = _mm_unpackhi_epi16(a[2 * k], a[2 * k + 1]); /* columns 4-7 */
  }
  for (int k = 0; k < 2; k++)
    for (int h = 0; h < 2; h++) { /* rows 4k..4k+3, columns pairs of half h */
      c[4 * h + 2 * k] = _mm_unpacklo_epi32(b[4 * h + 2 * k], b[4 * h + 2 * k + 1]);
      c[4 * h + 2 * k + 1] = _mm_unpackhi_epi32(b[4 * h + 2 * k], b[4 * h + 2 * k + 1]);
    }
  for (int h = 0; h < 2; h++)
    for (int k = 0; k < 2; k++) { /* column 4h + 2k (+1): rows 0-3 from c[4h+k], rows 4-7 from c[4h+2+k] */
      _mm_storeu_si128((__m128i *)(void *)(d + (size_t)(4 * h + 2 * k) * ld),
                       _mm_unpacklo_epi64(c[4 * h + k], c[4 * h + 2 + k]));
      _mm_storeu_si128((__m128i *)(void *)(d + (size_t)(4 * h + 2 * k + 1) * ld),
                       _mm_unpackhi_epi64(c[4 * h + k], c[4 * h + 2 + k]));
    }
}
#endif

/* Columns [c0, c0 + nc) of w [rows, cols] as rows of block [nc, ld]; esz 2 or 4 bytes. Tiles of
 * TILE rows by 8 columns: the destination lines a tile writes are finished before it moves on
 * (element by element over whole rows, every store missed the cache: 34 % of an export's CPU). */
#define TILE 32
static void transpose_block(void *block, size_t ld, const void *w, size_t esz, int rows, int cols, int c0, int nc) {
  for (size_t r1 = 0; r1 < (size_t)rows; r1 += TILE) {
    size_t r2 = r1 + TILE < (size_t)rows ? r1 + TILE : (size_t)rows, c = 0;
#ifdef __SSE2__
    if (esz == 2 && r2 - r1 == TILE)
      for (; c + 8 <= (size_t)nc; c += 8)
        for (size_t r = r1; r < r2; r += 8)
          t8x8_16((uint16_t *)block + c * ld + r, ld, (const uint16_t *)w + r * (size_t)cols + (size_t)c0 + c,
                  (size_t)cols);
#endif
    for (; c < (size_t)nc; c += 8) {
      size_t c2 = c + 8 < (size_t)nc ? c + 8 : (size_t)nc;
      for (size_t r = r1; r < r2; r++)
        for (size_t j = c; j < c2; j++) {
          size_t from = r * (size_t)cols + (size_t)c0 + j, to = j * ld + r;
          if (esz == 2) ((uint16_t *)block)[to] = ((const uint16_t *)w)[from];
          else ((uint32_t *)block)[to] = ((const uint32_t *)w)[from];
        }
    }
  }
}

/* Columns [c, c_end) of w as the tensor's next output rows, through a block. */
static int put_blocks(cp_onnx_writer *wo, const void *w, size_t esz, int rows, int cols, int c, int c_end,
                      const char *name) {
  size_t ld = (size_t)rows + TRANSPOSE_PAD, bn;
  int bc = c_end - c < TRANSPOSE_BLOCK ? c_end - c : TRANSPOSE_BLOCK, rc = 0;
  void *block = NULL;
  if (!cp_size_mul(&bn, ld, (size_t)bc * esz) || !(block = malloc(bn)))
    return cp_nomem("onnx graph: weight '%s'", name);
  for (int c0 = c; c0 < c_end && rc == 0; c0 += bc) {
    int nc = c_end - c0 < bc ? c_end - c0 : bc;
    transpose_block(block, ld, w, esz, rows, cols, c0, nc);
    for (int j = 0; j < nc && rc == 0; j++)
      rc = cp_onnx_tensor_write(wo, (char *)block + (size_t)j * ld * esz, (uint64_t)rows);
  }
  free(block);
  return rc;
}

/* ---------------------------------------------------------------- the direct path (AVX2) */

#ifdef OT_X86
/* How NaNs are stored (cp_half_canon): a value whose magnitude passes `lim` becomes
 * (v & keep) | set. F16: sign | 0x7e00; BF16: the quiet bit 0x40 set; none: lim 0x7fff, never. */
typedef struct {
  uint16_t lim, keep, set;
} nan_rule;

static uint16_t nan1(uint16_t v, nan_rule n) { return (v & 0x7fffu) > n.lim ? (uint16_t)((v & n.keep) | n.set) : v; }

/* The 16 x 16 elements at s (row stride ls) as o[j] = column j, NaNs rewritten: an in-lane 8 x 8
 * transpose of rows 0-7 and of rows 8-15 (three rounds of interleaves), then the lanes paired. */
OT_AVX2 __attribute__((always_inline)) static inline void t16(__m256i o[16], const uint16_t *s, size_t ls, nan_rule n) {
  const __m256i mag = _mm256_set1_epi16(0x7fff), lim = _mm256_set1_epi16((short)n.lim);
  __m256i a[16], b[16], c[16], t[16], any = _mm256_setzero_si256();
#pragma GCC unroll 16
  for (int k = 0; k < 16; k++) {
    a[k] = _mm256_loadu_si256((const __m256i *)(const void *)(s + (size_t)k * ls));
    any = _mm256_or_si256(any, _mm256_cmpgt_epi16(_mm256_and_si256(a[k], mag), lim));
  }
  if (!_mm256_testz_si256(any, any)) { /* a NaN among them: rare */
    const __m256i keep = _mm256_set1_epi16((short)n.keep), set = _mm256_set1_epi16((short)n.set);
    for (int k = 0; k < 16; k++) {
      __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(a[k], mag), lim);
      a[k] = _mm256_blendv_epi8(a[k], _mm256_or_si256(_mm256_and_si256(a[k], keep), set), nan);
    }
  }
#pragma GCC unroll 2
  for (int g = 0; g < 16; g += 8) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      b[g + k] = _mm256_unpacklo_epi16(a[g + 2 * k], a[g + 2 * k + 1]);
      b[g + k + 4] = _mm256_unpackhi_epi16(a[g + 2 * k], a[g + 2 * k + 1]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      int i = g + 4 * (k >> 1) + 2 * (k & 1); /* (h, k') = (k >> 1, k & 1) */
      c[i] = _mm256_unpacklo_epi32(b[i], b[i + 1]);
      c[i + 1] = _mm256_unpackhi_epi32(b[i], b[i + 1]);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      int h = k >> 1, j = k & 1;
      t[g + 4 * h + 2 * j] = _mm256_unpacklo_epi64(c[g + 4 * h + j], c[g + 4 * h + 2 + j]);
      t[g + 4 * h + 2 * j + 1] = _mm256_unpackhi_epi64(c[g + 4 * h + j], c[g + 4 * h + 2 + j]);
    }
  }
  /* t[j], j < 8: lane 0 column j, lane 1 column 8 + j, of rows 0-7; t[8 + j] the same of rows 8-15 */
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) {
    o[j] = _mm256_permute2x128_si256(t[j], t[8 + j], 0x20);
    o[8 + j] = _mm256_permute2x128_si256(t[j], t[8 + j], 0x31);
  }
}

/* Rows [r0, r1) by columns [c0 + j0, c0 + j1) of w into dst [.., ld] one element at a time, row by
 * row (the source's order). */
static void put_scalar(uint16_t *dst, size_t ld, const uint16_t *w, int cols, int c0, int r0, int r1, int j0, int j1,
                       nan_rule n) {
  for (int r = r0; r < r1; r++)
    for (int j = j0; j < j1; j++)
      dst[(size_t)j * ld + (size_t)r] = nan1(w[(size_t)r * (size_t)cols + (size_t)(c0 + j)], n);
}

/* Columns [c0, c0 + nc) of w [rows, cols] as the rows of dst [nc, ld], NaNs rewritten. Strips of 32
 * source rows, BAND columns at a time (a strip then reads 1 KiB of each of its rows); each output
 * row gets a whole 64-byte line per tile, with non-temporal stores where dst's rows are 32-byte
 * aligned (the staging buffer is read next by the hash thread, not by us: filling it through the
 * cache read each line from memory first). */
#define BAND 512
OT_AVX2 static void transpose_avx2(uint16_t *dst, size_t ld, const uint16_t *w, int rows, int cols, int c0, int nc,
                                   nan_rule n) {
  const bool stream = (uintptr_t)dst % 32 == 0 && ld % 16 == 0;
  const int r32 = rows / 32 * 32, n16 = nc / 16 * 16;
  for (int b0 = 0; b0 < n16; b0 += BAND) {
    int b1 = b0 + BAND < n16 ? b0 + BAND : n16;
    for (int r = 0; r < r32; r += 32) {
      const uint16_t *s = w + (size_t)r * (size_t)cols + (size_t)c0;
      for (int j = b0; j < b1; j += 16) {
        __m256i top[16], bottom[16];
        t16(top, s + j, (size_t)cols, n);
        t16(bottom, s + (size_t)16 * (size_t)cols + j, (size_t)cols, n);
        uint16_t *d = dst + (size_t)j * ld + (size_t)r;
        if (stream) {
#pragma GCC unroll 16
          for (int k = 0; k < 16; k++) {
            _mm256_stream_si256((__m256i *)(void *)(d + (size_t)k * ld), top[k]);
            _mm256_stream_si256((__m256i *)(void *)(d + (size_t)k * ld + 16), bottom[k]);
          }
        } else {
#pragma GCC unroll 16
          for (int k = 0; k < 16; k++) {
            _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)k * ld), top[k]);
            _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)k * ld + 16), bottom[k]);
          }
        }
      }
    }
  }
  if (stream) _mm_sfence(); /* the stores reach memory before the hash thread is handed the buffer */
  put_scalar(dst, ld, w, cols, c0, r32, rows, 0, n16, n);
  put_scalar(dst, ld, w, cols, c0, 0, rows, n16, nc, n);
}

static bool have_avx2(void) {
  __builtin_cpu_init();
  return allow_avx2 && __builtin_cpu_supports("avx2");
}

/* Output rows from column *c on, straight into the staging buffer while the writer offers it;
 * where a buffer ends inside the next 16 output rows, those go through `scratch` and
 * cp_onnx_tensor_write. Leaves *c at cols, or where the writer offers no room (the block path
 * goes on from there). */
static int put_direct(cp_onnx_writer *wo, const uint16_t *w, cp_dtype given, int rows, int cols, int *c,
                      const char *name) {
  uint16_t *scratch = NULL;
  int rc = 0;
  while (rc == 0 && *c < cols) {
    uint64_t room, k;
    bool canon;
    uint16_t *d = cp_onnx_tensor_room(wo, &room, &canon);
    if (!d) break;
    nan_rule n = {0x7fff, 0xffff, 0};
    if (canon) n = given == CP_F16 ? (nan_rule){0x7c00, 0x8000, 0x7e00} : (nan_rule){0x7f80, 0xffff, 0x40};
    k = room / (uint64_t)rows;
    if (k >= (uint64_t)(cols - *c)) k = (uint64_t)(cols - *c);
    else k -= k % 16;
    if (k > 0) {
      transpose_avx2(d, (size_t)rows, w, rows, cols, *c, (int)k, n);
      rc = cp_onnx_tensor_advance(wo, k * (uint64_t)rows);
    } else { /* canon again in cp_onnx_tensor_write: a rewritten NaN stays as it is */
      k = cols - *c < 16 ? (uint64_t)(cols - *c) : 16;
      size_t bytes;
      if (!scratch && (!cp_size_mul(&bytes, (size_t)rows, 16 * sizeof *scratch) || !(scratch = malloc(bytes)))) {
        rc = cp_nomem("onnx graph: weight '%s'", name);
        break;
      }
      transpose_avx2(scratch, (size_t)rows, w, rows, cols, *c, (int)k, n);
      rc = cp_onnx_tensor_write(wo, scratch, k * (uint64_t)rows);
    }
    *c += (int)k;
  }
  free(scratch);
  return rc;
}
#endif

int cp_og_write_transposed(cp_onnx_writer *wo, const void *w, cp_dtype given, int rows, int cols, const char *name) {
  int c = 0, rc = 0;
#ifdef OT_X86
  if (cp_dtype_size(given) == 2 && have_avx2()) rc = put_direct(wo, w, given, rows, cols, &c, name);
#endif
  if (rc == 0 && c < cols) rc = put_blocks(wo, w, cp_dtype_size(given), rows, cols, c, cols, name);
  return rc;
}
