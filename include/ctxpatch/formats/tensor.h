/* Floor: formats. Tensor element types and borrowed tensor views shared by every format.
 *
 * A cp_tensor describes one contiguous, row-major, little-endian tensor. `data` is borrowed
 * from whoever produced the view (usually a read-only mmap of the file) and stays valid until
 * that producer is freed.
 */
#ifndef CTXPATCH_TENSOR_H
#define CTXPATCH_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  CP_F64,
  CP_F32,
  CP_F16,
  CP_BF16,
  CP_F8_E4M3,
  CP_F8_E5M2,
  CP_I64,
  CP_I32,
  CP_I16,
  CP_I8,
  CP_U8,
  CP_BOOL,
  CP_DTYPE_COUNT,
  /* Block formats (GGUF quants, ggml type id + CP_DTYPE_BLOCK_BASE): never a cp_tensor's dtype,
   * only the dtype of a model matrix kept quantised (cp_linear, model.h). Outside
   * [0, CP_DTYPE_COUNT): cp_dtype_size is 0 and every per-element table refuses them; use
   * cp_dtype_span for their bytes. */
  CP_DTYPE_BLOCK_BASE = 0x100,
  CP_Q4_0 = CP_DTYPE_BLOCK_BASE + 2,
  CP_Q8_0 = CP_DTYPE_BLOCK_BASE + 8,
  CP_Q4_K = CP_DTYPE_BLOCK_BASE + 12
} cp_dtype;

#define CP_MAX_DIMS 8

typedef struct {
  const char *name;            /* borrowed, NUL-terminated */
  cp_dtype dtype;
  int ndim;                    /* 0 for a scalar */
  int64_t shape[CP_MAX_DIMS];  /* each >= 0 */
  uint64_t nbytes;             /* numel * element size, checked for overflow */
  const void *data;            /* borrowed; NULL when the producer cannot map it */
} cp_tensor;

/* Bytes per element; 0 for a block format. */
size_t cp_dtype_size(cp_dtype dtype);
/* Whether dtype is a block format (CP_Q4_0, CP_Q8_0, CP_Q4_K). */
bool cp_dtype_is_block(cp_dtype dtype);
/* Elements per block: 32 (Q4_0, Q8_0), 256 (Q4_K), 1 for element types, 0 for unknown values. */
uint32_t cp_dtype_block(cp_dtype dtype);
/* Bytes of `count` consecutive elements: count * cp_dtype_size, or for a block format whole
 * blocks (count / block * bytes per block). `count` must be a multiple of the block (assert);
 * the caller has bounded count * size (the tensor's checked size). */
uint64_t cp_dtype_span(cp_dtype dtype, uint64_t count);
/* safetensors spelling: "F32", "BF16", "F8_E4M3", ... ("Q8_0", "Q4_0", "Q4_K" for blocks; never
 * parsed back by cp_dtype_from_name) */
const char *cp_dtype_name(cp_dtype dtype);
/* Parses the safetensors spelling; returns 0 or CP_EUNSUPPORTED (message not set). */
int cp_dtype_from_name(cp_dtype *out, const char *name);
bool cp_dtype_is_float(cp_dtype dtype);

/* numel of a shape; returns CP_EOVERFLOW (message not set) past 2^63. */
int cp_shape_numel(uint64_t *out, int ndim, const int64_t *shape);
/* numel * element size with overflow check; CP_EOVERFLOW (message not set). */
int cp_shape_nbytes(uint64_t *out, cp_dtype dtype, int ndim, const int64_t *shape);

/* Overflow-checked arithmetic: return false on overflow. */
static inline bool cp_mul_u64(uint64_t *out, uint64_t a, uint64_t b) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline bool cp_add_u64(uint64_t *out, uint64_t a, uint64_t b) {
  return !__builtin_add_overflow(a, b, out);
}

/* Element conversions used when widening weights for the engines. */
float cp_f16_to_f32(uint16_t h);
float cp_bf16_to_f32(uint16_t b);
uint16_t cp_f32_to_f16(float f);   /* round to nearest even */
uint16_t cp_f32_to_bf16(float f);  /* round to nearest even */
/* n F16 (`f16`) or BF16 values h as a float32 round trip leaves them (cp_f16_to_f32 then
 * cp_f32_to_f16, or the BF16 pair): the same bits but for NaNs, made quiet (BF16) or canonical
 * (F16, sign kept), into o (may be h): a reorder of 16-bit weights writes the bytes a widened
 * path would, without widening. */
void cp_half_canon(uint16_t *o /* [n] */, const uint16_t *h /* [n] */, size_t n, bool f16);

/* Widens `count` elements of a float dtype (F64/F32/F16/BF16) to float32, or decodes whole
 * blocks of a block format (count a multiple of the block; CP_EARG otherwise) exactly as the GGUF
 * reader does (formats/gguf_quant.c). */
int cp_convert_to_f32(float *dst /* [count] */, const void *src, cp_dtype dtype, uint64_t count);

#endif
