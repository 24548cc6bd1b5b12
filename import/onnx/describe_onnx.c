/* `inspect` of an ONNX export (import/describe.h, cp_describe_onnx): the bounded summary of
 * formats/onnx_read.c as the same kind of JSON tree as a checkpoint's description. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import/describe.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/import/onnx_import.h"
#include "ctxpatch/formats/onnx.h"

char *cp_onnx_model_path(const char *path) {
  struct stat st;
  if (strlen(path) > 5 && cp_path_has_suffix(path, ".onnx") && cp_path_is_file(path)) return strdup(path);
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? cp_onnx_export_graph(path) : NULL;
}

static cJSON *names(char **v, size_t n) {
  cJSON *a = cJSON_CreateArray();
  for (size_t k = 0; a && k < n; k++) cJSON_AddItemToArray(a, cJSON_CreateString(v[k]));
  return a;
}

static void add_tensors(cJSON *root, const cp_onnx_info *info) {
  cJSON *tensors = cJSON_AddArrayToObject(root, "tensors");
  uint64_t bytes = 0, ext = 0, params = 0;
  for (size_t k = 0; k < info->n_tensors; k++) {
    const cp_onnx_tensor_info *t = &info->tensors[k];
    cJSON *item = cp_describe_tensor(t->name, t->dtype, t->ndim, t->shape, t->nbytes);
    cJSON_AddBoolToObject(item, "external", t->external);
    if (t->external) cJSON_AddNumberToObject(item, "offset", (double)t->offset), ext += t->nbytes;
    cJSON_AddItemToArray(tensors, item);
    bytes += t->nbytes;
    params += t->nbytes / cp_dtype_size(t->dtype);
  }
  cJSON_AddNumberToObject(root, "tensor_count", (double)info->n_tensors);
  cJSON_AddNumberToObject(root, "parameter_count", (double)params);
  cJSON_AddNumberToObject(root, "bytes", (double)bytes);
  cJSON_AddNumberToObject(root, "external_bytes", (double)ext);
}

/* The ctxpatch.* metadata: rule parsed back to JSON (null when absent or not JSON). */
static void add_ctxpatch(cJSON *root, const cp_onnx_info *info) {
  const char *rule = cp_onnx_info_meta(info, "ctxpatch.rule"), *cert = cp_onnx_info_meta(info, "ctxpatch.certificate_sha256");
  const char *fid = cp_onnx_info_meta(info, "ctxpatch.fidelity");
  cJSON *r = rule ? cJSON_Parse(rule) : NULL;
  cJSON_AddItemToObject(root, "rule", r ? r : cJSON_CreateNull());
  if (fid) cJSON_AddStringToObject(root, "fidelity", fid);
  else cJSON_AddNullToObject(root, "fidelity");
  if (cert && cert[0]) cJSON_AddStringToObject(root, "certificate_sha256", cert);
  else cJSON_AddNullToObject(root, "certificate_sha256");
  cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
  for (size_t k = 0; k < info->n_meta; k++) cJSON_AddStringToObject(meta, info->meta_keys[k], info->meta_values[k]);
}

/* "recovered": the model description read back from the graph (ctxpatch/import/onnx_import.h) with
 * its hyper-parameters, the tensors it made and the initializers it left, or {"error": why}. */
