/* Patching a third-party ONNX graph in place (include/ctxpatch/export/onnx_rewrite.h): the
 * rule spliced into the attention sites (export/onnx/rewrite/onnx_sites.c finds them) through the
 * byte-preserving editor (formats/onnx_edit.c). */
#include "ctxpatch/export/onnx_rewrite.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/base/version.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/formats/onnx_edit.h"
#include "export/onnx/onnx_attention.h"
#include "export/onnx/rewrite/onnx_rewrite_int.h"
#include "export/onnx/rewrite/onnx_sites.h"

#define PREFIX "ctxpatch/rewrite/"

/* alibi_scale whose F is computed at run time (dynamic, progressive), and its name for messages. */
static bool alibi_runtime(const cp_rule *r) {
  return r->alibi_mode == CP_ALIBI_DYNAMIC || r->alibi_mode == CP_ALIBI_PROGRESSIVE;
}
static const char *alibi_name(const cp_rule *r) {
  return r->alibi_mode == CP_ALIBI_DYNAMIC ? "alibi_scale dynamic" : "alibi_scale progressive";
}

/* What the rewriter cannot express, one line naming the node or the rule key. */
static int refuse_rule(const cp_onnx_model *m, const cp_rule *r, const cp_onnx_site *s, size_t n) {
  const cp_onnx_graph *g = m->graph;
  char lb[300];
  const char *meta = cp_onnx_model_meta(m, "ctxpatch.rule");
  if (meta && strcmp(meta, "{}") != 0 && meta[0])
    return cp_error_set(CP_EONNX_SITE, "%s: metadata_props ctxpatch.rule: the graph already carries a ctxpatch rule "
                        "(%.80s); patch the original instead", m->path, meta);
  const char *what = r->distance_ceiling ? "distance_ceiling" : r->has_top_k ? "top_k" :
                     r->fire_threshold > 0 ? "fire_threshold" : NULL;
  if (what)
    return cp_error_set(CP_EONNX_SITE, "%s: %s at %s: not expressed by the in-place rewriter (docs/onnx.md); "
                        "export the model with `patch --to onnx` instead", m->path, what, cp_onnx_site_label(lb, &g->nodes[s[0].node], s[0].node));
  if (r->n_temperature > 1 && (size_t)r->n_temperature != n)
    return cp_error_set(CP_EONNX_SITE, "%s: %d per-layer temperatures for %zu attention sites (first %s)", m->path,
                        r->n_temperature, n, cp_onnx_site_label(lb, &g->nodes[s[0].node], s[0].node));
  size_t rot;
  if (r->has_lambda && cp_onnx_graph_rotary(g, &rot))
    return cp_error_set(CP_EONNX_SITE, "%s: %s: lambda_mask implies a distance ceiling of %lld on RoPE, and the "
                        "rotation is computed before the attention site: not expressible here", m->path,
                        cp_onnx_site_label(lb, &g->nodes[rot], rot), (long long)r->n_local);
  for (size_t k = 0; k < n; k++) {
    const cp_onnx_node *nd = &g->nodes[s[k].node];
    int rc = s[k].kind == CP_ONNX_SITE_CONTRIB ? cp_rw_contrib_refuse(m, &s[k], r) : 0;
    if (rc < 0) return rc;
    if (s[k].kind == CP_ONNX_SITE_SOFTMAX && s[k].elem_type != 1 && s[k].elem_type != 10)
      return cp_error_set(CP_EONNX_SITE, "%s: %s: logits of ONNX type %d (float or float16 only)", m->path,
                          cp_onnx_site_label(lb, nd, s[k].node), (int)s[k].elem_type);
  }
  if ((r->has_lambda || r->n_schedule || alibi_runtime(r)) && cp_onnx_model_opset(m, "") < 11)
    return cp_error_set(CP_EONNX_SITE, "%s: opset %lld: %s needs opset 11 (Range, negative Gather indices)", m->path,
                        (long long)cp_onnx_model_opset(m, ""), r->has_lambda ? "lambda_mask" : r->n_schedule ?
                        "temperature_schedule" : alibi_name(r));
  return 0;
}

