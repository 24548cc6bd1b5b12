/* onnxruntime-genai's genai_config.json beside a recovered graph as a cross-check of what the
 * graph gave (import/onnx/onnx_import_priv.h, cp_onnx_genai_check): each size it states must equal
 * the recovered one, and the agreement is recorded in the provenance. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "import/onnx/onnx_import_priv.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"

#define GENAI_MAX ((size_t)1 << 20) /* genai_config.json bytes read at most */

int cp_onnx_genai_check(cp_onnx_import *im, const cp_hf_config *c) {
  char *dir = strdup(im->path), *slash, *path = NULL, *text = NULL;
  size_t len = 0;
  cJSON *root = NULL;
  struct stat st;
  int rc = 0;
  CP_CHECK_ALLOC(dir, im->path);
  slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else strcpy(dir, ".");
  CP_CHECK_ALLOC_GOTO(path = cp_path_join(dir, "genai_config.json"), im->path);
  if (stat(path, &st) != 0) goto done; /* none: nothing to check */
  if ((rc = cp_read_file(&text, &len, path, GENAI_MAX)) < 0) goto done;
  cp_input_note(path);
  if (!(root = cJSON_ParseWithLength(text, len))) {
    rc = cp_error_set(CP_ECFG_JSON, "%s: not JSON", path);
    goto done;
  }
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *dec = cJSON_GetObjectItemCaseSensitive(model, "decoder");
  const struct { const cJSON *obj; const char *key, *full; long long want; } keys[] = {
      {model, "vocab_size", "model.vocab_size", c->vocab_size},
      {model, "context_length", "model.context_length", c->train_len},
      {dec, "num_hidden_layers", "model.decoder.num_hidden_layers", c->n_layers},
      {dec, "num_attention_heads", "model.decoder.num_attention_heads", c->n_heads},
      {dec, "num_key_value_heads", "model.decoder.num_key_value_heads", c->n_kv_heads},
      {dec, "head_size", "model.decoder.head_size", c->d_head},
      {dec, "hidden_size", "model.decoder.hidden_size", c->d_model}};
  char agreed[512] = "";
  size_t at = 0;
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(keys[k].obj, keys[k].key);
    if (!v) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)keys[k].want) {
      rc = cp_error_set(CP_EONNX_METADATA, "%s: key '%s' is %s%g but the graph gives %lld", path, keys[k].full,
                        cJSON_IsNumber(v) ? "" : "not a number: ", cJSON_IsNumber(v) ? v->valuedouble : 0.0,
                        keys[k].want);
      goto done;
    }
    int n = snprintf(agreed + at, sizeof agreed - at, "%s%s %lld", at ? ", " : "", keys[k].full, keys[k].want);
    if (n > 0 && (size_t)n < sizeof agreed - at) at += (size_t)n;
  }
  if (at) rc = cp_oi_prov(im, "genai_config.json", "agrees: %s", agreed);
done:
  cJSON_Delete(root);
  free(text);
  free(path);
  free(dir);
  return rc;
}
