/* The family table (include/ctxpatch/model/families.h): every family's HF tensor names, fused
 * q/k/v layout and bake sites (names resolved against a checkpoint: import/names.c). Names
 * follow each family's HF modeling code and docs/fire-layout.md. */
#include "ctxpatch/model/families.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#define ROWS(t) t, sizeof t / sizeof t[0]
#define DEC CP_STACK_DECODER
#define ENC CP_STACK_ENCODER

/* T5: both stacks spelled out, since the FFN sits in sub-layer 1 of the encoder and 2 of the decoder.
 * `g` is llama.cpp's GGUF stack prefix ("enc" / "dec", src/llama-arch.cpp LLM_ARCH_T5). */
#define T5_SELF(s, g, st)                                                                             \
  {CP_ROLE_ATTN_NORM, st, s ".block.%d.layer.0.layer_norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,    \
   CP_WHEN_ALWAYS, g ".blk.%d.attn_norm"},                                                                 \
  {CP_ROLE_Q, st, s ".block.%d.layer.0.SelfAttention.q", CP_BIAS_NONE, CP_DIM_Q, CP_DIM_D, CP_WHEN_ALWAYS, \
   g ".blk.%d.attn_q"},                                                                                    \
  {CP_ROLE_K, st, s ".block.%d.layer.0.SelfAttention.k", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS, \
   g ".blk.%d.attn_k"},                                                                                    \
  {CP_ROLE_V, st, s ".block.%d.layer.0.SelfAttention.v", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS, \
   g ".blk.%d.attn_v"},                                                                                    \
  {CP_ROLE_O, st, s ".block.%d.layer.0.SelfAttention.o", CP_BIAS_NONE, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS, \
   g ".blk.%d.attn_o"}
#define T5_FFN(s, g, st, sub)                                                                        \
  {CP_ROLE_FFN_NORM, st, s ".block.%d.layer." sub ".layer_norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, \
   CP_WHEN_ALWAYS, g ".blk.%d.ffn_norm"},                                                                  \
  {CP_ROLE_GATE, st, s ".block.%d.layer." sub ".DenseReluDense.wi_0", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D, \
   CP_WHEN_GATED, g ".blk.%d.ffn_gate"},                                                                   \
  {CP_ROLE_UP, st, s ".block.%d.layer." sub ".DenseReluDense.wi_1", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D,  \
   CP_WHEN_GATED, g ".blk.%d.ffn_up"},                                                                     \
  {CP_ROLE_UP, st, s ".block.%d.layer." sub ".DenseReluDense.wi", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D,    \
   CP_WHEN_NOT_GATED, g ".blk.%d.ffn_up"},                                                                 \
  {CP_ROLE_DOWN, st, s ".block.%d.layer." sub ".DenseReluDense.wo", CP_BIAS_NONE, CP_DIM_D, CP_DIM_FF,  \
   CP_WHEN_ALWAYS, g ".blk.%d.ffn_down"},                                                                  \
  {CP_ROLE_FINAL_NORM, st, s ".final_layer_norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS,  \
   g ".output_norm"},                                                                                      \
  {CP_ROLE_REL_BIAS, st, s ".block.0.layer.0.SelfAttention.relative_attention_bias", CP_BIAS_NONE,    \
   CP_DIM_BUCKETS, CP_DIM_HEADS, CP_WHEN_ALWAYS, g ".blk.0.attn_rel_b"}

/* The embedding's first row ("shared") is llama.cpp's token_embd; the encoder's copy is not written. */
static const cp_family_tensor k_t5[] = {
    {CP_ROLE_EMBED, DEC, "shared", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},
    {CP_ROLE_EMBED, DEC, "encoder.embed_tokens", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, NULL},
    T5_SELF("encoder", "enc", ENC),
    T5_FFN("encoder", "enc", ENC, "1"),
    T5_SELF("decoder", "dec", DEC),
    {CP_ROLE_CQ, DEC, "decoder.block.%d.layer.1.EncDecAttention.q", CP_BIAS_NONE, CP_DIM_Q, CP_DIM_D, CP_WHEN_ALWAYS,
     "dec.blk.%d.cross_attn_q"},
    {CP_ROLE_CK, DEC, "decoder.block.%d.layer.1.EncDecAttention.k", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS,
     "dec.blk.%d.cross_attn_k"},
    {CP_ROLE_CV, DEC, "decoder.block.%d.layer.1.EncDecAttention.v", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS,
     "dec.blk.%d.cross_attn_v"},
    {CP_ROLE_CO, DEC, "decoder.block.%d.layer.1.EncDecAttention.o", CP_BIAS_NONE, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS,
     "dec.blk.%d.cross_attn_o"},
    {CP_ROLE_CROSS_NORM, DEC, "decoder.block.%d.layer.1.layer_norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_ALWAYS, "dec.blk.%d.cross_attn_norm"},
    T5_FFN("decoder", "dec", DEC, "2"),
    {CP_ROLE_LM_HEAD, DEC, "lm_head", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"},
};

/* The fused-QKV, LayerNorm decoders (BLOOM, MPT, GPT-NeoX, GPT-2) share one shape; `nb` is the
 * bias rule of norms and MLP, `ab` that of the attention projections. The last column is
 * llama.cpp's GGUF name, the same for its `bloom`, `mpt` and `gptneox` architectures
 * (src/llama-arch.cpp); its attn_qkv holds q | k | v whatever the HF layout
 * (export/gguf/gguf_export.c reorders), and for its `gpt2` architecture too (llama.cpp's converter
 * transposes GPT-2's Conv1D matrices into [n_out, n_in]; cp_names_conv1d). */
#define FUSED_ROWS(embed, ln1, qkv, o, ln2, up, down, lnf, head, nb, ab)                        \
  {CP_ROLE_EMBED, DEC, embed, CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},     \
  {CP_ROLE_ATTN_NORM, DEC, ln1, nb, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "blk.%d.attn_norm"},        \
  {CP_ROLE_QKV, DEC, qkv, ab, CP_DIM_QKV, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_qkv"},                \
  {CP_ROLE_O, DEC, o, ab, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS, "blk.%d.attn_output"},                   \
  {CP_ROLE_FFN_NORM, DEC, ln2, nb, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "blk.%d.ffn_norm"},          \
  {CP_ROLE_UP, DEC, up, nb, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.ffn_up"},                     \
  {CP_ROLE_DOWN, DEC, down, nb, CP_DIM_D, CP_DIM_FF, CP_WHEN_ALWAYS, "blk.%d.ffn_down"},               \
  {CP_ROLE_FINAL_NORM, DEC, lnf, nb, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "output_norm"},            \
  {CP_ROLE_LM_HEAD, DEC, head, CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"}

static const cp_family_tensor k_bloom[] = {
    FUSED_ROWS("word_embeddings", "h.%d.input_layernorm", "h.%d.self_attention.query_key_value",
               "h.%d.self_attention.dense", "h.%d.post_attention_layernorm", "h.%d.mlp.dense_h_to_4h",
               "h.%d.mlp.dense_4h_to_h", "ln_f", "lm_head", CP_BIAS_REQUIRED, CP_BIAS_REQUIRED),
    {CP_ROLE_EMBED_NORM, DEC, "word_embeddings_layernorm", CP_BIAS_REQUIRED, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS,
     "token_embd_norm"},
};

/* HF's MptForCausalLM has no biases at all; mosaicml's code has them when no_bias is false. */
static const cp_family_tensor k_mpt[] = {
    FUSED_ROWS("wte", "blocks.%d.norm_1", "blocks.%d.attn.Wqkv", "blocks.%d.attn.out_proj", "blocks.%d.norm_2",
               "blocks.%d.ffn.up_proj", "blocks.%d.ffn.down_proj", "norm_f", "lm_head", CP_BIAS_UNLESS_NO_BIAS,
               CP_BIAS_UNLESS_NO_BIAS),
};

static const cp_family_tensor k_gpt_neox[] = {
    FUSED_ROWS("embed_in", "layers.%d.input_layernorm", "layers.%d.attention.query_key_value",
               "layers.%d.attention.dense", "layers.%d.post_attention_layernorm", "layers.%d.mlp.dense_h_to_4h",
               "layers.%d.mlp.dense_4h_to_h", "final_layer_norm", "embed_out", CP_BIAS_REQUIRED,
               CP_BIAS_IF_QKV_BIAS),
};

/* Llama body, shared with FIRE; attention_bias / mlp_bias checkpoints carry biases. The last
 * column is llama.cpp's GGUF name (src/llama-arch.cpp LLM_ARCH_LLAMA). */
#define LLAMA_ROWS                                                                                       \
  {CP_ROLE_EMBED, DEC, "embed_tokens", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},            \
  {CP_ROLE_ATTN_NORM, DEC, "layers.%d.input_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "blk.%d.attn_norm"}, \
  {CP_ROLE_Q, DEC, "layers.%d.self_attn.q_proj", CP_BIAS_OPTIONAL, CP_DIM_Q, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_q"},  \
  {CP_ROLE_K, DEC, "layers.%d.self_attn.k_proj", CP_BIAS_OPTIONAL, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_k"}, \
  {CP_ROLE_V, DEC, "layers.%d.self_attn.v_proj", CP_BIAS_OPTIONAL, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_v"}, \
  {CP_ROLE_O, DEC, "layers.%d.self_attn.o_proj", CP_BIAS_OPTIONAL, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS, "blk.%d.attn_output"},  \
  {CP_ROLE_FFN_NORM, DEC, "layers.%d.post_attention_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,    \
   CP_WHEN_ALWAYS, "blk.%d.ffn_norm"},                                                                                      \
  {CP_ROLE_GATE, DEC, "layers.%d.mlp.gate_proj", CP_BIAS_OPTIONAL, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.ffn_gate"}, \
  {CP_ROLE_UP, DEC, "layers.%d.mlp.up_proj", CP_BIAS_OPTIONAL, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.ffn_up"},     \
  {CP_ROLE_DOWN, DEC, "layers.%d.mlp.down_proj", CP_BIAS_OPTIONAL, CP_DIM_D, CP_DIM_FF, CP_WHEN_ALWAYS, "blk.%d.ffn_down"}, \
  {CP_ROLE_FINAL_NORM, DEC, "norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "output_norm"},                \
  {CP_ROLE_LM_HEAD, DEC, "lm_head", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"}

/* Llama-family bodies with q/k norms (Qwen3: self_attn.q_norm / k_norm, [head_dim]; llama.cpp's
 * LLM_ARCH_QWEN3 names them attn_q_norm / attn_k_norm). */
static const cp_family_tensor k_llama[] = {
    LLAMA_ROWS,
    {CP_ROLE_Q_NORM, DEC, "layers.%d.self_attn.q_norm", CP_BIAS_NONE, CP_DIM_HEAD, CP_DIM_NONE, CP_WHEN_QK_NORM,
     "blk.%d.attn_q_norm"},
    {CP_ROLE_K_NORM, DEC, "layers.%d.self_attn.k_norm", CP_BIAS_NONE, CP_DIM_HEAD, CP_DIM_NONE, CP_WHEN_QK_NORM,
     "blk.%d.attn_k_norm"},
};

static const cp_family_tensor k_fire[] = {
    LLAMA_ROWS,
    {CP_ROLE_FIRE, DEC, "fire", CP_BIAS_NONE, CP_DIM_NONE, CP_DIM_NONE, CP_WHEN_SHARED, NULL},
    {CP_ROLE_FIRE, DEC, "layers.%d.self_attn.fire", CP_BIAS_NONE, CP_DIM_NONE, CP_DIM_NONE, CP_WHEN_PER_LAYER, NULL},
};

/* GPT-2 (HF GPT2LMHeadModel, modeling_gpt2.py): Conv1D layers (the layout's conv1d flag), c_attn
 * = q | k | v along its output, learned positions wpe, biases everywhere, tied head. Hub
 * checkpoints of the original gpt2 store the body without "transformer.". */
static const cp_family_tensor k_gpt2[] = {
    FUSED_ROWS("wte", "h.%d.ln_1", "h.%d.attn.c_attn", "h.%d.attn.c_proj", "h.%d.ln_2", "h.%d.mlp.c_fc",
               "h.%d.mlp.c_proj", "ln_f", "lm_head", CP_BIAS_REQUIRED, CP_BIAS_REQUIRED),
    {CP_ROLE_POS_EMBED, DEC, "wpe", CP_BIAS_NONE, CP_DIM_POSITIONS, CP_DIM_D, CP_WHEN_ALWAYS, "position_embd"},
};

/* Phi-3 (transformers' modeling_phi3.py: Phi3Attention.qkv_proj holds q | k | v rows,
 * Phi3MLP.gate_up_proj gate | up rows, chunked in that order; no biases). llama.cpp's
 * LLM_ARCH_PHI3 keeps both fused: attn_qkv, and ffn_up holding gate | up (its swiglu takes the
 * first half as the gate). */
static const cp_family_tensor k_phi3[] = {
    {CP_ROLE_EMBED, DEC, "embed_tokens", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},
    {CP_ROLE_ATTN_NORM, DEC, "layers.%d.input_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS,
     "blk.%d.attn_norm"},
    {CP_ROLE_QKV, DEC, "layers.%d.self_attn.qkv_proj", CP_BIAS_NONE, CP_DIM_QKV, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_qkv"},
    {CP_ROLE_O, DEC, "layers.%d.self_attn.o_proj", CP_BIAS_NONE, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS,
     "blk.%d.attn_output"},
    {CP_ROLE_FFN_NORM, DEC, "layers.%d.post_attention_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_ALWAYS, "blk.%d.ffn_norm"},
    {CP_ROLE_GATE_UP, DEC, "layers.%d.mlp.gate_up_proj", CP_BIAS_NONE, CP_DIM_FF2, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.ffn_up"},
    {CP_ROLE_DOWN, DEC, "layers.%d.mlp.down_proj", CP_BIAS_NONE, CP_DIM_D, CP_DIM_FF, CP_WHEN_ALWAYS,
     "blk.%d.ffn_down"},
    {CP_ROLE_FINAL_NORM, DEC, "norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "output_norm"},
    {CP_ROLE_LM_HEAD, DEC, "lm_head", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"},
};

/* Gemma, Gemma 2 and Gemma 3 text (modeling_gemma.py, modeling_gemma2.py, modeling_gemma3.py): Llama's
 * names, tied head; Gemma 3 adds the per-head q_norm / k_norm to Gemma 2's layout; Gemma 2's
 * post_attention_layernorm normalises the attention output, so its FFN norm is
 * pre_feedforward_layernorm (Gemma 1's FFN norm is post_attention_layernorm, as Llama's). The
 * norms hold w of RMSNorm's (1 + w): the loader adds the 1 (import/model_load.c). GGUF names:
 * llama.cpp's LLM_ARCH_GEMMA2 (src/llama-arch.cpp: post_attention_norm, post_ffw_norm), whose
 * converter stores the norms with the 1 added (convert_hf_to_gguf.py Gemma2Model). */
static const cp_family_tensor k_gemma[] = {
    {CP_ROLE_EMBED, DEC, "embed_tokens", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},
    {CP_ROLE_ATTN_NORM, DEC, "layers.%d.input_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS,
     "blk.%d.attn_norm"},
    {CP_ROLE_Q, DEC, "layers.%d.self_attn.q_proj", CP_BIAS_OPTIONAL, CP_DIM_Q, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_q"},
    {CP_ROLE_K, DEC, "layers.%d.self_attn.k_proj", CP_BIAS_OPTIONAL, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_k"},
    {CP_ROLE_V, DEC, "layers.%d.self_attn.v_proj", CP_BIAS_OPTIONAL, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_v"},
    {CP_ROLE_O, DEC, "layers.%d.self_attn.o_proj", CP_BIAS_OPTIONAL, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS,
     "blk.%d.attn_output"},
    /* Gemma 3 (Gemma3Attention): RMSNorm (1 + w) of each head of q and k; llama.cpp's gemma3 names */
    {CP_ROLE_Q_NORM, DEC, "layers.%d.self_attn.q_norm", CP_BIAS_NONE, CP_DIM_HEAD, CP_DIM_NONE, CP_WHEN_QK_NORM,
     "blk.%d.attn_q_norm"},
    {CP_ROLE_K_NORM, DEC, "layers.%d.self_attn.k_norm", CP_BIAS_NONE, CP_DIM_HEAD, CP_DIM_NONE, CP_WHEN_QK_NORM,
     "blk.%d.attn_k_norm"},
    {CP_ROLE_POST_ATTN_NORM, DEC, "layers.%d.post_attention_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_SANDWICH, "blk.%d.post_attention_norm"},
    {CP_ROLE_FFN_NORM, DEC, "layers.%d.pre_feedforward_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_SANDWICH, "blk.%d.ffn_norm"},
    {CP_ROLE_FFN_NORM, DEC, "layers.%d.post_attention_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_NOT_SANDWICH, "blk.%d.ffn_norm"},
    {CP_ROLE_GATE, DEC, "layers.%d.mlp.gate_proj", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.ffn_gate"},
    {CP_ROLE_UP, DEC, "layers.%d.mlp.up_proj", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.ffn_up"},
    {CP_ROLE_DOWN, DEC, "layers.%d.mlp.down_proj", CP_BIAS_NONE, CP_DIM_D, CP_DIM_FF, CP_WHEN_ALWAYS,
     "blk.%d.ffn_down"},
    {CP_ROLE_POST_FFN_NORM, DEC, "layers.%d.post_feedforward_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_SANDWICH, "blk.%d.post_ffw_norm"},
    {CP_ROLE_FINAL_NORM, DEC, "norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "output_norm"},
    {CP_ROLE_LM_HEAD, DEC, "lm_head", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"},
};

/* OLMo 2 (modeling_olmo2.py Olmo2DecoderLayer, Olmo2Attention): no pre-norms; post_attention_layernorm
 * and post_feedforward_layernorm norm each module's output; q_norm / k_norm span the whole q and k
 * projections ([H*dh], [Hkv*dh]). GGUF names: llama.cpp's LLM_ARCH_OLMO2 (src/llama-arch.cpp:
 * attn_q_norm, attn_k_norm, post_attention_norm, post_ffw_norm). */
static const cp_family_tensor k_olmo2[] = {
    {CP_ROLE_EMBED, DEC, "embed_tokens", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},
    {CP_ROLE_Q, DEC, "layers.%d.self_attn.q_proj", CP_BIAS_NONE, CP_DIM_Q, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_q"},
    {CP_ROLE_K, DEC, "layers.%d.self_attn.k_proj", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_k"},
    {CP_ROLE_V, DEC, "layers.%d.self_attn.v_proj", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.attn_v"},
    {CP_ROLE_O, DEC, "layers.%d.self_attn.o_proj", CP_BIAS_NONE, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS,
     "blk.%d.attn_output"},
    {CP_ROLE_Q_NORM, DEC, "layers.%d.self_attn.q_norm", CP_BIAS_NONE, CP_DIM_Q, CP_DIM_NONE, CP_WHEN_ALWAYS,
     "blk.%d.attn_q_norm"},
    {CP_ROLE_K_NORM, DEC, "layers.%d.self_attn.k_norm", CP_BIAS_NONE, CP_DIM_KV, CP_DIM_NONE, CP_WHEN_ALWAYS,
     "blk.%d.attn_k_norm"},
    {CP_ROLE_POST_ATTN_NORM, DEC, "layers.%d.post_attention_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_ALWAYS, "blk.%d.post_attention_norm"},
    {CP_ROLE_GATE, DEC, "layers.%d.mlp.gate_proj", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.ffn_gate"},
    {CP_ROLE_UP, DEC, "layers.%d.mlp.up_proj", CP_BIAS_NONE, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.ffn_up"},
    {CP_ROLE_DOWN, DEC, "layers.%d.mlp.down_proj", CP_BIAS_NONE, CP_DIM_D, CP_DIM_FF, CP_WHEN_ALWAYS,
     "blk.%d.ffn_down"},
    {CP_ROLE_POST_FFN_NORM, DEC, "layers.%d.post_feedforward_layernorm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_ALWAYS, "blk.%d.post_ffw_norm"},
    {CP_ROLE_FINAL_NORM, DEC, "norm", CP_BIAS_NONE, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "output_norm"},
    {CP_ROLE_LM_HEAD, DEC, "lm_head", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"},
};

/* StarCoder2 (modeling_starcoder2.py: Starcoder2DecoderLayer's nn.LayerNorm input_layernorm and
 * post_attention_layernorm, always with bias; Starcoder2Attention q/k/v/o_proj and Starcoder2MLP
 * c_fc / c_proj, biased when use_bias, the config's qkv_bias here). GGUF names: llama.cpp's
 * LLM_ARCH_STARCODER2 (src/llama-arch.cpp), whose converter keeps HF's row order (NEOX rotation). */
static const cp_family_tensor k_starcoder2[] = {
    {CP_ROLE_EMBED, DEC, "embed_tokens", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "token_embd"},
    {CP_ROLE_ATTN_NORM, DEC, "layers.%d.input_layernorm", CP_BIAS_REQUIRED, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS,
     "blk.%d.attn_norm"},
    {CP_ROLE_Q, DEC, "layers.%d.self_attn.q_proj", CP_BIAS_IF_QKV_BIAS, CP_DIM_Q, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_q"},
    {CP_ROLE_K, DEC, "layers.%d.self_attn.k_proj", CP_BIAS_IF_QKV_BIAS, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_k"},
    {CP_ROLE_V, DEC, "layers.%d.self_attn.v_proj", CP_BIAS_IF_QKV_BIAS, CP_DIM_KV, CP_DIM_D, CP_WHEN_ALWAYS,
     "blk.%d.attn_v"},
    {CP_ROLE_O, DEC, "layers.%d.self_attn.o_proj", CP_BIAS_IF_QKV_BIAS, CP_DIM_D, CP_DIM_Q, CP_WHEN_ALWAYS,
     "blk.%d.attn_output"},
    {CP_ROLE_FFN_NORM, DEC, "layers.%d.post_attention_layernorm", CP_BIAS_REQUIRED, CP_DIM_D, CP_DIM_NONE,
     CP_WHEN_ALWAYS, "blk.%d.ffn_norm"},
    {CP_ROLE_UP, DEC, "layers.%d.mlp.c_fc", CP_BIAS_IF_QKV_BIAS, CP_DIM_FF, CP_DIM_D, CP_WHEN_ALWAYS, "blk.%d.ffn_up"},
    {CP_ROLE_DOWN, DEC, "layers.%d.mlp.c_proj", CP_BIAS_IF_QKV_BIAS, CP_DIM_D, CP_DIM_FF, CP_WHEN_ALWAYS,
     "blk.%d.ffn_down"},
    {CP_ROLE_FINAL_NORM, DEC, "norm", CP_BIAS_REQUIRED, CP_DIM_D, CP_DIM_NONE, CP_WHEN_ALWAYS, "output_norm"},
    {CP_ROLE_LM_HEAD, DEC, "lm_head", CP_BIAS_NONE, CP_DIM_VOCAB, CP_DIM_D, CP_WHEN_ALWAYS, "output"},
};

/* Indexed by cp_family. Hub BLOOMs and MPTs store their body without the "transformer." prefix. */
static const cp_family_layout k_layouts[CP_FAMILY_COUNT] = {
    [CP_FAMILY_T5] = {CP_FAMILY_T5, {"", NULL}, CP_QKV_SEPARATE, CP_TAU_REL_BIAS, NULL, ROWS(k_t5), false},
    [CP_FAMILY_BLOOM] = {CP_FAMILY_BLOOM, {"transformer.", ""}, CP_QKV_INTERLEAVED, CP_TAU_STORED_SLOPES,
                         "relative_pe.slopes", ROWS(k_bloom), false},
    [CP_FAMILY_MPT] = {CP_FAMILY_MPT, {"transformer.", ""}, CP_QKV_CONCAT, CP_TAU_STORED_SLOPES,
                       "relative_pe.slopes", ROWS(k_mpt), false},
    [CP_FAMILY_LLAMA] = {CP_FAMILY_LLAMA, {"model.", NULL}, CP_QKV_SEPARATE, CP_TAU_NOWHERE, NULL, ROWS(k_llama),
                         false},
    [CP_FAMILY_GPT_NEOX] = {CP_FAMILY_GPT_NEOX, {"gpt_neox.", NULL}, CP_QKV_INTERLEAVED, CP_TAU_NOWHERE, NULL,
                            ROWS(k_gpt_neox), false},
    [CP_FAMILY_FIRE] = {CP_FAMILY_FIRE, {"model.", NULL}, CP_QKV_SEPARATE, CP_TAU_FIRE_OUT, NULL, ROWS(k_fire),
                        false},
    [CP_FAMILY_GPT2] = {CP_FAMILY_GPT2, {"transformer.", ""}, CP_QKV_CONCAT, CP_TAU_NOWHERE, NULL, ROWS(k_gpt2),
                        true},
    [CP_FAMILY_PHI3] = {CP_FAMILY_PHI3, {"model.", NULL}, CP_QKV_CONCAT, CP_TAU_NOWHERE, NULL, ROWS(k_phi3), false},
    [CP_FAMILY_GEMMA] = {CP_FAMILY_GEMMA, {"model.", NULL}, CP_QKV_SEPARATE, CP_TAU_NOWHERE, NULL, ROWS(k_gemma),
                         false},
    [CP_FAMILY_OLMO2] = {CP_FAMILY_OLMO2, {"model.", NULL}, CP_QKV_SEPARATE, CP_TAU_NOWHERE, NULL, ROWS(k_olmo2),
                         false},
    [CP_FAMILY_STARCODER2] = {CP_FAMILY_STARCODER2, {"model.", NULL}, CP_QKV_SEPARATE, CP_TAU_NOWHERE, NULL,
                              ROWS(k_starcoder2), false},
};

const cp_family_layout *cp_family_layout_of(cp_family family) {
  assert(family >= 0 && family < CP_FAMILY_COUNT);
  return &k_layouts[family];
}
