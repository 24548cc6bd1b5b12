/* Floor: export. A small graph-building layer over the ONNX writer (ctxpatch/formats/onnx.h)
 * that every exporter uses: unique deterministic value names, nodes in one call, cached
 * constants, weights from float arrays (transposed for MatMul), graph inputs and outputs with
 * symbolic dims, and the layer pieces the engine computes (Linear, LayerNorm, RMSNorm,
 * activations), spelled in opset-17 operators so that they compute what engine/layer_ops.c does.
 *
 * Errors are sticky (like cp_strbuf): every builder returns the name of the value it made, or
 * NULL once any call has failed; later calls do nothing and return NULL, so a layer reads as a
 * straight line of calls and the exporter checks cp_og_status() once at the end.
 *
 * Naming: values the builder makes are "/HINT_N" (N counts every value made, so names are
 * unique and the same calls give the same names); weights keep the name the caller gives
 * (which must not start with '/'), constants are "const/N". Every name returned is owned by the
 * builder and valid until cp_og_free.
 */
#ifndef CTXPATCH_EXPORT_ONNX_BUILDER_H
#define CTXPATCH_EXPORT_ONNX_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/formats/onnx.h"
#include "ctxpatch/model/families.h"

typedef struct cp_og cp_og;

/* The builder writes into w (borrowed; the caller commits or aborts it after cp_og_free). */
int cp_og_create(cp_og **out, cp_onnx_writer *w);
void cp_og_free(cp_og *g);
/* 0, or the first error any builder call met (its message is the thread's cp_error). */
int cp_og_status(const cp_og *g);
/* Records an error found by the caller (the first one sticks); returns rc. */
int cp_og_fail(cp_og *g, int rc);

/* A fresh value name "/HINT_N". */
const char *cp_og_name(cp_og *g, const char *hint);

/* Node `op` over inputs in[0..n_in) (an input may be "" for an omitted optional one) with one
 * output, named after the op; returns the output. */
const char *cp_og_node(cp_og *g, const char *op, const char *const *in, int n_in, const cp_onnx_attr *attrs,
                       int n_attrs);
/* The same with n_out outputs, whose names go to out[0..n_out); returns out[0]. */
const char *cp_og_node_n(cp_og *g, const char *op, const char *const *in, int n_in, const char **out, int n_out,
                         const cp_onnx_attr *attrs, int n_attrs);
/* One-, two- and three-input nodes without attributes. */
const char *cp_og_op1(cp_og *g, const char *op, const char *a);
const char *cp_og_op2(cp_og *g, const char *op, const char *a, const char *b);
const char *cp_og_op3(cp_og *g, const char *op, const char *a, const char *b, const char *c);

/* Attribute values for cp_og_node (the arrays are borrowed until the node call returns). */
cp_onnx_attr cp_og_attr_i(const char *name, int64_t v);
cp_onnx_attr cp_og_attr_f(const char *name, float v);
cp_onnx_attr cp_og_attr_ints(const char *name, const int64_t *v, int n);

/* Constants (int64, float32 or float64 initializers, each distinct value stored once): a scalar
 * or 1-D. */
const char *cp_og_i64(cp_og *g, int64_t v);
const char *cp_og_i64s(cp_og *g, const int64_t *v, int n);
const char *cp_og_f32(cp_og *g, float v);
const char *cp_og_f32s(cp_og *g, const float *v, int n);
const char *cp_og_f64s(cp_og *g, const double *v, int n);

/* A float weight stored under `name` with shape dims[0..ndim) (in the writer's weight dtype
 * when `lowp`). */
const char *cp_og_weight(cp_og *g, const char *name, const float *data, int ndim, const int64_t *dims, bool lowp);
/* w [rows, cols] stored transposed as `name` [cols, rows] (cp_linear's [n_out, n_in] becomes
 * MatMul's [n_in, n_out]), streamed a block of rows at a time. */
const char *cp_og_weight_t(cp_og *g, const char *name, const float *w, int rows, int cols, bool lowp);
/* The same two for elements of `dt` as a stored-dtype model holds them (cp_linear.dtype,
 * embed_dtype): F32, F16 or BF16 converted on the way out, a block format widened to float32 one
 * tensor at a time; the bytes written are those of the float32 model. No copy of the model is
 * made: peak memory is one block (one tensor for a block format) beside the writer's buffers. */
