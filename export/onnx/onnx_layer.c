/* The graph side of the residual layout's ops shared by the ONNX builders (onnx_layer.h). */
#include "export/onnx/onnx_layer.h"

int cp_og_layer_add(void *ctx, cp_slot dst, cp_slot a, cp_slot b) {
  cp_og_layer *c = ctx;
  c->v[dst] = cp_og_op2(c->g, "Add", c->v[a], c->v[b]);
  return 0;
}

int cp_og_layer_copy(void *ctx, cp_slot dst, cp_slot src) {
  cp_og_layer *c = ctx;
  c->v[dst] = c->v[src];
  return 0;
}

int cp_og_layer_ffn_add(cp_og_layer *c, cp_slot dst, cp_slot src, cp_stack_kind stack, int layer) {
  const char *f = cp_og_ffn(c->g, c->m, c->ly, c->v[src], stack, layer);
  c->v[dst] = cp_og_op2(c->g, "Add", c->v[dst], f);
  return 0;
}
