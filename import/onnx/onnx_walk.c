/* The data-flow index and bounded searches the recovery of third-party graphs walks with, and
 * the emitter of a recovered description as the family's Hugging Face tensors and config.json
 * text (import/onnx/onnx_walk.h). */
#include "import/onnx/onnx_walk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

/* ---------------------------------------------------------------- index */

static int edge_cmp(const void *a, const void *b) {
  const cp_ow_edge *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->node > y->node) - (x->node < y->node);
}

/* Index of the first edge named `name` in the sorted e[n], or n. */
static size_t lower(const cp_ow_edge *e, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(e[mid].name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static bool in_sorted(const char *const *v, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(v[mid], name);
    if (!c) return true;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return false;
}

/* The graph inputs that are not initializers (sorted), then which nodes depend on their values,
 * in topological order: Shape and Size depend on shapes only, Constant on nothing. */
static int dyn_init(cp_ow *w) {
  const cp_onnx_graph *g = w->g;
  const char **inits = malloc((g->n_initializers + 1) * sizeof *inits);
  if (!inits) return cp_nomem("%s: indexing the graph", w->path);
  for (size_t i = 0; i < g->n_initializers; i++) inits[i] = g->initializers[i].name;
  if (g->n_initializers) qsort(inits, g->n_initializers, sizeof *inits, str_cmp);
  for (size_t i = 0; i < g->n_inputs; i++)
    if (!in_sorted(inits, g->n_initializers, g->inputs[i].name)) w->inputs[w->n_inputs++] = g->inputs[i].name;
  free(inits);
  if (w->n_inputs) qsort(w->inputs, w->n_inputs, sizeof *w->inputs, str_cmp);
  for (size_t i = 0; i < g->n_nodes; i++) {
    size_t at = g->order[i];
    const cp_onnx_node *n = &g->nodes[at];
    if (cp_ow_is(n, "Shape") || cp_ow_is(n, "Size") || cp_ow_is(n, "Constant")) continue;
    for (size_t k = 0; k < n->n_inputs && !w->dyn[at]; k++) w->dyn[at] = n->inputs[k][0] && cp_ow_dynamic(w, n->inputs[k]);
  }
  return 0;
}

int cp_ow_init(cp_ow *w, const char *path, const cp_onnx_graph *g) {
  memset(w, 0, sizeof *w);
  w->path = path;
  w->g = g;
  if (g->n_nodes > CP_REC_MAX_NODES)
    return cp_error_set(CP_EONNX_RECOVER, "%s: %zu nodes: graphs over %d nodes are not walked", path, g->n_nodes,
                        CP_REC_MAX_NODES);
  size_t n_out = 0, n_in = 0;
  for (size_t i = 0; i < g->n_nodes; i++) n_out += g->nodes[i].n_outputs, n_in += g->nodes[i].n_inputs;
  w->prod = malloc((n_out + 1) * sizeof *w->prod);
  w->cons = malloc((n_in + 1) * sizeof *w->cons);
  w->seen = calloc(g->n_nodes + 1, 1);
  w->dyn = calloc(g->n_nodes + 1, 1);
  w->mark = calloc(g->n_nodes + 1, 1);
  w->inputs = malloc((g->n_inputs + 1) * sizeof *w->inputs);
  if (!w->prod || !w->cons || !w->seen || !w->dyn || !w->mark || !w->inputs) {
    cp_ow_free(w);
    return cp_nomem("%s: indexing the graph", path);
  }
  for (size_t i = 0; i < g->n_nodes; i++) {
    const cp_onnx_node *n = &g->nodes[i];
    for (size_t k = 0; k < n->n_outputs; k++)
      if (n->outputs[k][0]) w->prod[w->n_prod++] = (cp_ow_edge){n->outputs[k], i};
    for (size_t k = 0; k < n->n_inputs; k++)
      if (n->inputs[k][0]) w->cons[w->n_cons++] = (cp_ow_edge){n->inputs[k], i};
  }
  if (w->n_prod) qsort(w->prod, w->n_prod, sizeof *w->prod, edge_cmp);
  if (w->n_cons) qsort(w->cons, w->n_cons, sizeof *w->cons, edge_cmp);
  /* a name several Constants define: keep the last in file order (sorted last among equals) */
  size_t k = 0;
  for (size_t i = 0; i < w->n_prod; i++) {
    if (k && !strcmp(w->prod[k - 1].name, w->prod[i].name)) w->prod[k - 1] = w->prod[i];
    else w->prod[k++] = w->prod[i];
  }
  w->n_prod = k;
  return dyn_init(w);
}

void cp_ow_free(cp_ow *w) {
  free(w->dyn);
  free(w->mark);
  free(w->inputs);
  free(w->prod);
  free(w->cons);
  free(w->seen);
  memset(w, 0, sizeof *w);
}

const cp_onnx_node *cp_ow_producer(const cp_ow *w, const char *name) {
  size_t i = lower(w->prod, w->n_prod, name);
  return i < w->n_prod && !strcmp(w->prod[i].name, name) ? &w->g->nodes[w->prod[i].node] : NULL;
}

size_t cp_ow_consumers(const cp_ow *w, const char *name, const cp_onnx_node **out, size_t max) {
  size_t i = lower(w->cons, w->n_cons, name), n = 0;
  for (; i < w->n_cons && n <= max && !strcmp(w->cons[i].name, name); i++, n++)
    if (n < max) out[n] = &w->g->nodes[w->cons[i].node];
  return n;
}

const cp_onnx_node *cp_ow_consumer(const cp_ow *w, const char *name, const char *op, int slot) {
  size_t i = lower(w->cons, w->n_cons, name), end = i + CP_REC_MAX_VISIT;
  for (; i < w->n_cons && i < end && !strcmp(w->cons[i].name, name); i++) {
    const cp_onnx_node *n = &w->g->nodes[w->cons[i].node];
    if (strcmp(n->op_type, op)) continue;
    if (slot < 0) return n;
    if ((size_t)slot < n->n_inputs && !strcmp(n->inputs[slot], name)) return n;
  }
  return NULL;
}

bool cp_ow_is_output(const cp_ow *w, const char *name) {
  for (size_t i = 0; i < w->g->n_outputs; i++)
    if (!strcmp(w->g->outputs[i].name, name)) return true;
  return false;
}

bool cp_ow_makes_output(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)ctx;
  for (size_t i = 0; i < n->n_outputs; i++)
    if (cp_ow_is_output(w, n->outputs[i])) return true;
  return false;
}

const cp_onnx_tensor *cp_ow_init_of(const cp_ow *w, const char *name) {
  return name[0] ? cp_onnx_graph_initializer(w->g, name) : NULL;
}

static int tensor_scalar(const cp_onnx_tensor *t, double *out) {
  if (t->numel != 1) return 1;
  if (t->has_dtype && cp_dtype_is_float(t->dtype)) {
    float f;
    if (cp_onnx_tensor_f32(&f, t) < 0) return 1;
    *out = f;
    return 0;
  }
  int64_t v;
  if (cp_onnx_tensor_i64(&v, t) < 0) return 1;
  *out = (double)v;
  return 0;
}

int cp_ow_scalar(const cp_ow *w, const char *name, double *out) {
  const cp_onnx_tensor *t = cp_ow_init_of(w, name);
  if (t) return tensor_scalar(t, out);
  const cp_onnx_node *n = cp_ow_producer(w, name);
  if (!n || strcmp(n->op_type, "Constant") || n->domain[0]) return 1;
  for (size_t a = 0; a < n->n_attrs; a++) {
    const cp_onnx_attribute *at = &n->attrs[a];
    if (!strcmp(at->name, "value") && at->t) return tensor_scalar(at->t, out);
    if (!strcmp(at->name, "value_float")) return *out = at->f, 0;
    if (!strcmp(at->name, "value_int")) return *out = (double)at->i, 0;
  }
  return 1;
}

const cp_onnx_tensor *cp_ow_const(const cp_ow *w, const char *name) {
  for (int step = 0; step < 4; step++) {
    const cp_onnx_tensor *t = cp_ow_init_of(w, name);
    if (t) return t;
    const cp_onnx_node *p = cp_ow_producer(w, name);
    if (!p || p->domain[0] || p->n_inputs != 1 || (strcmp(p->op_type, "Cast") && strcmp(p->op_type, "Identity")))
      return NULL;
    const cp_onnx_attribute *to = cp_ow_is(p, "Cast") ? cp_onnx_node_attr(p, "to") : NULL;
    if (cp_ow_is(p, "Cast") && (!to || to->i != 1)) return NULL; /* to float only: others change the values */
    name = p->inputs[0];
  }
  return NULL;
}

const cp_onnx_tensor *cp_ow_weight(const cp_ow *w, const cp_onnx_node *n, size_t slot, int ndim) {
  if (slot >= n->n_inputs) return NULL;
  const cp_onnx_tensor *t = cp_ow_const(w, n->inputs[slot]);
  if (!t || t->ndim != ndim || !t->has_dtype || !cp_dtype_is_float(t->dtype)) return NULL;
  return t;
}

const char *cp_ow_label(const cp_ow *w, const cp_onnx_node *n, char buf[96]) {
  if (n->name[0]) snprintf(buf, 96, "%.90s", n->name);
  else snprintf(buf, 96, "%.40s #%zu", n->op_type, (size_t)(n - w->g->nodes));
  return buf;
}

int cp_ow_bad(const cp_ow *w, const cp_onnx_node *n, const char *why) {
  char b[96];
  return cp_error_set(CP_EONNX_RECOVER, "%s: node '%s' (%s): %s", w->path, cp_ow_label(w, n, b), n->op_type, why);
}

/* ---------------------------------------------------------------- accounting */

void cp_ow_explain(const cp_ow *w, const cp_onnx_node *n) {
  if (n) w->mark[n - w->g->nodes] = 1;
}

bool cp_ow_dynamic(const cp_ow *w, const char *name) {
  size_t i = lower(w->prod, w->n_prod, name);
  if (i < w->n_prod && !strcmp(w->prod[i].name, name)) return w->dyn[w->prod[i].node];
  return in_sorted(w->inputs, w->n_inputs, name);
}

bool cp_ow_layout(const cp_ow *w, const cp_onnx_node *n) {
  static const char *const ops[] = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity",
                                    "Dropout", "Flatten",   "Split",   "Concat"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    if (cp_ow_is(n, ops[i])) return true;
  if (cp_ow_is(n, "Cast")) { /* to float: a Cast to an integer or a half type changes the values */
    const cp_onnx_attribute *to = cp_onnx_node_attr(n, "to");
    return to && to->i == 1;
  }
  /* the past cache of one layer taken out of a graph input (onnxruntime's gpt2_past.onnx) */
  return cp_ow_is(n, "Gather") && in_sorted(w->inputs, w->n_inputs, cp_ow_in(n, 0)) &&
         !cp_ow_dynamic(w, cp_ow_in(n, 1));
}

/* ---------------------------------------------------------------- searches */

typedef struct {
  size_t *q;
  size_t head, tail, cap;
} queue;

static void push_node(const cp_ow *w, queue *q, size_t node) {
  if (w->seen[node] || q->tail >= q->cap) return;
  w->seen[node] = 1;
  q->q[q->tail++] = node;
}

static void push_consumers(const cp_ow *w, queue *q, const char *name) {
  for (size_t i = lower(w->cons, w->n_cons, name); i < w->n_cons && q->tail < q->cap && !strcmp(w->cons[i].name, name);
       i++)
    push_node(w, q, w->cons[i].node);
}

static const cp_onnx_node *search(const cp_ow *w, const char *from, const cp_onnx_node *start, bool forward,
                                  cp_ow_pred stop, cp_ow_pred visit, void *ctx) {
  size_t buf[CP_REC_MAX_VISIT];
  queue q = {buf, 0, 0, CP_REC_MAX_VISIT};
  const cp_onnx_node *hit = NULL;
  if (forward) push_consumers(w, &q, from);
  for (size_t k = 0; !forward && k < start->n_inputs; k++) {
    const cp_onnx_node *p = start->inputs[k][0] ? cp_ow_producer(w, start->inputs[k]) : NULL;
    if (p) push_node(w, &q, (size_t)(p - w->g->nodes));
  }
  while (q.head < q.tail && !hit) {
    const cp_onnx_node *n = &w->g->nodes[q.q[q.head++]];
    if (stop(w, n, ctx)) {
      hit = n;
      break;
    }
    if (visit && visit(w, n, ctx)) continue; /* visited, not passed */
    if (forward) {
      for (size_t k = 0; k < n->n_outputs; k++)
        if (n->outputs[k][0]) push_consumers(w, &q, n->outputs[k]);
    } else {
      for (size_t k = 0; k < n->n_inputs; k++) {
        const cp_onnx_node *p = n->inputs[k][0] ? cp_ow_producer(w, n->inputs[k]) : NULL;
        if (p) push_node(w, &q, (size_t)(p - w->g->nodes));
      }
    }
  }
  for (size_t i = 0; i < q.tail; i++) w->seen[q.q[i]] = 0; /* every node marked is queued: O(visited) */
  return hit;
}

const cp_onnx_node *cp_ow_forward(const cp_ow *w, const char *from, cp_ow_pred stop, cp_ow_pred visit, void *ctx) {
  return search(w, from, NULL, true, stop, visit, ctx);
}

const cp_onnx_node *cp_ow_backward(const cp_ow *w, const cp_onnx_node *n, cp_ow_pred stop, cp_ow_pred visit,
                                   void *ctx) {
  return search(w, NULL, n, false, stop, visit, ctx);
}

/* ---------------------------------------------------------------- SwiGLU */

/* Whether binary node n takes `a` as one of its inputs. */
static bool takes(const cp_onnx_node *n, const char *a) {
  return (n->n_inputs > 0 && !strcmp(n->inputs[0], a)) || (n->n_inputs > 1 && !strcmp(n->inputs[1], a));
}

int cp_rec_swiglu(cp_onnx_import *im, const cp_ow *w, cp_rec *r, const char *y, const cp_onnx_node *at,
                  cp_rec_layer *l, const char **o) {
  const cp_onnx_node *c[16], *gate = NULL, *up = NULL;
  size_t n = cp_ow_consumers(w, y, c, 16);
  for (size_t i = 0; i < n && i < 16; i++) {
    if (strcmp(c[i]->op_type, "MatMul") || c[i]->domain[0] || strcmp(c[i]->inputs[0], y) || !cp_ow_weight(w, c[i], 1, 2))
      continue;
    if (cp_ow_consumer(w, c[i]->outputs[0], "Sigmoid", 0)) gate = c[i];
    else up = c[i];
  }
  if (!gate || !up) return cp_ow_bad(w, at, "the MLP is not a SiLU-gated pair of MatMuls (gate with Sigmoid, up)");
  const cp_onnx_node *sg = cp_ow_consumer(w, gate->outputs[0], "Sigmoid", 0);
  const cp_onnx_node *silu = cp_ow_consumer(w, sg->outputs[0], "Mul", -1);
  if (!silu || !takes(silu, gate->outputs[0])) return cp_ow_bad(w, sg, "not x * sigmoid(x)");
  const cp_onnx_node *mul = cp_ow_consumer(w, silu->outputs[0], "Mul", -1);
  if (!mul || !takes(mul, up->outputs[0])) return cp_ow_bad(w, silu, "the SiLU does not multiply the up projection");
  l->gate.w = cp_ow_weight(w, gate, 1, 2);
  l->up.w = cp_ow_weight(w, up, 1, 2);
  const cp_onnx_node *dn = cp_ow_consumer(w, mul->outputs[0], "MatMul", 0);
  if (!dn || dn->domain[0] || !(l->down.w = cp_ow_weight(w, dn, 1, 2)))
    return cp_ow_bad_on(w, mul, "its output feeds no MatMul with a weight (down_proj)", mul->outputs[0], NULL);
  l->down.out_in = false;
  *o = dn->outputs[0];
  const cp_onnx_node *ex[] = {gate, up, sg, silu, mul, dn};
  for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) cp_ow_explain(w, ex[i]);
  if (r->n_layers == 1) {
    char b[96];
    r->act = "silu";
    r->d_ff = l->up.w->shape[1];
    int rc = cp_oi_prov(im, "hidden_act", "Sigmoid '%s' times its input", cp_ow_label(w, sg, b));
    if (!rc) rc = cp_oi_prov(im, "intermediate_size", "columns of up weight '%s'", l->up.w->name);
    return rc;
  }
  return 0;
}

