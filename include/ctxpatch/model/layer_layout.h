/* Floor: model. The residual layout of one transformer layer, written once: which norm feeds which
 * module and how the outputs rejoin the residual stream. The CPU engine, the CUDA engine and the
 * ONNX builders each implement the small ops table below over their own values (host buffers,
 * device buffers, graph names) and run the same program, so the three layouts (pre-norm with an
 * optional cross-attention, GPT-NeoX's parallel residual, BLOOM's residual from the norm) cannot
 * drift apart between them.
 *
 * Ownership: nothing here allocates; `ctx` is the caller's.
 */
#ifndef CTXPATCH_MODEL_LAYER_LAYOUT_H
#define CTXPATCH_MODEL_LAYER_LAYOUT_H

#include <stdbool.h>

/* Three values a layer works on: the residual stream, a normed input, a module's output. */
typedef enum { CP_SLOT_X, CP_SLOT_H, CP_SLOT_T } cp_slot;
typedef enum {
  CP_LAYER_NORM_ATTN,
  CP_LAYER_NORM_CROSS,
  CP_LAYER_NORM_FFN,
  CP_LAYER_NORM_POST_ATTN, /* Gemma 2's norms of the module outputs */
  CP_LAYER_NORM_POST_FFN,
} cp_layer_norm;

typedef enum {
  CP_RESIDUAL_PRE_NORM,  /* x += attn(ln1(x)); [x += cross(lnc(x))]; x += ffn(ln2(x)) */
  CP_RESIDUAL_PARALLEL,  /* GPT-NeoX: x + attn(ln1(x)) + ffn(ln2(x)) */
  CP_RESIDUAL_FROM_NORM, /* BLOOM apply_residual_connection_post_layernorm: the residuals are the normed inputs */
  CP_RESIDUAL_SANDWICH,  /* Gemma 2: x += lnpa(attn(ln1(x))); x += lnpf(ffn(ln2(x))) */
  CP_RESIDUAL_SCALED,    /* Granite: x += r attn(ln1(x)); x += r ffn(ln2(x)), r the residual multiplier */
  CP_RESIDUAL_POST_NORM, /* OLMo 2: x += lnpa(attn(x)); x += lnpf(ffn(x)) (no pre-norms) */
} cp_residual;

/* Each op returns 0 or a negative CP_E* code (set by the op); the program stops at the first. */
typedef struct {
  int (*norm)(void *ctx, cp_layer_norm which, cp_slot dst, cp_slot src);
  int (*attn)(void *ctx, bool cross, cp_slot dst, cp_slot src); /* self- or cross-attention of src */
  int (*add)(void *ctx, cp_slot dst, cp_slot a, cp_slot b);     /* dst = a + b */
  int (*copy)(void *ctx, cp_slot dst, cp_slot src);
  int (*ffn_add)(void *ctx, cp_slot dst, cp_slot src); /* dst += ffn(src) */
  int (*ffn)(void *ctx, cp_slot dst, cp_slot src);     /* dst = ffn(src); only the sandwich, scaled and
                                                          post-norm layouts use it (NULL where a builder refuses them) */
  int (*scale)(void *ctx, cp_slot s);                  /* s *= the residual multiplier; scaled layout only */
} cp_layer_ops;

/* Runs one layer in `layout` (with a cross-attention after the self-attention when `cross`; only
 * the pre-norm layout has one) over the slots, the layer's input and output in CP_SLOT_X. */
int cp_layer_run(const cp_layer_ops *ops, void *ctx, cp_residual layout, bool cross);

#endif
