/* `inspect`'s summary of an ONNX model file (include/ctxpatch/formats/onnx.h, cp_onnx_read_info),
 * made from the full hardened reader (include/ctxpatch/formats/onnx_graph.h): every check of that
 * reader applies (protobuf walk, SSA and order, tensors, external data confined to the folder). */
#include "ctxpatch/formats/onnx.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "formats/onnx_graph_priv.h"

void cp_onnx_info_free(cp_onnx_info *info) {
  if (!info) return;
  for (size_t k = 0; k < info->n_tensors; k++) free(info->tensors[k].name);
  for (size_t k = 0; k < info->n_meta; k++) free(info->meta_keys[k]), free(info->meta_values[k]);
  for (size_t k = 0; k < info->n_inputs; k++) free(info->inputs[k]);
  for (size_t k = 0; k < info->n_outputs; k++) free(info->outputs[k]);
  free(info->tensors), free(info->meta_keys), free(info->meta_values), free(info->inputs), free(info->outputs);
  free(info->producer_name), free(info->producer_version), free(info->data_location);
  memset(info, 0, sizeof *info);
}

const char *cp_onnx_info_meta(const cp_onnx_info *info, const char *key) {
  for (size_t k = 0; k < info->n_meta; k++)
    if (!strcmp(info->meta_keys[k], key)) return info->meta_values[k];
  return NULL;
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static int copy_names(char ***out, size_t *n_out, const cp_onnx_value *v, size_t n, const char *path) {
  CP_CHECK_ALLOC(*out = calloc(n + 1, sizeof **out), path);
  for (size_t k = 0; k < n; k++, (*n_out)++) CP_CHECK_ALLOC((*out)[k] = dup_or_empty(v[k].name), path);
  return 0;
}

static int copy_tensor(cp_onnx_tensor_info *t, const cp_onnx_tensor *src, const char *path) {
  char q[128];
  CP_CHECK_ALLOC(t->name = dup_or_empty(src->name), path);
  if (!src->has_dtype)
    return cp_error_set(CP_EONNX_DTYPE, "%s: initializer '%s': data type %d has no ctxpatch dtype", path,
                        cp_onnx_q(q, src->name), (int)src->elem_type);
  t->dtype = src->dtype, t->ndim = src->ndim, t->nbytes = src->nbytes;
  memcpy(t->shape, src->shape, sizeof t->shape);
  t->external = src->storage == CP_ONNX_STORE_EXTERNAL, t->offset = t->external ? src->offset : 0;
  return 0;
}

static int summarise(cp_onnx_info *info, const cp_onnx_model *m, const char *path) {
  const cp_onnx_graph *g = m->graph;
  int64_t opset = cp_onnx_model_opset(m, "");
  info->ir_version = m->ir_version, info->opset = opset < 0 ? 0 : opset;
  CP_CHECK_ALLOC((info->producer_name = dup_or_empty(m->producer_name)) &&
                     (info->producer_version = dup_or_empty(m->producer_version)),
                 path);
  info->n_nodes = g->n_nodes;
  CP_CHECK_ALLOC(info->meta_keys = calloc(m->n_metadata + 1, sizeof *info->meta_keys), path);
  CP_CHECK_ALLOC(info->meta_values = calloc(m->n_metadata + 1, sizeof *info->meta_values), path);
  for (size_t k = 0; k < m->n_metadata; k++, info->n_meta++)
    CP_CHECK_ALLOC((info->meta_keys[k] = dup_or_empty(m->metadata[k].key)) &&
                       (info->meta_values[k] = dup_or_empty(m->metadata[k].value)),
                   path);
  int rc;
  if ((rc = copy_names(&info->inputs, &info->n_inputs, g->inputs, g->n_inputs, path)) < 0 ||
      (rc = copy_names(&info->outputs, &info->n_outputs, g->outputs, g->n_outputs, path)) < 0)
    return rc;
  if (m->n_data_files) CP_CHECK_ALLOC(info->data_location = strdup(m->data_files[0]), path);
  CP_CHECK_ALLOC(info->tensors = calloc(g->n_initializers + 1, sizeof *info->tensors), path);
  for (size_t k = 0; k < g->n_initializers; k++) {
    info->n_tensors++; /* counted first: a refused tensor's name is freed with the rest */
    if ((rc = copy_tensor(&info->tensors[k], &g->initializers[k], path)) < 0) return rc;
  }
  return 0;
}

int cp_onnx_read_info(cp_onnx_info *out, const char *path) {
  memset(out, 0, sizeof *out);
  cp_onnx_model *m = NULL;
  int rc = cp_onnx_model_open(&m, path, NULL);
  if (rc == 0) rc = summarise(out, m, path);
  cp_onnx_model_free(m);
  if (rc < 0) cp_onnx_info_free(out);
  return rc;
}
