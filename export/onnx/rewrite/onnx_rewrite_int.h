/* Private to export/onnx/rewrite/onnx_rewrite*.c: the node and constant builders the in-place rewriter
 * shares between its Softmax sites (onnx_rewrite.c) and its com.microsoft attention sites
 * (onnx_rewrite_contrib.c). Every added name is "<p><what>" (values) or "<p>node/<what>" (nodes),
 * p = "ctxpatch/rewrite/L<layer>/". */
#ifndef CTXPATCH_EXPORT_ONNX_REWRITE_INT_H
#define CTXPATCH_EXPORT_ONNX_REWRITE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_edit.h"

typedef struct {
  cp_onnx_edit *e;
  const cp_onnx_model *m;
  cp_onnx_rewrite_report *rep;
} cp_rw;

/* A value name and its node's name. */
typedef struct {
  char v[200], n[220];
} cp_rw_name;

cp_rw_name cp_rw_name_of(const char *p, const char *what);
/* Node "<p>node/<what>" of `type` writing "<p><what>", spliced in before node `before`. */
int cp_rw_op(cp_rw *w, size_t before, const char *p, const char *what, const char *type, const char *const *in,
             size_t n_in, const cp_onnx_edit_attr *attrs, size_t n_attrs);
int cp_rw_const(cp_rw *w, const char *name, int32_t type, const int64_t *shape, int ndim, const void *data);
/* "<p><what>" = v, an int64 scalar. */
int cp_rw_i64(cp_rw *w, const char *p, const char *what, int64_t v);
/* "<p><out>" = Unsqueeze(in, axes) in the opset's spelling (axes an input from opset 13). */
int cp_rw_unsqueeze(cp_rw *w, size_t before, const char *p, const char *out, const char *in, const int64_t *axes,
                    int n_axes);
/* "<p>keep" (bool) of the Lambda mask from "<p>qcol" (query positions with a trailing axis of 1:
 * [S, 1] or [B, S, 1]) and "<p>kpos" [T]: kpos < n_global or qcol - kpos < n_local. */
int cp_rw_lambda_keep(cp_rw *w, size_t before, const char *p, const cp_rule *r);
/* "<p>qcol" [S, 1] from "<p>qpos" [S]. */
int cp_rw_qcol(cp_rw *w, size_t before, const char *p);
/* "<p>bias" = Where("<p>keep", 0, the lowest finite value of `type`: float 1 or float16 10). */
int cp_rw_lambda_bias(cp_rw *w, size_t before, const char *p, int32_t type);

/* The rule at a com.microsoft Attention / MultiHeadAttention / GroupQueryAttention site (layer l):
 * the temperature as its scale attribute, the Lambda mask as its attention_bias, or as its
 * mask_index for an Attention with a past (onnx_rewrite_contrib.c). */
int cp_rw_contrib(cp_rw *w, const cp_onnx_site *s, size_t l, const cp_rule *r);
/* What the contrib path cannot express at site s, one line naming the node (CP_EONNX_SITE). */
int cp_rw_contrib_refuse(const cp_onnx_model *m, const cp_onnx_site *s, const cp_rule *r);

#endif
