/* The in-place rewriter's com.microsoft attention sites (export/onnx/rewrite/onnx_rewrite_int.h): the
 * temperature as the node's scale, the Lambda mask computed in-graph from the node's runtime
 * shapes and fed as
 *   Attention without a past:      attention_bias [1, 1, S, T] (input 5, added to one it has);
 *   Attention with a past:         mask_index [B, S, T] int32 (input 3): onnxruntime refuses an
 *                                  Attention with both a past and an attention_bias, and a 3-D
 *                                  mask is its per-query mask (hidden keys get the node's
 *                                  mask_filter_value), ANDed with the 2-D mask it has;
 *   MultiHeadAttention:            attention_bias [1, 1, S, T] (input 5, added to one it has),
 *                                  T = past_key's length + S;
 *   GroupQueryAttention:           attention_bias [B, 1, S, T] (input 10), T its
 *                                  total_sequence_length, each sequence's query positions from
 *                                  seqlens_k as onnxruntime places them (a first prompt at 0).
 * Query positions are absolute (past + row); key j is kept iff j < n_global or qpos - j < n_local
 * (the causal half is the node's own). */
#include <stdio.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"
#include "export/onnx/rewrite/onnx_rewrite_int.h"
#include "export/onnx/rewrite/onnx_sites.h"

#define PREFIX "ctxpatch/rewrite/"

static bool has_input(const cp_onnx_node *n, size_t i) { return n->n_inputs > i && n->inputs[i][0]; }

static bool is_op(const cp_onnx_node *n, const char *op) { return !strcmp(n->op_type, op); }

int cp_rw_contrib_refuse(const cp_onnx_model *m, const cp_onnx_site *s, const cp_rule *r) {
  const cp_onnx_node *nd = &m->graph->nodes[s->node];
  char lb[300], qb[128];
  const char *label = cp_onnx_site_label(lb, nd, s->node);
  if (r->n_temperature && s->scale == 0.0f)
    return cp_error_set(CP_EONNX_SITE, "%s: %s: no scale attribute and the head size cannot be told from the "
                        "weights feeding it, so its temperature cannot be set", m->path, label);
  if (r->n_schedule)
    return cp_error_set(CP_EONNX_SITE, "%s: %s: temperature_schedule gives each row its own tau, and the node's "
                        "scale attribute is one number", m->path, label);
  if (!r->has_lambda) return 0;
  bool attention = is_op(nd, "Attention");
  if (attention && has_input(nd, 4)) {
    if (cp_onnx_attr_i(nd, "past_present_share_buffer", 0) || has_input(nd, 6))
      return cp_error_set(CP_EONNX_SITE, "%s: %s: lambda_mask with a past shared with present (past_sequence_length): "
                          "the key count is not the past's length; not expressed by the rewriter", m->path, label);
    if (s->mask_rank != 0 && s->mask_rank != 2)
      return cp_error_set(CP_EONNX_SITE, "%s: %s: lambda_mask with a past goes through mask_index (onnxruntime "
                          "refuses attention_bias with a past), and its mask_index '%s' is %s: only a 2-D "
                          "[batch, total] mask is combined with it", m->path, label,
                          cp_quote(qb, sizeof qb, nd->inputs[3], strlen(nd->inputs[3])),
                          s->mask_rank < 0 ? "of undeclared rank" : s->mask_rank == 1 ? "1-D (lengths)" : "not 2-D");
  }
  if (!attention && !s->self_attention)
    return cp_error_set(CP_EONNX_SITE, "%s: %s: its keys are not projected from the query's hidden states "
                        "(cross-attention?): lambda_mask is for a decoder's self-attention", m->path, label);
  if (is_op(nd, "MultiHeadAttention") && (has_input(nd, 8) || has_input(nd, 9)))
    return cp_error_set(CP_EONNX_SITE, "%s: %s: lambda_mask with past_sequence_length / cache_indirection (a "
                        "shared KV buffer): the key count is not the past's length; not expressed by the rewriter",
                        m->path, label);
  if (is_op(nd, "GroupQueryAttention") && (!has_input(nd, 5) || !has_input(nd, 6)))
    return cp_error_set(CP_EONNX_SITE, "%s: %s: no seqlens_k / total_sequence_length input to place the queries",
                        m->path, label);
  if (!attention && s->elem_type != 1 && s->elem_type != 10)
    return cp_error_set(CP_EONNX_SITE, "%s: %s: a query of ONNX type %d (float or float16 only)", m->path, label,
                        (int)s->elem_type);
  return 0;
}