static int add_node(cp_rw *w, size_t before, const char *name, const char *op, const char *const *in, size_t n_in,
                    const char *out, const cp_onnx_edit_attr *attrs, size_t n_attrs) {
  cp_onnx_edit_node nd = {name, op, NULL, in, n_in, &out, 1, attrs, n_attrs};
  w->rep->n_nodes_added++;
  return cp_onnx_edit_insert_node(w->e, before, &nd);
}

int cp_rw_const(cp_rw *w, const char *name, int32_t type, const int64_t *shape, int ndim, const void *data) {
  w->rep->n_initializers_added++;
  return cp_onnx_edit_add_initializer(w->e, name, type, shape, ndim, data);
}

cp_rw_name cp_rw_name_of(const char *p, const char *what) {
  cp_rw_name r;
  snprintf(r.v, sizeof r.v, "%s%s", p, what);
  snprintf(r.n, sizeof r.n, "%snode/%s", p, what);
  return r;
}

int cp_rw_op(cp_rw *w, size_t before, const char *p, const char *what, const char *type, const char *const *in,
             size_t n_in, const cp_onnx_edit_attr *attrs, size_t n_attrs) {
  cp_rw_name x = cp_rw_name_of(p, what);
  return add_node(w, before, x.n, type, in, n_in, x.v, attrs, n_attrs);
}

int cp_rw_i64(cp_rw *w, const char *p, const char *what, int64_t v) {
  cp_rw_name x = cp_rw_name_of(p, what);
  return cp_rw_const(w, x.v, 7, NULL, 0, &v);
}

int cp_rw_unsqueeze(cp_rw *w, size_t before, const char *p, const char *out, const char *in, const int64_t *axes,
                    int n_axes) {
  char what[64];
  snprintf(what, sizeof what, "const/axes_%s", out);
  cp_rw_name ax = cp_rw_name_of(p, what);
  int64_t n = n_axes;
  const char *ins[] = {in, ax.v};
  int rc;
  if (cp_onnx_model_opset(w->m, "") >= 13) {
    if ((rc = cp_rw_const(w, ax.v, 7, &n, 1, axes)) < 0) return rc;
    return cp_rw_op(w, before, p, out, "Unsqueeze", ins, 2, NULL, 0);
  }
  cp_onnx_edit_attr a = {"axes", 7, 0, 0, axes, (size_t)n_axes};
  return cp_rw_op(w, before, p, out, "Unsqueeze", ins, 1, &a, 1);
}

/* The site's positions from its logits x [..., S, T]: <p>T (int64 scalar), <p>kpos [T] = 0 .. T-1
 * and <p>qpos [S] = T - S .. T-1 (a causal pass over a cache of T - S keys). */
static int positions(cp_rw *w, size_t before, const char *p, const char *x) {
  cp_rw_name c_m2 = cp_rw_name_of(p, "const/-2"), c_m1 = cp_rw_name_of(p, "const/-1"), c_0 = cp_rw_name_of(p, "const/0"), c_1 = cp_rw_name_of(p, "const/1");
  cp_rw_name shape = cp_rw_name_of(p, "shape"), S = cp_rw_name_of(p, "S"), T = cp_rw_name_of(p, "T"), q0 = cp_rw_name_of(p, "q0");
  int rc;
  if ((rc = cp_rw_i64(w, p, "const/-2", -2)) < 0 || (rc = cp_rw_i64(w, p, "const/-1", -1)) < 0 ||
      (rc = cp_rw_i64(w, p, "const/0", 0)) < 0 || (rc = cp_rw_i64(w, p, "const/1", 1)) < 0)
    return rc;
  const char *in_shape[] = {x}, *in_s[] = {shape.v, c_m2.v}, *in_t[] = {shape.v, c_m1.v}, *in_k[] = {c_0.v, T.v, c_1.v},
             *in_q0[] = {T.v, S.v}, *in_q[] = {q0.v, T.v, c_1.v};
  cp_onnx_edit_attr ax0 = {"axis", 2, 0, 0, NULL, 0};
  if ((rc = cp_rw_op(w, before, p, "shape", "Shape", in_shape, 1, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "S", "Gather", in_s, 2, &ax0, 1)) < 0 ||
      (rc = cp_rw_op(w, before, p, "T", "Gather", in_t, 2, &ax0, 1)) < 0 ||
      (rc = cp_rw_op(w, before, p, "kpos", "Range", in_k, 3, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "q0", "Sub", in_q0, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "qpos", "Range", in_q, 3, NULL, 0)) < 0)
    return rc;
  return 0;
}

