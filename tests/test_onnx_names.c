/* ctxpatch's ONNX initializer names (ctxpatch/model/onnx_names.h), which the exporter writes and the
 * reader finds by: every tensor the family table gives a decoder-only or T5 model has a name, no two
 * tensors share one (a reader taking the wrong tensor), the names docs/onnx.md and
 * ctxpatch/import/onnx_import.h promise are these, and cp_onnx_name_own accepts exactly the
 * decoder-only roots. */
#include <stdbool.h>
#include <string.h>

#include "ctxpatch/model/families.h"
#include "ctxpatch/model/onnx_names.h"
#include "test.h"

#define LAYERS 3
#define MAX_NAMES 512

typedef struct {
  char name[MAX_NAMES][CP_TENSOR_NAME_MAX];
  int n;
} name_set;

/* Adds `name`; false when it is there already. */
static bool add_unique(name_set *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->name[i], name)) return false;
  if (s->n < MAX_NAMES) strcpy(s->name[s->n++], name);
  return true;
}

/* Whether several tensors of the family legitimately share this row's name (T5's embedding, stored
 * once as "shared" for both stacks). */
static bool shared_row(cp_family f, const cp_family_tensor *row) {
  return f == CP_FAMILY_T5 && row->role == CP_ROLE_EMBED && row->stack == CP_STACK_ENCODER;
}

static void check_family(cp_family f) {
  static name_set s;
  const cp_family_layout *fl = cp_family_layout_of(f);
  char buf[CP_TENSOR_NAME_MAX];
  s.n = 0;
  for (size_t i = 0; i < fl->n_tensors; i++) {
    const cp_family_tensor *row = &fl->tensors[i];
    static const cp_tensor_role qkv[3] = {CP_ROLE_Q, CP_ROLE_K, CP_ROLE_V}, gate_up[2] = {CP_ROLE_GATE, CP_ROLE_UP};
    /* the export writes a fused q/k/v as q, k and v, Phi-3's fused gate/up as gate and up */
    const cp_tensor_role *roles = row->role == CP_ROLE_QKV ? qkv : row->role == CP_ROLE_GATE_UP ? gate_up : &row->role;
    int n_roles = row->role == CP_ROLE_QKV ? 3 : row->role == CP_ROLE_GATE_UP ? 2 : 1;
    bool per_layer = strstr(row->hf, "%d") != NULL;
    for (int r = 0; r < n_roles; r++)
      for (int l = 0; l < (per_layer ? LAYERS : 1); l++) {
        int layer = row->role == CP_ROLE_FIRE && row->when == CP_WHEN_SHARED ? CP_ONNX_NO_LAYER : l;
        const char *n = cp_onnx_name(buf, f, roles[r], row->stack, layer, ".weight");
        CHECK_MSG(n != NULL, "%s: row %s has no ONNX name", cp_family_name(f), row->hf);
        if (!n || shared_row(f, row)) continue;
        /* alternatives of one role (T5's gated / plain up) name the same tensor */
        bool alternative = false;
        for (size_t j = 0; j < i; j++)
          alternative |= fl->tensors[j].role == row->role && fl->tensors[j].stack == row->stack;
        CHECK_MSG(add_unique(&s, n) || alternative, "%s: '%s' names two tensors", cp_family_name(f), n);
        CHECK_MSG(f == CP_FAMILY_T5 || cp_onnx_name_own(n), "%s: '%s' is outside the own roots",
                  cp_family_name(f), n);
      }
  }
}

static void check_spelling(cp_family f, cp_tensor_role role, cp_stack_kind stack, int layer, const char *suffix,
                           const char *want) {
  char buf[CP_TENSOR_NAME_MAX];
  const char *got = cp_onnx_name(buf, f, role, stack, layer, suffix);
  CHECK_MSG(got && !strcmp(got, want), "got '%s', want '%s'", got ? got : "(none)", want);
}

int main(void) {
  for (int f = 0; f < CP_FAMILY_COUNT; f++) check_family((cp_family)f);

  /* the names documented for readers of the graphs (docs/onnx.md, onnx_import.h) */
  const cp_stack_kind D = CP_STACK_DECODER, E = CP_STACK_ENCODER;
  check_spelling(CP_FAMILY_LLAMA, CP_ROLE_EMBED, D, 0, ".weight", "model.embed_tokens.weight");
  check_spelling(CP_FAMILY_LLAMA, CP_ROLE_Q, D, 2, ".weight", "model.layers.2.attn.q.weight");
  check_spelling(CP_FAMILY_BLOOM, CP_ROLE_V, D, 11, ".bias", "model.layers.11.attn.v.bias");
  check_spelling(CP_FAMILY_LLAMA, CP_ROLE_GATE, D, 0, "", "model.layers.0.mlp.gate");
  check_spelling(CP_FAMILY_LLAMA, CP_ROLE_LM_HEAD, D, 0, ".weight", "lm_head.weight");
  check_spelling(CP_FAMILY_FIRE, CP_ROLE_FIRE, D, 1, ".mlp.0.weight", "model.layers.1.fire.mlp.0.weight");
  check_spelling(CP_FAMILY_FIRE, CP_ROLE_FIRE, D, CP_ONNX_NO_LAYER, ".c", "model.fire.c");
  check_spelling(CP_FAMILY_T5, CP_ROLE_EMBED, E, 0, ".weight", "shared.weight");
  check_spelling(CP_FAMILY_T5, CP_ROLE_EMBED, D, 0, ".weight", "shared.weight");
  check_spelling(CP_FAMILY_T5, CP_ROLE_Q, E, 1, ".weight", "encoder.block.1.self_attn.q.weight");
  check_spelling(CP_FAMILY_T5, CP_ROLE_CO, D, 0, ".weight", "decoder.block.0.cross_attn.o.weight");
  check_spelling(CP_FAMILY_T5, CP_ROLE_REL_BIAS, E, 0, ".weight", "encoder.relative_attention_bias.weight");
  check_spelling(CP_FAMILY_T5, CP_ROLE_FINAL_NORM, D, 0, ".weight", "decoder.final.norm.weight");
  check_spelling(CP_FAMILY_T5, CP_ROLE_LM_HEAD, D, 0, ".weight", "lm_head.weight");

  /* tensors an export does not write */
  char buf[CP_TENSOR_NAME_MAX];
  CHECK(cp_onnx_name(buf, CP_FAMILY_BLOOM, CP_ROLE_QKV, D, 0, ".weight") == NULL && buf[0] == 0);
  CHECK(cp_onnx_name(buf, CP_FAMILY_T5, CP_ROLE_CQ, E, 0, ".weight") == NULL);
  CHECK(cp_onnx_name(buf, CP_FAMILY_LLAMA, CP_ROLE_REL_BIAS, D, 0, ".weight") == NULL);

  /* the decoder-only roots, and nothing else */
  CHECK(cp_onnx_name_own("model.anything"));
  CHECK(cp_onnx_name_own("lm_head.weight"));
  CHECK(!cp_onnx_name_own("lm_head"));
  CHECK(!cp_onnx_name_own("models.layers.0.attn.q.weight"));
  CHECK(!cp_onnx_name_own("onnx::MatMul_123"));
  CHECK(!cp_onnx_name_own("shared.weight"));
  CHECK(!cp_onnx_name_own("const/0"));
  return test_finish();
}
