/* Floor: model. Hugging Face config.json: architecture family, hyperparameters and positional scheme.
 *
 * Parsed strictly (duplicate keys and nesting deeper than 128 are refused). Field names
 * follow each family's HF config class; the family is chosen from `model_type`, falling
 * back to `architectures[0]`. Unknown families get an error listing the supported ones.
 */
#ifndef CTXPATCH_HF_CONFIG_H
#define CTXPATCH_HF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/model/rule.h"

typedef enum {
  CP_FAMILY_T5,       /* model_type t5 (also mt5, umt5 layouts are not claimed) */
  CP_FAMILY_BLOOM,    /* model_type bloom */
  CP_FAMILY_MPT,      /* model_type mpt */
  CP_FAMILY_LLAMA,    /* model_type llama, mistral, qwen2, qwen3 or granite */
  CP_FAMILY_GPT_NEOX, /* model_type gpt_neox */
  CP_FAMILY_FIRE,     /* model_type ctxpatch_fire (layout in docs/fire-layout.md) */
  CP_FAMILY_GPT2,     /* model_type gpt2 (GPT2LMHeadModel: Conv1D weights, learned wpe positions) */
  CP_FAMILY_PHI3,     /* model_type phi3 (Phi3ForCausalLM: the Llama body with fused qkv_proj, gate_up_proj) */
  CP_FAMILY_GEMMA,    /* model_type gemma, gemma2 or gemma3_text (modeling_gemma.py, modeling_gemma2.py,
                         modeling_gemma3.py's Gemma3ForCausalLM) */
  CP_FAMILY_OLMO2,    /* model_type olmo2 (modeling_olmo2.py: norms after the modules, whole q/k norms) */
  CP_FAMILY_STARCODER2, /* model_type starcoder2 (modeling_starcoder2.py: LayerNorms with bias, GELU MLP c_fc ->
                           c_proj, biased q/k/v/o, GQA, RoPE) */
  CP_FAMILY_COUNT
} cp_family;

typedef enum {
  CP_POS_T5_BUCKETS, /* relative-position buckets, table in block 0 */
  CP_POS_ALIBI,      /* linear biases */
  CP_POS_ROPE,       /* rotary */
  CP_POS_FIRE,       /* functional interpolation */
  CP_POS_LEARNED,    /* learned absolute positions added to the input (GPT-2 wpe): attention
                        itself has no positional term, so no distance-based rule applies */
} cp_pos_scheme;

/* Widest FIRE MLP read (the paper's is 32): bounds the engines' per-evaluation scratch. */
#define CP_FIRE_MAX_WIDTH 1024
/* RoPE pairs (rotary dims / 2) a longrope factor list may hold (model/rope.h CP_ROPE_MAX_DIMS / 2). */
#define CP_HF_ROPE_MAX_PAIRS 512