const char *cp_og_weight_as(cp_og *g, const char *name, const void *data, cp_dtype dt, int ndim, const int64_t *dims,
                            bool lowp);
const char *cp_og_weight_t_as(cp_og *g, const char *name, const void *w, cp_dtype dt, int rows, int cols, bool lowp);
/* Weights read from m's checkpoint mapping (a stored-dtype model) have their resident pages
 * dropped once written (cp_model_release), so streaming a model keeps the resident set flat.
 * m is borrowed; NULL (the default) drops nothing. */
void cp_og_set_source(cp_og *g, const cp_model *m);

/* Graph input `name` (returned as the value name) and graph output `name` holding `value`
 * (an Identity node when the names differ). Symbolic dims: see cp_onnx_dim. */
const char *cp_og_input(cp_og *g, const char *name, cp_dtype elem, int ndim, const cp_onnx_dim *dims);
int cp_og_output(cp_og *g, const char *name, const char *value, cp_dtype elem, int ndim, const cp_onnx_dim *dims);

/* ---- layer pieces (x: [..., n_in] float) ---- */

/* x W^T + b: MatMul by the transposed weight "PREFIX.weight" [n_in, n_out], then Add
 * "PREFIX.bias" when L->b. */
const char *cp_og_linear(cp_og *g, const char *x, const cp_linear *L, const char *prefix);
/* The model's norm over the last axis (width n): LayerNormalization(17) with "PREFIX.weight"
 * (and "PREFIX.bias"), or RMSNorm as engine/layer_ops.c: x / Sqrt(ReduceMean(x^2) + eps) * w. */
const char *cp_og_norm(cp_og *g, const char *x, const cp_norm_weights *w, cp_norm_kind kind, float eps, int n,
                       const char *prefix);
/* Gemma's RMSNorm x / rms(x) * (1 + w) of the model's 1 + w (nw->w [n], no bias): the initializer
 * PREFIX.weight holds HF's w (nw->w - 1, so the graph reads back as HF's tensor), the 1 is an Add
 * node; ((1 + w) - 1) + 1 is the model's value exactly where it lies in [0.5, 2] (Sterbenz). */
const char *cp_og_norm_plus_one(cp_og *g, const char *x, const cp_norm_weights *nw, float eps, int n,
                                const char *prefix);
/* relu, gelu (erf form), gelu_tanh, silu = x * Sigmoid(x), as engine/layer_ops.c's act(). */
const char *cp_og_act(cp_og *g, const char *x, cp_act act);
/* The layer's FFN as engine/layer_ops.c cp_ops_ffn: down(act(up(h))), or down(act(gate(h)) * up(h))
 * when m->gated_ffn; weights named by role in `stack`'s `layer` (ctxpatch/model/onnx_names.h). */
const char *cp_og_ffn(cp_og *g, const cp_model *m, const cp_layer *ly, const char *h, cp_stack_kind stack, int layer);
/* Output head on the final-normed h [B, S, D]: times m->lm_head_scale, then Gemm against the
 * [V, D] head `head_w` (transB), reshaped to logits [B, S, V] after the shape of ids [B, S]. */
const char *cp_og_lm_head(cp_og *g, const cp_model *m, const char *h, const char *head_w, const char *ids);

/* ---- shape pieces ---- */

/* ONNX TensorProto data types, for Cast. */
enum { CP_OG_FLOAT = 1, CP_OG_INT64 = 7, CP_OG_BOOL = 9, CP_OG_DOUBLE = 11 };
/* Cast to ONNX TensorProto data type `to` (CP_OG_*). */
const char *cp_og_cast(cp_og *g, const char *x, int to);
const char *cp_og_unsqueeze(cp_og *g, const char *x, const int64_t *axes, int n);
const char *cp_og_transpose(cp_og *g, const char *x, const int64_t *perm, int n);
const char *cp_og_concat(cp_og *g, const char *a, const char *b, int64_t axis);
/* [B, S, heads*dh] -> [B, heads, S, dh], and back: [B, H, S, dh] -> [B, S, H*dh]. */
const char *cp_og_split_heads(cp_og *g, const char *x, int heads, int dh);
const char *cp_og_merge_heads(cp_og *g, const char *x, int heads, int dh);

#endif