/* ---------------------------------------------------------------- emitter */

cp_rec_layer *cp_rec_push(cp_rec *r, const char *path) {
  if (r->n_layers >= CP_REC_MAX_LAYERS) {
    cp_error_set(CP_EONNX_RECOVER, "%s: more than %d layers recovered", path, CP_REC_MAX_LAYERS);
    return NULL;
  }
  if (CP_ARRAY_RESERVE(r->layers, r->cap_layers, (size_t)r->n_layers + 1, path)) return NULL;
  cp_rec_layer *l = &r->layers[r->n_layers++];
  memset(l, 0, sizeof *l);
  return l;
}

/* Checks t's shape against `a` x `b` (b < 0: a vector of a). */
static int check_shape(const cp_onnx_import *im, const cp_onnx_tensor *t /* [a, b] or [a] */, int64_t a, int64_t b,
                       const char *role,
                       int layer) {
  bool ok = b < 0 ? t->ndim == 1 && t->shape[0] == a : t->ndim == 2 && t->shape[0] == a && t->shape[1] == b;
  if (ok) return 0;
  char want[64], got[64];
  if (b < 0) snprintf(want, sizeof want, "[%lld]", (long long)a);
  else snprintf(want, sizeof want, "[%lld, %lld]", (long long)a, (long long)b);
  if (t->ndim == 1) snprintf(got, sizeof got, "[%lld]", (long long)t->shape[0]);
  else if (t->ndim == 2) snprintf(got, sizeof got, "[%lld, %lld]", (long long)t->shape[0], (long long)t->shape[1]);
  else snprintf(got, sizeof got, "%d dims", t->ndim);
  return cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' is %s; as %s of layer %d it should be %s", im->path,
                      t->name, got, role, layer, want);
}