static void add_recovered(cJSON *root, const char *model_path) {
  cJSON *r = cJSON_AddObjectToObject(root, "recovered");
  cp_model *m = NULL;
  cp_checkpoint *ck = NULL;
  if (cp_model_open(&m, model_path) < 0 || cp_checkpoint_open(&ck, model_path) < 0) {
    cJSON_AddStringToObject(r, "error", cp_error_message());
    cp_error_clear();
    cp_model_free(m);
    return;
  }
  const cp_onnx_import *im = cp_checkpoint_onnx(ck);
  cJSON_AddStringToObject(r, "naming", cp_onnx_import_naming(im));
  cJSON_AddStringToObject(r, "config", cp_onnx_import_config_source(im));
  cJSON_AddStringToObject(r, "family", cp_family_name(m->family));
  cJSON_AddStringToObject(r, "positions", cp_pos_scheme_name(m->pos));
  const struct { const char *key; double v; } nums[] = {
      {"vocab_size", m->vocab}, {"d_model", m->d_model}, {"n_layers", m->decoder.n_layers},
      {"n_heads", m->n_heads}, {"n_kv_heads", m->n_kv_heads}, {"d_head", m->d_head}, {"d_ff", m->d_ff},
      {"train_len", (double)m->train_len}, {"norm_eps", m->norm_eps}, {"attn_scale", m->attn_scale}};
  for (size_t k = 0; k < sizeof nums / sizeof *nums; k++) cJSON_AddNumberToObject(r, nums[k].key, nums[k].v);
  cJSON_AddStringToObject(r, "norm", m->norm == CP_NORM_RMS ? "rms" : "layer");
  cJSON_AddStringToObject(r, "activation", cp_act_name(m->act));
  if (m->pos == CP_POS_ROPE) {
    cJSON_AddNumberToObject(r, "rope_theta", m->rope_theta);
    cJSON_AddNumberToObject(r, "rope_dims", m->rope_dims);
    cJSON_AddNumberToObject(r, "rope_scale", m->rope_scale);
  }
  cJSON_AddBoolToObject(r, "tied_head", m->lm_head == m->embed);
  if (cp_onnx_import_provenance_count(im)) {
    cJSON *p = cJSON_AddObjectToObject(r, "provenance");
    for (size_t k = 0; k < cp_onnx_import_provenance_count(im); k++) {
      const char *src, *key = cp_onnx_import_provenance(im, k, &src);
      cJSON_AddStringToObject(p, key, src);
    }
  }
  cJSON *t = cJSON_AddArrayToObject(r, "tensors"), *u = cJSON_AddArrayToObject(r, "unrecognised");
  for (size_t k = 0; k < cp_checkpoint_count(ck); k++)
    cJSON_AddItemToArray(t, cJSON_CreateString(cp_checkpoint_tensor(ck, k)->name));
  for (size_t k = 0; k < cp_onnx_import_ignored_count(im); k++)
    cJSON_AddItemToArray(u, cJSON_CreateString(cp_onnx_import_ignored(im, k)));
  cp_checkpoint_free(ck);
  cp_model_free(m);
}

int cp_describe_onnx(cJSON **out, const char *path, const char *model_path) {
  cp_onnx_info info;
  *out = NULL;
  int rc = cp_onnx_read_info(&info, model_path);
  if (rc < 0) return rc;
  cJSON *root = cJSON_CreateObject();
  CP_CHECK_ALLOC_GOTO(root, path);
  cJSON_AddStringToObject(root, "path", path);
  cJSON_AddStringToObject(root, "format", "onnx");
  cJSON_AddStringToObject(root, "model_file", model_path);
  cJSON_AddNumberToObject(root, "ir_version", (double)info.ir_version);
  cJSON_AddNumberToObject(root, "opset", (double)info.opset);
  cJSON_AddStringToObject(root, "producer", info.producer_name);
  cJSON_AddStringToObject(root, "producer_version", info.producer_version);
  cJSON_AddNumberToObject(root, "node_count", (double)info.n_nodes);
  cJSON_AddItemToObject(root, "inputs", names(info.inputs, info.n_inputs));
  cJSON_AddItemToObject(root, "outputs", names(info.outputs, info.n_outputs));
  if (info.data_location) cJSON_AddStringToObject(root, "external_data", info.data_location);
  else cJSON_AddNullToObject(root, "external_data");
  add_ctxpatch(root, &info);
  add_tensors(root, &info);
  add_recovered(root, model_path);
  *out = root;
done:
  cp_onnx_info_free(&info);
  return rc;
}
