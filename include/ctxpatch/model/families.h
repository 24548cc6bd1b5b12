/* Floor: model. The family table: for every supported family, what its Hugging Face
 * checkpoint calls each tensor, how it fuses q/k/v, and where a bake can put a temperature or an
 * ALiBi factor. The loader (import/model_load.c) and the baker (patchers/bake.c) both name tensors
 * through it, so each name is spelled once.
 *
 * A row is one tensor role in one stack: `hf` is its HF module name (without ".weight"/".bias";
 * "%d" stands for the layer in per-layer roles), under the family's body prefix except for
 * CP_ROLE_LM_HEAD, which HF keeps outside the body module. Rows are data only, so an exporter can
 * add columns (a GGUF name) beside `hf` without touching the readers; ctxpatch's own ONNX names,
 * the same for every decoder-only family, are by role in ctxpatch/model/onnx_names.h.
 * Several rows of one role and stack are alternatives: the first whose `when` holds and whose
 * tensor the checkpoint has wins (the first whose `when` holds when none is present).
 *
 * Ownership: the table is static; nothing here allocates.
 */
#ifndef CTXPATCH_MODEL_FAMILIES_H
#define CTXPATCH_MODEL_FAMILIES_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/model/hf_config.h"

#define CP_TENSOR_NAME_MAX 600

typedef enum {
  CP_ROLE_EMBED,      /* [V, D] */
  CP_ROLE_EMBED_NORM, /* [D] (BLOOM word_embeddings_layernorm) */
  CP_ROLE_REL_BIAS,   /* T5: block 0's relative bucket table of a stack [buckets, H] */
  CP_ROLE_ATTN_NORM,  /* per layer [D] */
  CP_ROLE_Q,          /* [H*dh, D] */
  CP_ROLE_K,          /* [Hkv*dh, D] */
  CP_ROLE_V,          /* [Hkv*dh, D] */
  CP_ROLE_QKV,        /* fused [H*dh + 2 Hkv*dh, D] in the family's cp_qkv_layout */
  CP_ROLE_O,          /* [D, H*dh] */
  CP_ROLE_Q_NORM,     /* per layer [dh]: Qwen3's per-head RMSNorm of q, before RoPE; [H*dh]: OLMo 2's whole q */
  CP_ROLE_K_NORM,     /* per layer [dh]: the same of k; [Hkv*dh]: OLMo 2's */
  CP_ROLE_CQ, CP_ROLE_CK, CP_ROLE_CV, CP_ROLE_CO, /* T5 decoder cross-attention, shapes as q k v o */
  CP_ROLE_CROSS_NORM, /* T5 decoder [D] */
  CP_ROLE_FFN_NORM,   /* [D] */
  CP_ROLE_GATE,       /* [d_ff, D], gated FFNs only */
  CP_ROLE_UP,         /* [d_ff, D] */
  CP_ROLE_GATE_UP,    /* fused [2 d_ff, D]: gate rows, then up rows (Phi-3 gate_up_proj); the loader
                         splits it into GATE and UP */
  CP_ROLE_DOWN,       /* [D, d_ff] */
  CP_ROLE_FIRE,       /* base name of a FIRE MLP (parts below); per layer or shared */
  CP_ROLE_FINAL_NORM, /* [D], per stack */
  CP_ROLE_LM_HEAD,    /* [V, D], absent when tied */
  CP_ROLE_POS_EMBED,  /* [n_positions, D] learned absolute positions (GPT-2 wpe) */
  CP_ROLE_POST_ATTN_NORM, /* per layer [D]: Gemma 2's and OLMo 2's norm of the attention output before the residual sum */
  CP_ROLE_POST_FFN_NORM,  /* per layer [D]: the same of the FFN output */
  CP_ROLE_COUNT
} cp_tensor_role;

/* The parts of one FIRE MLP under its CP_ROLE_FIRE base name (docs/fire-layout.md): torch's
 * nn.Sequential(Linear, ReLU, Linear[, ReLU, Linear]) indices. */
#define CP_FIRE_IN "mlp.0"   /* Linear(1, W): weight [W, 1], bias [W] */
#define CP_FIRE_MID "mlp.2"  /* two hidden layers: Linear(W, W): weight [W, W], bias [W] */
#define CP_FIRE_OUT1 "mlp.2" /* one hidden layer: Linear(W, H): weight [H, W], bias [H] */
#define CP_FIRE_OUT2 "mlp.4" /* two hidden layers: Linear(W, H): weight [H, W], bias [H] */
#define CP_FIRE_C "c"        /* scalar c of psi(x) = log(c x + 1) */
#define CP_FIRE_L "L"        /* scalar threshold of the normaliser */

/* ".mlp.2.weight" / ".mlp.4.bias"...: the output layer's part of an MLP of `layers` hidden layers. */
static inline const char *cp_fire_out_part(int layers, bool bias) {
  if (layers == 2) return bias ? "." CP_FIRE_OUT2 ".bias" : "." CP_FIRE_OUT2 ".weight";
  return bias ? "." CP_FIRE_OUT1 ".bias" : "." CP_FIRE_OUT1 ".weight";
}