static int zeros(cp_onnx_import *im, const char *name, int64_t n) {
  float *z = calloc((size_t)n + 1, sizeof *z);
  CP_CHECK_ALLOC(z, im->path);
  return cp_oi_add(im, name, z, 1, n, 0);
}

/* A linear layer `lin` of in -> out as HF tensor `base`.weight in [in, out] (conv1d) or [out, in],
 * and its bias (zeros when the graph has none and `bias` says the family needs one). */
static int emit_lin(cp_onnx_import *im, const char *base, const cp_rec_lin *lin, int64_t in, int64_t out,
                    bool conv1d, bool bias, int layer) {
  char n[CP_TENSOR_NAME_MAX];
  int rc = lin->out_in ? check_shape(im, lin->w, out, in, base, layer) : check_shape(im, lin->w, in, out, base, layer);
  if (rc) return rc;
  snprintf(n, sizeof n, "%s.weight", base);
  if ((rc = cp_oi_take(im, n, lin->w, conv1d == lin->out_in))) return rc;
  snprintf(n, sizeof n, "%s.bias", base);
  if (lin->b) {
    if ((rc = check_shape(im, lin->b, out, -1, base, layer))) return rc;
    return bias ? cp_oi_take(im, n, lin->b, false) : cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s': a bias "
                                                                  "on %s, which the family has not", im->path,
                                                                  lin->b->name, base);
  }
  return bias ? zeros(im, n, out) : 0;
}