/* <p>S = query's dim 1 (int64 scalar); <p>T = P + S with P = dim `past_axis` of `past` ("": none,
 * T = S); <p>kpos [T] = 0 .. T-1, <p>qpos [S] = T - S .. T-1. */
static int positions(cp_rw *w, size_t before, const char *p, const char *query, const char *past, int64_t past_axis) {
  cp_rw_name c_1 = cp_rw_name_of(p, "const/1"), c_pa = cp_rw_name_of(p, "const/past_axis"), c_0 = cp_rw_name_of(p, "const/0");
  cp_rw_name shape = cp_rw_name_of(p, "shape"), S = cp_rw_name_of(p, "S"), T = cp_rw_name_of(p, "T");
  cp_rw_name q0 = cp_rw_name_of(p, "q0"), ps = cp_rw_name_of(p, "past_shape"), P = cp_rw_name_of(p, "P");
  int rc;
  if ((rc = cp_rw_i64(w, p, "const/1", 1)) < 0 || (rc = cp_rw_i64(w, p, "const/0", 0)) < 0 ||
      (past[0] && (rc = cp_rw_i64(w, p, "const/past_axis", past_axis)) < 0))
    return rc;
  const char *in_shape[] = {query}, *in_s[] = {shape.v, c_1.v}, *in_ps[] = {past}, *in_p[] = {ps.v, c_pa.v},
             *in_t[] = {P.v, S.v}, *in_t0[] = {S.v}, *in_k[] = {c_0.v, T.v, c_1.v}, *in_q0[] = {T.v, S.v},
             *in_q[] = {q0.v, T.v, c_1.v};
  cp_onnx_edit_attr ax0 = {"axis", 2, 0, 0, NULL, 0};
  if ((rc = cp_rw_op(w, before, p, "shape", "Shape", in_shape, 1, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "S", "Gather", in_s, 2, &ax0, 1)) < 0)
    return rc;
  if (past[0] && ((rc = cp_rw_op(w, before, p, "past_shape", "Shape", in_ps, 1, NULL, 0)) < 0 ||
                  (rc = cp_rw_op(w, before, p, "P", "Gather", in_p, 2, &ax0, 1)) < 0 ||
                  (rc = cp_rw_op(w, before, p, "T", "Add", in_t, 2, NULL, 0)) < 0))
    return rc;
  if (!past[0] && (rc = cp_rw_op(w, before, p, "T", "Identity", in_t0, 1, NULL, 0)) < 0) return rc;
  if ((rc = cp_rw_op(w, before, p, "kpos", "Range", in_k, 3, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "q0", "Sub", in_q0, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "qpos", "Range", in_q, 3, NULL, 0)) < 0)
    return rc;
  return 0;
}

/* <p>bias4 fed to the node as its attention_bias input `input`, added to one it has. */
static int feed_bias(cp_rw *w, const cp_onnx_site *s, const char *p, size_t input) {
  const cp_onnx_node *n = &w->m->graph->nodes[s->node];
  cp_rw_name b4 = cp_rw_name_of(p, "bias4"), sum = cp_rw_name_of(p, "attention_bias");
  if (!has_input(n, input)) return cp_onnx_edit_set_input(w->e, s->node, input, b4.v);
  const char *in_add[] = {n->inputs[input], b4.v};
  int rc = cp_rw_op(w, s->node, p, "attention_bias", "Add", in_add, 2, NULL, 0);
  return rc < 0 ? rc : cp_onnx_edit_set_input(w->e, s->node, input, sum.v);
}

/* <p>bias4 [1, 1, S, T] of the Lambda mask fed as attention_bias input `input` (added to one the
 * node has), after positions(). */
static int feed_bias4(cp_rw *w, const cp_onnx_site *s, const char *p, const cp_rule *r, size_t input) {
  int64_t ax[2] = {0, 1};
  int rc;
  if ((rc = cp_rw_qcol(w, s->node, p)) < 0 || (rc = cp_rw_lambda_keep(w, s->node, p, r)) < 0 ||
      (rc = cp_rw_lambda_bias(w, s->node, p, s->elem_type)) < 0 ||
      (rc = cp_rw_unsqueeze(w, s->node, p, "bias4", cp_rw_name_of(p, "bias").v, ax, 2)) < 0)
    return rc;
  return feed_bias(w, s, p, input);
}

/* An Attention with a past (input [B, S, hidden], past [2, B, N, P, H]): the Lambda keep [S, T]
 * ANDed with its 2-D mask_index [B, T] (> 0: visible), or expanded over the batch without one,
 * as its mask_index [B, S, T] int32. */
