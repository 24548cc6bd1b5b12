/* Floor: import. Format-neutral model description: one checkpoint folder (config.json + weights in any format
 * cp_checkpoint_open reads) turned into arrays in a layout every engine shares: float32 after
 * cp_model_open; with cp_model_open_ex's stored_dtype the matrices (cp_linear, embedding, output
 * head) keep the checkpoint's F32/F16/BF16, or a GGUF's Q8_0/Q4_0/Q4_K blocks, and point into its
 * mapping (cp_weight_dtype says which).
 *
 * Each family's HF tensors are normalised on load:
 *   - Gemma's norm weights w are stored as the 1 + w its RMSNorm multiplies by;
 *   - fused QKV projections (BLOOM and GPT-NeoX per-head interleaved [H, 3, dh]; MPT
 *     concatenated q|k|v) are split into separate q, k, v matrices;
 *   - every linear layer is `y = x W^T + b` with W [n_out, n_in] as HF stores it (GPT-2's Conv1D
 *     weights, stored [n_in, n_out], are transposed on load); absent biases are NULL;
 *   - the FFN is up -> act -> down, or act(gate) * up -> down when gated (T5 gated-*:
 *     gate = wi_0, up = wi_1; Llama/FIRE: gate_proj, up_proj);
 *   - T5's relative bucket table is kept once per stack (block 0), BLOOM's embedding LayerNorm
 *     and the output head (the embedding when tied) are explicit.
 * Every tensor's shape is checked against the config (CP_EMODEL_TENSOR naming the tensor and the
 * expected and actual shapes); tensors the engines do not use are ignored.
 *
 * Ownership: cp_model_open returns a model that owns its config and every array; all pointers
 * below stay valid until cp_model_free. The struct is read-only for its users.
 */
#ifndef CTXPATCH_MODEL_H
#define CTXPATCH_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/model/rope.h"
#include "ctxpatch/model/layer_layout.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/formats/tensor.h"

struct cp_checkpoint;

typedef enum { CP_NORM_LAYER, CP_NORM_RMS } cp_norm_kind;
typedef enum { CP_ACT_RELU, CP_ACT_GELU, CP_ACT_GELU_TANH, CP_ACT_SILU } cp_act;

typedef struct {
  const float *w; /* [n] */
  const float *b; /* [n], or NULL (RMS norms, MPT) */
} cp_norm_weights;

typedef struct {
  const void *w;  /* [n_out, n_in] elements of `dtype`; rows of cp_dtype_span(dtype, n_in) bytes */
  const float *b; /* [n_out], or NULL */
  int n_out, n_in;
  cp_dtype dtype; /* of w: CP_F32 (always after cp_model_open), or CP_F16 / CP_BF16 / a GGUF block
                     format (CP_Q8_0, CP_Q4_0, CP_Q4_K; n_in whole blocks) as stored */
} cp_linear;

/* FIRE bias MLP of docs/fire-layout.md, one or two hidden layers of width W:
 *   layers 1: b_h(x) = w2[h] . relu(w1 x + b1) + b2[h]
 *   layers 2: b_h(x) = w2[h] . relu(wm relu(w1 x + b1) + bm) + b2[h]
 * The arrays point into the model's buffers. */
typedef struct {
  const float *w1; /* [W] (the [W, 1] first layer) */
  const float *b1; /* [W] */
  const float *wm; /* [W, W] second hidden layer (layers 2); else NULL */
  const float *bm; /* [W] (layers 2); else NULL */
  const float *w2; /* [H, W] output layer */
  const float *b2; /* [H] */
  int width;       /* W, 1..CP_FIRE_MAX_WIDTH */
  int layers;      /* hidden layers: 1 or 2 */
  double c;        /* psi(x) = log(c x + 1) */
  double L;        /* threshold of the normaliser (a rule's fire_threshold replaces it) */
} cp_fire_mlp;

/* FIRE bias of head h at MLP input x (docs/fire-layout.md), in double like the reference. Every
 * CPU evaluation goes through this function or the next (the same doubles, bit for bit). */
