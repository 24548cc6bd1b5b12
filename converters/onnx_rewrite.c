/* Patching a third-party ONNX graph in place (include/ctxpatch/converters/onnx_rewrite.h): finds
 * the attention sites (Softmax after a q.k MatMul; com.microsoft attention ops) and splices the
 * rule in through the byte-preserving editor (formats/onnx_edit.c). */
#include "ctxpatch/converters/onnx_rewrite.h"

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
#include "ctxpatch/formats/onnx_edit.h"

#define WALK_STEPS 8
#define PREFIX "ctxpatch/rewrite/"

static const char *q(char buf[128], const char *s) { return cp_quote(buf, 128, s, strlen(s)); }

/* "node 'NAME' (OP)" or "node INDEX (OP)" in buf[300]. */
static const char *label(char buf[300], const cp_onnx_node *n, size_t index) {
  char a[128], b[128];
  if (n->name[0]) snprintf(buf, 300, "node '%s' (%s%s%s)", q(a, n->name), n->domain, n->domain[0] ? " " : "", q(b, n->op_type));
  else snprintf(buf, 300, "node %zu (%s%s%s)", index, n->domain, n->domain[0] ? " " : "", q(b, n->op_type));
  return buf;
}

static bool is_ms(const cp_onnx_node *n) { return !strcmp(n->domain, "com.microsoft"); }
static bool is_default(const cp_onnx_node *n) { return !n->domain[0] || !strcmp(n->domain, "ai.onnx"); }

/* Names of the main graph sorted for lookups: node outputs (a name several Constant nodes define:
 * the last in file order, as the reader takes it) and initializers. */
typedef struct {
  const char *name;
  size_t idx;
} name_ix;

typedef struct {
  const cp_onnx_graph *g;
  name_ix *out, *init;
  size_t n_out, n_init;
} gix;

