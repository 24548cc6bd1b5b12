/* The config.json beside a graph with Hugging Face names, as a cross-check of what the graph's
 * recovery gave (import/onnx/onnx_import_priv.h, cp_onnx_hf_config_check). The graph decides: the
 * names and the config only say what the model should be (issue 33), so a config.json that
 * describes another model refuses the graph rather than overriding it. */
#include <stdio.h>
#include <stdlib.h>

#include "import/onnx/onnx_import_priv.h"
#include "ctxpatch/base/error.h"

int cp_onnx_hf_config_check(cp_onnx_import *im, const cp_hf_config *c) {
  char *text = NULL, *source = NULL;
  size_t len = 0;
  cp_hf_config *f = NULL;
  int rc = cp_oi_config_beside(im, &text, &len, &source);
  if (rc) return rc == 1 ? 0 : rc; /* none: nothing to check */
  if ((rc = cp_hf_config_parse(&f, text, len, source)) < 0) goto done;
  if (f->family != c->family) {
    rc = cp_error_set(CP_EONNX_METADATA, "%s: key 'model_type' is '%s' (family %s) but the graph computes a %s", source,
                      f->model_type, cp_family_name(f->family), cp_family_name(c->family));
    goto done;
  }
  bool gpt2 = c->family == CP_FAMILY_GPT2;
  /* NULL: not compared. GPT-2 derives kv heads and d_head from n_head; a plain-op Llama holds no
   * training length (its RoPE works at any position). */
  const struct {
    const char *key;
    long long have, want;
  } keys[] = {{"vocab_size", f->vocab_size, c->vocab_size},
              {gpt2 ? "n_embd" : "hidden_size", f->d_model, c->d_model},
              {gpt2 ? "n_layer" : "num_hidden_layers", f->n_layers, c->n_layers},
              {gpt2 ? "n_head" : "num_attention_heads", f->n_heads, c->n_heads},
              {gpt2 ? NULL : "num_key_value_heads", f->n_kv_heads, c->n_kv_heads},
              {gpt2 ? NULL : "head_dim", f->d_head, c->d_head},
              {gpt2 ? "n_inner" : "intermediate_size", f->d_ff, c->d_ff},
              {gpt2 ? "n_positions" : NULL, f->train_len, c->train_len}};
  char agreed[512] = "";
  size_t at = 0;
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    if (!keys[k].key) continue;
    if (keys[k].have != keys[k].want) {
      rc = cp_error_set(CP_EONNX_METADATA,
                        "%s: key '%s' gives %lld but the graph gives %lld (the config.json "
                        "beside the graph describes another model)",
                        source, keys[k].key, keys[k].have, keys[k].want);
      goto done;
    }
    int n = snprintf(agreed + at, sizeof agreed - at, "%s%s %lld", at ? ", " : "", keys[k].key, keys[k].want);
    if (n > 0 && (size_t)n < sizeof agreed - at) at += (size_t)n;
  }
  rc = cp_oi_prov(im, "config.json", "%s agrees: model_type %s, %s", source, f->model_type, agreed);
done:
  cp_hf_config_free(f);
  free(text);
  free(source);
  return rc;
}
