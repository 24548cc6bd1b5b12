/* The full ONNX reader (include/ctxpatch/formats/onnx_graph.h): the model file read (at most
 * 2 GiB), walked and unpacked (formats/onnx_wire.c), then turned into views of the model, its
 * graphs (subgraph depth bounded), nodes, attributes and values; tensors in formats/onnx_tensor.c,
 * external data in formats/onnx_external.c, names and order in formats/onnx_order.c. */
#include <fcntl.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/quote.h"
#include "formats/onnx_graph_priv.h"
#include "formats/onnx_wire.h"

#define MODEL_MAX ((size_t)INT32_MAX) /* protobuf's own limit */
#define WHAT_CAP 200

void cp_onnx_read_params_init(cp_onnx_read_params *p) {
  memset(p, 0, sizeof *p);
  p->max_graph_depth = CP_ONNX_MAX_GRAPH_DEPTH;
}

const char *cp_onnx_q(char buf[128], const char *s) { return cp_quote(buf, 128, s ? s : "", s ? strlen(s) : 0); }

const char *cp_onnx_node_label(char buf[160], const cp_onnx_node *n, size_t index) {
  char q[128];
  if (n->name[0]) snprintf(buf, 160, "node '%s'", cp_onnx_q(q, n->name));
  else snprintf(buf, 160, "node %zu (%s)", index, cp_onnx_q(q, n->op_type));
  return buf;
}

static const char *str(const char *s) { return s ? s : ""; }

#define NEW(m, var, count)                                                              \
  do {                                                                                  \
    (var) = cp_arena_array(&(m)->priv->arena, (count) ? (count) : 1, sizeof *(var));   \
    CP_CHECK_ALLOC(var, (m)->path);                                                     \
  } while (0)

static int build_graph(cp_onnx_model *m, cp_onnx_graph *g, const Onnx__GraphProto *gp, int depth, const char *where);

static int build_value(cp_onnx_model *m, cp_onnx_value *v, const Onnx__ValueInfoProto *vp, const char *kind) {
  char q[128];
  v->name = str(vp->name), v->ndim = -1;
  const Onnx__TypeProto *tp = vp->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) return 0;
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  v->is_tensor = true, v->elem_type = tt->has_elem_type ? tt->elem_type : 0;
  if (!tt->shape) return 0;
  if (tt->shape->n_dim > CP_MAX_DIMS * 4)
    return cp_error_set(CP_EONNX_GRAPH, "%s: %s '%s': %zu dims", m->path, kind, cp_onnx_q(q, v->name),
                        tt->shape->n_dim);
  cp_onnx_dim *dims;
  NEW(m, dims, tt->shape->n_dim);
  for (size_t k = 0; k < tt->shape->n_dim; k++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[k];
    dims[k].value = -1;
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return cp_error_set(CP_EONNX_GRAPH, "%s: %s '%s': negative dim %zu (%" PRId64 ")", m->path, kind,
                            cp_onnx_q(q, v->name), k, d->dim_value);
      dims[k].value = d->dim_value;
    } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
      dims[k].param = str(d->dim_param);
    }
  }
  v->ndim = (int)tt->shape->n_dim, v->dims = dims;
  return 0;
}

static int build_values(cp_onnx_model *m, const cp_onnx_value **out, size_t *n, Onnx__ValueInfoProto **vp, size_t count,
                        const char *kind) {
  cp_onnx_value *v;
  NEW(m, v, count);
  for (size_t k = 0; k < count; k++) {
    int rc = build_value(m, &v[k], vp[k], kind);
    if (rc < 0) return rc;
  }
  *out = v, *n = count;
  return 0;
}