static int cmp_name_ix(const void *a, const void *b) {
  const name_ix *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* Sorts v[0..*n) by (name, idx) and keeps the last idx of each name. */
static void sort_last(name_ix *v, size_t *n) {
  if (*n) qsort(v, *n, sizeof *v, cmp_name_ix);
  size_t k = 0;
  for (size_t i = 0; i < *n; i++) {
    if (k && !strcmp(v[k - 1].name, v[i].name)) v[k - 1] = v[i];
    else v[k++] = v[i];
  }
  *n = k;
}

static int gix_build(gix *x, const cp_onnx_graph *g, const char *path) {
  memset(x, 0, sizeof *x);
  x->g = g;
  size_t n = 0;
  for (size_t k = 0; k < g->n_nodes; k++) n += g->nodes[k].n_outputs;
  x->out = malloc((n + 1) * sizeof *x->out), x->init = malloc((g->n_initializers + 1) * sizeof *x->init);
  if (!x->out || !x->init) return cp_error_set(CP_ENOMEM, "%s: out of memory", path);
  for (size_t k = 0; k < g->n_nodes; k++)
    for (size_t o = 0; o < g->nodes[k].n_outputs; o++)
      if (g->nodes[k].outputs[o][0]) x->out[x->n_out++] = (name_ix){g->nodes[k].outputs[o], k};
  for (size_t k = 0; k < g->n_initializers; k++) x->init[x->n_init++] = (name_ix){g->initializers[k].name, k};
  sort_last(x->out, &x->n_out);
  sort_last(x->init, &x->n_init);
  return 0;
}

static void gix_free(gix *x) { free(x->out), free(x->init); }

static size_t lookup(const name_ix *v, size_t n, const char *name) {
  name_ix key = {name, 0};
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(v[mid].name, key.name);
    if (c == 0) return v[mid].idx;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return SIZE_MAX;
}

/* The node producing `name` (file order index), or SIZE_MAX. */
static size_t producer(const gix *x, const char *name) { return name[0] ? lookup(x->out, x->n_out, name) : SIZE_MAX; }

/* The initializer named `name`, or NULL. */
static const cp_onnx_tensor *init_of(const gix *x, const char *name) {
  size_t k = lookup(x->init, x->n_init, name);
  return k == SIZE_MAX ? NULL : &x->g->initializers[k];
}

static bool passes_logits(const cp_onnx_node *n) {
  static const char *const ops[] = {"Where", "Add", "Sub", "Mul", "Div", "Cast", "Reshape", "Identity", "Transpose"};
  if (!is_default(n)) return false;
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
    if (!strcmp(n->op_type, ops[k])) return true;
  return false;
}

static bool is_matmul(const cp_onnx_node *n) {
  return (is_default(n) && !strcmp(n->op_type, "MatMul")) || (is_ms(n) && !strcmp(n->op_type, "FusedMatMul"));
}

/* The q.k MatMul upstream of `name` through elementwise ops (depth-first, bounded), or SIZE_MAX. */
static size_t find_matmul(const gix *x, const char *name, int steps) {
  const cp_onnx_graph *g = x->g;
  size_t p = producer(x, name);
  if (p == SIZE_MAX || steps <= 0) return SIZE_MAX;
  const cp_onnx_node *n = &g->nodes[p];
  if (is_matmul(n)) return p;
  if (!passes_logits(n)) return SIZE_MAX;
  for (size_t i = 0; i < n->n_inputs; i++) {
    size_t r = find_matmul(x, n->inputs[i], steps - 1);
    if (r != SIZE_MAX) return r;
  }
  return SIZE_MAX;
}

/* The ONNX type of value `name`: value_info / outputs, else an initializer or Constant operand
 * of the nodes on the way up (the logits share the type of a scale constant), else float. */
static int32_t logits_type(const gix *x, const char *name, size_t matmul) {
  const cp_onnx_graph *g = x->g;
  for (size_t k = 0; k < g->n_value_info; k++)
    if (!strcmp(g->value_info[k].name, name) && g->value_info[k].elem_type) return g->value_info[k].elem_type;
  const cp_onnx_node *mm = &g->nodes[matmul];
  for (size_t i = 0; i < mm->n_inputs; i++) {
    const cp_onnx_tensor *t = init_of(x, mm->inputs[i]);
    if (t) return t->elem_type;
  }
  for (size_t k = 0; k < g->n_nodes; k++) {
    const cp_onnx_node *n = &g->nodes[k];
    bool uses = false;
    for (size_t i = 0; i < n->n_inputs; i++) uses |= !strcmp(n->inputs[i], mm->outputs[0]);
    if (!uses || (strcmp(n->op_type, "Div") && strcmp(n->op_type, "Mul"))) continue;
    for (size_t i = 0; i < n->n_inputs; i++) {
      const cp_onnx_tensor *t = init_of(x, n->inputs[i]);
      size_t p = producer(x, n->inputs[i]);
      if (!t && p != SIZE_MAX && !strcmp(g->nodes[p].op_type, "Constant") && g->nodes[p].n_attrs &&
          g->nodes[p].attrs[0].type == CP_ONNX_ATYPE_TENSOR)
        t = g->nodes[p].attrs[0].t;
      if (t) return t->elem_type;
    }
  }
  return 1;
}

/* The output width of the MatMul whose weight (an initializer, [in, out]) feeds `name` through
 * ops that keep the width (RotaryEmbedding, Add, Cast, Identity), or 0. */
static int64_t proj_width(const gix *x, const char *name, int steps) {
  const cp_onnx_graph *g = x->g;
  size_t p = producer(x, name);
  if (p == SIZE_MAX || steps <= 0) return 0;
  const cp_onnx_node *n = &g->nodes[p];
  if (is_matmul(n) && n->n_inputs >= 2) {
    const cp_onnx_tensor *w = init_of(x, n->inputs[1]);
    return w && w->ndim == 2 ? w->shape[1] : 0;
  }
  if (!strcmp(n->op_type, "RotaryEmbedding") || !strcmp(n->op_type, "Add") || !strcmp(n->op_type, "Cast") ||
      !strcmp(n->op_type, "Identity"))
    return n->n_inputs ? proj_width(x, n->inputs[0], steps - 1) : 0;
  return 0;
}

static int64_t attr_i(const cp_onnx_node *n, const char *name, int64_t dflt) {
  const cp_onnx_attribute *a = cp_onnx_node_attr(n, name);
  return a && a->type == CP_ONNX_ATYPE_INT ? a->i : dflt;
}

/* The scale a contrib attention node uses now: its attribute, else 1/sqrt(head size); 0 when
 * the head size cannot be told. */
static float contrib_scale(const gix *x, const cp_onnx_node *n) {
  const cp_onnx_attribute *s = cp_onnx_node_attr(n, "scale");
  if (s && s->type == CP_ONNX_ATYPE_FLOAT && s->f != 0.0f) return s->f;
  int64_t heads = attr_i(n, "num_heads", 0), width = 0, parts = 1;
  if (heads <= 0 || n->n_inputs < 1) return 0;
  if (!strcmp(n->op_type, "Attention")) {
    const cp_onnx_attribute *qkv = cp_onnx_node_attr(n, "qkv_hidden_sizes");
    const cp_onnx_tensor *w = n->n_inputs >= 2 ? init_of(x, n->inputs[1]) : NULL;
    if (qkv && qkv->type == CP_ONNX_ATYPE_INTS && qkv->n == 3) width = qkv->ints[0];
    else if (w && w->ndim == 2 && w->shape[1] % 3 == 0) width = w->shape[1] / 3;
  } else {
    bool packed = n->n_inputs < 2 || !n->inputs[1][0];
    width = proj_width(x, n->inputs[0], WALK_STEPS);
    if (packed && !strcmp(n->op_type, "GroupQueryAttention")) parts = 0; /* q, k, v widths differ: see below */
    else if (packed) return 0; /* MultiHeadAttention's packed QKV is 5-D: its width is not a head count */
    if (parts == 0) {
      int64_t kv = attr_i(n, "kv_num_heads", 0);
      if (kv <= 0 || width % (heads + 2 * kv)) return 0;
      return (float)(1.0 / sqrt((double)(width / (heads + 2 * kv))));
    }
  }
  if (width <= 0 || width % heads) return 0;
  return (float)(1.0 / sqrt((double)(width / heads)));
}

static bool is_contrib_attention(const cp_onnx_node *n) {
  return is_ms(n) && (!strcmp(n->op_type, "Attention") || !strcmp(n->op_type, "MultiHeadAttention") ||
                      !strcmp(n->op_type, "GroupQueryAttention"));
}

/* A training graph: a backward op or a training opset. */
static int refuse_training(const cp_onnx_model *m) {
  const cp_onnx_graph *g = m->graph;
  char lb[300];
  for (size_t k = 0; k < g->n_nodes; k++) {
    const cp_onnx_node *n = &g->nodes[k];
    size_t len = strlen(n->op_type);
    bool grad = (len > 4 && !strcmp(n->op_type + len - 4, "Grad")) || strstr(n->op_type, "Grad_") ||
                !strcmp(n->op_type, "YieldOp");
    if (grad)
      return cp_error_set(CP_EUNSUPPORTED, "%s: %s: a training graph (forward and backward); it does not run "
                          "as an inference model, so it is not rewritten", m->path, label(lb, n, k));
  }
  return 0;
}

int cp_onnx_find_sites(cp_onnx_site **out, size_t *n_out, const cp_onnx_model *m) {
  *out = NULL, *n_out = 0;
  const cp_onnx_graph *g = m->graph;
  int rc = refuse_training(m);
  if (rc < 0) return rc;
  gix ix, *x = &ix;
  cp_onnx_site *s = NULL;
  size_t n = 0;
  if ((rc = gix_build(x, g, m->path)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(s = calloc(g->n_nodes + 1, sizeof *s), m->path);
  for (size_t o = 0; o < g->n_nodes; o++) {
    size_t k = g->order[o];
    const cp_onnx_node *nd = &g->nodes[k];
    if (is_contrib_attention(nd)) {
      s[n].kind = CP_ONNX_SITE_CONTRIB, s[n].node = k, s[n].scale = contrib_scale(x, nd);
      n++;
    } else if (is_default(nd) && !strcmp(nd->op_type, "Softmax") && nd->n_inputs == 1) {
      size_t mm = find_matmul(x, nd->inputs[0], WALK_STEPS);
      if (mm == SIZE_MAX) continue; /* not an attention softmax */
      s[n].kind = CP_ONNX_SITE_SOFTMAX, s[n].node = k, s[n].matmul = mm;
      s[n].elem_type = logits_type(x, nd->inputs[0], mm);
      n++;
    }
  }
  if (n == 0)
    rc = cp_error_set(CP_EUNSUPPORTED, "%s: no attention site found (no Softmax fed by a MatMul through elementwise "
                      "ops, no com.microsoft Attention / MultiHeadAttention / GroupQueryAttention)", m->path);
done:
  gix_free(x);
  if (rc < 0) free(s);
  else *out = s, *n_out = n;
  return rc;
}

static bool has_rotary(const cp_onnx_graph *g, size_t *at) {
  for (size_t k = 0; k < g->n_nodes; k++) {
    const cp_onnx_node *n = &g->nodes[k];
    bool trig = is_default(n) && (!strcmp(n->op_type, "Sin") || !strcmp(n->op_type, "Cos")); /* RoPE built from ops */
    if (trig || strstr(n->op_type, "Rotary") || (!strcmp(n->op_type, "GroupQueryAttention") && attr_i(n, "do_rotary", 0))) {
      *at = k;
      return true;
    }
  }
  return false;
}

/* Whether initializer t holds ALiBi slopes: float32 or float64, H in 2 .. 1024 values in a shape whose
 * other dims are 1, equal (to 1e-6 relative) to the BLOOM/MPT slopes of H heads with an integer
 * max bias of 1 .. 16 (BLOOM: 8; MPT: alibi_bias_max). */
/* The values of a float32 or float64 tensor of at most 1024 elements, in double (raw float64
 * read as stored, without a float round trip). */
static int values_f64(double *out /* [t->numel] */, const cp_onnx_tensor *t) {
  if (t->elem_type == 11 && t->data) {
    memcpy(out, t->data, t->numel * sizeof *out); /* little-endian hosts (base/le.h) */
    return 0;
  }
  float v[1024];
  int rc = cp_onnx_tensor_f32(v, t);
  for (uint64_t h = 0; rc == 0 && h < t->numel; h++) out[h] = v[h];
  return rc;
}

static bool is_slopes(const cp_onnx_tensor *t) {
  if ((t->elem_type != 1 && t->elem_type != 11) || t->numel < 2 || t->numel > 1024) return false;
  for (int k = 0; k < t->ndim; k++)
    if (t->shape[k] != 1 && (uint64_t)t->shape[k] != t->numel) return false;
  double v[1024], want[1024];
  if (values_f64(v, t) < 0) return false;
  for (int bias = 1; bias <= 16; bias++) { /* max bias: BLOOM 8, MPT's alibi_bias_max (8 by default) */
    cp_alibi_slopes(want, (int)t->numel, (double)bias);
    uint64_t h = 0;
    while (h < t->numel && fabs(v[h] - want[h]) <= 1e-6 * want[h]) h++;
    if (h == t->numel) return true;
  }
  return false;
}

static bool passes_positional(const cp_onnx_node *n) {
  static const char *const ops[] = {"Neg", "Unsqueeze", "Squeeze", "Expand", "Tile"};
  if (passes_logits(n)) return true;
  for (size_t k = 0; is_default(n) && k < sizeof ops / sizeof *ops; k++)
    if (!strcmp(n->op_type, ops[k])) return true;
  return false;
}

/* The ALiBi slopes initializers upstream of the Softmax sites' logits (through elementwise and
 * shape ops; each node visited once over all sites): flagged in found[] by initializer index. */
static int find_slopes(bool *found /* [g->n_initializers] */, const cp_onnx_graph *g, const cp_onnx_site *s, size_t n,
                       const char *path) {
  gix ix;
  bool *seen = calloc(g->n_nodes + 1, sizeof *seen);
  size_t *stack = malloc((g->n_nodes + 1) * sizeof *stack), top = 0;
  int rc = gix_build(&ix, g, path);
  if (rc == 0 && (!seen || !stack)) rc = cp_error_set(CP_ENOMEM, "%s: out of memory", path);
  for (size_t k = 0; k < n && rc == 0; k++) {
    if (s[k].kind != CP_ONNX_SITE_SOFTMAX) continue;
    size_t p = producer(&ix, g->nodes[s[k].node].inputs[0]);
    if (p != SIZE_MAX && !seen[p]) stack[top++] = p, seen[p] = true;
  }
  while (rc == 0 && top) {
    const cp_onnx_node *nd = &g->nodes[stack[--top]];
    if (!passes_positional(nd)) continue;
    for (size_t i = 0; i < nd->n_inputs; i++) {
      size_t t = lookup(ix.init, ix.n_init, nd->inputs[i]);
      if (t != SIZE_MAX && !found[t] && is_slopes(&g->initializers[t])) found[t] = true;
      size_t q = producer(&ix, nd->inputs[i]);
      if (q != SIZE_MAX && !seen[q]) seen[q] = true, stack[top++] = q;
    }
  }
  gix_free(&ix);
  free(seen), free(stack);
  return rc;
}

/* What the rewriter cannot express, one line naming the node or the rule key. */
static int refuse_rule(const cp_onnx_model *m, const cp_rule *r, const cp_onnx_site *s, size_t n) {
  const cp_onnx_graph *g = m->graph;
  char lb[300], qb[128];
  const char *meta = cp_onnx_model_meta(m, "ctxpatch.rule");
  if (meta && strcmp(meta, "{}") != 0 && meta[0])
    return cp_error_set(CP_EUNSUPPORTED, "%s: metadata_props ctxpatch.rule: the graph already carries a ctxpatch rule "
                        "(%.80s); patch the original instead", m->path, meta);
  const char *what = r->alibi_mode == CP_ALIBI_DYNAMIC ? "alibi_scale dynamic" :
                     r->alibi_mode == CP_ALIBI_PROGRESSIVE ? "alibi_scale progressive" :
                     r->distance_ceiling ? "distance_ceiling" : r->has_top_k ? "top_k" :
                     r->fire_threshold > 0 ? "fire_threshold" : NULL;
  if (what)
    return cp_error_set(CP_EUNSUPPORTED, "%s: %s at %s: not expressed by the in-place rewriter (docs/onnx.md); "
                        "export the model with `patch --to onnx` instead", m->path, what, label(lb, &g->nodes[s[0].node], s[0].node));
  if (r->n_temperature > 1 && (size_t)r->n_temperature != n)
    return cp_error_set(CP_EUNSUPPORTED, "%s: %d per-layer temperatures for %zu attention sites (first %s)", m->path,
                        r->n_temperature, n, label(lb, &g->nodes[s[0].node], s[0].node));
  size_t rot;
  if (r->has_lambda && has_rotary(g, &rot))
    return cp_error_set(CP_EUNSUPPORTED, "%s: %s: lambda_mask implies a distance ceiling of %lld on RoPE, and the "
                        "rotation is computed before the attention site: not expressible here", m->path,
                        label(lb, &g->nodes[rot], rot), (long long)r->n_local);
  for (size_t k = 0; k < n; k++) {
    const cp_onnx_node *nd = &g->nodes[s[k].node];
    if (s[k].kind == CP_ONNX_SITE_CONTRIB && r->n_temperature && s[k].scale == 0.0f)
      return cp_error_set(CP_EUNSUPPORTED, "%s: %s: no scale attribute and the head size cannot be told from the "
                          "weights feeding it, so its temperature cannot be set", m->path, label(lb, nd, s[k].node));
    if (s[k].kind == CP_ONNX_SITE_CONTRIB && r->n_schedule)
      return cp_error_set(CP_EUNSUPPORTED, "%s: %s: temperature_schedule gives each row its own tau, and the node's "
                          "scale attribute is one number", m->path, label(lb, nd, s[k].node));
    if (s[k].kind == CP_ONNX_SITE_CONTRIB && r->has_lambda && !strcmp(nd->op_type, "Attention") && nd->n_inputs > 4 &&
        nd->inputs[4][0])
      return cp_error_set(CP_EUNSUPPORTED, "%s: %s: lambda_mask goes through attention_bias, and onnxruntime refuses "
                          "an Attention with both a past (input '%s') and an attention_bias", m->path,
                          label(lb, nd, s[k].node), q(qb, nd->inputs[4]));
    if (s[k].kind == CP_ONNX_SITE_CONTRIB && r->has_lambda && strcmp(nd->op_type, "Attention") != 0)
      return cp_error_set(CP_EUNSUPPORTED, "%s: %s: lambda_mask through the attention_bias of %s is not expressed by "
                          "the rewriter (Attention only)", m->path, label(lb, nd, s[k].node), nd->op_type);
    if (s[k].kind == CP_ONNX_SITE_SOFTMAX && s[k].elem_type != 1 && s[k].elem_type != 10)
      return cp_error_set(CP_EUNSUPPORTED, "%s: %s: logits of ONNX type %d (float or float16 only)", m->path,
                          label(lb, nd, s[k].node), (int)s[k].elem_type);
  }
  if ((r->has_lambda || r->n_schedule) && cp_onnx_model_opset(m, "") < 11)
    return cp_error_set(CP_EUNSUPPORTED, "%s: opset %lld: %s needs opset 11 (Range, negative Gather indices)", m->path,
                        (long long)cp_onnx_model_opset(m, ""), r->has_lambda ? "lambda_mask" : "temperature_schedule");
  return 0;
}

typedef struct {
  cp_onnx_edit *e;
  const cp_onnx_model *m;
  cp_onnx_rewrite_report *rep;
} rw;

static int add_node(rw *w, size_t before, const char *name, const char *op, const char *const *in, size_t n_in,
                    const char *out, const cp_onnx_edit_attr *attrs, size_t n_attrs) {
  cp_onnx_edit_node nd = {name, op, NULL, in, n_in, &out, 1, attrs, n_attrs};
  w->rep->n_nodes_added++;
  return cp_onnx_edit_insert_node(w->e, before, &nd);
}

static int add_const(rw *w, const char *name, int32_t type, const int64_t *shape, int ndim, const void *data) {
  w->rep->n_initializers_added++;
  return cp_onnx_edit_add_initializer(w->e, name, type, shape, ndim, data);
}

/* Names of one site's values and nodes: "<p><what>" and "<p>node/<what>". */
typedef struct {
  char v[200], n[220];
} nm;

static nm name2(const char *p, const char *what) {
  nm r;
  snprintf(r.v, sizeof r.v, "%s%s", p, what);
  snprintf(r.n, sizeof r.n, "%snode/%s", p, what);
  return r;
}

static int op(rw *w, size_t before, const char *p, const char *what, const char *type, const char *const *in,
              size_t n_in, const cp_onnx_edit_attr *attrs, size_t n_attrs) {
  nm x = name2(p, what);
  return add_node(w, before, x.n, type, in, n_in, x.v, attrs, n_attrs);
}

static int scalar_i64(rw *w, const char *p, const char *what, int64_t v) {
  nm x = name2(p, what);
  return add_const(w, x.v, 7, NULL, 0, &v);
}

/* The site's positions from its logits x [..., S, T]: <p>T (int64 scalar), <p>kpos [T] = 0 .. T-1
 * and <p>qpos [S] = T - S .. T-1 (a causal pass over a cache of T - S keys). */
static int positions(rw *w, size_t before, const char *p, const char *x) {
  nm c_m2 = name2(p, "const/-2"), c_m1 = name2(p, "const/-1"), c_0 = name2(p, "const/0"), c_1 = name2(p, "const/1");
  nm shape = name2(p, "shape"), S = name2(p, "S"), T = name2(p, "T"), q0 = name2(p, "q0");
  int rc;
  if ((rc = scalar_i64(w, p, "const/-2", -2)) < 0 || (rc = scalar_i64(w, p, "const/-1", -1)) < 0 ||
      (rc = scalar_i64(w, p, "const/0", 0)) < 0 || (rc = scalar_i64(w, p, "const/1", 1)) < 0)
    return rc;
  const char *in_shape[] = {x}, *in_s[] = {shape.v, c_m2.v}, *in_t[] = {shape.v, c_m1.v}, *in_k[] = {c_0.v, T.v, c_1.v},
             *in_q0[] = {T.v, S.v}, *in_q[] = {q0.v, T.v, c_1.v};
  cp_onnx_edit_attr ax0 = {"axis", 2, 0, 0, NULL, 0};
  if ((rc = op(w, before, p, "shape", "Shape", in_shape, 1, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "S", "Gather", in_s, 2, &ax0, 1)) < 0 ||
      (rc = op(w, before, p, "T", "Gather", in_t, 2, &ax0, 1)) < 0 ||
      (rc = op(w, before, p, "kpos", "Range", in_k, 3, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "q0", "Sub", in_q0, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "qpos", "Range", in_q, 3, NULL, 0)) < 0)
    return rc;
  return 0;
}

/* <p>bias [S, T] of the Lambda mask (after positions()). */
static int lambda_bias(rw *w, size_t before, const char *p, int32_t type, const cp_rule *r) {
  nm col = name2(p, "const/col"), ng = name2(p, "const/n_global"), nl = name2(p, "const/n_local");
  nm zero = name2(p, "const/zero"), masked = name2(p, "const/masked"), qpos = name2(p, "qpos"), kpos = name2(p, "kpos");
  nm qcol = name2(p, "qcol"), d = name2(p, "d"), near = name2(p, "near"), glob = name2(p, "glob"), keep = name2(p, "keep");
  int64_t shape_col[2] = {-1, 1}, two = 2;
  float z = 0.0f, neg = type == 10 ? -65504.0f : -FLT_MAX;
  int rc;
  if ((rc = scalar_i64(w, p, "const/n_global", r->n_global)) < 0 || (rc = scalar_i64(w, p, "const/n_local", r->n_local)) < 0 ||
      (rc = add_const(w, col.v, 7, &two, 1, shape_col)) < 0 || (rc = add_const(w, zero.v, type, NULL, 0, &z)) < 0 ||
      (rc = add_const(w, masked.v, type, NULL, 0, &neg)) < 0)
    return rc;
  const char *in_col[] = {qpos.v, col.v}, *in_d[] = {qcol.v, kpos.v}, *in_near[] = {d.v, nl.v}, *in_glob[] = {kpos.v, ng.v},
             *in_keep[] = {near.v, glob.v}, *in_bias[] = {keep.v, zero.v, masked.v};
  if ((rc = op(w, before, p, "qcol", "Reshape", in_col, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "d", "Sub", in_d, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "near", "Less", in_near, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "glob", "Less", in_glob, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "keep", "Or", in_keep, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "bias", "Where", in_bias, 3, NULL, 0)) < 0)
    return rc;
  return 0;
}

/* <p>inv_tau_rows [S, 1] of the logits' type: 1 / tau(T) per row, T = qpos + 1, from the
 * layer's piecewise schedule (cp_tau_schedule) in double, as the engines compute it (after
 * positions()). */
static int schedule_rows(rw *w, size_t before, const char *p, int32_t type, const cp_tau_schedule *sc) {
  char what[64], prev[200];
  int rc;
  double one = 1.0, t1 = sc->t1, lo = sc->lo, hi = sc->hi, zero = 0.0;
  nm c1 = name2(p, "const/1"), d1 = name2(p, "const/d1"), dt1 = name2(p, "const/t1"), dlo = name2(p, "const/lo");
  nm dhi = name2(p, "const/hi"), d0 = name2(p, "const/d0"), qpos = name2(p, "qpos"), col = name2(p, "const/col");
  int64_t shape_col[2] = {-1, 1}, two = 2;
  if ((rc = add_const(w, d1.v, 11, NULL, 0, &one)) < 0 || (rc = add_const(w, dt1.v, 11, NULL, 0, &t1)) < 0 ||
      (rc = add_const(w, dlo.v, 11, NULL, 0, &lo)) < 0 || (rc = add_const(w, dhi.v, 11, NULL, 0, &hi)) < 0 ||
      (rc = add_const(w, d0.v, 11, NULL, 0, &zero)) < 0 || (rc = add_const(w, col.v, 7, &two, 1, shape_col)) < 0)
    return rc;
  nm len = name2(p, "len"), lend = name2(p, "len_d"), lenc = name2(p, "len_clamped"), lg = name2(p, "log_len");
  cp_onnx_edit_attr to_d = {"to", 2, 0, 11, NULL, 0}, to_t = {"to", 2, 0, type, NULL, 0};
  const char *in_len[] = {qpos.v, c1.v}, *in_lend[] = {len.v}, *in_c[] = {lend.v, d1.v}, *in_lg[] = {lenc.v};
  if ((rc = op(w, before, p, "len", "Add", in_len, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "len_d", "Cast", in_lend, 1, &to_d, 1)) < 0 ||
      (rc = op(w, before, p, "len_clamped", "Max", in_c, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "log_len", "Log", in_lg, 1, NULL, 0)) < 0)
    return rc;
  snprintf(prev, sizeof prev, "%s", dt1.v);
  for (int k = 0; k + 1 < sc->n; k++) {
    double loglen = sc->log_len[k], width = sc->log_len[k + 1] - sc->log_len[k], slope = sc->slope[k];
    char cn[3][64], vn[4][64];
    snprintf(cn[0], 64, "const/seg%d/log_len", k), snprintf(cn[1], 64, "const/seg%d/width", k);
    snprintf(cn[2], 64, "const/seg%d/slope", k);
    snprintf(vn[0], 64, "seg%d/from", k), snprintf(vn[1], 64, "seg%d/over", k), snprintf(vn[2], 64, "seg%d/in", k);
    snprintf(vn[3], 64, "seg%d/term", k);
    nm c_l = name2(p, cn[0]), c_w = name2(p, cn[1]), c_s = name2(p, cn[2]);
    nm v0 = name2(p, vn[0]), v1 = name2(p, vn[1]), v2 = name2(p, vn[2]), v3 = name2(p, vn[3]);
    if ((rc = add_const(w, c_l.v, 11, NULL, 0, &loglen)) < 0 || (rc = add_const(w, c_w.v, 11, NULL, 0, &width)) < 0 ||
        (rc = add_const(w, c_s.v, 11, NULL, 0, &slope)) < 0)
      return rc;
    const char *i0[] = {lg.v, c_l.v}, *i1[] = {v0.v, d0.v}, *i2[] = {v1.v, c_w.v}, *i3[] = {v2.v, c_s.v}, *i4[] = {prev, v3.v};
    snprintf(what, sizeof what, "seg%d/sum", k);
    if ((rc = op(w, before, p, vn[0], "Sub", i0, 2, NULL, 0)) < 0 || (rc = op(w, before, p, vn[1], "Max", i1, 2, NULL, 0)) < 0 ||
        (rc = op(w, before, p, vn[2], "Min", i2, 2, NULL, 0)) < 0 || (rc = op(w, before, p, vn[3], "Mul", i3, 2, NULL, 0)) < 0 ||
        (rc = op(w, before, p, what, "Add", i4, 2, NULL, 0)) < 0)
      return rc;
    snprintf(prev, sizeof prev, "%s", name2(p, what).v);
  }
  nm tlo = name2(p, "tau_lo"), tau = name2(p, "tau"), inv = name2(p, "inv_tau_d"), invt = name2(p, "inv_tau");
  const char *in_lo[] = {prev, dlo.v}, *in_hi[] = {tlo.v, dhi.v}, *in_inv[] = {d1.v, tau.v}, *in_cast[] = {inv.v},
             *in_rows[] = {invt.v, col.v};
  if ((rc = op(w, before, p, "tau_lo", "Max", in_lo, 2, NULL, 0)) < 0 || (rc = op(w, before, p, "tau", "Min", in_hi, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "inv_tau_d", "Div", in_inv, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "inv_tau", "Cast", in_cast, 1, &to_t, 1)) < 0 ||
      (rc = op(w, before, p, "inv_tau_rows", "Reshape", in_rows, 2, NULL, 0)) < 0)
    return rc;
  return 0;
}

/* Mul by 1/tau (constant, or per row from the schedule) and / or Add of the Lambda bias in front
 * of the Softmax of site s (layer l). */
static int rewrite_softmax(rw *w, const cp_onnx_site *s, size_t l, const cp_rule *r, const cp_tau_schedule *sc) {
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
      if ((rc = add_const(w, c, s->elem_type, NULL, 0, &inv)) < 0) return rc;
    }
    const char *in[] = {x, c};
    if ((rc = op(w, s->node, p, "logits_tau", "Mul", in, 2, NULL, 0)) < 0) return rc;
    snprintf(x, sizeof x, "%slogits_tau", p);
  }
  if (r->has_lambda) {
    nm bias = name2(p, "bias");
    if ((rc = lambda_bias(w, s->node, p, s->elem_type, r)) < 0) return rc;
    const char *in[] = {x, bias.v};
    if ((rc = op(w, s->node, p, "logits_lambda", "Add", in, 2, NULL, 0)) < 0) return rc;
    snprintf(x, sizeof x, "%slogits_lambda", p);
  }
  if (strcmp(x, sm->inputs[0]) != 0) {
    w->rep->n_nodes_changed++;
    if ((rc = cp_onnx_edit_set_input(w->e, s->node, 0, x)) < 0) return rc;
  }
  w->rep->n_softmax++;
  return 0;
}

/* Positions of a com.microsoft Attention node (input [B, S, hidden], past [2, B, N, P, H]):
 * <p>T = P + S (S without a past), <p>kpos, <p>qpos as positions() gives them. */
static int positions_attention(rw *w, size_t before, const char *p, const cp_onnx_node *n) {
  nm c_1 = name2(p, "const/1"), c_3 = name2(p, "const/3"), c_0 = name2(p, "const/0");
  nm shape = name2(p, "shape"), S = name2(p, "S"), T = name2(p, "T"), q0 = name2(p, "q0"), ps = name2(p, "past_shape");
  nm P = name2(p, "P");
  bool past = n->n_inputs > 4 && n->inputs[4][0];
  int rc;
  if ((rc = scalar_i64(w, p, "const/1", 1)) < 0 || (rc = scalar_i64(w, p, "const/3", 3)) < 0 ||
      (rc = scalar_i64(w, p, "const/0", 0)) < 0)
    return rc;
  const char *in_shape[] = {n->inputs[0]}, *in_s[] = {shape.v, c_1.v}, *in_ps[] = {past ? n->inputs[4] : ""},
             *in_p[] = {ps.v, c_3.v}, *in_t[] = {P.v, S.v}, *in_t0[] = {S.v}, *in_k[] = {c_0.v, T.v, c_1.v},
             *in_q0[] = {T.v, S.v}, *in_q[] = {q0.v, T.v, c_1.v};
  cp_onnx_edit_attr ax0 = {"axis", 2, 0, 0, NULL, 0};
  if ((rc = op(w, before, p, "shape", "Shape", in_shape, 1, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "S", "Gather", in_s, 2, &ax0, 1)) < 0)
    return rc;
  if (past && ((rc = op(w, before, p, "past_shape", "Shape", in_ps, 1, NULL, 0)) < 0 ||
               (rc = op(w, before, p, "P", "Gather", in_p, 2, &ax0, 1)) < 0 ||
               (rc = op(w, before, p, "T", "Add", in_t, 2, NULL, 0)) < 0))
    return rc;
  if (!past && (rc = op(w, before, p, "T", "Identity", in_t0, 1, NULL, 0)) < 0) return rc;
  if ((rc = op(w, before, p, "kpos", "Range", in_k, 3, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "q0", "Sub", in_q0, 2, NULL, 0)) < 0 ||
      (rc = op(w, before, p, "qpos", "Range", in_q, 3, NULL, 0)) < 0)
    return rc;
  return 0;
}

/* The Lambda bias [1, 1, S, T] fed to a com.microsoft Attention node as its attention_bias
 * (input 5), added to the one it has. */
static int attention_lambda(rw *w, const cp_onnx_site *s, const char *p, const cp_rule *r) {
  const cp_onnx_node *n = &w->m->graph->nodes[s->node];
  const cp_onnx_tensor *wt = n->n_inputs > 1 ? cp_onnx_graph_initializer(w->m->graph, n->inputs[1]) : NULL;
  int32_t type = wt ? wt->elem_type : 1;
  int rc;
  if ((rc = positions_attention(w, s->node, p, n)) < 0 || (rc = lambda_bias(w, s->node, p, type, r)) < 0) return rc;
  nm bias = name2(p, "bias"), b4 = name2(p, "bias4"), axes = name2(p, "const/axes01"), sum = name2(p, "attention_bias");
  int64_t ax[2] = {0, 1}, two = 2;
  const char *in_u[] = {bias.v, axes.v};
  if (cp_onnx_model_opset(w->m, "") >= 13) {
    if ((rc = add_const(w, axes.v, 7, &two, 1, ax)) < 0 || (rc = op(w, s->node, p, "bias4", "Unsqueeze", in_u, 2, NULL, 0)) < 0)
      return rc;
  } else {
    cp_onnx_edit_attr a = {"axes", 7, 0, 0, ax, 2};
    if ((rc = op(w, s->node, p, "bias4", "Unsqueeze", in_u, 1, &a, 1)) < 0) return rc;
  }
  const char *fed = b4.v;
  if (n->n_inputs > 5 && n->inputs[5][0]) {
    const char *in_add[] = {n->inputs[5], b4.v};
    if ((rc = op(w, s->node, p, "attention_bias", "Add", in_add, 2, NULL, 0)) < 0) return rc;
    fed = sum.v;
  }
  return cp_onnx_edit_set_input(w->e, s->node, 5, fed);
}

static int rewrite_contrib(rw *w, const cp_onnx_site *s, size_t l, const cp_rule *r) {
  double tau = r->n_temperature == 0 ? 1.0 : r->temperature[r->n_temperature > 1 ? l : 0];
  char p[64];
  snprintf(p, sizeof p, PREFIX "L%zu/", l);
  int rc = 0;
  w->rep->n_contrib++;
  if (tau != 1.0 && (rc = cp_onnx_edit_set_attr_float(w->e, s->node, "scale", (float)((double)s->scale / tau))) < 0)
    return rc;
  if (r->has_lambda && (rc = attention_lambda(w, s, p, r)) < 0) return rc;
  if (tau != 1.0 || r->has_lambda) w->rep->n_nodes_changed++;
  return 0;
}

int cp_onnx_rewrite(cp_onnx_rewrite_report *rep, const cp_onnx_model *m, const cp_rule *rule, const char *out_path,
                    const cp_onnx_rewrite_params *p) {
  memset(rep, 0, sizeof *rep);
  cp_onnx_site *s = NULL;
  size_t n = 0;
  cp_onnx_edit *e = NULL;
  char *rule_json = NULL;
  bool *slopes = NULL;
  int rc = cp_onnx_find_sites(&s, &n, m);
  if (rc < 0) goto done;
  if ((rc = refuse_rule(m, rule, s, n)) < 0) goto done;
  bool any_slopes = false;
  CP_CHECK_ALLOC_GOTO(slopes = calloc(m->graph->n_initializers + 1, sizeof *slopes), m->path);
  if ((rule->alibi_mode || rule->has_lambda) && (rc = find_slopes(slopes, m->graph, s, n, m->path)) < 0) goto done;
  for (size_t k = 0; k < m->graph->n_initializers; k++) any_slopes |= slopes[k];
  if (rule->alibi_mode && !any_slopes) {
    char lb[300];
    rc = cp_error_set(CP_EUNSUPPORTED, "%s: alibi_scale: no ALiBi slopes constant (float32 or float64 [H], the BLOOM/MPT slopes) "
                      "upstream of %s", m->path, label(lb, &m->graph->nodes[s[0].node], s[0].node));
    goto done;
  }
  for (size_t k = 0; k < m->graph->n_initializers && rule->has_lambda; k++)
    if (slopes[k]) {
      char q1[128];
      rc = cp_error_set(CP_EUNSUPPORTED, "%s: initializer '%s' (ALiBi slopes): lambda_mask implies a distance ceiling "
                        "of %lld on ALiBi's distance term: not expressed by the rewriter", m->path,
                        q(q1, m->graph->initializers[k].name), (long long)rule->n_local);
      goto done;
    }
  /* The sites are the layers of one decoder-only stack: per-layer lists must have their count. */
  cp_rule_model rm = {false, 0, (int)n, rule->train_len, any_slopes, false, !any_slopes, NULL};
  if (n > CP_RULE_MAX_LAYERS) {
    rc = cp_error_set(CP_EUNSUPPORTED, "%s: %zu attention sites (at most %d layers)", m->path, n, CP_RULE_MAX_LAYERS);
    goto done;
  }
  if ((rc = cp_rule_check_model(rule, &rm, m->path)) < 0) goto done;
  if ((rc = cp_onnx_edit_open(&e, m->path)) < 0) goto done;
  if (cp_onnx_edit_n_nodes(e) != m->graph->n_nodes) {
    rc = cp_error_set(CP_EFORMAT, "%s: the file changed while it was read", m->path);
    goto done;
  }
  rw w = {e, m, rep};
  for (size_t k = 0; k < n && rc == 0; k++) {
    cp_attn_plan plan;
    cp_rule_plan(&plan, rule, &rm, CP_ATTN_DECODER_SELF, (int)k);
    rc = s[k].kind == CP_ONNX_SITE_SOFTMAX ? rewrite_softmax(&w, &s[k], k, rule, &plan.sched)
                                           : rewrite_contrib(&w, &s[k], k, rule);
  }
  /* Static ALiBi: each slopes constant becomes m_h / F, computed in double (as the engines). */
  for (size_t k = 0; k < m->graph->n_initializers && rc == 0 && rule->alibi_mode == CP_ALIBI_STATIC; k++) {
    const cp_onnx_tensor *t = &m->graph->initializers[k];
    if (!slopes[k]) continue;
    double v[1024];
    float f[1024];
    if ((rc = values_f64(v, t)) < 0) break;
    for (uint64_t h = 0; h < t->numel; h++) v[h] /= rule->alibi_factor, f[h] = (float)v[h];
    rc = cp_onnx_edit_replace_initializer(e, t->name, t->elem_type, t->shape, t->ndim, t->elem_type == 11 ? (void *)v : (void *)f);
    rep->n_initializers_changed++;
  }
  if (rc < 0) goto done;
  CP_CHECK_ALLOC_GOTO(rule_json = cp_rule_to_string(rule), m->path);
  if ((rc = cp_onnx_edit_set_meta(e, "ctxpatch.version", cp_version())) < 0 ||
      (rc = cp_onnx_edit_set_meta(e, "ctxpatch.rule", rule_json)) < 0 ||
      (rc = cp_onnx_edit_set_meta(e, "ctxpatch.fidelity", "graph-rewrite")) < 0)
    goto done;
  for (size_t k = 0; p && k < p->n_meta && rc == 0; k++) rc = cp_onnx_edit_set_meta(e, p->meta_keys[k], p->meta_values[k]);
  if (rc == 0 && out_path) rc = cp_onnx_edit_write(e, out_path);
done:
  free(slopes);
  free(rule_json);
  cp_onnx_edit_free(e);
  free(s);
  return rc;
}
