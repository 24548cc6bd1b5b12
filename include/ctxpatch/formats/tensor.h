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
  CP_DTYPE_COUNT
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

/* Bytes per element. */
size_t cp_dtype_size(cp_dtype dtype);
/* safetensors spelling: "F32", "BF16", "F8_E4M3", ... */
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

/* Widens `count` elements of a float dtype (F64/F32/F16/BF16) to float32. */
int cp_convert_to_f32(float *dst /* [count] */, const void *src, cp_dtype dtype, uint64_t count);

#endif