static int attention_past_mask(cp_rw *w, const cp_onnx_site *s, const char *p, const cp_rule *r) {
  const cp_onnx_node *n = &w->m->graph->nodes[s->node];
  cp_rw_name keep = cp_rw_name_of(p, "keep"), mask = cp_rw_name_of(p, "mask"), shape = cp_rw_name_of(p, "shape");
  cp_rw_name m64 = cp_rw_name_of(p, "mask64"), pos = cp_rw_name_of(p, "mask_on"), m3 = cp_rw_name_of(p, "mask_on3");
  cp_rw_name c0 = cp_rw_name_of(p, "const/0"), first = cp_rw_name_of(p, "const/first"), ones = cp_rw_name_of(p, "const/ones2");
  cp_rw_name b1 = cp_rw_name_of(p, "B"), bss = cp_rw_name_of(p, "B11"), m3b = cp_rw_name_of(p, "mask_b");
  int64_t ax1 = 1, one = 1, two = 2, zero1 = 0, ones2[2] = {1, 1};
  cp_onnx_edit_attr to64 = {"to", 2, 0, 7, NULL, 0}, to32 = {"to", 2, 0, 6, NULL, 0}, ax0 = {"axis", 2, 0, 0, NULL, 0};
  int rc;
  if ((rc = positions(w, s->node, p, n->inputs[0], n->inputs[4], 3)) < 0 || (rc = cp_rw_qcol(w, s->node, p)) < 0 ||
      (rc = cp_rw_lambda_keep(w, s->node, p, r)) < 0)
    return rc;
  const char *visible = m3b.v;
  if (has_input(n, 3)) { /* [B, T] > 0, as onnxruntime reads a raw mask */
    const char *in_c[] = {n->inputs[3]}, *in_g[] = {m64.v, c0.v}, *in_and[] = {m3.v, keep.v};
    if ((rc = cp_rw_op(w, s->node, p, "mask64", "Cast", in_c, 1, &to64, 1)) < 0 ||
        (rc = cp_rw_op(w, s->node, p, "mask_on", "Greater", in_g, 2, NULL, 0)) < 0 ||
        (rc = cp_rw_unsqueeze(w, s->node, p, "mask_on3", pos.v, &ax1, 1)) < 0 ||
        (rc = cp_rw_op(w, s->node, p, "mask_b", "And", in_and, 2, NULL, 0)) < 0)
      return rc;
  } else { /* the batch size from the input's shape */
    const char *in_b[] = {shape.v, first.v}, *in_cat[] = {b1.v, ones.v}, *in_e[] = {keep.v, bss.v};
    cp_onnx_edit_attr axis0 = {"axis", 2, 0, 0, NULL, 0};
    if ((rc = cp_rw_const(w, first.v, 7, &one, 1, &zero1)) < 0 || (rc = cp_rw_const(w, ones.v, 7, &two, 1, ones2)) < 0 ||
        (rc = cp_rw_op(w, s->node, p, "B", "Gather", in_b, 2, &ax0, 1)) < 0 ||
        (rc = cp_rw_op(w, s->node, p, "B11", "Concat", in_cat, 2, &axis0, 1)) < 0 ||
        (rc = cp_rw_op(w, s->node, p, "mask_b", "Expand", in_e, 2, NULL, 0)) < 0)
      return rc;
  }
  const char *in_cast[] = {visible};
  if ((rc = cp_rw_op(w, s->node, p, "mask", "Cast", in_cast, 1, &to32, 1)) < 0) return rc;
  return cp_onnx_edit_set_input(w->e, s->node, 3, mask.v);
}

/* A GroupQueryAttention: T = total_sequence_length (input 6), sequence b's queries at
 * past_b + 0 .. S-1 with past_b = seqlens_k[b] + 1 - S, or 0 on a first prompt (S = T), as
 * onnxruntime places them; the bias [B, 1, S, T] as attention_bias (input 10). */
