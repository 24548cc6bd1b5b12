/* The in-place ONNX editor (include/ctxpatch/formats/onnx_edit.h): the model's bytes indexed as
 * top-level fields and main-graph fields (spans), edits kept as spliced byte blobs, and the
 * output made by copying every untouched span and writing the spliced ones. */
#include "ctxpatch/formats/onnx_edit.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/tensor.h"
#include "formats/onnx_span.h"
#include "onnx.pb-c.h"

#define MODEL_MAX ((size_t)INT32_MAX) /* protobuf's own limit, as the reader */
#define F_GRAPH 7
#define F_META 14
#define G_NODE 1
#define G_INIT 5

typedef struct {
  uint8_t *p;
  size_t n;
} blob;

typedef struct {
  size_t before;
  blob b; /* a packed NodeProto */
} insertion;

typedef struct {
  char *key;
  blob b;        /* a packed StringStringEntryProto */
  size_t top;    /* the top-level span it replaces; SIZE_MAX: appended */
} meta_set;

struct cp_onnx_edit {
  char *path;
  uint8_t *buf;
  size_t len;
  cp_pb_span *top, *gf;             /* top-level fields; main-graph fields */
  size_t n_top, cap_top, n_gf, cap_gf, graph;
  size_t *node_gf;                  /* [n_nodes] the graph field of each node */
  size_t n_nodes;
  blob *repl;                       /* [n_nodes] re-serialised nodes (p NULL: kept) */
  insertion *ins;
  size_t n_ins, cap_ins;
  blob *inits;
  size_t n_inits, cap_inits;
  blob *gf_repl;                    /* [n_gf] replaced graph fields (initializers; p NULL: kept) */
  meta_set *meta;
  size_t n_meta, cap_meta;
};

static int index_model(cp_onnx_edit *e) {
  int rc = cp_pb_scan(&e->top, &e->n_top, &e->cap_top, e->buf, 0, e->len, e->path);
  if (rc < 0) return rc;
  size_t graphs = 0;
  for (size_t k = 0; k < e->n_top; k++)
    if (e->top[k].field == F_GRAPH && e->top[k].wire == 2) e->graph = k, graphs++;
  if (graphs != 1) return cp_error_set(CP_EONNX_GRAPH, "%s: %zu graph fields (one expected)", e->path, graphs);
  if ((rc = cp_pb_scan(&e->gf, &e->n_gf, &e->cap_gf, e->buf, e->top[e->graph].body, e->top[e->graph].end, e->path)) < 0)
    return rc;
  for (size_t k = 0; k < e->n_gf; k++) e->n_nodes += e->gf[k].field == G_NODE && e->gf[k].wire == 2;
  CP_CHECK_ALLOC(e->node_gf = calloc(e->n_nodes + 1, sizeof *e->node_gf), e->path);
  CP_CHECK_ALLOC(e->repl = calloc(e->n_nodes + 1, sizeof *e->repl), e->path);
  CP_CHECK_ALLOC(e->gf_repl = calloc(e->n_gf + 1, sizeof *e->gf_repl), e->path);
  for (size_t k = 0, j = 0; k < e->n_gf; k++)
    if (e->gf[k].field == G_NODE && e->gf[k].wire == 2) e->node_gf[j++] = k;
  return 0;
}

int cp_onnx_edit_open(cp_onnx_edit **out, const char *path) {
  *out = NULL;
  cp_onnx_edit *e = calloc(1, sizeof *e);
  CP_CHECK_ALLOC(e, path);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(e->path = strdup(path), path);
  char *buf = NULL;
  if ((rc = cp_read_file(&buf, &e->len, path, MODEL_MAX)) < 0) goto done;
  e->buf = (uint8_t *)buf;
  rc = index_model(e);
done:
  if (rc < 0) cp_onnx_edit_free(e);
  else *out = e;
  return rc;
}