typedef enum { CP_STACK_DECODER, CP_STACK_ENCODER } cp_stack_kind; /* decoder-only: DECODER */

/* A tensor dimension in terms of the config. */
typedef enum { CP_DIM_NONE, CP_DIM_D, CP_DIM_Q, CP_DIM_KV, CP_DIM_QKV, CP_DIM_FF, CP_DIM_FF2 /* 2 d_ff */, CP_DIM_VOCAB,
               CP_DIM_BUCKETS, CP_DIM_HEADS, CP_DIM_POSITIONS /* n_positions */, CP_DIM_HEAD /* d_head */ } cp_dim;

/* Which bias a row's module has: the config decides for the last two. */
typedef enum {
  CP_BIAS_NONE,
  CP_BIAS_REQUIRED,
  CP_BIAS_OPTIONAL,       /* used when the checkpoint has it (Llama attention_bias / mlp_bias) */
  CP_BIAS_UNLESS_NO_BIAS, /* MPT: optional, none when no_bias */
  CP_BIAS_IF_QKV_BIAS,    /* GPT-NeoX attention_bias: required when set, else none */
} cp_bias_rule;

/* When a row applies (T5's FFN is gated or not by feed_forward_proj; FIRE's MLP is shared or not;
 * q/k norms where the config has them, cp_hf_config.qk_norm). */
typedef enum {
  CP_WHEN_ALWAYS,
  CP_WHEN_GATED,
  CP_WHEN_NOT_GATED,
  CP_WHEN_SHARED,
  CP_WHEN_PER_LAYER,
  CP_WHEN_QK_NORM,
  CP_WHEN_SANDWICH,    /* Gemma 2: post-attention and post-feed-forward norms (cp_hf_config.sandwich_norms) */
  CP_WHEN_NOT_SANDWICH
} cp_when;

typedef struct {
  cp_tensor_role role;
  cp_stack_kind stack;
  const char *hf;    /* HF module name, "%d" = layer */
  cp_bias_rule bias;
  cp_dim rows, cols; /* shape [rows, cols]; cols CP_DIM_NONE for vectors */
  cp_when when;
  const char *gguf;  /* llama.cpp's GGUF name ("blk.%d.attn_q"), or NULL when the family has no GGUF
                        reading; GGUF names have no body prefix */
} cp_family_tensor;

typedef enum {
  CP_QKV_SEPARATE,    /* q, k, v are their own tensors */
  CP_QKV_INTERLEAVED, /* BLOOM, GPT-NeoX: rows per head [H, 3, dh] (needs H == Hkv) */
  CP_QKV_CONCAT,      /* MPT, Phi-3: q | k | v rows */
} cp_qkv_layout;

/* Where the positional term lives as a weight, so a temperature (and for ALiBi a static factor)
 * can be baked into it along with q. */
typedef enum {
  CP_TAU_NOWHERE,       /* RoPE: no positional weight; scaling q is the whole bake */
  CP_TAU_REL_BIAS,      /* T5: the bucket table of each stack */
  CP_TAU_FIRE_OUT,      /* FIRE: each MLP's output layer */
  CP_TAU_STORED_SLOPES, /* ALiBi: slopes the checkpoint stores (suffix below), when it does */
} cp_tau_site;

typedef struct {
  cp_family family;
  const char *prefixes[2];  /* body module prefixes tried in order ("transformer.", "") */
  cp_qkv_layout qkv;
  cp_tau_site tau;
  const char *slopes_suffix; /* stored ALiBi slopes (e.g. JAIS's relative_pe.slopes), or NULL */
  const cp_family_tensor *tensors;
  size_t n_tensors;
  bool conv1d;               /* GPT-2's Conv1D: every per-layer matrix (q/k/v, o, FFN) is stored
                                transposed, [cols, rows] = [n_in, n_out] (y = x W + b); the rows'
                                shapes above are the [n_out, n_in] the loader makes of them */
} cp_family_layout;

const cp_family_layout *cp_family_layout_of(cp_family family);

/* Whether `role`'s weight is the w of Gemma's RMSNorm (1 + w) (GemmaRMSNorm): HF stores w, the
 * engines and llama.cpp's GGUF (convert_hf_to_gguf.py GemmaModel / Gemma2Model / Gemma3Model, which
 * adds 1 to every "norm.weight", Gemma 3's q_norm / k_norm included) hold 1 + w. */
static inline bool cp_family_norm_plus_one(cp_family family, cp_tensor_role role) {
  return family == CP_FAMILY_GEMMA &&
         (role == CP_ROLE_ATTN_NORM || role == CP_ROLE_FFN_NORM || role == CP_ROLE_POST_ATTN_NORM ||
          role == CP_ROLE_POST_FFN_NORM || role == CP_ROLE_FINAL_NORM || role == CP_ROLE_Q_NORM ||
          role == CP_ROLE_K_NORM);
}

#endif