/* The attribute's type: as declared, else the one field that is set (old files omit it). */
static cp_onnx_attr_type attr_type(const Onnx__AttributeProto *ap) {
  if (ap->has_type && ap->type) return (cp_onnx_attr_type)ap->type;
  if (ap->g) return CP_ONNX_ATYPE_GRAPH;
  if (ap->t) return CP_ONNX_ATYPE_TENSOR;
  if (ap->sparse_tensor) return CP_ONNX_ATYPE_SPARSE_TENSOR;
  if (ap->n_graphs) return CP_ONNX_ATYPE_GRAPHS;
  if (ap->n_tensors) return CP_ONNX_ATYPE_TENSORS;
  if (ap->n_sparse_tensors) return CP_ONNX_ATYPE_SPARSE_TENSORS;
  if (ap->n_strings) return CP_ONNX_ATYPE_STRINGS;
  if (ap->n_ints) return CP_ONNX_ATYPE_INTS;
  if (ap->n_floats) return CP_ONNX_ATYPE_FLOATS;
  if (ap->has_s) return CP_ONNX_ATYPE_STRING;
  if (ap->has_i) return CP_ONNX_ATYPE_INT;
  if (ap->has_f) return CP_ONNX_ATYPE_FLOAT;
  return CP_ONNX_ATYPE_UNDEFINED;
}

static int build_attr(cp_onnx_model *m, cp_onnx_attribute *a, const Onnx__AttributeProto *ap, const char *node,
                      int depth) {
  char what[WHAT_CAP + 160], q[128];
  a->name = str(ap->name), a->ref_attr_name = ap->ref_attr_name, a->type = attr_type(ap);
  a->f = ap->f, a->i = ap->i, a->s.len = ap->s.len, a->s.data = ap->s.data;
  snprintf(what, sizeof what, "%s attribute '%s'", node, cp_onnx_q(q, a->name));
  if (a->type == CP_ONNX_ATYPE_SPARSE_TENSOR || a->type == CP_ONNX_ATYPE_SPARSE_TENSORS)
    return cp_error_set(CP_EONNX_DTYPE, "%s: %s: sparse tensors are not supported", m->path, what);
  if ((a->type == CP_ONNX_ATYPE_TENSOR && !ap->t) || (a->type == CP_ONNX_ATYPE_GRAPH && !ap->g))
    return cp_error_set(CP_EONNX_GRAPH, "%s: %s: type %d without its value", m->path, what, (int)a->type);
  if ((unsigned)a->type > CP_ONNX_ATYPE_TYPE_PROTOS)
    return cp_error_set(CP_EONNX_GRAPH, "%s: %s: unknown attribute type %d", m->path, what, (int)a->type);
  int rc = 0;
  switch (a->type) {
  case CP_ONNX_ATYPE_FLOATS: a->n = ap->n_floats, a->floats = ap->floats; break;
  case CP_ONNX_ATYPE_INTS: a->n = ap->n_ints, a->ints = ap->ints; break;
  case CP_ONNX_ATYPE_STRINGS: {
    cp_onnx_bytes *s;
    NEW(m, s, ap->n_strings);
    for (size_t k = 0; k < ap->n_strings; k++) s[k].len = ap->strings[k].len, s[k].data = ap->strings[k].data;
    a->n = ap->n_strings, a->strings = s;
    break;
  }
  case CP_ONNX_ATYPE_TENSOR: {
    cp_onnx_tensor *t;
    NEW(m, t, 1);
    rc = cp_onnx_tensor_build(m, t, ap->t, what);
    a->t = t;
    break;
  }
  case CP_ONNX_ATYPE_TENSORS: {
    cp_onnx_tensor *t;
    NEW(m, t, ap->n_tensors);
    for (size_t k = 0; k < ap->n_tensors && rc == 0; k++) rc = cp_onnx_tensor_build(m, &t[k], ap->tensors[k], what);
    a->n = ap->n_tensors, a->tensors = t;
    break;
  }
  case CP_ONNX_ATYPE_GRAPH: {
    cp_onnx_graph *g;
    NEW(m, g, 1);
    rc = build_graph(m, g, ap->g, depth + 1, what);
    a->g = g;
    break;
  }
  case CP_ONNX_ATYPE_GRAPHS: {
    cp_onnx_graph *g;
    NEW(m, g, ap->n_graphs);
    for (size_t k = 0; k < ap->n_graphs && rc == 0; k++) rc = build_graph(m, &g[k], ap->graphs[k], depth + 1, what);
    a->n = ap->n_graphs, a->graphs = g;
    break;
  }
  default: break;
  }
  return rc;
}