int cp_rw_qcol(cp_rw *w, size_t before, const char *p) {
  cp_rw_name col = cp_rw_name_of(p, "const/qcol_shape"), qpos = cp_rw_name_of(p, "qpos");
  int64_t shape_col[2] = {-1, 1}, two = 2;
  const char *in[] = {qpos.v, col.v};
  int rc = cp_rw_const(w, col.v, 7, &two, 1, shape_col);
  return rc < 0 ? rc : cp_rw_op(w, before, p, "qcol", "Reshape", in, 2, NULL, 0);
}

int cp_rw_lambda_keep(cp_rw *w, size_t before, const char *p, const cp_rule *r) {
  cp_rw_name ng = cp_rw_name_of(p, "const/n_global"), nl = cp_rw_name_of(p, "const/n_local"), kpos = cp_rw_name_of(p, "kpos");
  cp_rw_name qcol = cp_rw_name_of(p, "qcol"), d = cp_rw_name_of(p, "d"), near = cp_rw_name_of(p, "near");
  cp_rw_name glob = cp_rw_name_of(p, "glob");
  int rc;
  if ((rc = cp_rw_i64(w, p, "const/n_global", r->n_global)) < 0 || (rc = cp_rw_i64(w, p, "const/n_local", r->n_local)) < 0)
    return rc;
  const char *in_d[] = {qcol.v, kpos.v}, *in_near[] = {d.v, nl.v}, *in_glob[] = {kpos.v, ng.v}, *in_keep[] = {near.v, glob.v};
  if ((rc = cp_rw_op(w, before, p, "d", "Sub", in_d, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "near", "Less", in_near, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "glob", "Less", in_glob, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "keep", "Or", in_keep, 2, NULL, 0)) < 0)
    return rc;
  return 0;
}

int cp_rw_lambda_bias(cp_rw *w, size_t before, const char *p, int32_t type) {
  cp_rw_name zero = cp_rw_name_of(p, "const/zero"), masked = cp_rw_name_of(p, "const/masked"), keep = cp_rw_name_of(p, "keep");
  float z = 0.0f, neg = type == 10 ? -65504.0f : -FLT_MAX;
  const char *in[] = {keep.v, zero.v, masked.v};
  int rc;
  if ((rc = cp_rw_const(w, zero.v, type, NULL, 0, &z)) < 0 || (rc = cp_rw_const(w, masked.v, type, NULL, 0, &neg)) < 0)
    return rc;
  return cp_rw_op(w, before, p, "bias", "Where", in, 3, NULL, 0);
}

/* <p>bias [S, T] of the Lambda mask (after positions()). */
static int lambda_bias(cp_rw *w, size_t before, const char *p, int32_t type, const cp_rule *r) {
  int rc;
  if ((rc = cp_rw_qcol(w, before, p)) < 0 || (rc = cp_rw_lambda_keep(w, before, p, r)) < 0) return rc;
  return cp_rw_lambda_bias(w, before, p, type);
}

/* <p>inv_tau_rows [S, 1] of the logits' type: 1 / tau(T) per row, T = qpos + 1, from the
 * layer's piecewise schedule (cp_tau_schedule) in double, as the engines compute it (after
 * positions()). */
