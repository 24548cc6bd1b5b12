/* A GGUF checkpoint's tensor names mapped back to HF's through the family table
 * (export/gguf/gguf_names.h). */
#include "export/gguf/gguf_names.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/import/names.h"
#include "ctxpatch/export/gguf_export.h"
#include "ctxpatch/import/gguf_model.h"

void cp_gguf_hf_names_free(cp_gguf_hf_names *m) {
  if (!m) return;
  for (size_t i = 0; m->hf && i < m->n; i++) free(m->hf[i]);
  free(m->hf);
  free(m->rows);
  free(m->transpose);
  free(m->plus_one);
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
  out->hf = calloc(n ? n : 1, sizeof *out->hf);
  out->rows = calloc(n ? n : 1, sizeof *out->rows); /* zeroed: CP_GGUF_ROWS_SAME */
  out->transpose = calloc(n ? n : 1, sizeof *out->transpose);
  out->plus_one = calloc(n ? n : 1, sizeof *out->plus_one);
  CP_CHECK_ALLOC_GOTO(out->hf && out->rows && out->transpose && out->plus_one, cp_checkpoint_dir(ck));
  cp_names gg, hf;
  cp_names_init(&gg, ck, cfg);
  hf = gg;
  hf.gguf = false;
  hf.prefix = hf.fl->prefixes[0];
  static const char *const suffixes[2] = {".weight", ".bias"};
  for (size_t r = 0; r < gg.fl->n_tensors && rc == 0; r++) {
    const cp_family_tensor *row = &gg.fl->tensors[r];
    if (!cp_names_row_applies(&gg, row)) continue;
    int layers = cp_names_layers(cfg, row);
    cp_gguf_rows rows = cp_gguf_rows_of(cfg, row->role);
    for (int l = 0; l < layers && rc == 0; l++)
      for (int s = 0; s < 2; s++) {
        char g[CP_TENSOR_NAME_MAX], h[CP_TENSOR_NAME_MAX];
        size_t i = index_of(ck, cp_names_row(g, &gg, row, l, suffixes[s]));
        if (i == (size_t)-1 || out->hf[i]) continue;
        CP_CHECK_ALLOC_GOTO(out->hf[i] = strdup(cp_names_row(h, &hf, row, l, suffixes[s])), g);
        const cp_tensor *t = cp_checkpoint_tensor(ck, i);
        if ((rc = cp_gguf_rows_check(&rows, t->ndim ? (uint64_t)t->shape[0] : 1, cp_checkpoint_dir(ck), g))) goto done;
        out->rows[i] = rows;
        out->transpose[i] = s == 0 && cp_names_conv1d(&hf, row);
        out->plus_one[i] = s == 0 && cp_family_norm_plus_one(cfg->family, row->role);
        if (out->plus_one[i] && t->dtype != CP_F32) {
          rc = cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': a Gemma norm (1 + w) stored as %s, not float32",
                            cp_checkpoint_dir(ck), g, cp_dtype_name(t->dtype));
          goto done;
        }
        if (out->transpose[i] && t->ndim != 2) {
          rc = cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s': %d dimensions, expected a 2-D matrix",
                            cp_checkpoint_dir(ck), g, t->ndim);
          goto done;
        }
      }
  }
  /* rope_freqs and rope_factors_* were read as the config's rope_scaling (import/gguf/gguf_model.c) */
  for (size_t i = 0; i < n && rc == 0; i++) {
    const char *name = cp_checkpoint_tensor(ck, i)->name;
    if (!out->hf[i] && strcmp(name, "rope_freqs.weight") != 0 && strcmp(name, "rope_factors_long.weight") != 0 &&
        strcmp(name, "rope_factors_short.weight") != 0)
      rc = cp_error_set(CP_EUNSUPPORTED,
                        "%s: tensor '%s': no HF name in the %s layout (refused rather than written "
                        "under its GGUF name)",
                        cp_gguf_path(cp_checkpoint_gguf(ck)), name, cp_family_name(cfg->family));
  }
done:
  cp_hf_config_free(cfg);
  return rc;
}
