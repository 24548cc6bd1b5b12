/* Accounting for a recovered graph's nodes (import/onnx/onnx_walk.h, "accounting"): the helpers
 * the patterns mark what they read with, the checks of a mask chain and of an activation's
 * elementwise spelling, and the walk back from the logits that refuses a node no pattern
 * explained (issue 33: a graph must compute what the recovered model computes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "import/onnx/onnx_walk.h"

void cp_ow_explain_ids(const cp_ow *w, const char *v) {
  static const char *const ops[] = {"Reshape", "Slice", "Cast", "Unsqueeze", "Squeeze", "Identity", "Flatten"};
  for (int step = 0; step < 32; step++) {
    const cp_onnx_node *p = cp_ow_producer(w, v);
    bool ok = false;
    for (size_t i = 0; p && i < sizeof ops / sizeof *ops && !ok; i++) ok = cp_ow_is(p, ops[i]);
    if (!ok || !p->n_inputs) return;
    cp_ow_explain(w, p);
    v = p->inputs[0];
  }
}

const char *cp_ow_stray(const cp_ow *w, const char *v, const char *v2, char *buf) {
  const cp_onnx_node *best = NULL;
  const char *bv = NULL;
  int best_score = -1;
  buf[0] = 0;
  for (int which = 0; which < 2; which++) {
    const char *x = which ? v2 : v;
    const cp_onnx_node *c[16];
    size_t n = x ? cp_ow_consumers(w, x, c, 16) : 0;
    for (size_t i = 0; i < n && i < 16; i++) {
      if (w->mark[c[i] - w->g->nodes] || cp_ow_layout(w, c[i])) continue;
      size_t dyn_in = 0;
      for (size_t k = 0; k < c[i]->n_inputs; k++) dyn_in += c[i]->inputs[k][0] && cp_ow_dynamic(w, c[i]->inputs[k]);
      int score = dyn_in == 1 ? 1 : 0;
      if (score > best_score) best = c[i], bv = x, best_score = score;
    }
  }
  if (best) {
    char b[96];
    if (w->unexplained) *w->unexplained = true;
    snprintf(buf, 320, "; value '%.80s' feeds node '%s' (%.40s, index %zu), which no pattern explains", bv,
             cp_ow_label(w, best, b), best->op_type, (size_t)(best - w->g->nodes));
  }
  return buf;
}

int cp_ow_bad_on(const cp_ow *w, const cp_onnx_node *n, const char *why, const char *v, const char *v2) {
  char b[96], s[320];
  return cp_error_set(CP_EONNX_RECOVER, "%s: node '%s' (%s): %s%s", w->path, cp_ow_label(w, n, b), n->op_type, why,
                      cp_ow_stray(w, v, v2, s));
}

const cp_onnx_node *cp_ow_next(const cp_ow *w, const char *v, const char *op, size_t slot) {
  for (int step = 0; step < 8; step++) {
    const cp_onnx_node *c[2];
    size_t n = cp_ow_consumers(w, v, c, 2);
    for (size_t i = 0; i < n && i < 2; i++)
      if (cp_ow_is(c[i], op) && !strcmp(cp_ow_in(c[i], slot), v)) return c[i];
    if (n != 1 || !cp_ow_layout(w, c[0]) || c[0]->n_outputs != 1) return NULL;
    cp_ow_explain(w, c[0]);
    v = c[0]->outputs[0];
  }
  return NULL;
}

void cp_ow_mask_chain(const cp_ow *w, const char *from, const cp_onnx_node *sm, cp_ow_pred causal, cp_ow_pred no_pass,
                      void *ctx) {
  const char *v = cp_ow_in(sm, 0);
  for (int step = 0; step < 16 && strcmp(v, from); step++) {
    const cp_onnx_node *p = cp_ow_producer(w, v);
    if (!p) return;
    size_t dyn_in = 0, at = 0;
    for (size_t k = 0; k < p->n_inputs; k++)
      if (p->inputs[k][0] && cp_ow_dynamic(w, p->inputs[k])) dyn_in++, at = k;
    if (dyn_in != 1) return;
    bool step_op = cp_ow_is(p, "Where") || cp_ow_is(p, "Add") || cp_ow_is(p, "Sub") || cp_ow_is(p, "Mul");
    if (step_op && (cp_ow_is(p, "Where") ? at == 0 : false)) return; /* Where picks by a constant condition */
    bool found = false; /* searched from the constant-only inputs: the scores chain leads to earlier masks */
    for (size_t k = 0; k < p->n_inputs && step_op && !found; k++) {
      const cp_onnx_node *c = k == at || !p->inputs[k][0] ? NULL : cp_ow_producer(w, p->inputs[k]);
      found = c && (causal(w, c, ctx) || cp_ow_backward(w, c, causal, no_pass, ctx));
    }
    if (step_op && !found) return;
    if (!step_op && !cp_ow_layout(w, p)) return;
    cp_ow_explain(w, p);
    v = p->inputs[at];
  }
}

