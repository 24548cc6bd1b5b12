/* ctxpatch's own ONNX initializer names (include/ctxpatch/model/onnx_names.h): one row per role and
 * stack, the decoder-only graph's and T5's. */
#include "ctxpatch/model/onnx_names.h"

#include <stdio.h>
#include <string.h>

#define ANY (-1) /* a row of either stack (T5's embedding and head, in both graphs) */
#define DEC CP_STACK_DECODER
#define ENC CP_STACK_ENCODER

typedef struct {
  cp_tensor_role role;
  int stack;    /* cp_stack_kind, or ANY */
  cp_when when; /* CP_WHEN_ALWAYS, or FIRE's CP_WHEN_SHARED / CP_WHEN_PER_LAYER */
  const char *name;
} onnx_row;

/* Both namings: the output head, outside any stack. */
static const onnx_row k_common[] = {
    {CP_ROLE_LM_HEAD, ANY, CP_WHEN_ALWAYS, "lm_head"},
};

/* export/onnx/onnx_decoder.c, onnx_attention.c (FIRE) and the builder's FFN. */
static const onnx_row k_decoder[] = {
    {CP_ROLE_EMBED, DEC, CP_WHEN_ALWAYS, "model.embed_tokens"},
    {CP_ROLE_EMBED_NORM, DEC, CP_WHEN_ALWAYS, "model.embed_norm"},
    {CP_ROLE_POS_EMBED, DEC, CP_WHEN_ALWAYS, "model.embed_positions"},
    {CP_ROLE_ATTN_NORM, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn_norm"},
    {CP_ROLE_Q, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn.q"},
    {CP_ROLE_K, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn.k"},
    {CP_ROLE_V, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn.v"},
    {CP_ROLE_O, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn.o"},
    {CP_ROLE_Q_NORM, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn.q_norm"},
    {CP_ROLE_K_NORM, DEC, CP_WHEN_ALWAYS, "model.layers.%d.attn.k_norm"},
    {CP_ROLE_FFN_NORM, DEC, CP_WHEN_ALWAYS, "model.layers.%d.ffn_norm"},
    {CP_ROLE_POST_ATTN_NORM, DEC, CP_WHEN_ALWAYS, "model.layers.%d.post_attn_norm"}, /* Gemma 2 */
    {CP_ROLE_POST_FFN_NORM, DEC, CP_WHEN_ALWAYS, "model.layers.%d.post_ffn_norm"},
    {CP_ROLE_GATE, DEC, CP_WHEN_ALWAYS, "model.layers.%d.mlp.gate"},
    {CP_ROLE_UP, DEC, CP_WHEN_ALWAYS, "model.layers.%d.mlp.up"},
    {CP_ROLE_DOWN, DEC, CP_WHEN_ALWAYS, "model.layers.%d.mlp.down"},
    {CP_ROLE_FIRE, DEC, CP_WHEN_SHARED, "model.fire"},
    {CP_ROLE_FIRE, DEC, CP_WHEN_PER_LAYER, "model.layers.%d.fire"},
    {CP_ROLE_FINAL_NORM, DEC, CP_WHEN_ALWAYS, "model.norm"},
};

/* export/onnx/onnx_t5.c: each stack's tensors under "encoder." / "decoder.". */
#define T5_STACK(s, st)                                                  \
  {CP_ROLE_ATTN_NORM, st, CP_WHEN_ALWAYS, s ".block.%d.self_attn.norm"}, \
      {CP_ROLE_Q, st, CP_WHEN_ALWAYS, s ".block.%d.self_attn.q"},        \
      {CP_ROLE_K, st, CP_WHEN_ALWAYS, s ".block.%d.self_attn.k"},        \
      {CP_ROLE_V, st, CP_WHEN_ALWAYS, s ".block.%d.self_attn.v"},        \
      {CP_ROLE_O, st, CP_WHEN_ALWAYS, s ".block.%d.self_attn.o"},        \
      {CP_ROLE_FFN_NORM, st, CP_WHEN_ALWAYS, s ".block.%d.mlp.norm"},    \
      {CP_ROLE_GATE, st, CP_WHEN_ALWAYS, s ".block.%d.mlp.gate"},        \
      {CP_ROLE_UP, st, CP_WHEN_ALWAYS, s ".block.%d.mlp.up"},            \
      {CP_ROLE_DOWN, st, CP_WHEN_ALWAYS, s ".block.%d.mlp.down"},        \
      {CP_ROLE_FINAL_NORM, st, CP_WHEN_ALWAYS, s ".final.norm"}, {       \
    CP_ROLE_REL_BIAS, st, CP_WHEN_ALWAYS, s ".relative_attention_bias"   \
  }

static const onnx_row k_t5[] = {
    {CP_ROLE_EMBED, ANY, CP_WHEN_ALWAYS, "shared"},
    T5_STACK("encoder", ENC),
    T5_STACK("decoder", DEC),
    {CP_ROLE_CROSS_NORM, DEC, CP_WHEN_ALWAYS, "decoder.block.%d.cross_attn.norm"},
    {CP_ROLE_CQ, DEC, CP_WHEN_ALWAYS, "decoder.block.%d.cross_attn.q"},
    {CP_ROLE_CK, DEC, CP_WHEN_ALWAYS, "decoder.block.%d.cross_attn.k"},
    {CP_ROLE_CV, DEC, CP_WHEN_ALWAYS, "decoder.block.%d.cross_attn.v"},
    {CP_ROLE_CO, DEC, CP_WHEN_ALWAYS, "decoder.block.%d.cross_attn.o"},
};

static const char *find(const onnx_row *rows, size_t n, cp_tensor_role role, cp_stack_kind stack, bool shared) {
  for (size_t i = 0; i < n; i++) {
    const onnx_row *r = &rows[i];
    if (r->role != role || (r->stack != ANY && r->stack != (int)stack)) continue;
    if (r->when == CP_WHEN_ALWAYS || (r->when == CP_WHEN_SHARED) == shared) return r->name;
  }
  return NULL;
}

const char *cp_onnx_name_pattern(cp_family family, cp_tensor_role role, cp_stack_kind stack, bool shared) {
  const char *p = family == CP_FAMILY_T5 ? find(k_t5, sizeof k_t5 / sizeof *k_t5, role, stack, shared)
                                         : find(k_decoder, sizeof k_decoder / sizeof *k_decoder, role, stack, shared);
  return p ? p : find(k_common, sizeof k_common / sizeof *k_common, role, stack, shared);
}

const char *cp_onnx_name(char buf[CP_TENSOR_NAME_MAX], cp_family family, cp_tensor_role role, cp_stack_kind stack,
                         int layer, const char *suffix) {
  const char *p = cp_onnx_name_pattern(family, role, stack, layer == CP_ONNX_NO_LAYER);
  const char *at = p ? strstr(p, "%d") : NULL;
  buf[0] = 0;
  if (!p) return NULL;
  if (at) snprintf(buf, CP_TENSOR_NAME_MAX, "%.*s%d%s%s", (int)(at - p), p, layer, at + 2, suffix);
  else snprintf(buf, CP_TENSOR_NAME_MAX, "%s%s", p, suffix);
  return buf;
}

/* A root is a pattern's text before its first '.' (the whole pattern when it has none). */
static bool under_root(const char *name, const char *pattern) {
  size_t n = strcspn(pattern, ".");
  return !strncmp(name, pattern, n) && name[n] == '.';
}

bool cp_onnx_name_own(const char *name) {
  for (size_t i = 0; i < sizeof k_decoder / sizeof *k_decoder; i++)
    if (under_root(name, k_decoder[i].name)) return true;
  for (size_t i = 0; i < sizeof k_common / sizeof *k_common; i++)
    if (under_root(name, k_common[i].name)) return true;
  return false;
}
