/* Floor: export (private). A GGUF checkpoint's tensors under their HF names, for writing a GGUF
 * input as an HF safetensors folder (export/convert.c; export/gguf/gguf_names.c). */
#ifndef CTXPATCH_EXPORT_GGUF_NAMES_H
#define CTXPATCH_EXPORT_GGUF_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/export/gguf_export.h"

/* Per checkpoint tensor: its HF name (NULL only for a tensor that is config in HF's layout:
 * llama.cpp's rope_freqs, which is config.json's rope_scaling there, and is not written),
 * llama.cpp's row order (llama rotary q/k, BLOOM / GPT-NeoX fused q/k/v), which goes back to
 * HF order: HF row s is GGUF row cp_gguf_row_to_gguf(&rows[i], s), and whether HF stores it
 * transposed (GPT-2's Conv1D matrices: GGUF [n_out, n_in], HF [n_in, n_out]), and whether it holds
 * 1 + w of HF's w (Gemma's norms, cp_family_norm_plus_one; float32, checked): written as the stored
 * value minus 1. That subtraction is exact where 1 + w lies in [0.5, 2] (Sterbenz), so a loader
 * adding 1 again gets the stored value back bit for bit; HF's own w is met up to the rounding of
 * w + 1 (half a float32 ulp of 1, 6e-8). */
typedef struct {
  char **hf;          /* [n] owned */
  cp_gguf_rows *rows; /* [n] CP_GGUF_ROWS_SAME: rows in place */
  bool *transpose;    /* [n] */
  bool *plus_one;     /* [n] */
  size_t n;
} cp_gguf_hf_names;

/* The map of GGUF checkpoint `ck` (its config read from the metadata); CP_ECFG_FAMILY etc.
 * from the config, CP_EUNSUPPORTED naming the first tensor that has no HF name and is not
 * config (under its GGUF name no HF loader would read it). Free with cp_gguf_hf_names_free
 * (also after an error). */
int cp_gguf_hf_names_make(cp_gguf_hf_names *out, const cp_checkpoint *ck);
void cp_gguf_hf_names_free(cp_gguf_hf_names *m);

#endif