double cp_fire_mlp_bias(const cp_fire_mlp *f, int h, double x);
/* The biases of heads 0..H-1 at input x into out[H], the hidden layers evaluated once for all
 * heads (H = the rows of the output layer w2). */
void cp_fire_mlp_bias_heads(double *out, const cp_fire_mlp *f, int H, double x);

typedef struct {
  cp_norm_weights attn_norm;
  cp_linear q, k, v, o;         /* q [H*dh, D]; k, v [Hkv*dh, D]; o [D, H*dh] */
  cp_norm_weights q_norm, k_norm; /* Qwen3: RMSNorm [dh] of each head of q and k, after the projections
                                     and before RoPE (eps norm_eps); OLMo 2 (qk_norm_whole): RMSNorm
                                     [H*dh] / [Hkv*dh] of the whole row; w NULL elsewhere */
  cp_norm_weights cross_norm;   /* T5 decoder only */
  cp_linear cq, ck, cv, co;     /* T5 decoder cross-attention; w NULL elsewhere */
  cp_norm_weights ffn_norm;
  cp_norm_weights post_attn_norm, post_ffn_norm; /* Gemma 2, OLMo 2: norms of the attention and FFN outputs
                                                    before their residual sums; w NULL elsewhere */
  cp_linear gate, up, down;     /* gate.w NULL unless gated; up [d_ff, D]; down [D, d_ff] */
  const cp_fire_mlp *fire;      /* FIRE: this layer's MLP (shared or its own); else NULL */
} cp_layer;

typedef struct {
  int n_layers;
  cp_layer *layers;             /* [n_layers] */
  cp_norm_weights final_norm;
  const float *rel_bias;        /* T5: block 0's table [num_buckets, H]; else NULL */
} cp_stack;

typedef struct cp_model {
  cp_hf_config *cfg;            /* owned */
  cp_family family;
  cp_pos_scheme pos;

  int vocab, d_model, n_heads, n_kv_heads, d_head, d_ff;
  int64_t train_len;            /* config's training length, 0 when absent */
  bool from_gguf;               /* read from a single GGUF file (its metadata as the config) */

  cp_norm_kind norm;
  float norm_eps;
  cp_act act;
  bool gated_ffn;
  bool parallel_residual;       /* GPT-NeoX use_parallel_residual */
  bool residual_from_norm;      /* BLOOM apply_residual_connection_post_layernorm */
  float attn_scale;             /* c of the spec: 1/sqrt(d_head), 1 for T5, MPT softmax_scale,
                                   GPT-2 1 without scale_attn_weights; per layer: cp_model_attn_scale */
  bool attn_scale_inverse_layer; /* GPT-2 scale_attn_by_inverse_layer_idx: layer l divides c by l + 1 */
  float clip_qkv;               /* MPT attn_config.clip_qkv; 0 when none */
  float embed_scale;            /* Gemma: the embedding rows are multiplied by sqrt(D) (float); else 1 */
  float attn_softcap;           /* Gemma 2: scores c tanh(s / c) before the mask; 0 when none */
  float final_softcap;          /* Gemma 2: logits c tanh(l / c); 0 when none */
  bool sandwich_norms;          /* Gemma 2: post-attention and post-FFN norms (CP_RESIDUAL_SANDWICH) */
  bool post_norms;              /* OLMo 2: no pre-norms, the post norms only (CP_RESIDUAL_POST_NORM) */
  bool qk_norm_whole;           /* OLMo 2: q_norm / k_norm over the whole projected row, not per head */
  float residual_scale;         /* Granite residual_multiplier: each module's output times it before
                                   its residual sum (CP_RESIDUAL_SCALED when not 1); else 1 */

  const void *embed;            /* [V, D] elements of embed_dtype */
  cp_dtype embed_dtype;         /* CP_F32, or as stored (stored_dtype) */
  const float *pos_embed;       /* [train_len, D] learned absolute positions (GPT-2 wpe, row p added
                                   to the input at position p; no row past train_len); else NULL */
  cp_norm_weights embed_norm;   /* BLOOM word_embeddings_layernorm; w NULL elsewhere */
  const void *lm_head;          /* [V, D] elements of lm_head_dtype (the embedding when tied) */
  cp_dtype lm_head_dtype;
  float lm_head_scale;          /* T5 with tied embeddings: d_model^-0.5; else 1 */

  cp_stack encoder;             /* T5 only; n_layers 0 for decoder-only models */
  cp_stack decoder;             /* the decoder-only body, or T5's decoder */

  /* Positional terms. */
  double *alibi_slopes;         /* [H] for ALiBi (stored slopes when the checkpoint has them) */
  double rope_theta;
  int rope_dims;                /* rotated dims per head (GPT-NeoX partial rotary) */
  double rope_scale;            /* linear rope_scaling factor (positions are divided by it), 1 when none */
  char rope_type[32];           /* rope_scaling type: "", "linear", "llama3", "yarn", "dynamic", "longrope" */
  cp_rope_table rope;           /* the rotary frequencies and yarn's cos/sin scale (model/rope.h); under
                                   dynamic / longrope the init-time table: callers take cp_model_rope_at */
  bool rope_by_length;          /* dynamic / longrope: the table depends on the call's sequence length */
  cp_rope_table rope_local;     /* Gemma 3: the sliding layers' table (rope_local_base_freq, no scaling,
                                   positions undivided); n 0 elsewhere. Read through cp_model_rope_at */
  int t5_num_buckets, t5_max_distance;
  cp_fire_mlp *fire;            /* [n_fire] */
  int n_fire;

  /* A patched artifact's rule (config.json "ctxpatch": {"rule": ...}, written by `ctxpatch
   * patch` for what the weights do not carry). cp_engine_create applies it when its caller
   * passes no rule or the identity, and refuses a non-identity caller rule on top of it. */
  bool has_metadata_rule;
  cp_rule metadata_rule;

  /* Owned float arrays (freed by cp_model_free). */
  float **bufs;
  size_t n_bufs, cap_bufs;
  /* stored_dtype: the open checkpoint the matrices point into (owned), the model whose memory
   * unchanged tensors share (borrowed), and how many bytes of matrices are shared with it. */
  struct cp_checkpoint *ck;
  const struct cp_model *share_from;
  uint64_t shared_bytes;
} cp_model;