/* ---- the activation evaluated */

#define ACT_PTS 24
#define ACT_NODES 64

static double act_ref(const char *act, double x) {
  if (!strcmp(act, "gelu_new")) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  if (!strcmp(act, "gelu")) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
  if (!strcmp(act, "silu")) return x / (1 + exp(-x));
  return x > 0 ? x : 0;
}

/* One elementwise op on a and b (b unused for unary ops); false for an op not read here. */
static bool act_op(const cp_onnx_node *n, double a, double b, double *r) {
  bool ms = !strcmp(n->domain, "com.microsoft"), d = !n->domain[0];
  const char *op = n->op_type;
  if (d && !strcmp(op, "Add")) *r = a + b;
  else if (d && !strcmp(op, "Sub")) *r = a - b;
  else if (d && !strcmp(op, "Mul")) *r = a * b;
  else if (d && !strcmp(op, "Div")) *r = a / b;
  else if (d && !strcmp(op, "Pow")) *r = pow(a, b);
  else if (d && !strcmp(op, "Tanh")) *r = tanh(a);
  else if (d && !strcmp(op, "Erf")) *r = erf(a);
  else if (d && !strcmp(op, "Sigmoid")) *r = 1 / (1 + exp(-a));
  else if (d && !strcmp(op, "Relu")) *r = a > 0 ? a : 0;
  else if (d && !strcmp(op, "Sqrt")) *r = sqrt(a);
  else if (d && !strcmp(op, "Neg")) *r = -a;
  else if (d && !strcmp(op, "Exp")) *r = exp(a);
  else if (d && (!strcmp(op, "Identity") || !strcmp(op, "Cast"))) *r = a;
  else if (ms && !strcmp(op, "FastGelu")) *r = act_ref("gelu_new", a);
  else if (ms && !strcmp(op, "Gelu")) *r = act_ref("gelu", a);
  else return false;
  return true;
}

int cp_ow_check_act(const cp_ow *w, const char *from, const cp_onnx_node *to, const char *act) {
  const cp_onnx_node *span[ACT_NODES];
  double val[ACT_NODES][ACT_PTS];
  bool done[ACT_NODES] = {false};
  size_t n = 0;
  /* the nodes between: backward from `to`'s input over values that are not `from` */
  const cp_onnx_node *p0 = cp_ow_producer(w, cp_ow_in(to, 0));
  if (strcmp(cp_ow_in(to, 0), from) && p0) span[n++] = p0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < span[i]->n_inputs; k++) {
      const char *v = span[i]->inputs[k];
      const cp_onnx_node *p = !strcmp(v, from) || !v[0] ? NULL : cp_ow_producer(w, v);
      if (!p || !cp_ow_dynamic(w, v)) continue;
      bool have = false;
      for (size_t j = 0; j < n && !have; j++) have = span[j] == p;
      if (have) continue;
      if (n == ACT_NODES) return cp_ow_bad(w, to, "its activation spans more than 64 nodes");
      span[n++] = p;
    }
  /* evaluated in dependence order: each pass computes the nodes whose inputs are known */
  size_t left = n;
  for (size_t pass = 0; pass < n && left; pass++)
    for (size_t i = 0; i < n; i++) {
      if (done[i]) continue;
      const cp_onnx_node *s = span[i];
      double in[2][ACT_PTS];
      /* a layout op moves the values elementwise: its data input only, its shape input constant */
      bool layout = cp_ow_layout(w, s) && !cp_ow_is(s, "Concat") && !cp_ow_is(s, "Split") && !cp_ow_is(s, "Gather");
      bool ok = s->n_inputs >= 1 && (s->n_inputs <= 2 || layout) && s->n_outputs >= 1, wait = false;
      for (size_t k = 0; k < s->n_inputs && ok && !wait; k++) {
        const char *v = s->inputs[k];
        if (layout && k > 0) {
          ok = !v[0] || !cp_ow_dynamic(w, v);
          continue;
        }
        double c;
        if (!strcmp(v, from)) {
          for (int t = 0; t < ACT_PTS; t++) in[k][t] = -6 + 12.0 * t / (ACT_PTS - 1);
          continue;
        }
        size_t j = 0;
        for (; j < n && !(span[j]->n_outputs && !strcmp(span[j]->outputs[0], v)); j++) {
        }
        if (j < n) {
          if (!done[j]) wait = true;
          else memcpy(in[k], val[j], sizeof in[k]);
        } else if (!cp_ow_dynamic(w, v) && !cp_ow_scalar(w, v, &c)) {
          for (int t = 0; t < ACT_PTS; t++) in[k][t] = c;
        } else {
          ok = false;
        }
      }
      if (wait) continue;
      for (int t = 0; t < ACT_PTS && ok; t++)
        if (layout) val[i][t] = in[0][t];
        else ok = act_op(s, in[0][t], s->n_inputs > 1 ? in[1][t] : 0, &val[i][t]);
      if (!ok) return cp_ow_bad(w, s, "not an elementwise step of an activation (one input, scalar constants)");
      done[i] = true, left--;
    }
  if (left || !n) return cp_ow_bad(w, to, "its input is not an activation of the MLP's first projection");
  for (int t = 0; t < ACT_PTS; t++) {
    double x = -6 + 12.0 * t / (ACT_PTS - 1), want = act_ref(act, x);
    if (!(fabs(val[0][t] - want) <= 1e-4 * (1 + fabs(want)))) {
      if (w->unexplained) *w->unexplained = true; /* the graph computes other than the pattern says */
      char why[400], b[96];
      snprintf(why, sizeof why,
               "its input, from node '%s' (%.40s, index %zu), is not %s of the MLP's first "
               "projection (at x = %.3g: %.6g, not %.6g)",
               cp_ow_label(w, span[0], b), span[0]->op_type, (size_t)(span[0] - w->g->nodes), act, x, val[0][t], want);
      return cp_ow_bad(w, to, why);
    }
  }
  for (size_t i = 0; i < n; i++) cp_ow_explain(w, span[i]);
  return 0;
}

