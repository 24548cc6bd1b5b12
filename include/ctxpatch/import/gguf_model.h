/* Floor: import. A single GGUF file as a model: its `{arch}.*` metadata as the model
 * config (in place of config.json) and its `tokenizer.ggml.*` metadata as the tokenizer.
 *
 * Config: general.architecture "llama", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3",
 * "gptneox", "bloom", "mpt", "gpt2" or "t5" (llama.cpp's names; families llama (model_type llama,
 * qwen2, qwen3), phi3, gemma (model_type gemma, gemma2, gemma3_text), gpt_neox, bloom, mpt, gpt2,
 * t5). The keys become the config.json fields the family's HF config names, and go through the
 * same parser (cp_hf_config_parse), so every range check applies; cfg->text is that synthetic
 * config.json. Every architecture:
 *   {arch}.embedding_length -> hidden_size (MPT d_model)
 *   {arch}.block_count -> num_hidden_layers (BLOOM n_layer, MPT n_layers)
 *   {arch}.attention.head_count -> num_attention_heads (BLOOM n_head, MPT n_heads)
 *   {arch}.attention.head_count_kv (default: head_count; gptneox and bloom refuse another value)
 *   {arch}.feed_forward_length -> intermediate_size (BLOOM: must be 4 x embedding_length; MPT:
 *                            expansion_ratio)
 *   {arch}.context_length -> the training length (max_position_embeddings, BLOOM seq_length, MPT
 *                            max_seq_len); train_len_key says "GGUF {arch}.context_length";
 *                            commands with --train-len override it
 *   {arch}.vocab_size, else the rows of token_embd.weight -> vocab_size
 *   tokenizer.ggml.bos_token_id / eos_token_id -> bos/eos (u32 0xFFFFFFFF: none)
 *   tie_word_embeddings: true when the file has no output.weight.
 * llama: {arch}.attention.key_length -> head_dim (when present), layer_norm_rms_epsilon ->
 *   rms_norm_eps, rope.freq_base -> rope_theta (default 10000), rope.scaling.type / .factor ->
 *   rope_scaling ("none" is no scaling); rope.dimension_count must equal the head size.
 *   llama.cpp's converter permutes the q and k rows of each head for its interleaved rotary pairs;
 *   the model loader (import/model_load.c) undoes it, so the engines see HF's layout. qwen2 and
 *   qwen3 rotate halves as HF does: rows as stored; qwen3 has blk.N.attn_q_norm / attn_k_norm.
 * gemma, gemma2: as llama (rows as stored: NEOX rotation), key_length -> head_dim, activation
 *   gelu_pytorch_tanh, norms stored as 1 + w (the loader keeps them); output.weight refused (llama.cpp
 *   runs the embedding as its head). gemma2: attn_logit_softcapping, final_logit_softcapping,
 *   attention.sliding_window (llama.cpp's defaults 50, 30, 4096 when absent), the even layers
 *   sliding, query_pre_attn_scalar = head_dim (hidden / heads at 46 layers: llama.cpp's scale);
 *   sliding_window_pattern and rope.freq_base_swa refused. gemma3: attention.sliding_window
 *   (required), layer il sliding when il % 6 < 5, rope_local_base_freq 10000 (rope.freq_base_swa
 *   must say 10000 if present), query_pre_attn_scalar as gemma2 (hidden / heads at 62 layers), no
 *   soft-caps; sliding_window_pattern and soft-cap keys refused.
 * gptneox: rope.dimension_count -> rotary_pct (partial NEOX-style rotary, no row permutation),
 *   rope.freq_base, rope.scaling as llama, use_parallel_residual (default true),
 *   attention.layer_norm_epsilon -> layer_norm_eps, attention_bias when blk.0.attn_qkv.bias exists.
 * bloom: attention.layer_norm_epsilon; ALiBi with llama.cpp's fixed max bias 8 (BLOOM's slopes).
 * mpt: attention.max_alibi_bias -> attn_config.alibi_bias_max (required and > 0: llama.cpp runs an
 *   MPT without it on learned positions, not supported), attention.clamp_kqv -> clip_qkv,
 *   attention.layer_norm_epsilon, no_bias when the file has no bias tensor.
 * gpt2: context_length (required: the rows of position_embd) -> n_positions,
 *   attention.layer_norm_epsilon, activation gelu_new (llama.cpp's ggml_gelu); matrices are
 *   [n_out, n_in] (llama.cpp's converter transposed HF's Conv1D), read as such.
 * t5: attention.key_length -> d_kv, block_count / decoder_block_count -> num_layers /
 *   num_decoder_layers, attention.relative_buckets_count, layer_norm_rms_epsilon,
 *   decoder_start_token_id, feed_forward_proj gated-gelu when enc.blk.0.ffn_gate exists else relu,
 *   relative_attention_max_distance 128 (llama.cpp's constant); a file without output.weight is
 *   refused (llama.cpp would run the embedding unscaled as the head, no T5Config says that).
 * The fused attn_qkv of gptneox, bloom, mpt and gpt2 holds q | k | v (llama.cpp's converter reorders
 * BLOOM's and GPT-NeoX's per-head [H, 3, dh] rows); the loader splits it so.
 * Activation: llama.cpp runs all three with ggml_gelu, the tanh approximation, so the config read
 * from a GGUF says gelu_pytorch_tanh (HF's GPT-NeoX and MPT use the exact GELU; the difference is
 * below 1e-3 per activation).
 *
 * Tokenizer: tokenizer.ggml.model "llama" (SentencePiece vocabulary: tokens, scores, token_type,
 * unknown/bos/eos/padding ids, add_space_prefix) becomes a SentencePiece BPE model run by
 * libsentencepiece, as llama.cpp's SPM tokenizer does: no whitespace collapsing, a dummy prefix
 * unless add_space_prefix is false, byte fallback when the 256 byte pieces are there.
 * tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, token_type, merges, pre "gpt-2" only,
 * bos/eos ids, add_bos_token / add_eos_token) becomes the tokenizer.json byte-level BPE it was
 * made from (cp_tokenizer_from_bpe_vocab; bounds and refusals there). Other values, and other
 * gpt2 pre-tokenizers, are refused with CP_ETOK_UNSUPPORTED.
 *
 * Ownership: results are owned by the caller (cp_hf_config_free, cp_tokenizer_free).
 */