/* The model's residual layout (ctxpatch/model/layer_layout.h). */
static inline cp_residual cp_model_residual(const cp_model *m) {
  return m->parallel_residual    ? CP_RESIDUAL_PARALLEL
         : m->residual_from_norm ? CP_RESIDUAL_FROM_NORM
         : m->sandwich_norms     ? CP_RESIDUAL_SANDWICH
         : m->post_norms         ? CP_RESIDUAL_POST_NORM
         : m->residual_scale != 1.0f ? CP_RESIDUAL_SCALED
                                 : CP_RESIDUAL_PRE_NORM;
}

/* Opens a checkpoint folder (or a weights file with config.json beside it) and loads the whole
 * model as float32. The caller owns *out (cp_model_free). */
int cp_model_open(cp_model **out, const char *path);

typedef struct {
  /* Keep every F32/F16/BF16 matrix (linear layers, embedding, output head) and every GGUF
   * Q8_0/Q4_0/Q4_K matrix as stored, pointing into the checkpoint's mapping, which the model then
   * keeps open: memory about the file's size instead of float32. GGUF llama q/k, whose rows the
   * loader puts back in HF order, are owned copies in their stored dtype (whole rows of elements
   * or blocks moved). Matrices the loader must otherwise rearrange (GPT-2 Conv1D transposes, fused
   * QKV splits), unmapped or misaligned tensors, norms and biases are float32 copies. Engines that read the weights as
   * float32 (the ONNX and GGUF exporters) need the default, false. */
  bool stored_dtype;
  /* With stored_dtype: a model opened with stored_dtype (it must outlive this one) whose
   * matrices this one uses in place of its own wherever the tensor of the same name has the same
   * dtype, shape and bytes (compared, chunk by chunk, at open): the patched side of a
   * certification then costs only what the bake changed. NULL: none. */
  const struct cp_model *share_from;
  /* `path` already opened (borrowed; without stored_dtype): the model is read from it instead of
   * opening path again (`patch IN.onnx OUT.onnx` reads the graph once). NULL: opened here. */
  struct cp_checkpoint *checkpoint;
} cp_model_open_params;