static int emit_norm(cp_onnx_import *im, const char *base, const cp_rec_norm *nm, int64_t d, bool bias, int layer) {
  char n[CP_TENSOR_NAME_MAX];
  int rc = check_shape(im, nm->w, d, -1, base, layer);
  if (rc) return rc;
  snprintf(n, sizeof n, "%s.weight", base);
  if ((rc = cp_oi_take(im, n, nm->w, false))) return rc;
  if (!bias) return 0;
  snprintf(n, sizeof n, "%s.bias", base);
  if (!nm->b) return zeros(im, n, d);
  if ((rc = check_shape(im, nm->b, d, -1, base, layer))) return rc;
  return cp_oi_take(im, n, nm->b, false);
}

/* Whether the head holds the embedding's values (a graph that spelled a tied head out). */
static int head_is_embed(bool *tied, const cp_onnx_import *im, const cp_rec *r) {
  float *e = NULL, *h = NULL;
  *tied = false;
  if (r->head.w == r->embed) return *tied = true, 0;
  if (r->head.w->numel != r->embed->numel) return 0;
  int rc = cp_oi_read_f32(&e, im, r->embed);
  if (rc == 0) rc = cp_oi_read_f32(&h, im, r->head.w);
  if (rc == 0) {
    int64_t V = r->vocab, D = r->d_model;
    *tied = true;
    for (int64_t v = 0; v < V && *tied; v++)
      for (int64_t d = 0; d < D; d++) {
        float hv = r->head.out_in ? h[v * D + d] : h[d * V + v];
        if (memcmp(&hv, &e[v * D + d], sizeof hv)) {
          *tied = false;
          break;
        }
      }
  }
  free(e);
  free(h);
  return rc;
}

