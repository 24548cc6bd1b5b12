/* Floor: model. The initializer names of ctxpatch's own ONNX export (docs/onnx.md), by family
 * table role: the exporter (export/onnx/) names each weight it writes here and the reader
 * (import/onnx/onnx_import.c, onnx_import_t5.c) finds it here, so each name is spelled once.
 *
 * Two namings: the decoder-only graph (every family but T5: "model.layers.%d.attn.q", ...) and
 * T5's two graphs (CP_FAMILY_T5: "encoder.block.%d.self_attn.q", "shared", ...). A name is its
 * pattern with "%d" the layer, then a suffix (".weight", ".bias"; "" gives the base name that
 * cp_og_linear / cp_og_norm add the suffix to). Fused q/k/v has no name: the export writes q, k
 * and v.
 *
 * Ownership: the table is static; names are written into the caller's buffer.
 */
#ifndef CTXPATCH_MODEL_ONNX_NAMES_H
#define CTXPATCH_MODEL_ONNX_NAMES_H

#include <stdbool.h>

#include "ctxpatch/model/families.h"
#include "ctxpatch/model/hf_config.h"

/* `layer` of FIRE's one shared MLP (cfg->fire_shared); per-layer tensors take their layer. */
#define CP_ONNX_NO_LAYER (-1)

/* The pattern ("%d" = layer) of `role` in `stack` of a `family` export, or NULL when the export
 * writes no such tensor. `shared` picks FIRE's shared MLP over the per-layer ones. */
const char *cp_onnx_name_pattern(cp_family family, cp_tensor_role role, cp_stack_kind stack, bool shared);
/* The full name of `role` in `stack`, layer `layer` (CP_ONNX_NO_LAYER: FIRE's shared MLP; ignored
 * by tensors not per layer), then `suffix`, into buf; NULL (buf "") when the export writes no such
 * tensor. */
const char *cp_onnx_name(char buf[CP_TENSOR_NAME_MAX], cp_family family, cp_tensor_role role, cp_stack_kind stack,
                         int layer, const char *suffix);
/* Whether `name` lies under a root of the decoder-only export's weight names ("model.",
 * "lm_head."): the names a decoder-only export may hold besides its graph constants. */
bool cp_onnx_name_own(const char *name);

#endif