static int schedule_rows(cp_rw *w, size_t before, const char *p, int32_t type, const cp_tau_schedule *sc) {
  char what[64], prev[200];
  int rc;
  double one = 1.0, t1 = sc->t1, lo = sc->lo, hi = sc->hi, zero = 0.0;
  cp_rw_name c1 = cp_rw_name_of(p, "const/1"), d1 = cp_rw_name_of(p, "const/d1"), dt1 = cp_rw_name_of(p, "const/t1"), dlo = cp_rw_name_of(p, "const/lo");
  cp_rw_name dhi = cp_rw_name_of(p, "const/hi"), d0 = cp_rw_name_of(p, "const/d0"), qpos = cp_rw_name_of(p, "qpos"), col = cp_rw_name_of(p, "const/col");
  int64_t shape_col[2] = {-1, 1}, two = 2;
  if ((rc = cp_rw_const(w, d1.v, 11, NULL, 0, &one)) < 0 || (rc = cp_rw_const(w, dt1.v, 11, NULL, 0, &t1)) < 0 ||
      (rc = cp_rw_const(w, dlo.v, 11, NULL, 0, &lo)) < 0 || (rc = cp_rw_const(w, dhi.v, 11, NULL, 0, &hi)) < 0 ||
      (rc = cp_rw_const(w, d0.v, 11, NULL, 0, &zero)) < 0 || (rc = cp_rw_const(w, col.v, 7, &two, 1, shape_col)) < 0)
    return rc;
  cp_rw_name len = cp_rw_name_of(p, "len"), lend = cp_rw_name_of(p, "len_d"), lenc = cp_rw_name_of(p, "len_clamped"), lg = cp_rw_name_of(p, "log_len");
  cp_onnx_edit_attr to_d = {"to", 2, 0, 11, NULL, 0}, to_t = {"to", 2, 0, type, NULL, 0};
  const char *in_len[] = {qpos.v, c1.v}, *in_lend[] = {len.v}, *in_c[] = {lend.v, d1.v}, *in_lg[] = {lenc.v};
  if ((rc = cp_rw_op(w, before, p, "len", "Add", in_len, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "len_d", "Cast", in_lend, 1, &to_d, 1)) < 0 ||
      (rc = cp_rw_op(w, before, p, "len_clamped", "Max", in_c, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "log_len", "Log", in_lg, 1, NULL, 0)) < 0)
    return rc;
  snprintf(prev, sizeof prev, "%s", dt1.v);
  for (int k = 0; k + 1 < sc->n; k++) {
    double loglen = sc->log_len[k], width = sc->log_len[k + 1] - sc->log_len[k], slope = sc->slope[k];
    char cn[3][64], vn[4][64];
    snprintf(cn[0], 64, "const/seg%d/log_len", k), snprintf(cn[1], 64, "const/seg%d/width", k);
    snprintf(cn[2], 64, "const/seg%d/slope", k);
    snprintf(vn[0], 64, "seg%d/from", k), snprintf(vn[1], 64, "seg%d/over", k), snprintf(vn[2], 64, "seg%d/in", k);
    snprintf(vn[3], 64, "seg%d/term", k);
    cp_rw_name c_l = cp_rw_name_of(p, cn[0]), c_w = cp_rw_name_of(p, cn[1]), c_s = cp_rw_name_of(p, cn[2]);
    cp_rw_name v0 = cp_rw_name_of(p, vn[0]), v1 = cp_rw_name_of(p, vn[1]), v2 = cp_rw_name_of(p, vn[2]), v3 = cp_rw_name_of(p, vn[3]);
    if ((rc = cp_rw_const(w, c_l.v, 11, NULL, 0, &loglen)) < 0 || (rc = cp_rw_const(w, c_w.v, 11, NULL, 0, &width)) < 0 ||
        (rc = cp_rw_const(w, c_s.v, 11, NULL, 0, &slope)) < 0)
      return rc;
    const char *i0[] = {lg.v, c_l.v}, *i1[] = {v0.v, d0.v}, *i2[] = {v1.v, c_w.v}, *i3[] = {v2.v, c_s.v}, *i4[] = {prev, v3.v};
    snprintf(what, sizeof what, "seg%d/sum", k);
    if ((rc = cp_rw_op(w, before, p, vn[0], "Sub", i0, 2, NULL, 0)) < 0 || (rc = cp_rw_op(w, before, p, vn[1], "Max", i1, 2, NULL, 0)) < 0 ||
        (rc = cp_rw_op(w, before, p, vn[2], "Min", i2, 2, NULL, 0)) < 0 || (rc = cp_rw_op(w, before, p, vn[3], "Mul", i3, 2, NULL, 0)) < 0 ||
        (rc = cp_rw_op(w, before, p, what, "Add", i4, 2, NULL, 0)) < 0)
      return rc;
    snprintf(prev, sizeof prev, "%s", cp_rw_name_of(p, what).v);
  }
  cp_rw_name tlo = cp_rw_name_of(p, "tau_lo"), tau = cp_rw_name_of(p, "tau"), inv = cp_rw_name_of(p, "inv_tau_d"), invt = cp_rw_name_of(p, "inv_tau");
  const char *in_lo[] = {prev, dlo.v}, *in_hi[] = {tlo.v, dhi.v}, *in_inv[] = {d1.v, tau.v}, *in_cast[] = {inv.v},
             *in_rows[] = {invt.v, col.v};
  if ((rc = cp_rw_op(w, before, p, "tau_lo", "Max", in_lo, 2, NULL, 0)) < 0 || (rc = cp_rw_op(w, before, p, "tau", "Min", in_hi, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "inv_tau_d", "Div", in_inv, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, before, p, "inv_tau", "Cast", in_cast, 1, &to_t, 1)) < 0 ||
      (rc = cp_rw_op(w, before, p, "inv_tau_rows", "Reshape", in_rows, 2, NULL, 0)) < 0)
    return rc;
  return 0;
}

