/* The runtime check of a certified artifact into its certificate (patchers/patch_runtime.h). */
#include "patchers/patch_runtime.h"
#include "base/json_strict.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
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
  if (kind == CP_RUNTIME_ONNXRUNTIME && params->onnx)
    weights = params->onnx->weight_dtype == CP_F16 ? "f16" : params->onnx->weight_dtype == CP_BF16 ? "bf16" : "f32";
  int rc = cp_runtime_check(&obj, &differs, params->runtime, kind, artifact, m, rule, params->tok, &pr, weights);
  if (rc < 0) return rc;
  cJSON_AddItemToObject(cert, "runtime_check", obj);
  if (differs && (rc = fail_verdict(cert, out, obj)) < 0) return rc;
  char *text = cp_json_print(cert, true);
  CP_CHECK_ALLOC(text, "certificate");
  free(out->certificate_json);
  out->certificate_json = text;
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