static int build_node(cp_onnx_model *m, cp_onnx_node *n, const Onnx__NodeProto *np, size_t index, int depth) {
  char what[160];
  n->name = str(np->name), n->op_type = str(np->op_type), n->domain = str(np->domain);
  n->inputs = (const char *const *)np->input, n->n_inputs = np->n_input;
  n->outputs = (const char *const *)np->output, n->n_outputs = np->n_output;
  cp_onnx_node_label(what, n, index);
  cp_onnx_attribute *a;
  NEW(m, a, np->n_attribute);
  n->attrs = a, n->n_attrs = np->n_attribute;
  for (size_t k = 0; k < np->n_attribute; k++) {
    int rc = build_attr(m, &a[k], np->attribute[k], what, depth);
    if (rc < 0) return rc;
  }
  return 0;
}

static int build_graph(cp_onnx_model *m, cp_onnx_graph *g, const Onnx__GraphProto *gp, int depth, const char *where) {
  char what[WHAT_CAP], q[128];
  if (depth > m->priv->params.max_graph_depth)
    return cp_error_set(CP_EONNX_GRAPH, "%s: %s: subgraphs nested deeper than %d", m->path, where,
                        m->priv->params.max_graph_depth);
  g->name = str(gp->name), g->depth = depth;
  if (gp->n_sparse_initializer)
    return cp_error_set(CP_EONNX_DTYPE, "%s: graph '%s': %zu sparse initializers (e.g. '%s'): not supported",
                        m->path, cp_onnx_q(q, g->name), gp->n_sparse_initializer,
                        gp->sparse_initializer[0]->values ? str(gp->sparse_initializer[0]->values->name) : "");
  cp_onnx_tensor *t;
  NEW(m, t, gp->n_initializer);
  g->initializers = t, g->n_initializers = gp->n_initializer;
  for (size_t k = 0; k < gp->n_initializer; k++) {
    snprintf(what, sizeof what, "initializer '%s'", cp_onnx_q(q, str(gp->initializer[k]->name)));
    int rc = cp_onnx_tensor_build(m, &t[k], gp->initializer[k], what);
    if (rc < 0) return rc;
  }
  int rc;
  if ((rc = build_values(m, &g->inputs, &g->n_inputs, gp->input, gp->n_input, "graph input")) < 0 ||
      (rc = build_values(m, &g->outputs, &g->n_outputs, gp->output, gp->n_output, "graph output")) < 0 ||
      (rc = build_values(m, &g->value_info, &g->n_value_info, gp->value_info, gp->n_value_info, "value_info")) < 0)
    return rc;
  cp_onnx_node *n;
  NEW(m, n, gp->n_node);
  g->nodes = n, g->n_nodes = gp->n_node;
  for (size_t k = 0; k < gp->n_node; k++)
    if ((rc = build_node(m, &n[k], gp->node[k], k, depth)) < 0) return rc;
  return 0;
}

/* Whether a tensor, or one inside graph gp (its initializers and every node's attributes, nested
 * graphs included, up to the reader's depth bound), lives in external data. */