/* Mul by 1/tau (constant, or per row from the schedule) and / or Add of the Lambda bias in front
 * of the Softmax of site s (layer l). */
static int rewrite_softmax(cp_rw *w, const cp_onnx_site *s, size_t l, const cp_rule *r, const cp_tau_schedule *sc) {
  const cp_onnx_node *sm = &w->m->graph->nodes[s->node];
  char p[64], x[600], c[200];
  snprintf(p, sizeof p, PREFIX "L%zu/", l);
  snprintf(x, sizeof x, "%s", sm->inputs[0]);
  double tau = r->n_temperature == 0 ? 1.0 : r->temperature[r->n_temperature > 1 ? l : 0];
  int rc;
  if ((sc->n || r->has_lambda) && (rc = positions(w, s->node, p, x)) < 0) return rc;
  if (sc->n || tau != 1.0) {
    if (sc->n) {
      if ((rc = schedule_rows(w, s->node, p, s->elem_type, sc)) < 0) return rc;
      snprintf(c, sizeof c, "%sinv_tau_rows", p);
    } else {
      float inv = (float)(1.0 / tau);
      snprintf(c, sizeof c, "%sconst/inv_tau", p);
      if ((rc = cp_rw_const(w, c, s->elem_type, NULL, 0, &inv)) < 0) return rc;
    }
    const char *in[] = {x, c};
    if ((rc = cp_rw_op(w, s->node, p, "logits_tau", "Mul", in, 2, NULL, 0)) < 0) return rc;
    snprintf(x, sizeof x, "%slogits_tau", p);
  }
  if (r->has_lambda) {
    cp_rw_name bias = cp_rw_name_of(p, "bias");
    if ((rc = lambda_bias(w, s->node, p, s->elem_type, r)) < 0) return rc;
    const char *in[] = {x, bias.v};
    if ((rc = cp_rw_op(w, s->node, p, "logits_lambda", "Add", in, 2, NULL, 0)) < 0) return rc;
    snprintf(x, sizeof x, "%slogits_lambda", p);
  }
  if (strcmp(x, sm->inputs[0]) != 0) {
    w->rep->n_nodes_changed++;
    if ((rc = cp_onnx_edit_set_input(w->e, s->node, 0, x)) < 0) return rc;
  }
  w->rep->n_softmax++;
  return 0;
}

