/* A GGUF checkpoint's tensor names mapped back to HF's through the family table
 * (converters/gguf_names.h). */
#include "converters/gguf_names.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/converters/families.h"
#include "ctxpatch/converters/gguf_model.h"

void cp_gguf_hf_names_free(cp_gguf_hf_names *m) {
  if (!m) return;
  for (size_t i = 0; m->hf && i < m->n; i++) free(m->hf[i]);
  free(m->hf);
  free(m->heads);
  memset(m, 0, sizeof *m);
}

/* Index of tensor `name` in ck, or (size_t)-1. */
static size_t index_of(const cp_checkpoint *ck, const char *name) {
  const cp_tensor *t = cp_checkpoint_find(ck, name);
  for (size_t i = 0; t && i < cp_checkpoint_count(ck); i++)
    if (cp_checkpoint_tensor(ck, i) == t) return i;
  return (size_t)-1;
}

int cp_gguf_hf_names_make(cp_gguf_hf_names *out, const cp_checkpoint *ck) {
  memset(out, 0, sizeof *out);
  cp_hf_config *cfg = NULL;
  int rc = cp_checkpoint_config(&cfg, ck, cp_checkpoint_dir(ck));
  if (rc) return rc;
  size_t n = cp_checkpoint_count(ck);
  out->n = n;
  out->d_head = cfg->d_head;
  out->hf = calloc(n ? n : 1, sizeof *out->hf);
  out->heads = calloc(n ? n : 1, sizeof *out->heads);
  CP_CHECK_ALLOC_GOTO(out->hf && out->heads, cp_checkpoint_dir(ck));
  cp_names gg, hf;
  cp_names_init(&gg, ck, cfg);
  hf = gg;
  hf.gguf = false;
  hf.prefix = hf.fl->prefixes[0];
  static const char *const suffixes[2] = {".weight", ".bias"};
  for (size_t r = 0; r < gg.fl->n_tensors && rc == 0; r++) {
    const cp_family_tensor *row = &gg.fl->tensors[r];
    if (!cp_names_row_applies(&gg, row)) continue;
    int layers = strstr(row->gguf, "%d") ? cfg->n_layers : 1;
    int heads = cfg->pos != CP_POS_ROPE ? 0 : row->role == CP_ROLE_Q ? cfg->n_heads
              : row->role == CP_ROLE_K ? cfg->n_kv_heads : 0;
    for (int l = 0; l < layers && rc == 0; l++)
      for (int s = 0; s < 2; s++) {
        char g[CP_TENSOR_NAME_MAX], h[CP_TENSOR_NAME_MAX];
        size_t i = index_of(ck, cp_names_row(g, &gg, row, l, suffixes[s]));
        if (i == (size_t)-1 || out->hf[i]) continue;
        CP_CHECK_ALLOC_GOTO(out->hf[i] = strdup(cp_names_row(h, &hf, row, l, suffixes[s])), g);
        out->heads[i] = heads;
      }
  }
done:
  cp_hf_config_free(cfg);
  return rc;
}