void cp_onnx_edit_free(cp_onnx_edit *e) {
  if (!e) return;
  for (size_t k = 0; k < e->n_nodes; k++) free(e->repl[k].p);
  for (size_t k = 0; k < e->n_ins; k++) free(e->ins[k].b.p);
  for (size_t k = 0; k < e->n_inits; k++) free(e->inits[k].p);
  for (size_t k = 0; e->gf_repl && k < e->n_gf; k++) free(e->gf_repl[k].p);
  free(e->gf_repl);
  for (size_t k = 0; k < e->n_meta; k++) free(e->meta[k].key), free(e->meta[k].b.p);
  free(e->repl), free(e->ins), free(e->inits), free(e->meta), free(e->node_gf);
  free(e->top), free(e->gf), free(e->buf), free(e->path);
  free(e);
}

size_t cp_onnx_edit_n_nodes(const cp_onnx_edit *e) { return e->n_nodes; }

/* Packs message m into *b (malloc). */
static int pack(blob *b, const ProtobufCMessage *m, const char *path) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *p = malloc(n ? n : 1);
  CP_CHECK_ALLOC(p, path);
  protobuf_c_message_pack(m, p);
  b->p = p, b->n = n;
  return 0;
}

/* Node `node` unpacked from its current bytes (a replacement when it has one). */
static int node_unpack(Onnx__NodeProto **np, const cp_onnx_edit *e, size_t node) {
  if (node >= e->n_nodes) return cp_error_set(CP_EARG, "%s: node %zu: no such node", e->path, node);
  const cp_pb_span *s = &e->gf[e->node_gf[node]];
  const blob *r = &e->repl[node];
  *np = r->p ? onnx__node_proto__unpack(NULL, r->n, r->p)
             : onnx__node_proto__unpack(NULL, s->end - s->body, e->buf + s->body);
  if (!*np) return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: node %zu does not unpack", e->path, s->start, node);
  return 0;
}

static int node_repack(cp_onnx_edit *e, size_t node, const Onnx__NodeProto *np) {
  blob b;
  int rc = pack(&b, &np->base, e->path);
  if (rc < 0) return rc;
  free(e->repl[node].p);
  e->repl[node] = b;
  return 0;
}

int cp_onnx_edit_set_input(cp_onnx_edit *e, size_t node, size_t input, const char *name) {
  Onnx__NodeProto *np;
  int rc = node_unpack(&np, e, node);
  if (rc < 0) return rc;
  if (input >= 64) {
    rc = cp_error_set(CP_EARG, "%s: node %zu: input %zu", e->path, node, input);
  } else if (input < np->n_input) {
    char *old = np->input[input];
    np->input[input] = (char *)name;
    rc = node_repack(e, node, np);
    np->input[input] = old;
  } else {
    /* A later optional input: the ones between are omitted (""). */
    char **arr = malloc((input + 1) * sizeof *arr), **old = np->input;
    size_t n_old = np->n_input;
    if (!arr) {
      rc = cp_nomem("%s", e->path);
    } else {
      for (size_t k = 0; k <= input; k++) arr[k] = k < n_old ? old[k] : (char *)"";
      arr[input] = (char *)name;
      np->input = arr, np->n_input = input + 1;
      rc = node_repack(e, node, np);
      np->input = old, np->n_input = n_old;
      free(arr);
    }
  }
  onnx__node_proto__free_unpacked(np, NULL);
  return rc;
}

int cp_onnx_edit_set_attr_float(cp_onnx_edit *e, size_t node, const char *name, float v) {
  Onnx__NodeProto *np;
  int rc = node_unpack(&np, e, node);
  if (rc < 0) return rc;
  Onnx__AttributeProto *found = NULL;
  for (size_t k = 0; k < np->n_attribute; k++)
    if (np->attribute[k]->name && !strcmp(np->attribute[k]->name, name)) found = np->attribute[k];
  if (found) {
    Onnx__AttributeProto saved = *found;
    found->has_f = 1, found->f = v, found->has_type = 1, found->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    rc = node_repack(e, node, np);
    *found = saved;
  } else {
    Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
    a.name = (char *)name, a.has_f = 1, a.f = v, a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    Onnx__AttributeProto **arr = malloc((np->n_attribute + 1) * sizeof *arr), **old = np->attribute;
    if (!arr) {
      rc = cp_nomem("%s", e->path);
    } else {
      if (np->n_attribute) memcpy(arr, old, np->n_attribute * sizeof *arr);
      arr[np->n_attribute] = &a;
      np->attribute = arr, np->n_attribute++;
      rc = node_repack(e, node, np);
      np->attribute = old, np->n_attribute--;
      free(arr);
    }
  }
  onnx__node_proto__free_unpacked(np, NULL);
  return rc;
}

