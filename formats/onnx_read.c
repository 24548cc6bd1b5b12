/* A bounded summary of an ONNX model file for `inspect` (include/ctxpatch/formats/onnx.h,
 * cp_onnx_read_info): the file size-capped, the proto unpacked by protobuf-c, every initializer's
 * shape and bytes checked, external data locations confined to the model's folder. Not the full
 * hardened reader (nodes are only counted). */
#include "ctxpatch/formats/onnx.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "formats/onnx_proto.h"
#include "onnx.pb-c.h"

#define MODEL_MAX ((size_t)INT32_MAX) /* protobuf's own limit */

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

/* A relative location with no ".." component and no leading '/': stays inside the folder. */
static bool location_safe(const char *loc) {
  if (!loc[0] || loc[0] == '/') return false;
  for (const char *p = loc; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    p += n + (e ? 1 : 0);
  }
  return true;
}

/* Checks an external tensor's location/offset/length against the data file (size *data_size once
 * opened) and records them in t. */
static int read_external(cp_onnx_info *info, cp_onnx_tensor_info *t, const Onnx__TensorProto *tp, const char *path,
                         uint64_t *data_size) {
  const char *loc = NULL;
  uint64_t off = 0, len = UINT64_MAX;
  for (size_t k = 0; k < tp->n_external_data; k++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[k];
    char *end = NULL;
    if (!e->key || !e->value) continue;
    if (!strcmp(e->key, "location")) loc = e->value;
    else if (!strcmp(e->key, "offset")) off = strtoull(e->value, &end, 10);
    else if (!strcmp(e->key, "length")) len = strtoull(e->value, &end, 10);
    if (end && (*end || end == e->value))
      return cp_error_set(CP_EFORMAT, "%s: initializer '%s': external %s '%.40s' is not a number", path, t->name,
                          e->key, e->value);
  }
  if (!loc || !location_safe(loc))
    return cp_error_set(CP_EFORMAT, "%s: initializer '%s': external location '%.200s' is not a relative path "
                        "inside the model's folder", path, t->name, loc ? loc : "(none)");
  if (info->data_location && strcmp(info->data_location, loc) != 0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: initializer '%s': a second external data file '%.200s'", path,
                        t->name, loc);
  if (!info->data_location) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup("."), *full = dir ? cp_path_join(dir, loc) : NULL;
    struct stat st;
    int fd = full ? cp_open_input(full, 0) : CP_ENOMEM;
    int rc = fd < 0 ? fd : fstat(fd, &st) == 0 ? 0 : cp_error_set(CP_EIO, "%s: %s", full, strerror(errno));
    if (fd >= 0) close(fd);
    free(dir), free(full);
    if (rc < 0) return rc == CP_ENOMEM ? cp_error_set(rc, "%s: out of memory", path) : rc;
    *data_size = (uint64_t)st.st_size;
    CP_CHECK_ALLOC(info->data_location = strdup(loc), path);
  }
  if (len != t->nbytes || off > *data_size || len > *data_size - off)
    return cp_error_set(CP_EFORMAT, "%s: initializer '%s': external bytes [%" PRIu64 ", +%" PRIu64 ") do not hold "
                        "its %" PRIu64 " bytes inside the %" PRIu64 "-byte data file", path, t->name, off, len,
                        t->nbytes, *data_size);
  t->external = true, t->offset = off;
  return 0;
}