/* ---- the walk back from the logits */

/* Which inputs of an explained node carry what the recovered model computes: a contrib op's mask,
 * past and position inputs are the op's own (its semantics, as the recovery read them). */
static bool walked_input(const cp_onnx_node *n, size_t k) {
  if (strcmp(n->domain, "com.microsoft")) return true;
  if (!strcmp(n->op_type, "MultiHeadAttention") || !strcmp(n->op_type, "GroupQueryAttention")) return k < 3;
  if (!strcmp(n->op_type, "Attention") || !strcmp(n->op_type, "RotaryEmbedding") ||
      !strcmp(n->op_type, "EmbedLayerNormalization"))
    return k == 0;
  return true;
}

int cp_ow_account(const cp_ow *w, const char *logits, const char *how) {
  const cp_onnx_graph *g = w->g;
  const char *out = logits;
  if (!cp_ow_is_output(w, logits)) {
    const cp_onnx_node *o = cp_ow_forward(w, logits, cp_ow_makes_output, NULL, NULL);
    for (size_t k = 0; o && k < o->n_outputs; k++)
      if (cp_ow_is_output(w, o->outputs[k])) out = o->outputs[k];
    if (!o) return cp_error_set(CP_EONNX_RECOVER, "%s: the logits '%s' reach no graph output", w->path, logits);
  }
  const cp_onnx_node *p = cp_ow_producer(w, out);
  if (!p) return 0;
  size_t *q = malloc((g->n_nodes + 1) * sizeof *q), head = 0, tail = 0;
  unsigned char *seen = calloc(g->n_nodes + 1, 1);
  int rc = 0;
  if (!q || !seen) {
    rc = cp_nomem("%s: accounting for the graph's nodes", w->path);
    goto done;
  }
  q[tail++] = (size_t)(p - g->nodes), seen[p - g->nodes] = 1;
  while (head < tail) {
    size_t at = q[head++];
    const cp_onnx_node *n = &g->nodes[at];
    if (!w->dyn[at]) continue;
    if (!w->mark[at] && !cp_ow_layout(w, n)) {
      char b[96];
      if (w->unexplained) *w->unexplained = true;
      rc = cp_error_set(CP_EONNX_RECOVER,
                        "%s: node '%s' (%s, index %zu) is on the path to the logits '%s' but no "
                        "part of the recovered model: the %s recovery does not explain it, so the model would not "
                        "compute what the graph computes",
                        w->path, cp_ow_label(w, n, b), n->op_type, at, out, how);
      goto done;
    }
    for (size_t k = 0; k < n->n_inputs; k++) {
      const cp_onnx_node *pp =
          n->inputs[k][0] && (!w->mark[at] || walked_input(n, k)) ? cp_ow_producer(w, n->inputs[k]) : NULL;
      if (pp && !seen[pp - g->nodes]) seen[pp - g->nodes] = 1, q[tail++] = (size_t)(pp - g->nodes);
    }
  }
done:
  free(q);
  free(seen);
  return rc;
}
