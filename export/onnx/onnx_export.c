/* `convert --to onnx` (include/ctxpatch/export/onnx_export.h): the rule resolved as the
 * engine resolves it, the graph written through the builder, the folder assembled atomically. */
#include "ctxpatch/export/onnx_export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/onnx/onnx_decoder.h"
#include "export/onnx/onnx_t5.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/version.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/export/onnx_builder.h"
#include "ctxpatch/import/onnx_import.h"
#include "ctxpatch/formats/onnx.h"

void cp_onnx_export_params_init(cp_onnx_export_params *p) {
  memset(p, 0, sizeof *p);
  p->weight_dtype = CP_F32;
}

int cp_onnx_export_rule(cp_rule *out, const cp_model *m, const cp_rule *rule) {
  bool caller = rule && !cp_rule_is_identity(rule);
  /* The graph holds one frequency table; these pick theirs by the length of each call. */
  if (m->rope_by_length)
    return cp_error_set(CP_EUNSUPPORTED, "onnx export: key 'rope_scaling.type': '%s' is not written as ONNX (its RoPE "
                        "frequencies change with the sequence length of each call; the graph holds one table)",
                        m->rope_type);
  if (caller && m->has_metadata_rule)
    return cp_error_set(CP_ERULE_MODEL, "rule: the model is a patched artifact whose config.json 'ctxpatch.rule' "
                                        "already applies a rule; refusing to combine it with another one");
  if (caller) *out = *rule;
  else if (m->has_metadata_rule) *out = m->metadata_rule;
  else cp_rule_init(out);
  cp_rule_model rm;
  cp_model_rule_model(&rm, m);
  return cp_rule_check_model(out, &rm, "rule");
}

