/* The attention sites of an ONNX graph for the in-place rewriter (include/ctxpatch/export/
 * onnx_rewrite.h, cp_onnx_find_sites) and the facts about them it needs: a sorted index of the
 * main graph's names, the q.k MatMul upstream of a Softmax, the logits' type, a contrib node's
 * scale, rotary embeddings and ALiBi slopes constants (export/onnx/rewrite/onnx_sites.h).
 * The search is linear in the graph (issue 33 item 12: 24,000 sites took 155 s): every name
 * lookup goes through a sorted index, the MatMul search is memoised per (node, steps left), the
 * logits' type per MatMul, and the site limit is checked as sites are found. */
#include "export/onnx/rewrite/onnx_sites.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"

#define WALK_STEPS 8

static const char *q(char buf[128], const char *s) { return cp_quote(buf, 128, s, strlen(s)); }

/* "node 'NAME' (OP)" or "node INDEX (OP)" in buf[300]. */
const char *cp_onnx_site_label(char buf[300], const cp_onnx_node *n, size_t index) {
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
  name_ix *vi_typed, *in_typed, *vi_any, *in_any; /* value_info / graph inputs: with a type; any (first of a name) */
  size_t n_vi_typed, n_in_typed, n_vi_any, n_in_any;
  name_ix *use; /* (input name, node) of every node input, for the consumers of a value */
  size_t n_use;
  size_t *mm_memo;    /* [n_nodes * (WALK_STEPS + 1)] find_matmul's answer + 1 (0: not yet; SIZE_MAX: none) */
  int32_t *type_memo; /* [n_nodes] logits_type's answer from a MatMul (0: not yet) */
  uint64_t *work;     /* node visits, counted for tests (cp_onnx_find_sites_counted) */
} gix;