void cp_model_open_params_init(cp_model_open_params *p);
int cp_model_open_ex(cp_model **out, const char *path, const cp_model_open_params *params);
/* cp_model_open_ex with stored_dtype: how the engine's commands (forward, verify, calibrate,
 * inspect --stats, patch) open a model. */
int cp_model_open_stored(cp_model **out, const char *path);
void cp_model_free(cp_model *m);

const cp_hf_config *cp_model_config(const cp_model *m);
/* Drops the resident pages of data[0..len) when they lie in the mapping of a stored-dtype model's
 * checkpoint (cp_checkpoint_release): a weight streamed once by an exporter is not kept in the
 * resident set. Anything else (owned float32 copies, NULL) is left alone. */
void cp_model_release(const cp_model *m, const void *data, uint64_t len);

/* The training length a user states (`--train-len N`, import/train_len.c): m's train_len and its
 * config's train_len / train_len_key (`source`, e.g. CP_TRAIN_LEN_OPTION) replaced, so every rule
 * default, calibration, certificate and written GGUF context_length uses it. CP_EARG outside
 * [1, CP_TRAIN_LEN_MAX], or on a learned-position model (GPT-2) unless n is its n_positions. */
#define CP_TRAIN_LEN_OPTION "option --train-len"
#define CP_TRAIN_LEN_MAX ((int64_t)1 << 30)
int cp_model_set_train_len(cp_model *m, int64_t n, const char *source);
/* What cp_rule_check_model / cp_rule_plan need to know about the model. */
void cp_model_rule_model(cp_rule_model *out, const cp_model *m);
/* The rule a run on m applies (cp_engine_set_rule's choice): `caller` when it is not the
 * identity, else the artifact's metadata rule, else NULL (none). Borrowed. */
const cp_rule *cp_model_applied_rule(const cp_model *m, const cp_rule *caller);
/* CP_ERULE_MODEL when `caller` has a temperature or a temperature_schedule and m is an artifact
 * whose weights carry a baked temperature (config.json ctxpatch.baked_rule), unless on_top: the
 * logits would be divided twice. 0 otherwise. */
int cp_model_check_rule_on_top(const cp_model *m, const cp_rule *caller, bool on_top);
/* Checks ids[0..n) are in [0, vocab): CP_EMODEL_INPUT naming `what` and the first bad entry;
 * also refuses an empty list. */
int cp_model_check_ids(const cp_model *m, const int64_t *ids, int64_t n, const char *what);

const char *cp_act_name(cp_act act);
/* c of the spec for self-attention layer `layer` of m: attn_scale, divided by layer + 1 under
 * GPT-2's scale_attn_by_inverse_layer_idx. Every engine and exporter takes c from here. */
float cp_model_attn_scale(const cp_model *m, int layer);
/* CP_EMODEL_INPUT when positions [0, n) need a row that m's learned position table lacks (only
 * models with pos_embed have such a limit); `what` names the input in the message. */
int cp_model_check_positions(const cp_model *m, int64_t n, const char *what);
/* The RoPE table decoder layer `layer` rotates with in a call whose sequence length (largest
 * position + 1, model/rope.h cp_rope_table_at) is seq_len, and in *pos_div the divisor of its
 * positions. Gemma 3's sliding layers: &m->rope_local, undivided (Gemma3DecoderLayer.forward's
 * position_embeddings_local). Every other layer: &m->rope unless m->rope_by_length, else the
 * call's table computed into *scratch (which the result then points to), divided by rope_scale.
 * The load refuses a model with both (Gemma 3 under dynamic / longrope). The engines and the
 * exporters rotate with this. */
const cp_rope_table *cp_model_rope_at(const cp_model *m, int layer, int64_t seq_len, cp_rope_table *scratch,
                                      double *pos_div);

#endif