static int add_metadata(cp_onnx_writer *w, const cp_model *m, const cp_rule *rule, const cp_onnx_export_params *p) {
  char *text = cp_rule_to_string(rule);
  CP_CHECK_ALLOC(text, "onnx export: rule");
  int rc = cp_onnx_add_metadata(w, "ctxpatch.rule", text);
  free(text);
  if (rc == 0) rc = cp_onnx_add_metadata(w, "ctxpatch.fidelity", "graph");
  if (rc == 0) rc = cp_onnx_add_metadata(w, "ctxpatch.version", cp_version());
  if (rc == 0)
    rc = cp_onnx_add_metadata(w, "ctxpatch.certificate_sha256", p->certificate_sha256 ? p->certificate_sha256 : "");
  if (rc == 0 && m->family != CP_FAMILY_T5) /* what present.{i}.key holds (export/onnx/onnx_decoder.h) */
    rc = cp_onnx_add_metadata(w, "ctxpatch.kv_cache", cp_onnx_decoder_kv_cache(m, rule));
  /* What reading the graph back needs (ctxpatch/import/onnx_import.h): the config, FIRE's scalars. */
  if (rc == 0 && m->cfg->text) rc = cp_onnx_add_metadata(w, CP_ONNX_META_CONFIG, m->cfg->text);
  if (rc == 0 && m->n_fire) {
    char *fire = cp_onnx_fire_meta(m);
    CP_CHECK_ALLOC(fire, "onnx export: fire");
    rc = cp_onnx_add_metadata(w, CP_ONNX_META_FIRE, fire);
    free(fire);
  }
  return rc;
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

typedef int (*graph_fn)(cp_og *g, const cp_model *m, const cp_rule *rule);

/* onnx/FILE (+ onnx/FILE.data) of the graph `build` makes, into the existing folder sub
 * (= dir/onnx); digests into *files, sizes added to *stats. */
static int write_one(cp_folder_result *files, cp_onnx_export_stats *stats, const char *sub, const char *file,
                     graph_fn build, const cp_model *m, const cp_rule *rule, const cp_onnx_export_params *p) {
  char *path = cp_path_join(sub, file), *data = NULL, rel[128], model_hex[65], data_hex[65];
  cp_onnx_writer *w = NULL;
  cp_og *g = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(path, sub);
  cp_onnx_params op;
  cp_onnx_params_init(&op);
  op.weight_dtype = p->weight_dtype;
  if (p->external_threshold) op.external_threshold = p->external_threshold;
  op.graph_name = m->cfg->model_type[0] ? m->cfg->model_type : "ctxpatch";
  if ((rc = cp_onnx_writer_open(&w, path, &op)) < 0 || (rc = add_metadata(w, m, rule, p)) < 0 ||
      (rc = cp_og_create(&g, w)) < 0)
    goto done;
  cp_og_set_source(g, m);
  if ((rc = build(g, m, rule)) < 0 || (rc = cp_og_status(g)) < 0) goto done;
  rc = cp_onnx_writer_commit(w, model_hex, data_hex);
  w = NULL;
  snprintf(rel, sizeof rel, "onnx/%s", file);
  if (rc < 0 || (rc = cp_folder_result_add(files, rel, model_hex)) < 0) goto done;
  snprintf(rel, sizeof rel, "onnx/%s.data", file);
  if (data_hex[0] && (rc = cp_folder_result_add(files, rel, data_hex)) < 0) goto done;
  if (stats) {
    CP_CHECK_ALLOC_GOTO(data = cp_path_join(sub, rel + 5), sub);
    stats->graphs++;
    stats->model_bytes += file_size(path);
    stats->data_bytes += data_hex[0] ? file_size(data) : 0;
  }
done:
  cp_og_free(g);
  cp_onnx_writer_abort(w);
  free(path);
  free(data);
  return rc;
}

int cp_onnx_write_graph(cp_folder_result *files, cp_onnx_export_stats *stats, const char *dir, const cp_model *m,
                        const cp_rule *rule, const cp_onnx_export_params *p) {
  char *sub = cp_path_join(dir, "onnx");
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(sub, dir);
  if (mkdir(sub, 0755) != 0 && errno != EEXIST) {
    rc = cp_error_set(CP_EIO, "%s: cannot create folder: %s", sub, strerror(errno));
    goto done;
  }
  if (m->family == CP_FAMILY_T5) { /* Optimum's encoder + merged decoder (export/onnx/onnx_t5.h) */
    if ((rc = write_one(files, stats, sub, "encoder_model.onnx", cp_onnx_t5_encoder_graph, m, rule, p)) == 0)
      rc = write_one(files, stats, sub, "decoder_model_merged.onnx", cp_onnx_t5_decoder_graph, m, rule, p);
  } else {
    rc = write_one(files, stats, sub, "model.onnx", cp_onnx_decoder_graph, m, rule, p);
  }
done:
  free(sub);
  return rc;
}

int cp_onnx_export(cp_onnx_export_stats *stats, const char *in, const char *out, const cp_rule *rule,
                   const cp_onnx_export_params *params) {
  cp_onnx_export_params defaults;
  if (!params) cp_onnx_export_params_init(&defaults), params = &defaults;
  cp_model *m = NULL;
  cp_checkpoint *ck = NULL;
  cp_atomic_dir *dir = NULL;
  cp_folder_result files = {0};
  cp_onnx_export_stats st = {0};
  cp_rule eff;
  int rc;
  /* The model as stored (its matrices in the checkpoint's mapping): the writer converts each weight
   * on the way out, so no float32 copy of the model is ever held (docs/perf.md, "Checkpoint conversion"). */
  if ((rc = cp_model_open_stored(&m, in)) < 0 || (rc = cp_onnx_export_rule(&eff, m, rule)) < 0 ||
      (rc = cp_checkpoint_open(&ck, in)) < 0)
    goto done;
  if ((rc = cp_atomic_dir_open(&dir, out, params->replace)) < 0) goto done;
  const char *tmp = cp_atomic_dir_path(dir);
  cp_folder_params fp = {0};
  if ((rc = cp_folder_copy_aux(&files, tmp, ck, &fp)) < 0) goto done;
  st.aux_files = files.n_files;
  if ((rc = cp_onnx_write_graph(&files, &st, tmp, m, &eff, params)) < 0) goto done;
  if (!params->no_manifest && (rc = cp_write_sha256_manifest(tmp, files.files, files.n_files)) < 0) goto done;
  rc = cp_atomic_dir_commit(dir);
  dir = NULL;
  if (rc == 0 && stats) *stats = st;
done:
  cp_atomic_dir_abort(dir);
  cp_checkpoint_free(ck);
  cp_model_free(m);
  cp_folder_result_free(&files);
  return rc;
}