static int emit_gpt2(cp_onnx_import *im, const cp_rec *r) {
  char n[CP_TENSOR_NAME_MAX];
  int64_t D = r->d_model, F = r->d_ff;
  int rc = check_shape(im, r->embed, r->vocab, D, "transformer.wte", -1);
  if (!rc) rc = cp_oi_take(im, "transformer.wte.weight", r->embed, false);
  if (!rc) rc = check_shape(im, r->pos_embed, r->train_len, D, "transformer.wpe", -1);
  if (!rc) rc = cp_oi_take(im, "transformer.wpe.weight", r->pos_embed, false);
  for (int l = 0; l < r->n_layers && !rc; l++) {
    const cp_rec_layer *y = &r->layers[l];
    snprintf(n, sizeof n, "transformer.h.%d.ln_1", l);
    if ((rc = emit_norm(im, n, &y->attn_norm, D, true, l))) break;
    snprintf(n, sizeof n, "transformer.h.%d.attn.c_attn", l);
    if ((rc = emit_lin(im, n, &y->qkv, D, 3 * D, true, true, l))) break;
    snprintf(n, sizeof n, "transformer.h.%d.attn.c_proj", l);
    if ((rc = emit_lin(im, n, &y->o, D, D, true, true, l))) break;
    snprintf(n, sizeof n, "transformer.h.%d.ln_2", l);
    if ((rc = emit_norm(im, n, &y->ffn_norm, D, true, l))) break;
    snprintf(n, sizeof n, "transformer.h.%d.mlp.c_fc", l);
    if ((rc = emit_lin(im, n, &y->up, D, F, true, true, l))) break;
    snprintf(n, sizeof n, "transformer.h.%d.mlp.c_proj", l);
    rc = emit_lin(im, n, &y->down, F, D, true, true, l);
  }
  if (!rc) rc = emit_norm(im, "transformer.ln_f", &r->final_norm, D, true, r->n_layers);
  return rc;
}