static bool external_tensor(const Onnx__TensorProto *t) {
  return t && ((t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
               t->n_external_data > 0);
}

static bool external_in_nodes(Onnx__NodeProto *const *nodes, size_t n, int depth, int max_depth);

static bool external_in_graph(const Onnx__GraphProto *gp, int depth, int max_depth) {
  if (!gp) return false;
  if (depth > max_depth) return true; /* refused either way: the reader bounds the depth too */
  for (size_t k = 0; k < gp->n_initializer; k++)
    if (external_tensor(gp->initializer[k])) return true;
  return external_in_nodes(gp->node, gp->n_node, depth, max_depth);
}

static bool external_in_nodes(Onnx__NodeProto *const *nodes, size_t n, int depth, int max_depth) {
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < nodes[i]->n_attribute; k++) {
      const Onnx__AttributeProto *a = nodes[i]->attribute[k];
      if (external_tensor(a->t) || external_in_graph(a->g, depth + 1, max_depth)) return true;
      for (size_t j = 0; j < a->n_tensors; j++)
        if (external_tensor(a->tensors[j])) return true;
      for (size_t j = 0; j < a->n_graphs; j++)
        if (external_in_graph(a->graphs[j], depth + 1, max_depth)) return true;
    }
  return false;
}

/* Model-local functions are read, not described: a tensor of theirs in external data would be
 * outside what the graph digest covers (onnx_digest.h) while onnxruntime computes with it, so
 * such a model is refused (issue 33, item 5). */
static int functions_without_external_data(const cp_onnx_model *m, const Onnx__ModelProto *mp) {
  char q[128];
  for (size_t k = 0; k < mp->n_functions; k++) {
    const Onnx__FunctionProto *f = mp->functions[k];
    if (external_in_nodes(f->node, f->n_node, 0, m->priv->params.max_graph_depth))
      return cp_error_set(CP_EONNX_EXTERNAL, "%s: model-local function '%s' (functions[%zu]) holds a tensor in "
                          "external data, which the graph digest does not cover: refused",
                          m->path, cp_onnx_q(q, str(f->name)), k);
  }
  return 0;
}

static int build_model(cp_onnx_model *m, const Onnx__ModelProto *mp) {
  m->ir_version = mp->ir_version, m->model_version = mp->model_version;
  m->producer_name = str(mp->producer_name), m->producer_version = str(mp->producer_version);
  m->domain = str(mp->domain), m->n_functions = mp->n_functions;
  cp_onnx_opset *o;
  NEW(m, o, mp->n_opset_import);
  for (size_t k = 0; k < mp->n_opset_import; k++)
    o[k].domain = str(mp->opset_import[k]->domain), o[k].version = mp->opset_import[k]->version;
  m->opsets = o, m->n_opsets = mp->n_opset_import;
  cp_onnx_prop *p;
  NEW(m, p, mp->n_metadata_props);
  for (size_t k = 0; k < mp->n_metadata_props; k++)
    p[k].key = str(mp->metadata_props[k]->key), p[k].value = str(mp->metadata_props[k]->value);
  m->metadata = p, m->n_metadata = mp->n_metadata_props;
  if (!mp->graph) return cp_error_set(CP_EONNX_GRAPH, "%s: model has no graph", m->path);
  int frc = functions_without_external_data(m, mp);
  if (frc < 0) return frc;
  cp_onnx_graph *g;
  NEW(m, g, 1);
  m->graph = g;
  int rc = build_graph(m, g, mp->graph, 0, "main graph");
  if (rc == 0) rc = cp_onnx_graph_order(m, g);
  if (rc < 0) return rc;
  cp_onnx_external_finish(m->priv);
  const char **files;
  NEW(m, files, m->priv->n_files);
  for (size_t k = 0; k < m->priv->n_files; k++) files[k] = m->priv->files[k].location;
  m->data_files = files, m->n_data_files = m->priv->n_files;
  return 0;
}

/* The model's folder, opened to resolve external data against. */
static int open_folder(cp_onnx_model *m) {
  const char *slash = strrchr(m->path, '/');
  char *dir = slash ? strndup(m->path, (size_t)(slash - m->path) + (slash == m->path)) : strdup(".");
  CP_CHECK_ALLOC(dir, m->path);
  m->priv->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (m->priv->dirfd < 0) return cp_error_set(CP_EIO, "%s: cannot open the model's folder", m->path);
  return 0;
}

