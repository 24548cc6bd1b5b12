/* Names and order of ONNX graphs (formats/onnx_graph_priv.h, cp_onnx_graph_order): every name
 * defined once (SSA: graph inputs, initializers, node outputs; a graph input may also be an
 * initializer, its default; Constant nodes may redefine a name, the last wins), no subgraph shadowing an enclosing graph's name, every node input
 * and graph output defined here or in an enclosing graph, and a topological order by Kahn's
 * algorithm (ready nodes taken lowest index first, so file order is kept wherever it allows; a
 * node also waits for the producers of the outer names its subgraphs use). Names are found by
 * binary search in a sorted table per graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "formats/onnx_graph_priv.h"

#define SRC_INPUT ((size_t)-1)
#define SRC_INIT ((size_t)-2)

typedef struct {
  const char *name;
  size_t src; /* producing node, or SRC_INPUT / SRC_INIT */
} name_ent;

typedef struct scope {
  name_ent *ents; /* sorted by name, unique */
  size_t n;
  const struct scope *outer;
} scope;

typedef struct {
  const char **v; /* names used here but defined in an enclosing graph */
  size_t n, cap;
} name_list;

typedef struct {
  size_t from, to;
} edge;

static size_t src_rank(size_t src) { return src == SRC_INPUT ? 0 : src == SRC_INIT ? 1 : src + 2; }

static int ent_cmp(const void *pa, const void *pb) {
  const name_ent *x = pa, *y = pb;
  int c = strcmp(x->name, y->name);
  if (c) return c;
  size_t a = src_rank(x->src), b = src_rank(y->src);
  return (a > b) - (a < b); /* graph input, initializer, then nodes in file order */
}

static const name_ent *find(const scope *s, const char *name) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, s->ents[mid].name);
    if (!c) return &s->ents[mid];
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
  return NULL;
}

static const name_ent *find_outer(const scope *s, const char *name) {
  for (; s; s = s->outer) {
    const name_ent *e = find(s, name);
    if (e) return e;
  }
  return NULL;
}

static const char *node_label(char buf[160], const cp_onnx_graph *g, size_t i) {
  return cp_onnx_node_label(buf, &g->nodes[i], i);
}

static const char *src_label(char buf[160], const cp_onnx_graph *g, size_t src) {
  if (src == SRC_INPUT) return "a graph input";
  if (src == SRC_INIT) return "an initializer";
  char l[160];
  snprintf(buf, 160, "an output of %s", node_label(l, g, src));
  return buf;
}

static int push_name(name_list *l, const char *name, const char *path) {
  int rc = CP_ARRAY_RESERVE(l->v, l->cap, l->n + 1, path);
  if (rc == 0) l->v[l->n++] = name;
  return rc;
}

static int push_edge(edge **v, size_t *n, size_t *cap, size_t from, size_t to, const char *path) {
  int rc = CP_ARRAY_RESERVE(*v, *cap, *n + 1, path);
  if (rc == 0) (*v)[(*n)++] = (edge){from, to};
  return rc;
}

/* A Constant node (default domain): onnxruntime takes it as an initializer. */
static bool is_constant(const cp_onnx_graph *g, size_t src) {
  return src < SRC_INIT && !strcmp(g->nodes[src].op_type, "Constant") && !g->nodes[src].domain[0];
}

/* The graph's own names, sorted; duplicates refused, but for a graph input that is also an
 * initializer (kept once, as the input) and a name several Constant nodes define (the last in file
 * order defines it, as in onnxruntime, which loads such exports: onnxruntime/gpt2_past.onnx). */
