/* The verify certificate (docs/certificate.md). Deterministic: the same inputs give the same bytes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/file_list.h"
#include "ctxpatch/converters/hf_config.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/verify.h"
#include "converters/rule_json.h"
#include "verify/certificate_json.h"

#define CERTIFICATE_VERSION 1

/* Skipped by the certificate's listing: hidden names, and files below the first level of
 * subfolders (SHA256SUMS lists "onnx/model.onnx" and no deeper). */
static bool listed_file(const cp_file_entry *e) {
  const char *slash = strchr(e->path, '/');
  if (!S_ISREG(e->mode) || e->path[0] == '.' || (slash && (slash[1] == '.' || strchr(slash + 1, '/')))) return false;
  return true;
}

/* Regular files of the model folder (or the one file) and of its subfolders one level down
 * ("onnx/model.onnx"), sorted by relative path, each with its SHA-256, as the OpenSSF
 * model-signing manifest lists them. */
static int add_files(cJSON *files, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
  char hex[65];
  if (!S_ISDIR(st.st_mode)) {
    int rc = cp_sha256_file(hex, path);
    if (rc < 0) return rc;
    const char *slash = strrchr(path, '/');
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", slash ? slash + 1 : path);
    cJSON_AddStringToObject(f, "sha256", hex);
    cJSON_AddItemToArray(files, f);
    return 0;
  }
  cp_file_list l = {0};
  int rc = cp_file_list_make(&l, path);
  for (size_t i = 0; i < l.n && rc == 0; i++) {
    if (!listed_file(&l.items[i])) continue;
    char *full = cp_path_join(path, l.items[i].path);
    rc = full ? cp_sha256_file(hex, full) : cp_error_set(CP_ENOMEM, "out of memory");
    free(full);
    if (rc < 0) break;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", l.items[i].path);
    cJSON_AddStringToObject(f, "sha256", hex);
    cJSON_AddItemToArray(files, f);
  }
  cp_file_list_free(&l);
  return rc;
}

static cJSON *side_results(const cp_verify_result *r, cp_verify_side side) {
  cJSON *obj = cJSON_CreateObject();
  for (int p = 0; p < r->n_probes; p++) {
    cJSON *probe = cJSON_AddArrayToObject(obj, cp_probe_name(r->probes[p]));
    for (int l = 0; l < r->n_lengths; l++) {
      cJSON *c = cJSON_CreateObject();
      cJSON_AddNumberToObject(c, "length", (double)r->lengths[l]);
      cJSON_AddNumberToObject(c, "accuracy", cp_verify_accuracy_at(r, side, p, l));
      cJSON *by = cJSON_AddArrayToObject(c, "correct_by_depth");
      for (int d = 0; d < r->n_depths; d++)
        cJSON_AddItemToArray(by, cJSON_CreateNumber(r->correct[side][((size_t)p * r->n_lengths + l) * r->n_depths + d]));
      cJSON_AddItemToArray(probe, c);
    }
  }
  if (!isnan(r->pmax[side][0])) {
    cJSON *att = cJSON_AddArrayToObject(obj, "attention");
    for (int l = 0; l < r->n_lengths; l++) {
      cJSON *c = cJSON_CreateObject();
      cJSON_AddNumberToObject(c, "length", (double)r->lengths[l]);
      cJSON_AddNumberToObject(c, "pmax", r->pmax[side][l]);
      cJSON_AddNumberToObject(c, "entropy", r->entropy[side][l]);
      cJSON_AddItemToArray(att, c);
    }
  }
  return obj;
}

int cp_certificate_build(cJSON **out, const cp_model *model, const cp_verify_result *r,
                         const cp_verify_thresholds *t, bool pass, char **reasons, int n_reasons,
                         const cp_certificate_info *info) {
  *out = NULL;
  cJSON *c = cJSON_CreateObject();
  if (!c) return cp_error_set(CP_ENOMEM, "out of memory");
  cJSON_AddNumberToObject(c, "certificate_version", CERTIFICATE_VERSION);
  cJSON *tool = cJSON_AddObjectToObject(c, "tool");
  cJSON_AddStringToObject(tool, "name", "ctxpatch");
  cJSON_AddStringToObject(tool, "version", CTXPATCH_VERSION);

  cJSON *m = cJSON_AddObjectToObject(c, "model");
  cJSON_AddStringToObject(m, "family", cp_family_name(model->family));
  if (model->train_len > 0) cJSON_AddNumberToObject(m, "train_len", (double)model->train_len);
  else cJSON_AddNullToObject(m, "train_len");
  int rc = add_files(cJSON_AddArrayToObject(m, "files"), info->model_path);
  if (rc < 0) {
    cJSON_Delete(c);
    return rc;
  }
  cJSON *rule = info->rule ? cp_rule_to_json(info->rule) : cJSON_CreateObject();
  cJSON_AddItemToObject(c, "rule", rule ? rule : cJSON_CreateObject());

  cJSON *probes = cJSON_AddObjectToObject(c, "probes");
  cJSON *names = cJSON_AddArrayToObject(probes, "names");
  for (int p = 0; p < r->n_probes; p++) cJSON_AddItemToArray(names, cJSON_CreateString(cp_probe_name(r->probes[p])));
  cJSON *lengths = cJSON_AddArrayToObject(probes, "lengths");
  for (int l = 0; l < r->n_lengths; l++) cJSON_AddItemToArray(lengths, cJSON_CreateNumber((double)r->lengths[l]));
  cJSON_AddItemToObject(probes, "depths", cJSON_CreateDoubleArray(r->depths, r->n_depths));
  cJSON_AddNumberToObject(probes, "samples", r->samples);
  cJSON_AddNumberToObject(probes, "seed", (double)info->seed);
  cJSON_AddNumberToObject(probes, "max_new_tokens", info->max_new_tokens);

  cJSON *results = cJSON_AddObjectToObject(c, "results");
  cJSON_AddItemToObject(results, "patched", side_results(r, CP_SIDE_PATCHED));
  if (r->has_baseline) cJSON_AddItemToObject(results, "baseline", side_results(r, CP_SIDE_BASELINE));

  cJSON *th = cJSON_AddObjectToObject(c, "thresholds");
  if (t->min_accuracy >= 0) cJSON_AddNumberToObject(th, "min_accuracy", t->min_accuracy);
  else cJSON_AddNullToObject(th, "min_accuracy");
  cJSON *nr = cJSON_AddArrayToObject(th, "no_regression_at");
  for (int i = 0; i < t->n_no_regression; i++) cJSON_AddItemToArray(nr, cJSON_CreateNumber((double)t->no_regression_at[i]));

  cJSON *verdict = cJSON_AddObjectToObject(c, "verdict");
  cJSON_AddStringToObject(verdict, "result", pass ? "pass" : "fail");
  cJSON *why = cJSON_AddArrayToObject(verdict, "reasons");
  for (int i = 0; i < n_reasons; i++) cJSON_AddItemToArray(why, cJSON_CreateString(reasons[i]));

  cJSON *run = cJSON_AddObjectToObject(c, "run");
  cJSON_AddStringToObject(run, "engine", "cpu-fp32");
  cJSON_AddStringToObject(run, "device", info->device ? info->device : "cpu");
  cJSON_AddNumberToObject(run, "threads", info->threads);
  /* No wall time or rate: a patched artifact's config.json and safetensors headers carry this
   * document's digest, so anything that varies between identical runs would make the artifact
   * irreproducible. The CLI prints the timings instead. */
  cJSON_AddNumberToObject(run, "tokens", (double)r->tokens);
  *out = c;
  return 0;
}