static int emit_llama(cp_onnx_import *im, const cp_rec *r) {
  char n[CP_TENSOR_NAME_MAX];
  int64_t D = r->d_model, F = r->d_ff, Q = r->n_heads * r->d_head, KV = r->n_kv_heads * r->d_head;
  int rc = check_shape(im, r->embed, r->vocab, D, "model.embed_tokens", -1);
  if (!rc) rc = cp_oi_take(im, "model.embed_tokens.weight", r->embed, false);
  for (int l = 0; l < r->n_layers && !rc; l++) {
    const cp_rec_layer *y = &r->layers[l];
    struct { const char *name; const cp_rec_lin *lin; int64_t in, out; } lins[] = {
        {"self_attn.q_proj", &y->q, D, Q}, {"self_attn.k_proj", &y->k, D, KV}, {"self_attn.v_proj", &y->v, D, KV},
        {"self_attn.o_proj", &y->o, Q, D}, {"mlp.gate_proj", &y->gate, D, F}, {"mlp.up_proj", &y->up, D, F},
        {"mlp.down_proj", &y->down, F, D}};
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm", l);
    if ((rc = emit_norm(im, n, &y->attn_norm, D, false, l))) break;
    snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm", l);
    if ((rc = emit_norm(im, n, &y->ffn_norm, D, false, l))) break;
    for (size_t k = 0; k < sizeof lins / sizeof *lins && !rc; k++) {
      snprintf(n, sizeof n, "model.layers.%d.%s", l, lins[k].name);
      rc = emit_lin(im, n, lins[k].lin, lins[k].in, lins[k].out, false, false, l);
    }
  }
  if (!rc) rc = emit_norm(im, "model.norm", &r->final_norm, D, false, r->n_layers);
  return rc;
}