static int build_scope(cp_onnx_model *m, scope *s, const cp_onnx_graph *g, const scope *outer) {
  char q[128], a[160], b[160], gq[128];
  size_t n = g->n_inputs + g->n_initializers;
  for (size_t i = 0; i < g->n_nodes; i++) n += g->nodes[i].n_outputs;
  CP_CHECK_ALLOC(s->ents = calloc(n ? n : 1, sizeof *s->ents), m->path);
  s->outer = outer;
  size_t k = 0;
  for (size_t i = 0; i < g->n_inputs; i++) s->ents[k++] = (name_ent){g->inputs[i].name, SRC_INPUT};
  for (size_t i = 0; i < g->n_initializers; i++) s->ents[k++] = (name_ent){g->initializers[i].name, SRC_INIT};
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t o = 0; o < g->nodes[i].n_outputs; o++)
      if (g->nodes[i].outputs[o][0]) s->ents[k++] = (name_ent){g->nodes[i].outputs[o], i};
  qsort(s->ents, k, sizeof *s->ents, ent_cmp);
  size_t w = 0;
  for (size_t i = 0; i < k; i++) {
    name_ent *prev = w ? &s->ents[w - 1] : NULL, *e = &s->ents[i];
    if (prev && !strcmp(prev->name, e->name)) {
      if (prev->src == SRC_INPUT && e->src == SRC_INIT) continue; /* the input's default */
      if (is_constant(g, prev->src) && is_constant(g, e->src)) { /* onnxruntime: the last one wins */
        prev->src = e->src;
        continue;
      }
      return cp_error_set(CP_EONNX_GRAPH, "%s: graph '%s': duplicate name '%s' (%s and %s)", m->path,
                          cp_onnx_q(gq, g->name), cp_onnx_q(q, e->name), src_label(a, g, prev->src),
                          src_label(b, g, e->src));
    }
    if (outer && find_outer(outer, e->name))
      return cp_error_set(CP_EONNX_GRAPH, "%s: graph '%s': '%s' (%s) shadows a name of an enclosing graph", m->path,
                          cp_onnx_q(gq, g->name), cp_onnx_q(q, e->name), src_label(a, g, e->src));
    s->ents[w++] = *e;
  }
  s->n = w;
  return 0;
}

/* A name used in g: an edge from its producer to node `to` (SIZE_MAX: none), or an outer name. */
static int use_name(cp_onnx_model *m, const scope *s, const char *name, size_t to, edge **edges, size_t *n_edges,
                    size_t *cap_edges, name_list *outer_used) {
  const name_ent *e = find(s, name);
  if (e) return e->src < SRC_INIT && to != SIZE_MAX ? push_edge(edges, n_edges, cap_edges, e->src, to, m->path) : 0;
  if (find_outer(s->outer, name)) return push_name(outer_used, name, m->path);
  return CP_ENOTFOUND;
}

/* Min-heap of ready node indexes. */
static void heap_push(size_t *h, size_t *n, size_t v) {
  size_t i = (*n)++;
  for (; i && h[(i - 1) / 2] > v; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
  h[i] = v;
}

static size_t heap_pop(size_t *h, size_t *n) {
  size_t top = h[0], v = h[--*n], i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1] < h[c]) c++;
    if (h[c] >= v) break;
    h[i] = h[c], i = c;
  }
  if (*n) h[i] = v;
  return top;
}

/* Kahn's algorithm over the edges: g->order, g->sorted; a cycle is refused naming a node on it. */
static int kahn(cp_onnx_model *m, cp_onnx_graph *g, const edge *edges, size_t n_edges) {
  size_t n = g->n_nodes, *indeg = calloc(n + 1, sizeof *indeg), *start = calloc(n + 2, sizeof *start);
  size_t *adj = calloc(n_edges + 1, sizeof *adj), *heap = calloc(n + 1, sizeof *heap), n_heap = 0, done = 0;
  size_t *order = cp_arena_array(&m->priv->arena, n + 1, sizeof *order);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(indeg && start && adj && heap && order, m->path);
  for (size_t k = 0; k < n_edges; k++) indeg[edges[k].to]++, start[edges[k].from + 2]++;
  for (size_t i = 2; i < n + 2; i++) start[i] += start[i - 1];
  for (size_t k = 0; k < n_edges; k++) adj[start[edges[k].from + 1]++] = edges[k].to;
  for (size_t i = 0; i < n; i++)
    if (!indeg[i]) heap_push(heap, &n_heap, i);
  g->sorted = true;
  while (n_heap) {
    size_t i = heap_pop(heap, &n_heap);
    if (i != done) g->sorted = false;
    order[done++] = i;
    for (size_t k = start[i]; k < start[i + 1]; k++)
      if (!--indeg[adj[k]]) heap_push(heap, &n_heap, adj[k]);
  }
  if (done < n) {
    char l[160], gq[128];
    size_t i = 0;
    while (!indeg[i]) i++;
    rc = cp_error_set(CP_EONNX_GRAPH, "%s: graph '%s': cycle through %s (%zu nodes never become ready)", m->path,
                      cp_onnx_q(gq, g->name), node_label(l, g, i), n - done);
    goto done;
  }
  g->order = order;
done:
  free(indeg), free(start), free(adj), free(heap);
  return rc;
}