#ifndef CTXPATCH_IMPORT_GGUF_MODEL_H
#define CTXPATCH_IMPORT_GGUF_MODEL_H

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/tokenizers/tokenizer.h"

/* llama.cpp's architecture name of `family` ("llama", "gptneox", "bloom", "mpt"), or NULL when
 * the family has no GGUF mapping (T5, FIRE). */
const char *cp_gguf_arch_of(cp_family family);
/* llama.cpp's architecture for a config: by model_type where the family has several (llama /
 * mistral -> "llama", qwen2 -> "qwen2", qwen3 -> "qwen3", gemma2 -> "gemma2"), else as cp_gguf_arch_of. */
const char *cp_gguf_arch_of_config(const cp_hf_config *cfg);

/* The config of GGUF file `g` (CP_ECFG_FAMILY for an architecture other than those above,
 * CP_ENOTFOUND / CP_EGGUF_KEY naming a missing or mistyped key). */
int cp_gguf_config(cp_hf_config **out, const cp_gguf_file *g);

/* The config of an open checkpoint: its config.json, or its GGUF metadata; CP_ENOTFOUND when it
 * has neither (`path` names it in the message). */
int cp_checkpoint_config(cp_hf_config **out, const cp_checkpoint *ck, const char *path);

/* The tokenizer of GGUF file `g`. */
int cp_gguf_tokenizer(cp_tokenizer **out, const cp_gguf_file *g);

/* A tokenizer from `path`: a .gguf file's metadata; for a .onnx graph, or an ONNX export folder
 * (or its onnx/ subfolder) with no tokenizer of its own, the graph's folder's or its parent's; else
 * whatever cp_tokenizer_open reads. */
int cp_model_tokenizer_open(cp_tokenizer **out, const char *path);

#endif
