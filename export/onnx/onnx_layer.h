/* Floor: export (private). The graph side of the residual layout's ops (ctxpatch/model/layer_layout.h)
 * shared by the decoder-only and T5 builders: slots are node output names. Each builder's layer
 * context starts with a cp_og_layer, so the ops below take it as `ctx`. */
#ifndef CTXPATCH_EXPORT_ONNX_LAYER_H
#define CTXPATCH_EXPORT_ONNX_LAYER_H

#include "ctxpatch/export/onnx_builder.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/layer_layout.h"

typedef struct {
  cp_og *g;
  const cp_model *m;
  const cp_layer *ly;
  const char *v[3]; /* the slots' current values */
} cp_og_layer;

int cp_og_layer_add(void *ctx, cp_slot dst, cp_slot a, cp_slot b); /* an Add node */
int cp_og_layer_copy(void *ctx, cp_slot dst, cp_slot src);         /* no node: the name */
/* The feed-forward block of layer `layer` of `stack` (its weights named by the ONNX name table) on
 * src, added to dst. */
int cp_og_layer_ffn_add(cp_og_layer *c, cp_slot dst, cp_slot src, cp_stack_kind stack, int layer);

#endif