int cp_rec_emit(cp_onnx_import *im, const cp_rec *r, const char *naming) {
  const struct { const char *what; int64_t v; } sizes[] = {
      {"vocab_size", r->vocab}, {"d_model", r->d_model}, {"heads", r->n_heads}, {"kv heads", r->n_kv_heads},
      {"d_head", r->d_head}, {"d_ff", r->d_ff}, {"positions", r->train_len}};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) /* sizes from shapes: bound them before any product */
    if (sizes[k].v < 1 || sizes[k].v > ((int64_t)1 << 30))
      return cp_error_set(CP_EONNX_RECOVER, "%s: recovered %s %lld is outside [1, 2^30]", im->path, sizes[k].what,
                          (long long)sizes[k].v);
  bool tied = r->head.w == NULL;
  int rc = tied ? 0 : head_is_embed(&tied, im, r);
  if (rc) return rc;
  if (r->head.w) cp_oi_use(im, r->head.w);
  rc = r->family == CP_FAMILY_GPT2 ? emit_gpt2(im, r) : emit_llama(im, r);
  if (!rc && !tied) {
    rc = r->head.out_in ? check_shape(im, r->head.w, r->vocab, r->d_model, "lm_head", r->n_layers)
                        : check_shape(im, r->head.w, r->d_model, r->vocab, "lm_head", r->n_layers);
    if (!rc) rc = cp_oi_take(im, "lm_head.weight", r->head.w, !r->head.out_in);
  }
  if (rc) return rc;
  cp_strbuf b = {0};
  if (r->family == CP_FAMILY_GPT2)
    cp_strbuf_printf(&b, "{\"model_type\": \"gpt2\", \"vocab_size\": %lld, \"n_embd\": %lld, \"n_layer\": %d, "
                     "\"n_head\": %lld, \"n_positions\": %lld, \"n_inner\": %lld, \"layer_norm_epsilon\": %.9g, "
                     "\"activation_function\": \"%s\", \"tie_word_embeddings\": %s}",
                     (long long)r->vocab, (long long)r->d_model, r->n_layers, (long long)r->n_heads,
                     (long long)r->train_len, (long long)r->d_ff, r->eps, r->act, tied ? "true" : "false");
  else
    cp_strbuf_printf(&b, "{\"model_type\": \"llama\", \"vocab_size\": %lld, \"hidden_size\": %lld, "
                     "\"num_hidden_layers\": %d, \"num_attention_heads\": %lld, \"num_key_value_heads\": %lld, "
                     "\"head_dim\": %lld, \"intermediate_size\": %lld, \"rms_norm_eps\": %.9g, \"rope_theta\": %.9g, "
                     "\"max_position_embeddings\": %lld, \"hidden_act\": \"%s\", \"tie_word_embeddings\": %s}",
                     (long long)r->vocab, (long long)r->d_model, r->n_layers, (long long)r->n_heads,
                     (long long)r->n_kv_heads, (long long)r->d_head, (long long)r->d_ff, r->eps, r->rope_theta,
                     (long long)r->train_len, r->act, tied ? "true" : "false");
  if (b.oom || !b.s) {
    cp_strbuf_free(&b);
    return cp_nomem("%s", im->path);
  }
  im->config_text = b.s;
  im->config_len = strlen(b.s);
  im->naming = naming;
  im->config_source = strdup(!strcmp(naming, "pattern") ? "recovered from the graph's pattern"
                                                        : "recovered from the graph's contrib ops");
  CP_CHECK_ALLOC(im->config_source, im->path);
  return cp_oi_prov(im, "tie_word_embeddings", "%s", r->head.w ? (tied ? "the head's values equal the embedding's"
                                                                     : "the head differs from the embedding")
                                                               : "no head in the graph (its output is the final "
                                                                 "norm's): tied to the embedding, as the family is");
}
