/* The runtime check of a certified artifact into its certificate (patchers/patch_runtime.h). */
#include "patchers/patch_runtime.h"
#include "base/json_strict.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "patchers/patch_json.h"

/* A differing runtime fails the verdict: the artifact would run something other than what was certified. */
static int fail_verdict(cJSON *cert, cp_patch_outcome *out, const cJSON *rc_obj) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(rc_obj, "statement");
  char *line = strdup(cJSON_IsString(st) ? st->valuestring : "runtime check: differs");
  CP_CHECK_ALLOC(line, "runtime check");
  if (CP_ARRAY_RESIZE(out->reasons, (size_t)out->n_reasons + 1, "verify reasons") < 0) {
    free(line);
    return cp_error_code();
  }
  out->reasons[out->n_reasons++] = line;
  out->pass = false;
  out->verdict = CP_VERDICT_FAIL;
  cJSON *verdict = cJSON_GetObjectItemCaseSensitive(cert, "verdict");
  cJSON_ReplaceItemInObjectCaseSensitive(verdict, "result", cJSON_CreateString("fail"));
  cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(verdict, "reasons"), cJSON_CreateString(line));
  return 0;
}

int cp_patch_runtime_check(cJSON *cert, cp_patch_outcome *out, cp_runtime_kind kind, const char *artifact,
                           const cp_model *m, const cp_rule *rule, const cp_patch_params *params) {
  const cp_verify_result *r = out->result;
  cp_runtime_prompts pr = {r->probes,    r->n_probes,          r->lengths,
                           r->n_lengths, params->verify->seed, params->verify->threads};
  cJSON *obj = NULL;
  bool differs = false;
  const char *weights = NULL; /* a GGUF says it itself */
  if (kind == CP_RUNTIME_ONNXRUNTIME && params->inplace) weights = params->inplace->weights;
  else if (kind == CP_RUNTIME_ONNXRUNTIME && params->onnx)
    weights = params->onnx->weight_dtype == CP_F16 ? "f16" : params->onnx->weight_dtype == CP_BF16 ? "bf16" : "f32";
  int rc = cp_runtime_check(&obj, &differs, params->runtime, kind, artifact, m, rule, params->tok, &pr, weights);
  if (rc < 0) return rc;
  if (kind == CP_RUNTIME_ONNXRUNTIME && params->inplace) cJSON_AddStringToObject(obj, "graph", "the written graph");
  cJSON_AddItemToObject(cert, "runtime_check", obj);
  if (differs && (rc = fail_verdict(cert, out, obj)) < 0) return rc;
  char *text = cp_json_print(cert, true);
  CP_CHECK_ALLOC(text, "certificate");
  free(out->certificate_json);
  out->certificate_json = text;
  return 0;
}

int cp_patch_input_equivalence(cJSON **obj, const cp_model *m, const cp_patch_params *params) {
  const cp_verify_params *vp = params->verify;
  const cp_patch_inplace *ip = params->inplace;
  cp_runtime_prompts pr = {vp->probes, vp->n_probes, vp->lengths, vp->n_lengths, vp->seed, vp->threads};
  cp_rule *none = malloc(sizeof *none); /* tens of KiB: not on the stack */
  bool differs = false;
  char line[400];
  *obj = NULL;
  CP_CHECK_ALLOC(none, "runtime check");
  cp_rule_init(none);
  int rc = cp_runtime_check(obj, &differs, params->runtime, CP_RUNTIME_ONNXRUNTIME, ip->input_graph, m, none,
                            params->tok, &pr, ip->weights);
  free(none);
  if (rc < 0) return rc;
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(*obj, "max_abs_logit_diff");
  const cJSON *tol = cJSON_GetObjectItemCaseSensitive(*obj, "tolerance");
  const cJSON *at = cJSON_GetObjectItemCaseSensitive(*obj, "max_diff_at");
  double diff = cJSON_IsNumber(d) ? d->valuedouble : NAN, t = cJSON_IsNumber(tol) ? tol->valuedouble : 0;
  if (differs) {
    const cJSON *pi = cJSON_GetObjectItemCaseSensitive(at, "prompt"),
                *pp = cJSON_GetObjectItemCaseSensitive(at, "position"),
                *pn = cJSON_GetObjectItemCaseSensitive(at, "tokens");
    rc = cp_error_set(CP_EVERIFY_RUNTIME,
                      "%s: onnxruntime computes other logits on this graph than the ctxpatch engine on the model "
                      "recovered from it (max |diff| %.3g > %g, at position %d of prompt %d, %d tokens): the "
                      "recovery misses part of what the graph computes, so nothing is certified or written",
                      ip->input_graph, diff, t, cJSON_IsNumber(pp) ? pp->valueint : -1,
                      cJSON_IsNumber(pi) ? pi->valueint : -1, cJSON_IsNumber(pn) ? pn->valueint : -1);
    cJSON_Delete(*obj);
    *obj = NULL;
    return rc;
  }
  cJSON_AddStringToObject(*obj, "graph", "the input graph");
  /* check --rerun recovers the certified model from IN again (the engine cannot open OUT's
   * rewritten graph): where it was and its digest */
  char real[PATH_MAX], hex[65];
  cp_onnx_model *g = NULL;
  if (!realpath(ip->input_graph, real)) rc = cp_error_set(CP_EIO, "%s: cannot resolve the path", ip->input_graph);
  else rc = cp_onnx_file_digest(hex, &g, ip->input_graph);
  cp_onnx_model_free(g);
  if (rc < 0) {
    cJSON_Delete(*obj);
    *obj = NULL;
    return rc;
  }
  cJSON_AddStringToObject(*obj, "path", real);
  cJSON_AddStringToObject(*obj, "graph_sha256", hex);
  if (cJSON_IsNumber(d))
    snprintf(line, sizeof line,
             "onnxruntime computes on the input graph the logits the ctxpatch engine computes on the model "
             "recovered from it (max |diff| %.3g <= %g)",
             diff, t);
  else snprintf(line, sizeof line, "%s", CP_INPUT_NOT_COMPARED);
  cJSON_ReplaceItemInObjectCaseSensitive(*obj, "statement", cJSON_CreateString(line));
  return 0;
}

int cp_patch_runtime_check_gguf(cJSON *cert, cp_patch_outcome *out, const char *tmp, const char *in, const cJSON *block,
                                uint32_t gguf_type, int64_t train_len, const cp_patch_params *params) {
  if (!cp_runtime_installed(params->runtime, CP_RUNTIME_LLAMACPP)) /* "not checked": no file needed */
    return cp_patch_runtime_check(cert, out, CP_RUNTIME_LLAMACPP, in, NULL, NULL, params);
  cp_model *m = NULL;
  char *path = cp_path_join(tmp, "runtime-check.gguf");
  int rc = 0;
  CP_CHECK_ALLOC(path, tmp);
  /* The engine side opens the same file, its ctxpatch.rule applied: the two runtimes read one set of bytes. */
  if ((rc = cp_patch_write_gguf(tmp, in, path, block, false, gguf_type, train_len)) == 0 &&
      (rc = cp_model_open_stored(&m, path)) == 0)
    rc = cp_patch_runtime_check(cert, out, CP_RUNTIME_LLAMACPP, path, m, NULL, params);
  cp_model_free(m);
  unlink(path);
  free(path);
  return rc;
}