/* With require_sorted: the first node that uses a name produced by a later node. */
static int refuse_unsorted(cp_onnx_model *m, const cp_onnx_graph *g, const edge *edges, size_t n_edges) {
  char a[160], b[160], gq[128];
  for (size_t k = 0; k < n_edges; k++)
    if (edges[k].from >= edges[k].to)
      return cp_error_set(CP_EONNX_GRAPH, "%s: graph '%s': %s uses an output of %s, which comes later (nodes not in "
                          "topological order)", m->path, cp_onnx_q(gq, g->name), node_label(a, g, edges[k].to),
                          node_label(b, g, edges[k].from));
  return 0;
}

static int check_graph(cp_onnx_model *m, cp_onnx_graph *g, const scope *outer, name_list *outer_used);

/* The subgraphs of node i: checked inside scope s; the outer names they use become edges into i. */
static int node_subgraphs(cp_onnx_model *m, const cp_onnx_graph *g, size_t i, const scope *s, edge **edges,
                          size_t *n_edges, size_t *cap_edges, name_list *outer_used) {
  const cp_onnx_node *n = &g->nodes[i];
  int rc = 0;
  for (size_t a = 0; a < n->n_attrs && rc == 0; a++) {
    const cp_onnx_attribute *at = &n->attrs[a];
    size_t count = at->type == CP_ONNX_ATYPE_GRAPH ? 1 : at->type == CP_ONNX_ATYPE_GRAPHS ? at->n : 0;
    for (size_t k = 0; k < count && rc == 0; k++) {
      cp_onnx_graph *sub = (cp_onnx_graph *)(at->type == CP_ONNX_ATYPE_GRAPH ? at->g : &at->graphs[k]);
      name_list used = {NULL, 0, 0};
      rc = check_graph(m, sub, s, &used);
      for (size_t u = 0; u < used.n && rc == 0; u++)
        rc = use_name(m, s, used.v[u], i, edges, n_edges, cap_edges, outer_used);
      free(used.v);
    }
  }
  return rc;
}

static int check_graph(cp_onnx_model *m, cp_onnx_graph *g, const scope *outer, name_list *outer_used) {
  char q[128], l[160], gq[128];
  scope s = {NULL, 0, NULL};
  edge *edges = NULL;
  size_t n_edges = 0, cap_edges = 0;
  int rc = build_scope(m, &s, g, outer);
  for (size_t i = 0; i < g->n_nodes && rc == 0; i++) {
    const cp_onnx_node *n = &g->nodes[i];
    for (size_t k = 0; k < n->n_inputs && rc == 0; k++) {
      if (!n->inputs[k][0]) continue;
      rc = use_name(m, &s, n->inputs[k], i, &edges, &n_edges, &cap_edges, outer_used);
      if (rc == CP_ENOTFOUND)
        rc = cp_error_set(CP_EONNX_GRAPH, "%s: graph '%s': %s input '%s' is produced by no node, graph input, "
                          "initializer or enclosing graph", m->path, cp_onnx_q(gq, g->name), node_label(l, g, i),
                          cp_onnx_q(q, n->inputs[k]));
    }
    if (rc == 0) rc = node_subgraphs(m, g, i, &s, &edges, &n_edges, &cap_edges, outer_used);
  }
  for (size_t k = 0; k < g->n_outputs && rc == 0; k++) {
    rc = use_name(m, &s, g->outputs[k].name, SIZE_MAX, &edges, &n_edges, &cap_edges, outer_used);
    if (rc == CP_ENOTFOUND)
      rc = cp_error_set(CP_EONNX_GRAPH, "%s: graph '%s': graph output '%s' is produced by nothing", m->path,
                        cp_onnx_q(gq, g->name), cp_onnx_q(q, g->outputs[k].name));
  }
  if (rc == 0 && m->priv->params.require_sorted) rc = refuse_unsorted(m, g, edges, n_edges);
  if (rc == 0) rc = kahn(m, g, edges, n_edges);
  free(s.ents), free(edges);
  return rc;
}

int cp_onnx_graph_order(cp_onnx_model *m, cp_onnx_graph *g) {
  name_list used = {NULL, 0, 0};
  int rc = check_graph(m, g, NULL, &used);
  free(used.v);
  return rc;
}