int cp_onnx_edit_insert_node(cp_onnx_edit *e, size_t before, const cp_onnx_edit_node *n) {
  if (before > e->n_nodes) return cp_error_set(CP_EARG, "%s: node %zu: no such node", e->path, before);
  enum { MAX_ATTRS = 8 };
  if (n->n_attrs > MAX_ATTRS) return cp_error_set(CP_EARG, "%s: more than %d attributes", e->path, MAX_ATTRS);
  Onnx__AttributeProto a[MAX_ATTRS], *ap[MAX_ATTRS];
  for (size_t k = 0; k < n->n_attrs; k++) {
    const cp_onnx_edit_attr *s = &n->attrs[k];
    Onnx__AttributeProto init = ONNX__ATTRIBUTE_PROTO__INIT;
    a[k] = init, ap[k] = &a[k];
    a[k].name = (char *)s->name, a[k].has_type = 1, a[k].type = (Onnx__AttributeProto__AttributeType)s->type;
    if (s->type == 1) a[k].has_f = 1, a[k].f = s->f;
    else if (s->type == 2) a[k].has_i = 1, a[k].i = s->i;
    else if (s->type == 7) a[k].n_ints = s->n_ints, a[k].ints = (int64_t *)s->ints;
    else return cp_error_set(CP_EARG, "%s: attribute type %d not supported by the editor", e->path, s->type);
  }
  Onnx__NodeProto np = ONNX__NODE_PROTO__INIT;
  np.name = (char *)n->name, np.op_type = (char *)n->op_type;
  np.domain = n->domain && n->domain[0] ? (char *)n->domain : NULL;
  np.input = (char **)n->inputs, np.n_input = n->n_inputs;
  np.output = (char **)n->outputs, np.n_output = n->n_outputs;
  np.attribute = n->n_attrs ? ap : NULL, np.n_attribute = n->n_attrs;
  int rc = CP_ARRAY_RESERVE(e->ins, e->cap_ins, e->n_ins + 1, e->path);
  if (rc < 0) return rc;
  insertion *i = &e->ins[e->n_ins];
  i->before = before;
  if ((rc = pack(&i->b, &np.base, e->path)) < 0) return rc;
  e->n_ins++;
  return 0;
}

/* Whether the message at span s has the string field `field` equal to `key`. */
static bool string_field_is(const cp_onnx_edit *e, const cp_pb_span *s, unsigned field, const char *key) {
  size_t at, len;
  return cp_pb_string(&at, &len, e->buf, s, field) && len == strlen(key) && !memcmp(e->buf + at, key, len);
}

/* A TensorProto of raw little-endian data packed into *b. */
static int pack_tensor(blob *b, const cp_onnx_edit *e, const char *name, int32_t elem_type, const int64_t *shape, int ndim,
                       const void *data) {
  uint64_t numel = 1;
  for (int k = 0; k < ndim; k++)
    if (shape[k] < 0 || __builtin_mul_overflow(numel, (uint64_t)shape[k], &numel) || numel > ((uint64_t)1 << 28))
      return cp_error_set(CP_EARG, "%s: initializer '%s': shape too large", e->path, name);
  size_t esz = elem_type == 1 ? 4 : elem_type == 10 ? 2 : elem_type == 7 || elem_type == 11 ? 8 : 0;
  if (!esz) return cp_error_set(CP_EARG, "%s: initializer '%s': data type %d not supported", e->path, name, elem_type);
  uint8_t *raw = malloc(numel * esz + 1);
  CP_CHECK_ALLOC(raw, e->path);
  for (uint64_t k = 0; k < numel; k++) {
    if (elem_type == 1) memcpy(raw + 4 * k, (const float *)data + k, 4); /* little-endian hosts (base/le.h) */
    else if (elem_type == 7) memcpy(raw + 8 * k, (const int64_t *)data + k, 8);
    else if (elem_type == 11) memcpy(raw + 8 * k, (const double *)data + k, 8);
    else {
      uint16_t h = cp_f32_to_f16(((const float *)data)[k]);
      memcpy(raw + 2 * k, &h, 2);
    }
  }
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  tp.name = (char *)name, tp.has_data_type = 1, tp.data_type = elem_type;
  tp.dims = (int64_t *)shape, tp.n_dims = (size_t)ndim;
  tp.has_raw_data = 1, tp.raw_data.data = raw, tp.raw_data.len = numel * esz;
  int rc = pack(b, &tp.base, e->path);
  free(raw);
  return rc;
}