/* cp_onnx_emit over the editor: values "<p>alibi/N" made by nodes spliced in before node
 * `before`, float64 constants "<p>const/alibi/N". */
typedef struct {
  cp_rw *w;
  size_t before;
  const char *p;
  int n, rc;
  char names[12][200];
} rw_emit;

static const char *em_node(rw_emit *e, const char *type, const char *const *in, int n_in, const cp_onnx_edit_attr *a,
                           bool constant, double v) {
  assert(e->n < 12); /* cp_onnx_alibi_divisor makes 7 values */
  for (int i = 0; i < n_in; i++) if (!in[i]) return NULL; /* an earlier call failed */
  if (e->rc) return NULL;
  char what[48];
  snprintf(what, sizeof what, "%salibi/%d", constant ? "const/" : "", e->n);
  cp_rw_name x = cp_rw_name_of(e->p, what);
  e->rc = constant ? cp_rw_const(e->w, x.v, 11, NULL, 0, &v) : cp_rw_op(e->w, e->before, e->p, what, type, in, (size_t)n_in, a, a ? 1 : 0);
  if (e->rc) return NULL;
  return memcpy(e->names[e->n++], x.v, sizeof x.v);
}
static const char *em_op(void *u, const char *type, const char *const *in, int n) { return em_node(u, type, in, n, NULL, false, 0); }
static const char *em_cast(void *u, const char *x, int to) {
  cp_onnx_edit_attr a = {"to", 2, 0, to, NULL, 0};
  return em_node(u, "Cast", &x, 1, &a, false, 0);
}
static const char *em_f64(void *u, double v) { return em_node(u, NULL, NULL, 0, NULL, true, v); }

/* alibi_scale dynamic or progressive at Softmax site s (layer l): the ALiBi term that entry a
 * adds to the scores is multiplied by 1 / F, computed from the scores' shape [..., S, T] (the
 * cache included: T keys, query rows at T - S .. T - 1): F = max(1, T / train_len) for the pass,
 * or F_i = max(1, (i + 1) / train_len) as [S, 1], one per row. The term is proportional to the
 * slopes (cp_onnx_alibi_entries checks it), so this is the term of the slopes m_h / F: -m_h / F_i
 * times the distance, or times the cumulated mask in BLOOM's form (kpos instead of -(qpos -
 * kpos): the same softmax, row by row). */
