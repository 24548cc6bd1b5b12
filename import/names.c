/* Tensor names resolved against one checkpoint (include/ctxpatch/import/names.h): the family
 * table's rows (model/families.c) under the body prefix the checkpoint uses, with the config's row
 * conditions. The loader, the exporters and the baker all name tensors through it. */
#include "ctxpatch/import/names.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

const char *cp_names_format(char buf[CP_TENSOR_NAME_MAX], const char *prefix, const char *pattern, int layer,
                            const char *suffix) {
  const char *at = strstr(pattern, "%d");
  if (at)
    snprintf(buf, CP_TENSOR_NAME_MAX, "%s%.*s%d%s%s", prefix, (int)(at - pattern), pattern, layer, at + 2, suffix);
  else
    snprintf(buf, CP_TENSOR_NAME_MAX, "%s%s%s", prefix, pattern, suffix);
  return buf;
}

const char *cp_names_row(char buf[CP_TENSOR_NAME_MAX], const cp_names *nm, const cp_family_tensor *row,
                         int layer, const char *suffix) {
  const char *prefix = row->role == CP_ROLE_LM_HEAD || nm->gguf ? "" : nm->prefix;
  const char *name = nm->gguf ? row->gguf : row->hf;
  assert(name);
  return cp_names_format(buf, prefix, name, layer, suffix);
}

int cp_names_layers(const cp_hf_config *cfg, const cp_family_tensor *row) {
  if (!strstr(row->hf, "%d")) return 1;
  return row->stack == CP_STACK_DECODER && cfg->n_decoder_layers > 0 ? cfg->n_decoder_layers : cfg->n_layers;
}

bool cp_names_conv1d(const cp_names *nm, const cp_family_tensor *row) {
  return nm->fl->conv1d && !nm->gguf && row->cols != CP_DIM_NONE && row->role != CP_ROLE_EMBED &&
         row->role != CP_ROLE_POS_EMBED && row->role != CP_ROLE_LM_HEAD;
}

bool cp_names_row_applies(const cp_names *nm, const cp_family_tensor *row) {
  if (nm->gguf && !row->gguf) return false;
  switch (row->when) {
    case CP_WHEN_ALWAYS: return true;
    case CP_WHEN_GATED: return nm->gated;
    case CP_WHEN_NOT_GATED: return !nm->gated;
    case CP_WHEN_SHARED: return nm->fire_shared;
    case CP_WHEN_PER_LAYER: return !nm->fire_shared;
    case CP_WHEN_QK_NORM: return nm->qk_norm;
    case CP_WHEN_SANDWICH: return nm->sandwich;
    case CP_WHEN_NOT_SANDWICH: return !nm->sandwich;
  }
  return false;
}

const cp_family_tensor *cp_names_get(char buf[CP_TENSOR_NAME_MAX], const cp_names *nm, cp_tensor_role role,
                                     cp_stack_kind stack, int layer, const char *suffix) {
  const cp_family_tensor *first = NULL;
  for (size_t i = 0; i < nm->fl->n_tensors; i++) {
    const cp_family_tensor *row = &nm->fl->tensors[i];
    if (row->role != role || row->stack != stack || !cp_names_row_applies(nm, row)) continue;
    if (!first) first = row;
    if (cp_checkpoint_find(nm->ck, cp_names_row(buf, nm, row, layer, suffix))) return row;
  }
  if (first) cp_names_row(buf, nm, first, layer, suffix);
  return first;
}

void cp_names_init(cp_names *out, const cp_checkpoint *ck, const cp_hf_config *cfg) {
  memset(out, 0, sizeof *out);
  out->fl = cp_family_layout_of(cfg->family);
  out->ck = ck;
  out->fire_shared = cfg->fire_shared;
  out->qk_norm = cfg->qk_norm;
  /* T5's feed_forward_proj is "ACT" or "gated-ACT"; Llama-named FFNs (Phi-3's, Gemma's) always gate. */
  out->gated = cfg->family == CP_FAMILY_T5 ? strncmp(cfg->activation, "gated-", 6) == 0
                                           : cfg->family == CP_FAMILY_LLAMA || cfg->family == CP_FAMILY_FIRE ||
                                             cfg->family == CP_FAMILY_PHI3 || cfg->family == CP_FAMILY_GEMMA ||
                                             cfg->family == CP_FAMILY_OLMO2;
  out->sandwich = cfg->sandwich_norms;
  out->prefix = out->fl->prefixes[0];
  out->gguf = cp_checkpoint_gguf(ck) != NULL;
  if (out->gguf) return;
  char buf[CP_TENSOR_NAME_MAX];
  for (int i = 0; i < 2 && out->fl->prefixes[i]; i++) {
    out->prefix = out->fl->prefixes[i];
    if (cp_names_get(buf, out, CP_ROLE_EMBED, CP_STACK_DECODER, 0, ".weight") &&
        cp_checkpoint_find(ck, buf))
      return;
  }
  out->prefix = out->fl->prefixes[0];
}

cp_bias_rule cp_names_bias(const cp_family_tensor *row, const cp_hf_config *cfg) {
  switch (row->bias) {
    case CP_BIAS_UNLESS_NO_BIAS: return cfg->no_bias ? CP_BIAS_NONE : CP_BIAS_OPTIONAL;
    case CP_BIAS_IF_QKV_BIAS: return cfg->qkv_bias ? CP_BIAS_REQUIRED : CP_BIAS_NONE;
    default: return row->bias;
  }
}

size_t cp_names_next_slopes(const cp_names *nm, size_t from) {
  const char *suffix = nm->fl->slopes_suffix;
  if (!suffix) return (size_t)-1;
  size_t sl = strlen(suffix);
  for (size_t i = from; i < cp_checkpoint_count(nm->ck); i++) {
    const char *name = cp_checkpoint_tensor(nm->ck, i)->name;
    size_t len = strlen(name);
    if (len >= sl && strcmp(name + len - sl, suffix) == 0) return i;
  }
  return (size_t)-1;
}