typedef struct {
  cp_family family;
  cp_pos_scheme pos;
  char model_type[64];
  char architecture[128]; /* architectures[0] or "" */

  /* Sizes. For T5, n_layers is the encoder depth and n_decoder_layers the decoder's. */
  int vocab_size;
  int d_model;
  int n_layers;
  int n_decoder_layers; /* 0 for decoder-only */
  int n_heads;
  int n_kv_heads;       /* == n_heads unless GQA */
  int d_head;           /* T5 d_kv; else d_model / n_heads or head_dim */
  int d_ff;             /* T5 d_ff, Llama intermediate_size, NeoX intermediate_size, MPT expansion*d */
  double norm_eps;      /* layer_norm_epsilon / rms_norm_eps / layer_norm_eps */
  char activation[32];  /* "relu", "gated-gelu", "gelu", "silu", ... as configured */
  bool tie_word_embeddings;
  int64_t train_len;    /* n_positions / max_position_embeddings / max_seq_len / seq_length; 0 if absent */
  char train_len_key[96]; /* where train_len came from ("config.json max_position_embeddings",
                            "GGUF llama.context_length"); "" when absent */

  /* Special ids (-1 when null, or absent where HF's config class has no default). */
  int bos_token_id, eos_token_id, pad_token_id, decoder_start_token_id;

  /* T5 buckets. */
  int t5_num_buckets;
  int t5_max_distance;

  /* ALiBi: BLOOM uses 8; MPT reads attn_config.alibi_bias_max. */
  double alibi_bias_max;

  /* BLOOM apply_residual_connection_post_layernorm (false unless true). */
  bool residual_post_layernorm;

  /* MPT attn_config: softmax_scale and clip_qkv (0 when absent or not a number), qk_ln. */
  double mpt_softmax_scale;
  double mpt_clip_qkv;
  bool mpt_qk_ln;

  /* RoPE. */
  double rope_theta;
  double rotary_pct;     /* GPT-NeoX rotary_pct, 1.0 otherwise */
  int rotary_dims;       /* d_head * rotary_pct, rounded down as HF does */
  bool use_parallel_residual; /* GPT-NeoX */
  /* rope_scaling as transformers reads it (modeling_rope_utils; model/rope.c computes the
   * frequencies): type "linear", "llama3" or "yarn" ("" when none). */
  char rope_scaling_type[32];  /* "" when none, else e.g. "linear" */
  double rope_scaling_factor;  /* 1.0 when none */
  double rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
  int rope_original_max_pos;   /* llama3, yarn: original_max_position_embeddings; 0 when absent */
  double rope_attention_factor; /* yarn: 0 when absent (then 0.1 ln(factor) + 1) */
  double rope_beta_fast, rope_beta_slow; /* yarn: 32 and 1 when absent */
  bool rope_truncate;          /* yarn: floor/ceil the correction range (true when absent) */
  /* longrope: per-pair frequency divisors (rope_scaling.short_factor / long_factor, rotary_dims / 2
   * of each, finite and positive), the long ones for a call whose sequence passes
   * rope_original_max_pos. rope_scaling_factor is max_position_embeddings / original when the
   * original is given (transformers' _compute_longrope_parameters), rope_attention_factor the
   * given attention_factor (0: sqrt(1 + ln(factor) / ln(original)), 1 when factor <= 1).
   * dynamic: rope_original_max_pos is max_position_embeddings, the length the NTK base scales from. */
  int rope_n_factors;
  double rope_short_factor[CP_HF_ROPE_MAX_PAIRS], rope_long_factor[CP_HF_ROPE_MAX_PAIRS];
  bool rope_parameters_layout; /* the scaling came as transformers 5's "rope_parameters" (with
                                  rope_theta inside): a rewrite keeps that layout */
  int sliding_window;          /* the window of the layer_sliding layers (Mistral, Qwen2/3, Phi-3, Gemma 2); 0: none */

  /* FIRE. */
  int fire_mlp_width;    /* hidden width of the FIRE MLP (32 in the paper), 1..CP_FIRE_MAX_WIDTH */
  int fire_mlp_layers;   /* hidden layers of the FIRE MLP: 1, or 2 as in the paper */
  bool fire_shared;      /* one MLP for all layers */
  double fire_c_init;    /* initial value of c, informational */
  double fire_threshold; /* initial L, informational; the learned value lives in the weights */

  /* GPT-2 attention scaling: scale_attn_weights (c = 1/sqrt(d_head), else 1) and
   * scale_attn_by_inverse_layer_idx (layer l's c further divided by l + 1).
   * reorder_and_upcast_attn changes only the precision of HF's half-precision path, so an fp32
   * engine computes the same function: it is read and ignored. */
  bool scale_attn_weights;
  bool scale_attn_inverse_layer;

  /* MPT / misc flags. */
  bool qkv_bias;
  bool no_bias;          /* MPT no_bias */
  bool qk_norm;          /* Qwen3: per-head RMSNorm of q and k (weights [head_dim]) before RoPE */
  bool qk_norm_whole;    /* OLMo 2: q_norm / k_norm span the whole projection (weights [H*dh], [Hkv*dh]),
                            before the head split and RoPE (with qk_norm) */
  bool post_norms;       /* OLMo 2: no pre-norms; each module's output is normed before its residual sum */

  /* Gemma 2 (Gemma2Config; 0 / false for Gemma 1 and every other family): the attention scale is
   * query_pre_attn_scalar^-1/2; attention scores and final logits are soft-capped, x -> c tanh(x / c)
   * (c 0: none, a null key); post-attention and post-feed-forward norms (sandwich_norms). Every
   * family with a window: layer l attends to the last sliding_window keys only when
   * layer_sliding[l] (layer_types' "sliding_attention" entries, else the family's default: Gemma 2
   * even layers, Qwen2/3 from max_window_layers on, Mistral and Phi-3 all). */
  double query_pre_attn_scalar;
  double attn_softcap, final_softcap;
  bool sandwich_norms;
  /* Gemma 3 (Gemma3TextConfig): the sliding layers rotate with this base (rope_local_base_freq) and
   * no rope_scaling, the full layers with rope_theta and rope_scaling; 0 for every other model.
   * qk_norm is set too (Gemma3Attention's q_norm / k_norm, (1 + w) as every Gemma norm). */
  double rope_local_theta;
  bool layer_sliding[CP_RULE_MAX_LAYERS]; /* [n_layers]: sliding layers need n_layers <= CP_RULE_MAX_LAYERS */

  /* Granite (GraniteConfig; 1.0 and false for every other family): embeddings times
   * embedding_multiplier, attention scale attention_multiplier (not head_dim^-1/2), each module's
   * output times residual_multiplier before its residual sum, logits divided by logits_scaling. */
  bool granite;
  double embedding_multiplier, residual_multiplier, attention_multiplier, logits_scaling;

  /* A patched artifact's "ctxpatch" block (written by `ctxpatch patch`): present or not, and its
   * "rule" (the identity when absent or null), parsed as strictly as a rule file. */
  bool has_ctxpatch;
  cp_rule ctxpatch_rule;
  /* The rest of the block, for provenance (`inspect`, re-verify, --on-top): "baked_rule" (the
   * identity when absent or null), "method" and "fidelity" ("" when absent), "certified"
   * (-1 absent, 0 false, 1 true), "certificate_sha256" (64 hex digits; "" when absent or null). */
  cp_rule ctxpatch_baked_rule;
  char ctxpatch_method[32];
  char ctxpatch_fidelity[32];
  int ctxpatch_certified;
  char ctxpatch_certificate_sha256[65];
  /* "effective_in": the runtimes that execute the artifact, or "ctxpatch" alone
   * (ctxpatch/model/runtimes.h), joined by ", "; "" when absent (artifacts before the table). */
  char ctxpatch_effective_in[96];

  /* The file's bytes as parsed, NUL-terminated (owned), so a patch rewrites config.json from
   * this parse instead of reading the file again. */
  char *text;
  size_t text_len;
} cp_hf_config;

/* Parses config.json at `path`. The caller frees with cp_hf_config_free. */
int cp_hf_config_load(cp_hf_config **out, const char *path);
/* Parses from memory; `what` names the source in error messages. */
int cp_hf_config_parse(cp_hf_config **out, const char *text, size_t len, const char *what);
void cp_hf_config_free(cp_hf_config *cfg);

const char *cp_family_name(cp_family family); /* "t5", "bloom", "mpt", "llama", "gpt_neox", "fire", "gpt2", "phi3",
                                                 "gemma", "starcoder2" */
/* The name messages call the model by: its model_type ("qwen3", "granite", "mistral"), not its
 * family's ("llama"), but "gemma3" for gemma3_text and "fire" for ctxpatch_fire. Static, or
 * borrowed from cfg. */
const char *cp_hf_config_name(const cp_hf_config *cfg);
const char *cp_pos_scheme_name(cp_pos_scheme pos); /* "t5-buckets", "alibi", "rope", "fire", "learned" */
/* Comma-separated list of supported model_type values, for error messages. */
const char *cp_supported_families(void);

#endif