static int read_tensor(cp_onnx_info *info, cp_onnx_tensor_info *t, const Onnx__TensorProto *tp, const char *path,
                       uint64_t *data_size) {
  CP_CHECK_ALLOC(t->name = dup_or_empty(tp->name), path);
  if (cp_onnx_dtype_from_elem(&t->dtype, tp->data_type) < 0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: initializer '%s': data type %d", path, t->name, (int)tp->data_type);
  if (tp->n_dims > CP_MAX_DIMS)
    return cp_error_set(CP_EFORMAT, "%s: initializer '%s': %zu dims (at most %d)", path, t->name, tp->n_dims,
                        CP_MAX_DIMS);
  t->ndim = (int)tp->n_dims;
  for (int d = 0; d < t->ndim; d++)
    if ((t->shape[d] = tp->dims[d]) < 0)
      return cp_error_set(CP_EFORMAT, "%s: initializer '%s': negative dim %d", path, t->name, d);
  if (cp_shape_nbytes(&t->nbytes, t->dtype, t->ndim, t->shape) < 0)
    return cp_error_set(CP_EOVERFLOW, "%s: initializer '%s': shape overflows", path, t->name);
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
    return read_external(info, t, tp, path, data_size);
  if (tp->has_raw_data && tp->raw_data.len != t->nbytes)
    return cp_error_set(CP_EFORMAT, "%s: initializer '%s': %zu raw bytes for a %" PRIu64 "-byte shape", path,
                        t->name, tp->raw_data.len, t->nbytes);
  return 0;
}

static int read_names(char ***out, size_t *n_out, Onnx__ValueInfoProto **v, size_t n, const char *path) {
  CP_CHECK_ALLOC(*out = calloc(n + 1, sizeof **out), path);
  for (size_t k = 0; k < n; k++, (*n_out)++) CP_CHECK_ALLOC((*out)[k] = dup_or_empty(v[k]->name), path);
  return 0;
}

static int summarise(cp_onnx_info *info, const Onnx__ModelProto *m, const char *path) {
  const Onnx__GraphProto *g = m->graph;
  if (!g) return cp_error_set(CP_EFORMAT, "%s: model has no graph", path);
  info->ir_version = m->ir_version;
  for (size_t k = 0; k < m->n_opset_import; k++)
    if (!m->opset_import[k]->domain || !m->opset_import[k]->domain[0]) info->opset = m->opset_import[k]->version;
  CP_CHECK_ALLOC((info->producer_name = dup_or_empty(m->producer_name)) &&
                     (info->producer_version = dup_or_empty(m->producer_version)),
                 path);
  info->n_nodes = g->n_node;
  CP_CHECK_ALLOC(info->meta_keys = calloc(m->n_metadata_props + 1, sizeof *info->meta_keys), path);
  CP_CHECK_ALLOC(info->meta_values = calloc(m->n_metadata_props + 1, sizeof *info->meta_values), path);
  for (size_t k = 0; k < m->n_metadata_props; k++, info->n_meta++)
    CP_CHECK_ALLOC((info->meta_keys[k] = dup_or_empty(m->metadata_props[k]->key)) &&
                       (info->meta_values[k] = dup_or_empty(m->metadata_props[k]->value)),
                   path);
  int rc;
  if ((rc = read_names(&info->inputs, &info->n_inputs, g->input, g->n_input, path)) < 0 ||
      (rc = read_names(&info->outputs, &info->n_outputs, g->output, g->n_output, path)) < 0)
    return rc;
  CP_CHECK_ALLOC(info->tensors = calloc(g->n_initializer + 1, sizeof *info->tensors), path);
  uint64_t data_size = 0;
  for (size_t k = 0; k < g->n_initializer; k++) {
    info->n_tensors++; /* counted first: a refused tensor's name is freed with the rest */
    if ((rc = read_tensor(info, &info->tensors[k], g->initializer[k], path, &data_size)) < 0) return rc;
  }
  return 0;
}

int cp_onnx_read_info(cp_onnx_info *out, const char *path) {
  memset(out, 0, sizeof *out);
  char *buf = NULL;
  size_t len = 0;
  Onnx__ModelProto *m = NULL;
  int rc = cp_read_file(&buf, &len, path, MODEL_MAX);
  if (rc < 0) goto done;
  m = (Onnx__ModelProto *)protobuf_c_message_unpack(&onnx__model_proto__descriptor, NULL, len, (const uint8_t *)buf);
  if (!m) {
    rc = cp_error_set(CP_EFORMAT, "%s: not a readable ONNX ModelProto (protobuf unpack failed)", path);
    goto done;
  }
  rc = summarise(out, m, path);
done:
  if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
  free(buf);
  if (rc < 0) cp_onnx_info_free(out);
  return rc;
}