int cp_onnx_edit_add_initializer(cp_onnx_edit *e, const char *name, int32_t elem_type, const int64_t *shape, int ndim,
                                 const void *data) {
  int rc = CP_ARRAY_RESERVE(e->inits, e->cap_inits, e->n_inits + 1, e->path);
  if (rc == 0 && (rc = pack_tensor(&e->inits[e->n_inits], e, name, elem_type, shape, ndim, data)) == 0) e->n_inits++;
  return rc;
}

int cp_onnx_edit_replace_initializer(cp_onnx_edit *e, const char *name, int32_t elem_type, const int64_t *shape,
                                     int ndim, const void *data) {
  size_t at = SIZE_MAX;
  for (size_t k = 0; k < e->n_gf; k++)
    if (e->gf[k].field == G_INIT && e->gf[k].wire == 2 && string_field_is(e, &e->gf[k], 8, name)) at = k;
  if (at == SIZE_MAX) return cp_error_set(CP_ENOTFOUND, "%s: initializer '%s' not found in the main graph", e->path, name);
  blob b;
  int rc = pack_tensor(&b, e, name, elem_type, shape, ndim, data);
  if (rc < 0) return rc;
  free(e->gf_repl[at].p);
  e->gf_repl[at] = b;
  return 0;
}

int cp_onnx_edit_set_meta(cp_onnx_edit *e, const char *key, const char *value) {
  size_t top = SIZE_MAX;
  for (size_t k = 0; k < e->n_top; k++)
    if (e->top[k].field == F_META && e->top[k].wire == 2 && string_field_is(e, &e->top[k], 1, key)) top = k;
  meta_set *m = NULL;
  for (size_t k = 0; k < e->n_meta; k++)
    if (!strcmp(e->meta[k].key, key)) m = &e->meta[k];
  if (!m) {
    int rc = CP_ARRAY_RESERVE(e->meta, e->cap_meta, e->n_meta + 1, e->path);
    if (rc < 0) return rc;
    m = &e->meta[e->n_meta];
    memset(m, 0, sizeof *m);
    CP_CHECK_ALLOC(m->key = strdup(key), e->path);
    e->n_meta++;
  }
  Onnx__StringStringEntryProto p = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
  p.key = (char *)key, p.value = (char *)value;
  free(m->b.p), m->b.p = NULL;
  m->top = top;
  return pack(&m->b, &p.base, e->path);
}

/* A growing output buffer. */
typedef struct {
  uint8_t *p;
  size_t n, cap;
  bool failed;
} out_buf;

static void put(out_buf *o, const void *d, size_t n) {
  if (o->failed || !n) return;
  if (n > SIZE_MAX - o->n || CP_ARRAY_RESERVE(o->p, o->cap, o->n + n, "edited model") < 0) {
    o->failed = true;
    return;
  }
  memcpy(o->p + o->n, d, n);
  o->n += n;
}

static void put_varint(out_buf *o, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  do {
    b[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) b[n] |= 0x80;
    n++;
  } while (v);
  put(o, b, n);
}

