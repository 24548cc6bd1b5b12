/* Floor: model. How llama.cpp orders the rows of q/k and fused q/k/v tensors relative to Hugging
 * Face, for reading a GGUF as a model and for writing one. Nothing here allocates. */
#ifndef CTXPATCH_MODEL_GGUF_ROWS_H
#define CTXPATCH_MODEL_GGUF_ROWS_H

#include <stdint.h>

#include "ctxpatch/model/families.h"
#include "ctxpatch/model/hf_config.h"

/* How llama.cpp orders the rows of a tensor relative to HF:
 *   CP_GGUF_ROWS_ROTARY: a llama q/k weight (or bias), heads of d_head rows; row i*dh/2 + j of a
 *     head (half i, pair j) is stored at row 2j + i (convert_hf_to_gguf.py's LlamaModel.permute);
 *   CP_GGUF_ROWS_QKV: BLOOM's / GPT-NeoX's fused q/k/v, HF rows per head [H, 3, dh], stored as
 *     q | k | v, i.e. [3, H, dh] (the converters' BloomModel / GPTNeoXModel reorder);
 *   CP_GGUF_ROWS_SAME: in place. */
typedef enum { CP_GGUF_ROWS_SAME, CP_GGUF_ROWS_ROTARY, CP_GGUF_ROWS_QKV } cp_gguf_row_order;
typedef struct {
  cp_gguf_row_order order;
  int n_heads; /* CP_GGUF_ROWS_QKV */
  int d_head;
} cp_gguf_rows;

/* The row order of family table role `role` in a model of config `cfg` (SAME for families other
 * than llama, gpt_neox, bloom). */
cp_gguf_rows cp_gguf_rows_of(const cp_hf_config *cfg, cp_tensor_role role);
/* The GGUF row holding HF row `hf_row`, and the HF row of GGUF row `gguf_row`. */
uint64_t cp_gguf_row_to_gguf(const cp_gguf_rows *r, uint64_t hf_row);
uint64_t cp_gguf_row_to_hf(const cp_gguf_rows *r, uint64_t gguf_row);
/* CP_EMODEL_TENSOR (naming `where` and `tensor`) unless `rows` rows fit order `r`. */
int cp_gguf_rows_check(const cp_gguf_rows *r, uint64_t rows, const char *where, const char *tensor);

#endif
