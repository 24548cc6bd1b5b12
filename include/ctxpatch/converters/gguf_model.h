/* Floor: converters. A single GGUF file as a model: its `{arch}.*` metadata as the model
 * config (in place of config.json) and its `tokenizer.ggml.*` metadata as the tokenizer.
 *
 * Config: general.architecture "llama" is read (family llama). The keys become the config.json
 * fields HF's LlamaConfig names, and go through the same parser (cp_hf_config_parse), so every
 * range check applies; cfg->text is that synthetic config.json:
 *   {arch}.embedding_length -> hidden_size        {arch}.block_count -> num_hidden_layers
 *   {arch}.attention.head_count -> num_attention_heads
 *   {arch}.attention.head_count_kv -> num_key_value_heads (default: head_count)
 *   {arch}.attention.key_length -> head_dim (when present)
 *   {arch}.feed_forward_length -> intermediate_size
 *   {arch}.attention.layer_norm_rms_epsilon -> rms_norm_eps
 *   {arch}.rope.freq_base -> rope_theta (default 10000)
 *   {arch}.rope.scaling.type / .factor -> rope_scaling (type "none" is no scaling)
 *   {arch}.context_length -> max_position_embeddings, the training length (train_len_key says
 *                            "GGUF llama.context_length"; commands with --train-len override it)
 *   {arch}.vocab_size, else the rows of token_embd.weight -> vocab_size
 *   tokenizer.ggml.bos_token_id / eos_token_id -> bos/eos (u32 0xFFFFFFFF: none)
 *   tie_word_embeddings: true when the file has no output.weight.
 * {arch}.rope.dimension_count must equal the head size (llama rotates whole heads).
 * llama.cpp's converter permutes the q and k rows of each head for its interleaved rotary pairs;
 * the model loader (converters/model.c) undoes it, so the engines see HF's layout.
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
#ifndef CTXPATCH_CONVERTERS_GGUF_MODEL_H
#define CTXPATCH_CONVERTERS_GGUF_MODEL_H

#include "ctxpatch/converters/checkpoint.h"
#include "ctxpatch/converters/hf_config.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/tokenizers/tokenizer.h"

/* The config of GGUF file `g` (CP_ECFG_FAMILY for an architecture other than llama,
 * CP_ENOTFOUND / CP_EGGUF_KEY naming a missing or mistyped key). */
int cp_gguf_config(cp_hf_config **out, const cp_gguf_file *g);

/* The config of an open checkpoint: its config.json, or its GGUF metadata; CP_ENOTFOUND when it
 * has neither (`path` names it in the message). */
int cp_checkpoint_config(cp_hf_config **out, const cp_checkpoint *ck, const char *path);

/* The tokenizer of GGUF file `g`. */
int cp_gguf_tokenizer(cp_tokenizer **out, const cp_gguf_file *g);

/* A tokenizer from `path`: a .gguf file's metadata, else whatever cp_tokenizer_open reads. */
int cp_model_tokenizer_open(cp_tokenizer **out, const char *path);

#endif