static int rewrite_alibi(cp_rw *w, const cp_onnx_site *s, const cp_onnx_alibi_entry *a, size_t l, const cp_attn_plan *plan) {
  const cp_onnx_node *nd = &w->m->graph->nodes[a->node];
  char p[64], term[600];
  snprintf(p, sizeof p, PREFIX "L%zu/alibi/", l);
  snprintf(term, sizeof term, "%s", nd->inputs[a->bias_input]);
  cp_rw_name qcol = cp_rw_name_of(p, "qcol"), T = cp_rw_name_of(p, "T"), one = cp_rw_name_of(p, "const/one_d");
  cp_rw_name inv = cp_rw_name_of(p, "inv_f"), invt = cp_rw_name_of(p, "inv_f_t"), scaled = cp_rw_name_of(p, "term");
  double d1 = 1.0;
  int rc;
  if ((rc = positions(w, a->node, p, nd->inputs[a->scores_input])) < 0 || (rc = cp_rw_const(w, one.v, 11, NULL, 0, &d1)) < 0)
    return rc;
  if (plan->alibi_mode == CP_ALIBI_PROGRESSIVE && (rc = cp_rw_qcol(w, a->node, p)) < 0) return rc;
  rw_emit e = {w, a->node, p, 0, 0, {{0}}};
  cp_onnx_emit em = {&e, em_op, em_cast, em_f64};
  const char *F = cp_onnx_alibi_divisor(&em, plan, T.v, qcol.v);
  if (e.rc) return e.rc;
  cp_onnx_edit_attr to_t = {"to", 2, 0, s->elem_type, NULL, 0};
  const char *in_inv[] = {one.v, F}, *in_t[] = {inv.v}, *in_mul[] = {term, invt.v};
  if ((rc = cp_rw_op(w, a->node, p, "inv_f", "Div", in_inv, 2, NULL, 0)) < 0 ||
      (rc = cp_rw_op(w, a->node, p, "inv_f_t", "Cast", in_t, 1, &to_t, 1)) < 0 ||
      (rc = cp_rw_op(w, a->node, p, "term", "Mul", in_mul, 2, NULL, 0)) < 0)
    return rc;
  w->rep->n_nodes_changed++;
  return cp_onnx_edit_set_input(w->e, a->node, a->bias_input, scaled.v);
}