static int gqa_bias(cp_rw *w, const cp_onnx_site *s, const char *p, const cp_rule *r) {
  const cp_onnx_node *n = &w->m->graph->nodes[s->node];
  cp_rw_name c_1 = cp_rw_name_of(p, "const/1"), c_0 = cp_rw_name_of(p, "const/0"), shape = cp_rw_name_of(p, "shape");
  cp_rw_name S = cp_rw_name_of(p, "S"), T = cp_rw_name_of(p, "T"), t64 = cp_rw_name_of(p, "total64");
  cp_rw_name k64 = cp_rw_name_of(p, "seqlens64"), len = cp_rw_name_of(p, "len"), past = cp_rw_name_of(p, "past_b");
  cp_rw_name first = cp_rw_name_of(p, "first_prompt"), pastw = cp_rw_name_of(p, "past_w"), pcol = cp_rw_name_of(p, "past_col");
  cp_rw_name rows = cp_rw_name_of(p, "rows"), qpos = cp_rw_name_of(p, "qpos");
  cp_onnx_edit_attr to64 = {"to", 2, 0, 7, NULL, 0}, ax0 = {"axis", 2, 0, 0, NULL, 0}, kd = {"keepdims", 2, 0, 0, NULL, 0};
  int64_t ax1 = 1, ax2 = 2;
  int rc;
  if ((rc = cp_rw_i64(w, p, "const/1", 1)) < 0 || (rc = cp_rw_i64(w, p, "const/0", 0)) < 0) return rc;
  const char *in_shape[] = {n->inputs[0]}, *in_s[] = {shape.v, c_1.v}, *in_t64[] = {n->inputs[6]}, *in_t[] = {t64.v},
             *in_k64[] = {n->inputs[5]}, *in_len[] = {k64.v, c_1.v}, *in_past[] = {len.v, S.v},
             *in_first[] = {S.v, T.v}, *in_w[] = {first.v, c_0.v, past.v}, *in_rows[] = {c_0.v, S.v, c_1.v},
             *in_q[] = {pcol.v, rows.v}, *in_kp[] = {c_0.v, T.v, c_1.v};
  if ((rc = cp_rw_op(w, s->node, p, "shape", "Shape", in_shape, 1, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "S", "Gather", in_s, 2, &ax0, 1)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "total64", "Cast", in_t64, 1, &to64, 1)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "T", "ReduceMax", in_t, 1, &kd, 1)) < 0 || /* [1] or []: a scalar */
      (rc = cp_rw_op(w, s->node, p, "kpos", "Range", in_kp, 3, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "seqlens64", "Cast", in_k64, 1, &to64, 1)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "len", "Add", in_len, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "past_b", "Sub", in_past, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "first_prompt", "Equal", in_first, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "past_w", "Where", in_w, 3, NULL, 0)) < 0 ||
      (rc = cp_rw_unsqueeze(w, s->node, p, "past_col", pastw.v, &ax1, 1)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "rows", "Range", in_rows, 3, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, s->node, p, "qpos", "Add", in_q, 2, NULL, 0)) < 0 || /* [B, S] */
      (rc = cp_rw_unsqueeze(w, s->node, p, "qcol", qpos.v, &ax2, 1)) < 0 ||
      (rc = cp_rw_lambda_keep(w, s->node, p, r)) < 0 || (rc = cp_rw_lambda_bias(w, s->node, p, s->elem_type)) < 0 ||
      (rc = cp_rw_unsqueeze(w, s->node, p, "bias4", cp_rw_name_of(p, "bias").v, &ax1, 1)) < 0)
    return rc;
  return feed_bias(w, s, p, 10);
}

static int contrib_lambda(cp_rw *w, const cp_onnx_site *s, const char *p, const cp_rule *r) {
  const cp_onnx_node *n = &w->m->graph->nodes[s->node];
  int rc;
  if (is_op(n, "GroupQueryAttention")) return gqa_bias(w, s, p, r);
  if (is_op(n, "Attention") && has_input(n, 4)) return attention_past_mask(w, s, p, r);
  if (is_op(n, "Attention")) {
    if ((rc = positions(w, s->node, p, n->inputs[0], "", 0)) < 0) return rc;
  } else if ((rc = positions(w, s->node, p, n->inputs[0], has_input(n, 6) ? n->inputs[6] : "", 2)) < 0) /* past_key [B, N, P, H] */
    return rc;
  return feed_bias4(w, s, p, r, 5);
}

int cp_rw_contrib(cp_rw *w, const cp_onnx_site *s, size_t l, const cp_rule *r) {
  double tau = r->n_temperature == 0 ? 1.0 : r->temperature[r->n_temperature > 1 ? l : 0];
  char p[64];
  snprintf(p, sizeof p, PREFIX "L%zu/", l);
  int rc = 0;
  w->rep->n_contrib++;
  if (tau != 1.0 && (rc = cp_onnx_edit_set_attr_float(w->e, s->node, "scale", (float)((double)s->scale / tau))) < 0)
    return rc;
  if (r->has_lambda && (rc = contrib_lambda(w, s, p, r)) < 0) return rc;
  if (tau != 1.0 || r->has_lambda) w->rep->n_nodes_changed++;
  return 0;
}