static void put_field(out_buf *o, unsigned field, const uint8_t *d, size_t n) {
  put_varint(o, ((uint64_t)field << 3) | 2);
  put_varint(o, n);
  put(o, d, n);
}

static void put_inserted(out_buf *o, const cp_onnx_edit *e, size_t before) {
  for (size_t k = 0; k < e->n_ins; k++)
    if (e->ins[k].before == before) put_field(o, G_NODE, e->ins[k].b.p, e->ins[k].b.n);
}

/* The main graph's new body. */
static void put_graph(out_buf *o, const cp_onnx_edit *e) {
  size_t node = 0;
  for (size_t k = 0; k < e->n_gf; k++) {
    const cp_pb_span *s = &e->gf[k];
    if (s->field == G_NODE && s->wire == 2) {
      put_inserted(o, e, node);
      if (e->repl[node].p) put_field(o, G_NODE, e->repl[node].p, e->repl[node].n);
      else put(o, e->buf + s->start, s->end - s->start);
      node++;
      continue;
    }
    if (e->gf_repl[k].p) put_field(o, G_INIT, e->gf_repl[k].p, e->gf_repl[k].n);
    else put(o, e->buf + s->start, s->end - s->start);
  }
  put_inserted(o, e, e->n_nodes);
  for (size_t k = 0; k < e->n_inits; k++) put_field(o, G_INIT, e->inits[k].p, e->inits[k].n);
}

int cp_onnx_edit_serialize(uint8_t **out, size_t *len, const cp_onnx_edit *e) {
  *out = NULL, *len = 0;
  out_buf o = {0}, g = {0};
  put_graph(&g, e);
  for (size_t k = 0; k < e->n_top; k++) {
    const cp_pb_span *s = &e->top[k];
    const meta_set *m = NULL;
    for (size_t j = 0; j < e->n_meta; j++)
      if (e->meta[j].top == k) m = &e->meta[j];
    if (k == e->graph) put_field(&o, F_GRAPH, g.p, g.n);
    else if (m) put_field(&o, F_META, m->b.p, m->b.n);
    else put(&o, e->buf + s->start, s->end - s->start);
  }
  for (size_t j = 0; j < e->n_meta; j++)
    if (e->meta[j].top == SIZE_MAX) put_field(&o, F_META, e->meta[j].b.p, e->meta[j].b.n);
  bool failed = o.failed || g.failed;
  free(g.p);
  if (failed) {
    free(o.p);
    return cp_nomem("%s: serialising the edited model", e->path);
  }
  if (o.n > MODEL_MAX) {
    free(o.p);
    return cp_error_set(CP_EOVERFLOW, "%s: the edited model would pass protobuf's 2 GiB limit", e->path);
  }
  *out = o.p, *len = o.n;
  return 0;
}

int cp_onnx_edit_write(const cp_onnx_edit *e, const char *path) {
  uint8_t *b;
  size_t n;
  int rc = cp_onnx_edit_serialize(&b, &n, e);
  if (rc < 0) return rc;
  rc = cp_write_file_atomic(NULL, path, b, n);
  free(b);
  return rc;
}

/* ------------------------------------------------------------ external data locations */

#define LOC_MAX_DEPTH 100 /* messages inside one another, as the reader allows */

/* Points tensor t's external "location" `from` at `to`; counts it in *n. */
static int tensor_relocate(Onnx__TensorProto *t, const char *from, const char *to, size_t *n) {
  for (size_t k = 0; t && k < t->n_external_data; k++) {
    Onnx__StringStringEntryProto *kv = t->external_data[k];
    if (!kv->key || strcmp(kv->key, "location") || !kv->value || strcmp(kv->value, from)) continue;
    char *v = strdup(to);
    if (!v) return -1;
    free(kv->value); /* unpacked with the default allocator: free() releases it, and the copy later */
    kv->value = v;
    (*n)++;
  }
  return 0;
}

static int graph_relocate(Onnx__GraphProto *g, const char *from, const char *to, size_t *n, int depth);

