/* Floor: converters (private). A GGUF checkpoint's tensors under their HF names, for writing a GGUF
 * input as an HF safetensors folder (converters/convert.c; converters/gguf_names.c). */
#ifndef CTXPATCH_CONVERTERS_GGUF_NAMES_H
#define CTXPATCH_CONVERTERS_GGUF_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/converters/checkpoint.h"

/* Per checkpoint tensor: its HF name (NULL: a tensor the family table does not name, kept as is)
 * and, for rotary q/k weights and biases, the head count whose rows go back to HF order. */
typedef struct {
  char **hf;    /* [n] owned */
  int *heads;   /* [n] 0: rows in place */
  int d_head;
  size_t n;
} cp_gguf_hf_names;

/* The map of GGUF checkpoint `ck` (its llama config read from the metadata); CP_ECFG_FAMILY etc.
 * from the config. Free with cp_gguf_hf_names_free (also after an error). */
int cp_gguf_hf_names_make(cp_gguf_hf_names *out, const cp_checkpoint *ck);
void cp_gguf_hf_names_free(cp_gguf_hf_names *m);

#endif
