/* Private to formats/: the ggml tensor type table (block sizes, names) and the dequantisers of
 * the block formats the GGUF reader decodes (gguf_quant.c). */
#ifndef CTXPATCH_FORMATS_GGUF_QUANT_H
#define CTXPATCH_FORMATS_GGUF_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

typedef struct {
  const char *name;  /* NULL: no such type (removed or never assigned) */
  uint32_t block;    /* elements per block along ne[0] */
  uint32_t size;     /* bytes per block */
  int dtype;         /* the cp_dtype it is a plain view of, or -1 for block formats */
  bool dequant;      /* gguf_dequant_blocks decodes it */
} gguf_type_info;

/* Info of ggml type `type`, or NULL when the type is unknown. */
const gguf_type_info *gguf_type(uint32_t type);

/* Decodes `n_blocks` consecutive blocks of a dequantisable type at `src` into
 * dst[n_blocks * block] float32 values, exactly as ggml's dequantize_row_* does. */
void gguf_dequant_blocks(float *dst /* [n_blocks * block] */, const uint8_t *src, uint32_t type,
                         size_t n_blocks);

#endif