static int node_relocate(Onnx__NodeProto *np, const char *from, const char *to, size_t *n, int depth) {
  if (depth > LOC_MAX_DEPTH) return -1;
  for (size_t a = 0; a < np->n_attribute; a++) {
    Onnx__AttributeProto *at = np->attribute[a];
    if (tensor_relocate(at->t, from, to, n) < 0 || graph_relocate(at->g, from, to, n, depth + 1) < 0) return -1;
    for (size_t k = 0; k < at->n_tensors; k++)
      if (tensor_relocate(at->tensors[k], from, to, n) < 0) return -1;
    for (size_t k = 0; k < at->n_graphs; k++)
      if (graph_relocate(at->graphs[k], from, to, n, depth + 1) < 0) return -1;
  }
  return 0;
}

static int graph_relocate(Onnx__GraphProto *g, const char *from, const char *to, size_t *n, int depth) {
  if (!g) return 0;
  if (depth > LOC_MAX_DEPTH) return -1;
  for (size_t k = 0; k < g->n_initializer; k++)
    if (tensor_relocate(g->initializer[k], from, to, n) < 0) return -1;
  for (size_t k = 0; k < g->n_node; k++)
    if (node_relocate(g->node[k], from, to, n, depth + 1) < 0) return -1;
  return 0;
}

/* Whether p[0..n) holds the bytes of `from` (a cheap filter: only such messages are unpacked). */
static bool mentions(const uint8_t *p, size_t n, const char *from) {
  size_t m = strlen(from);
  for (size_t k = 0; m && k + m <= n; k++) {
    const uint8_t *hit = memchr(p + k, from[0], n - m + 1 - k);
    if (!hit) return false;
    k = (size_t)(hit - p);
    if (!memcmp(hit, from, m)) return true;
  }
  return false;
}

static bool span_mentions(const cp_onnx_edit *e, const cp_pb_span *s, const char *from) {
  return mentions(e->buf + s->start, s->end - s->start, from);
}

int cp_onnx_edit_set_location(size_t *n_changed, cp_onnx_edit *e, const char *from, const char *to) {
  *n_changed = 0;
  /* A reference the editor cannot reach (a model-local function's Constant) would keep reading `from`. */
  for (size_t k = 0; k < e->n_top; k++)
    if (k != e->graph && e->top[k].field != F_META && span_mentions(e, &e->top[k], from))
      return cp_error_set(CP_EUNSUPPORTED, "%s: offset %zu: field %u outside the main graph mentions the data file "
                          "'%s': its references cannot all be moved", e->path, e->top[k].start, e->top[k].field, from);
  int rc = 0;
  for (size_t k = 0; k < e->n_gf && rc == 0; k++) {
    const cp_pb_span *s = &e->gf[k];
    if (s->field != G_INIT || s->wire != 2 || e->gf_repl[k].p || !span_mentions(e, s, from)) continue;
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, s->end - s->body, e->buf + s->body);
    if (!t) return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: initializer does not unpack", e->path, s->start);
    size_t n = 0;
    if (tensor_relocate(t, from, to, &n) < 0) rc = cp_nomem("%s: moving a data file reference", e->path);
    else if (n) rc = pack(&e->gf_repl[k], &t->base, e->path);
    *n_changed += n;
    onnx__tensor_proto__free_unpacked(t, NULL);
  }
  for (size_t node = 0; node < e->n_nodes && rc == 0; node++) {
    const cp_pb_span *s = &e->gf[e->node_gf[node]];
    const blob *r = &e->repl[node];
    if (r->p ? !mentions(r->p, r->n, from) : !span_mentions(e, s, from)) continue;
    Onnx__NodeProto *np;
    if ((rc = node_unpack(&np, e, node)) < 0) return rc;
    size_t n = 0;
    if (node_relocate(np, from, to, &n, 0) < 0)
      rc = cp_error_set(CP_EONNX_GRAPH, "%s: node %zu: moving a data file reference failed (memory or nesting)", e->path,
                        node);
    else if (n) rc = node_repack(e, node, np);
    *n_changed += n;
    onnx__node_proto__free_unpacked(np, NULL);
  }
  return rc;
}