static int cmp_name_ix(const void *a, const void *b) {
  const name_ix *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* Sorts v[0..*n) by (name, idx) and keeps the last (else the first) idx of each name. */
static void sort_keep(name_ix *v, size_t *n, bool last) {
  if (*n) qsort(v, *n, sizeof *v, cmp_name_ix);
  size_t k = 0;
  for (size_t i = 0; i < *n; i++) {
    if (k && !strcmp(v[k - 1].name, v[i].name)) {
      if (last) v[k - 1] = v[i];
    } else v[k++] = v[i];
  }
  *n = k;
}

static void sort_last(name_ix *v, size_t *n) { sort_keep(v, n, true); }

/* The values v[0..n) indexed by name (the first of each), all of them or those with a type. */
static name_ix *value_index(size_t *count, const cp_onnx_value *v, size_t n, bool typed) {
  name_ix *x = malloc((n + 1) * sizeof *x);
  *count = 0;
  if (!x) return NULL;
  for (size_t k = 0; k < n; k++)
    if (!typed || v[k].elem_type) x[(*count)++] = (name_ix){v[k].name, k};
  sort_keep(x, count, false);
  return x;
}

static int gix_build(gix *x, const cp_onnx_graph *g, const char *path) {
  memset(x, 0, sizeof *x);
  x->g = g;
  size_t n = 0, n_in = 0;
  for (size_t k = 0; k < g->n_nodes; k++) n += g->nodes[k].n_outputs, n_in += g->nodes[k].n_inputs;
  x->out = malloc((n + 1) * sizeof *x->out), x->init = malloc((g->n_initializers + 1) * sizeof *x->init);
  x->use = malloc((n_in + 1) * sizeof *x->use);
  x->mm_memo = calloc(g->n_nodes * (WALK_STEPS + 1) + 1, sizeof *x->mm_memo); /* n_nodes fits the reader's memory */
  x->type_memo = calloc(g->n_nodes + 1, sizeof *x->type_memo);
  x->vi_typed = value_index(&x->n_vi_typed, g->value_info, g->n_value_info, true);
  x->vi_any = value_index(&x->n_vi_any, g->value_info, g->n_value_info, false);
  x->in_typed = value_index(&x->n_in_typed, g->inputs, g->n_inputs, true);
  x->in_any = value_index(&x->n_in_any, g->inputs, g->n_inputs, false);
  if (!x->out || !x->init || !x->use || !x->mm_memo || !x->type_memo || !x->vi_typed || !x->vi_any || !x->in_typed ||
      !x->in_any)
    return cp_nomem("%s", path);
  for (size_t k = 0; k < g->n_nodes; k++) {
    for (size_t o = 0; o < g->nodes[k].n_outputs; o++)
      if (g->nodes[k].outputs[o][0]) x->out[x->n_out++] = (name_ix){g->nodes[k].outputs[o], k};
    for (size_t i = 0; i < g->nodes[k].n_inputs; i++)
      if (g->nodes[k].inputs[i][0]) x->use[x->n_use++] = (name_ix){g->nodes[k].inputs[i], k};
  }
  for (size_t k = 0; k < g->n_initializers; k++) x->init[x->n_init++] = (name_ix){g->initializers[k].name, k};
  sort_last(x->out, &x->n_out);
  sort_last(x->init, &x->n_init);
  if (x->n_use) qsort(x->use, x->n_use, sizeof *x->use, cmp_name_ix); /* every pair kept: node order per name */
  return 0;
}

static void gix_free(gix *x) {
  free(x->out), free(x->init), free(x->use), free(x->mm_memo), free(x->type_memo);
  free(x->vi_typed), free(x->vi_any), free(x->in_typed), free(x->in_any);
}

static void visit(const gix *x) {
  if (x->work) (*x->work)++;
}

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

/* The first entry of `name` in the (name, idx)-sorted v[0..n) (duplicates kept), or n. */
static size_t lower_bound(const name_ix *v, size_t n, const char *name) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(v[mid].name, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The element type a typed value_info (else, with `inputs`, a typed graph input) declares for
 * `name`, or 0. */
static int32_t declared_type(const gix *x, const char *name, bool inputs) {
  size_t k = lookup(x->vi_typed, x->n_vi_typed, name);
  if (k != SIZE_MAX) return x->g->value_info[k].elem_type;
  k = inputs ? lookup(x->in_typed, x->n_in_typed, name) : SIZE_MAX;
  return k != SIZE_MAX ? x->g->inputs[k].elem_type : 0;
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

/* The q.k MatMul upstream of `name` through elementwise ops (depth-first, bounded), or SIZE_MAX.
 * The answer depends only on the producer and the steps left: kept per (node, steps), so each
 * node's inputs are read at most WALK_STEPS times over every search of the graph. */
static size_t find_matmul(const gix *x, const char *name, int steps) {
  const cp_onnx_graph *g = x->g;
  size_t p = producer(x, name);
  if (p == SIZE_MAX || steps <= 0) return SIZE_MAX;
  size_t *memo = &x->mm_memo[p * (WALK_STEPS + 1) + (size_t)steps];
  if (*memo) return *memo == SIZE_MAX ? SIZE_MAX : *memo - 1; /* 0: not yet; SIZE_MAX: none */
  visit(x);
  const cp_onnx_node *n = &g->nodes[p];
  size_t r = SIZE_MAX;
  if (is_matmul(n)) r = p;
  else if (passes_logits(n))
    for (size_t i = 0; i < n->n_inputs && r == SIZE_MAX; i++) r = find_matmul(x, n->inputs[i], steps - 1);
  *memo = r == SIZE_MAX ? SIZE_MAX : r + 1;
  return r;
}

/* The type the MatMul's operands tell: an initializer operand, else a Div / Mul consumer of its
 * output (the first in file order) with an initializer or Constant operand (the logits share the
 * type of a scale constant), else float. */
static int32_t matmul_type(const gix *x, size_t matmul) {
  const cp_onnx_graph *g = x->g;
  const cp_onnx_node *mm = &g->nodes[matmul];
  for (size_t i = 0; i < mm->n_inputs; i++) {
    const cp_onnx_tensor *t = init_of(x, mm->inputs[i]);
    if (t) return t->elem_type;
  }
  if (!mm->n_outputs || !mm->outputs[0][0]) return 1;
  for (size_t u = lower_bound(x->use, x->n_use, mm->outputs[0]); u < x->n_use; u++) {
    if (strcmp(x->use[u].name, mm->outputs[0])) break;
    visit(x);
    const cp_onnx_node *n = &g->nodes[x->use[u].idx];
    if (strcmp(n->op_type, "Div") && strcmp(n->op_type, "Mul")) continue;
    for (size_t i = 0; i < n->n_inputs && i < 2; i++) { /* binary ops: a third input means nothing */
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

/* The ONNX type of value `name`: value_info, else what its q.k MatMul tells (kept per MatMul:
 * many Softmax sites may share one). */
static int32_t logits_type(const gix *x, const char *name, size_t matmul) {
  int32_t t = declared_type(x, name, false);
  if (t) return t;
  if (!x->type_memo[matmul]) x->type_memo[matmul] = matmul_type(x, matmul);
  return x->type_memo[matmul];
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

int64_t cp_onnx_attr_i(const cp_onnx_node *n, const char *name, int64_t dflt) {
  const cp_onnx_attribute *a = cp_onnx_node_attr(n, name);
  return a && a->type == CP_ONNX_ATYPE_INT ? a->i : dflt;
}

/* The scale a contrib attention node uses now: its attribute, else 1/sqrt(head size); 0 when
 * the head size cannot be told. */
static float contrib_scale(const gix *x, const cp_onnx_node *n) {
  const cp_onnx_attribute *s = cp_onnx_node_attr(n, "scale");
  if (s && s->type == CP_ONNX_ATYPE_FLOAT && s->f != 0.0f) return s->f;
  int64_t heads = cp_onnx_attr_i(n, "num_heads", 0), width = 0, parts = 1;
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
      int64_t kv = cp_onnx_attr_i(n, "kv_num_heads", 0);
      if (kv <= 0 || width % (heads + 2 * kv)) return 0;
      return (float)(1.0 / sqrt((double)(width / (heads + 2 * kv))));
    }
  }
  if (width <= 0 || width % heads) return 0;
  return (float)(1.0 / sqrt((double)(width / heads)));
}

/* The ONNX element type of the query feeding a contrib node: its value_info or graph input,
 * else through ops that keep it (RotaryEmbedding, Add, Identity, Reshape, Transpose) up to a
 * Cast (its `to`) or a MatMul with an initializer weight (the weight's type); float when none
 * tells. */
static int32_t query_type(const gix *x, const char *name, int steps) {
  const cp_onnx_graph *g = x->g;
  for (; steps > 0 && name[0]; steps--) {
    visit(x);
    int32_t declared = declared_type(x, name, true);
    if (declared) return declared;
    size_t p = producer(x, name);
    if (p == SIZE_MAX) break;
    const cp_onnx_node *n = &g->nodes[p];
    if (!strcmp(n->op_type, "Cast")) return (int32_t)cp_onnx_attr_i(n, "to", 1);
    if (is_matmul(n) && n->n_inputs >= 2) {
      const cp_onnx_tensor *w = init_of(x, n->inputs[1]);
      return w ? w->elem_type : 1;
    }
    static const char *const keep[] = {"RotaryEmbedding", "Add", "Identity", "Reshape", "Transpose"};
    bool passes = false;
    for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) passes |= !strcmp(n->op_type, keep[k]);
    if (!passes || !n->n_inputs) break;
    const cp_onnx_tensor *t = n->n_inputs > 1 && !strcmp(n->op_type, "Add") ? init_of(x, n->inputs[1]) : NULL;
    if (t) return t->elem_type;
    name = n->inputs[0];
  }
  return 1;
}

/* The value a projection reads: up from `name` through a MatMul / FusedMatMul / Gemm with an
 * initializer weight (to its input 0) and through ops that keep a row's identity (Add, Mul, Cast,
 * Identity, Reshape, Transpose, RotaryEmbedding, Squeeze, Unsqueeze: to their one non-initializer
 * input), bounded; the first value it cannot go past. */
static const char *source_of(const gix *x, const char *name, int steps) {
  static const char *const keep[] = {"Add", "Mul", "Cast", "Identity", "Reshape", "Transpose", "RotaryEmbedding",
                                     "Squeeze", "Unsqueeze"};
  for (; steps > 0; steps--) {
    size_t p = producer(x, name);
    if (p == SIZE_MAX) return name;
    const cp_onnx_node *n = &x->g->nodes[p];
    bool mm = (is_matmul(n) || !strcmp(n->op_type, "Gemm")) && n->n_inputs >= 2 && init_of(x, n->inputs[1]);
    bool passes = false;
    for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) passes |= !strcmp(n->op_type, keep[k]);
    if ((!mm && !passes) || n->n_inputs > 3) return name; /* those ops take at most 3 inputs */
    const char *next = NULL;
    for (size_t i = 0; i < (mm ? 1 : n->n_inputs); i++) {
      if (!n->inputs[i][0] || init_of(x, n->inputs[i])) continue;
      if (next) return name; /* two live inputs: not a projection's path */
      next = n->inputs[i];
    }
    if (!next) return name;
    name = next;
  }
  return name;
}

/* The declared rank of value `name` (a graph input or a value_info), -1 when not declared. */
static int value_rank(const gix *x, const char *name) {
  size_t k = lookup(x->in_any, x->n_in_any, name);
  if (k != SIZE_MAX) return x->g->inputs[k].ndim;
  k = lookup(x->vi_any, x->n_vi_any, name);
  return k != SIZE_MAX ? x->g->value_info[k].ndim : -1;
}

/* The contrib site's facts besides its scale (cp_onnx_site). */
static void contrib_facts(cp_onnx_site *s, const gix *x, const cp_onnx_node *n) {
  bool attention = !strcmp(n->op_type, "Attention");
  s->self_attention = attention || n->n_inputs < 2 || !n->inputs[1][0] ||
                      !strcmp(source_of(x, n->inputs[0], WALK_STEPS), source_of(x, n->inputs[1], WALK_STEPS));
  if (attention) {
    const cp_onnx_tensor *w = n->n_inputs > 1 ? init_of(x, n->inputs[1]) : NULL;
    s->elem_type = w ? w->elem_type : 1;
    s->mask_rank = n->n_inputs > 3 && n->inputs[3][0] ? value_rank(x, n->inputs[3]) : 0;
  } else s->elem_type = query_type(x, n->inputs[0], WALK_STEPS);
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
      return cp_error_set(CP_EONNX_SITE, "%s: %s: a training graph (forward and backward); it does not run "
                          "as an inference model, so it is not rewritten", m->path, cp_onnx_site_label(lb, n, k));
  }
  return 0;
}

int cp_onnx_find_sites_counted(cp_onnx_site **out, size_t *n_out, const cp_onnx_model *m, uint64_t *work) {
  *out = NULL, *n_out = 0;
  const cp_onnx_graph *g = m->graph;
  int rc = refuse_training(m);
  if (rc < 0) return rc;
  gix ix, *x = &ix;
  cp_onnx_site *s = NULL;
  size_t n = 0;
  char lb[300];
  if ((rc = gix_build(x, g, m->path)) < 0) goto done;
  x->work = work;
  CP_CHECK_ALLOC_GOTO(s = calloc(CP_RULE_MAX_LAYERS + 1, sizeof *s), m->path);
  for (size_t o = 0; o < g->n_nodes; o++) {
    size_t k = g->order[o];
    const cp_onnx_node *nd = &g->nodes[k];
    visit(x);
    bool contrib = is_contrib_attention(nd), softmax = is_default(nd) && !strcmp(nd->op_type, "Softmax") && nd->n_inputs == 1;
    size_t mm = softmax ? find_matmul(x, nd->inputs[0], WALK_STEPS) : SIZE_MAX;
    if (!contrib && mm == SIZE_MAX) continue; /* not an attention site */
    /* The limit as sites are found: the work per site is bounded, the count is not. */
    if (n == CP_RULE_MAX_LAYERS) {
      rc = cp_error_set(CP_EONNX_SITE, "%s: more than %d attention sites (at most %d layers): %s is one more", m->path,
                        CP_RULE_MAX_LAYERS, CP_RULE_MAX_LAYERS, cp_onnx_site_label(lb, nd, k));
      goto done;
    }
    if (contrib) {
      s[n].kind = CP_ONNX_SITE_CONTRIB, s[n].node = k, s[n].scale = contrib_scale(x, nd);
      contrib_facts(&s[n], x, nd);
    } else {
      s[n].kind = CP_ONNX_SITE_SOFTMAX, s[n].node = k, s[n].matmul = mm;
      s[n].elem_type = logits_type(x, nd->inputs[0], mm);
    }
    n++;
  }
  if (n == 0)
    rc = cp_error_set(CP_EONNX_SITE, "%s: no attention site found (no Softmax fed by a MatMul through elementwise "
                      "ops, no com.microsoft Attention / MultiHeadAttention / GroupQueryAttention)", m->path);
done:
  gix_free(x);
  if (rc < 0) free(s);
  else *out = s, *n_out = n;
  return rc;
}

int cp_onnx_find_sites(cp_onnx_site **out, size_t *n_out, const cp_onnx_model *m) {
  return cp_onnx_find_sites_counted(out, n_out, m, NULL);
}

bool cp_onnx_graph_rotary(const cp_onnx_graph *g, size_t *at) {
  for (size_t k = 0; k < g->n_nodes; k++) {
    const cp_onnx_node *n = &g->nodes[k];
    bool trig = is_default(n) && (!strcmp(n->op_type, "Sin") || !strcmp(n->op_type, "Cos")); /* RoPE built from ops */
    if (trig || strstr(n->op_type, "Rotary") || (!strcmp(n->op_type, "GroupQueryAttention") && cp_onnx_attr_i(n, "do_rotary", 0))) {
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
int cp_onnx_values_f64(double *out /* [t->numel] */, const cp_onnx_tensor *t) {
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
  if (cp_onnx_values_f64(v, t) < 0) return false;
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
int cp_onnx_find_slopes(bool *found /* [g->n_initializers] */, const cp_onnx_graph *g, const cp_onnx_site *s, size_t n,
                        const char *path) {
  gix ix;
  bool *seen = calloc(g->n_nodes + 1, sizeof *seen);
  size_t *stack = malloc((g->n_nodes + 1) * sizeof *stack), top = 0;
  int rc = gix_build(&ix, g, path);
  if (rc == 0 && (!seen || !stack)) rc = cp_nomem("%s", path);
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


/* How value v depends on the slopes constants (found[]), upstream through elementwise and shape
 * ops: 0 not at all; 1 in proportion (through Mul by a slopes-free factor, Div of a slopes-derived
 * numerator, and ops that only move, copy or negate values); 2 otherwise (added to something,
 * selected by Where, multiplied by itself): *why gets the node. Each call visits at most *budget
 * nodes in all (a value past the bound counts as not depending). */
static int slopes_dep(const gix *x, const char *v, const bool *found, int depth, int *budget, size_t *why) {
  size_t t = lookup(x->init, x->n_init, v);
  if (t != SIZE_MAX) return found[t] ? 1 : 0;
  size_t p = producer(x, v);
  if (p == SIZE_MAX || depth <= 0 || --*budget < 0) return 0;
  const cp_onnx_node *n = &x->g->nodes[p];
  if (!passes_positional(n)) return 0;
  int d[8] = {0}, any = 0;
  for (size_t i = 0; i < n->n_inputs && i < 8; i++) {
    d[i] = slopes_dep(x, n->inputs[i], found, depth - 1, budget, why);
    if (d[i] == 2) return 2;
    any |= d[i];
  }
  if (!any) return 0;
  bool prop = !strcmp(n->op_type, "Mul") ? !(d[0] && d[1]) : !strcmp(n->op_type, "Div") ? !d[1]
              : strcmp(n->op_type, "Add") && strcmp(n->op_type, "Sub") && strcmp(n->op_type, "Where");
  if (!prop) *why = p;
  return prop ? 1 : 2;
}

int cp_onnx_alibi_entries(cp_onnx_alibi_entry *out /* [n] */, const cp_onnx_graph *g, const cp_onnx_site *s, size_t n,
                          const bool *found, const char *path, const char *what) {
  gix ix, *x = &ix;
  char lb[300], lb2[300], lb3[300];
  int rc = gix_build(x, g, path);
  for (size_t k = 0; k < n && rc == 0; k++) {
    out[k].node = SIZE_MAX;
    if (s[k].kind != CP_ONNX_SITE_SOFTMAX) continue;
    const char *v = g->nodes[s[k].node].inputs[0];
    for (int step = 0; step < WALK_STEPS && out[k].node == SIZE_MAX && rc == 0; step++) {
      size_t p = producer(x, v), why = SIZE_MAX;
      if (p == SIZE_MAX || p == s[k].matmul) break;
      const cp_onnx_node *nd = &g->nodes[p];
      int d[2] = {0, 0}, budget = 4096;
      bool add = is_default(nd) && nd->n_inputs == 2 && (!strcmp(nd->op_type, "Add") || !strcmp(nd->op_type, "Sub"));
      for (int i = 0; add && i < 2; i++) d[i] = slopes_dep(x, nd->inputs[i], found, 16, &budget, &why);
      int b = d[1] ? 1 : 0; /* the slopes side */
      if (add && (d[0] != 0) != (d[1] != 0) && (b == 1 || !strcmp(nd->op_type, "Add")) &&
          find_matmul(x, nd->inputs[1 - b], WALK_STEPS) == s[k].matmul) {
        if (d[b] == 2)
          rc = cp_error_set(CP_EONNX_SITE, "%s: %s: the ALiBi term it adds to the logits of %s is not proportional to "
                            "the slopes (%s combines them with another term): %s cannot scale it", path,
                            cp_onnx_site_label(lb, nd, p), cp_onnx_site_label(lb2, &g->nodes[s[k].node], s[k].node),
                            why == SIZE_MAX ? "a node" : cp_onnx_site_label(lb3, &g->nodes[why], why), what);
        out[k].node = p, out[k].bias_input = (size_t)b, out[k].scores_input = (size_t)(1 - b);
        break;
      }
      /* up the chain: the input the q.k MatMul comes through */
      if (!passes_logits(nd) || nd->n_inputs > 3) break; /* those ops take at most 3 inputs */
      size_t i = 0;
      while (i < nd->n_inputs && find_matmul(x, nd->inputs[i], WALK_STEPS) != s[k].matmul) i++;
      if (i == nd->n_inputs) break;
      v = nd->inputs[i];
    }
    if (rc == 0 && out[k].node == SIZE_MAX)
      rc = cp_error_set(CP_EONNX_SITE, "%s: %s: no ALiBi term (a slopes constant times a distance) is added on its "
                        "logits' way from its q.k MatMul, so %s has nothing to scale", path,
                        cp_onnx_site_label(lb, &g->nodes[s[k].node], s[k].node), what);
  }
  gix_free(x);
  return rc;
}