int cp_onnx_model_open_bytes(cp_onnx_model **out, const char *path, const uint8_t *buf, size_t len,
                             const cp_onnx_read_params *params) {
  *out = NULL;
  int rc = 0;
  cp_onnx_model *m = calloc(1, sizeof *m);
  CP_CHECK_ALLOC(m, path);
  CP_CHECK_ALLOC_GOTO(m->priv = calloc(1, sizeof *m->priv), path);
  m->priv->dirfd = -1;
  CP_CHECK_ALLOC_GOTO(m->path = strdup(path), path);
  if (params) m->priv->params = *params;
  else cp_onnx_read_params_init(&m->priv->params);
  if (m->priv->params.max_graph_depth <= 0) m->priv->params.max_graph_depth = CP_ONNX_MAX_GRAPH_DEPTH;
  if (len > MODEL_MAX) {
    rc = cp_error_set(CP_EOVERFLOW, "%s: %zu bytes: over protobuf's 2 GiB limit", path, len);
    goto done;
  }
  ProtobufCMessage *msg = NULL;
  if ((rc = cp_onnx_wire_unpack(&msg, &onnx__model_proto__descriptor, buf, len, path)) < 0) goto done;
  m->priv->proto = (Onnx__ModelProto *)msg;
  if ((rc = open_folder(m)) < 0) goto done;
  rc = build_model(m, m->priv->proto);
done:
  if (m->priv && m->priv->dirfd >= 0) close(m->priv->dirfd), m->priv->dirfd = -1;
  if (rc < 0) cp_onnx_model_free(m);
  else *out = m;
  return rc;
}

int cp_onnx_model_open(cp_onnx_model **out, const char *path, const cp_onnx_read_params *params) {
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  int rc = cp_read_file(&buf, &len, path, MODEL_MAX);
  if (rc == 0) cp_input_note(path);
  if (rc == 0) rc = cp_onnx_model_open_bytes(out, path, (const uint8_t *)buf, len, params);
  free(buf);
  return rc;
}

void cp_onnx_model_free(cp_onnx_model *m) {
  if (!m) return;
  if (m->priv) {
    cp_onnx_external_free(m->priv);
    if (m->priv->proto) cp_onnx_wire_free(&m->priv->proto->base);
    cp_arena_free(&m->priv->arena);
    free(m->priv);
  }
  free((char *)m->path);
  free(m);
}

int64_t cp_onnx_model_opset(const cp_onnx_model *m, const char *domain) {
  bool dflt = !domain[0] || !strcmp(domain, "ai.onnx");
  for (size_t k = 0; k < m->n_opsets; k++) {
    const char *d = m->opsets[k].domain;
    if (dflt ? (!d[0] || !strcmp(d, "ai.onnx")) : !strcmp(d, domain)) return m->opsets[k].version;
  }
  return -1;
}

const char *cp_onnx_model_meta(const cp_onnx_model *m, const char *key) {
  for (size_t k = 0; k < m->n_metadata; k++)
    if (!strcmp(m->metadata[k].key, key)) return m->metadata[k].value;
  return NULL;
}

const cp_onnx_tensor *cp_onnx_graph_initializer(const cp_onnx_graph *g, const char *name) {
  for (size_t k = 0; k < g->n_initializers; k++)
    if (!strcmp(g->initializers[k].name, name)) return &g->initializers[k];
  return NULL;
}

const cp_onnx_attribute *cp_onnx_node_attr(const cp_onnx_node *n, const char *name) {
  for (size_t k = 0; k < n->n_attrs; k++)
    if (!strcmp(n->attrs[k].name, name)) return &n->attrs[k];
  return NULL;
}
