/* Floor: import. Tensor names of the family table (ctxpatch/model/families.h) resolved against
 * one checkpoint: the body prefix it uses, its config's row conditions, GGUF or HF names.
 *
 * Ownership: cp_names borrows the checkpoint; nothing here allocates.
 */
#ifndef CTXPATCH_IMPORT_NAMES_H
#define CTXPATCH_IMPORT_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/model/families.h"
#include "ctxpatch/model/hf_config.h"

/* Naming state for one checkpoint: the family's rows, the body prefix the checkpoint uses (the
 * first prefix under which it has the embedding), and the config's row conditions. */
typedef struct {
  const cp_family_layout *fl;
  const cp_checkpoint *ck; /* borrowed */
  const char *prefix;
  bool gated;              /* FFN has a gate (T5 gated-ACT, Llama, FIRE) */
  bool fire_shared;
  bool qk_norm;             /* per-head q/k norms (Qwen3) */
  bool sandwich;            /* post-attention and post-FFN norms (Gemma 2) */
  bool gguf;               /* the checkpoint is a GGUF file: rows are named by their `gguf` column */
} cp_names;

void cp_names_init(cp_names *out, const cp_checkpoint *ck, const cp_hf_config *cfg);
/* How many tensors `row` names: its stack's depth (T5's decoder: n_decoder_layers) for per-layer
 * rows, else 1. */
int cp_names_layers(const cp_hf_config *cfg, const cp_family_tensor *row);
/* Whether `row`'s matrix is stored [cols, rows] in `nm`'s checkpoint: GPT-2's Conv1D layers (not its
 * embeddings or head) in an HF checkpoint; a GGUF file stores every matrix [rows, cols]. */
bool cp_names_conv1d(const cp_names *nm, const cp_family_tensor *row);
/* Whether a row applies under `nm`'s config. */
bool cp_names_row_applies(const cp_names *nm, const cp_family_tensor *row);
/* prefix + `pattern` with its one "%d" (if any) replaced by `layer`, + suffix, into buf. */
const char *cp_names_format(char buf[CP_TENSOR_NAME_MAX], const char *prefix, const char *pattern, int layer,
                            const char *suffix);
/* Writes the full name of `row` in `layer` with `suffix` (".weight", ".bias", "" ...) to buf. */
const char *cp_names_row(char buf[CP_TENSOR_NAME_MAX], const cp_names *nm, const cp_family_tensor *row,
                         int layer, const char *suffix);
/* The row of `role` in `stack` (alternatives resolved as above) with its full name in buf;
 * NULL when the family has no such tensor there. */
const cp_family_tensor *cp_names_get(char buf[CP_TENSOR_NAME_MAX], const cp_names *nm, cp_tensor_role role,
                                     cp_stack_kind stack, int layer, const char *suffix);
/* The effective bias of a row: CP_BIAS_NONE, CP_BIAS_REQUIRED or CP_BIAS_OPTIONAL. */
cp_bias_rule cp_names_bias(const cp_family_tensor *row, const cp_hf_config *cfg);
/* Index of the next stored-slopes tensor at or after `from`, or (size_t)-1 (also for families
 * without stored slopes). */
size_t cp_names_next_slopes(const cp_names *nm, size_t from);

#endif