int cp_onnx_rewrite_edit(cp_onnx_edit **out, cp_onnx_rewrite_report *rep, const cp_onnx_model *m, const cp_rule *rule,
                         int64_t train_len) {
  memset(rep, 0, sizeof *rep);
  *out = NULL;
  cp_onnx_site *s = NULL;
  size_t n = 0;
  cp_onnx_edit *e = NULL;
  char *rule_json = NULL;
  bool *slopes = NULL;
  cp_onnx_alibi_entry *entry = NULL;
  cp_rule *meta_rule = NULL;
  int rc = cp_onnx_find_sites(&s, &n, m);
  if (rc < 0) goto done;
  if ((rc = refuse_rule(m, rule, s, n)) < 0) goto done;
  bool any_slopes = false;
  CP_CHECK_ALLOC_GOTO(slopes = calloc(m->graph->n_initializers + 1, sizeof *slopes), m->path);
  if ((rule->alibi_mode || rule->has_lambda) && (rc = cp_onnx_find_slopes(slopes, m->graph, s, n, m->path)) < 0) goto done;
  for (size_t k = 0; k < m->graph->n_initializers; k++) any_slopes |= slopes[k];
  if (rule->alibi_mode && !any_slopes) {
    char lb[300];
    rc = cp_error_set(CP_EONNX_SITE, "%s: alibi_scale: no ALiBi slopes constant (float32 or float64 [H], the BLOOM/MPT slopes) "
                      "upstream of %s", m->path, cp_onnx_site_label(lb, &m->graph->nodes[s[0].node], s[0].node));
    goto done;
  }
  for (size_t k = 0; k < m->graph->n_initializers && rule->has_lambda; k++)
    if (slopes[k]) {
      char q1[128];
      rc = cp_error_set(CP_EONNX_SITE, "%s: initializer '%s' (ALiBi slopes): lambda_mask implies a distance ceiling "
                        "of %lld on ALiBi's distance term: not expressed by the rewriter", m->path,
                        cp_quote(q1, sizeof q1, m->graph->initializers[k].name, strlen(m->graph->initializers[k].name)), (long long)rule->n_local);
      goto done;
    }
  /* The sites are the layers of one decoder-only stack: per-layer lists must have their count. */
  /* the model's training length (the caller's, when it knows one); the rule's overrides it */
  cp_rule_model rm = {false, 0, (int)n, train_len > 0 ? train_len : 0, any_slopes, false, !any_slopes, NULL, NULL, 0};
  if (n > CP_RULE_MAX_LAYERS) {
    rc = cp_error_set(CP_EONNX_SITE, "%s: %zu attention sites (at most %d layers)", m->path, n, CP_RULE_MAX_LAYERS);
    goto done;
  }
  if ((rc = cp_rule_check_model(rule, &rm, m->path)) < 0) goto done;
  if (alibi_runtime(rule)) {
    CP_CHECK_ALLOC_GOTO(entry = calloc(n, sizeof *entry), m->path);
    if ((rc = cp_onnx_alibi_entries(entry, m->graph, s, n, slopes, m->path, alibi_name(rule))) < 0) goto done;
  }
  if ((rc = cp_onnx_edit_open(&e, m->path)) < 0) goto done;
  if (cp_onnx_edit_n_nodes(e) != m->graph->n_nodes) {
    rc = cp_error_set(CP_EIO, "%s: the file changed while it was read", m->path);
    goto done;
  }
  cp_rw w = {e, m, rep};
  for (size_t k = 0; k < n && rc == 0; k++) {
    cp_attn_plan plan;
    cp_rule_plan(&plan, rule, &rm, CP_ATTN_DECODER_SELF, (int)k);
    rc = s[k].kind == CP_ONNX_SITE_SOFTMAX ? rewrite_softmax(&w, &s[k], k, rule, &plan.sched)
                                           : cp_rw_contrib(&w, &s[k], k, rule);
    if (rc == 0 && entry && entry[k].node != SIZE_MAX) rc = rewrite_alibi(&w, &s[k], &entry[k], k, &plan);
  }
  /* Static ALiBi: each slopes constant becomes m_h / F, computed in double (as the engines). */
  for (size_t k = 0; k < m->graph->n_initializers && rc == 0 && rule->alibi_mode == CP_ALIBI_STATIC; k++) {
    const cp_onnx_tensor *t = &m->graph->initializers[k];
    if (!slopes[k]) continue;
    double v[1024];
    float f[1024];
    if ((rc = cp_onnx_values_f64(v, t)) < 0) break;
    for (uint64_t h = 0; h < t->numel; h++) v[h] /= rule->alibi_factor, f[h] = (float)v[h];
    rc = cp_onnx_edit_replace_initializer(e, t->name, t->elem_type, t->shape, t->ndim, t->elem_type == 11 ? (void *)v : (void *)f);
    rep->n_initializers_changed++;
  }
  if (rc < 0) goto done;
  /* The graph holds the training length it was given: the rule in its metadata says which. */
  CP_CHECK_ALLOC_GOTO(meta_rule = malloc(sizeof *meta_rule), m->path);
  *meta_rule = *rule;
  if (alibi_runtime(rule) && !rule->train_len) meta_rule->train_len = rm.train_len;
  CP_CHECK_ALLOC_GOTO(rule_json = cp_rule_to_string(meta_rule), m->path);
  if ((rc = cp_onnx_edit_set_meta(e, "ctxpatch.rewrite_version", cp_version())) < 0 ||
      (rc = cp_onnx_edit_set_meta(e, "ctxpatch.rule", rule_json)) < 0 ||
      (rc = cp_onnx_edit_set_meta(e, "ctxpatch.fidelity", "graph-rewrite")) < 0)
    goto done;
  *out = e;
  e = NULL;
done:
  free(meta_rule);
  free(entry);
  free(slopes);
  free(rule_json);
  cp_onnx_edit_free(e);
  free(s);
  return rc;
}

int cp_onnx_rewrite(cp_onnx_rewrite_report *rep, const cp_onnx_model *m, const cp_rule *rule, const char *out_path,
                    const cp_onnx_rewrite_params *p) {
  cp_onnx_edit *e = NULL;
  int rc = cp_onnx_rewrite_edit(&e, rep, m, rule, p ? p->train_len : 0);
  for (size_t k = 0; p && k < p->n_meta && rc == 0; k++)
    rc = cp_onnx_edit_set_meta(e, p->meta_keys[k], p->meta_values[k]);
  if (rc == 0 && out_path) rc = cp_onnx_edit_write_digested(NULL, e, out_path);
  cp_onnx_edit_free(e);
  return rc;
}
