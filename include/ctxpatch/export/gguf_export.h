/* Floor: export. A checkpoint written as a llama.cpp GGUF file (`convert --to gguf`, and the
 * writer under `patch --to gguf`).
 *
 * Families: llama, gpt_neox, bloom, mpt, gpt2, t5 (the family table's GGUF column: llama.cpp's
 * `llama`, `gptneox`, `bloom`, `mpt`, `gpt2`, `t5` architectures; the llama family's qwen2 and
 * qwen3 as llama.cpp's `qwen2` and `qwen3`, q/k rows unpermuted, qwen3's per-head norms as
 * attn_q_norm / attn_k_norm; phi3; gemma / gemma2 as llama.cpp's `gemma` / `gemma2`, norms stored as
 * 1 + w, q/k rows unpermuted; olmo2 as llama.cpp's `olmo2` (q/k rows unpermuted, whole-row q/k
 * norms as attn_q_norm / attn_k_norm, post_attention_norm, post_ffw_norm; head width D / H only)).
 * FIRE is refused with
 * CP_ECFG_FAMILY (no llama.cpp counterpart).
 *
 * From an HF folder (config.json + weights in any format the checkpoint reader opens): tensors by
 * the family table's GGUF names, rows reordered as llama.cpp's converter does (cp_gguf_rows: llama
 * q/k for interleaved rotary pairs, BLOOM / GPT-NeoX fused q/k/v to q | k | v; GPT-2's Conv1D
 * matrices transposed to [n_out, n_in], cp_names_conv1d), and the
 * `{arch}.*` keys from config.json:
 *   every arch: context_length (the training length), embedding_length, block_count,
 *     feed_forward_length, attention.head_count, attention.head_count_kv, vocab_size;
 *   llama: rope.dimension_count, attention.layer_norm_rms_epsilon, rope.freq_base
 *     (attention.key_length and value_length when heads are not d_model / H);
 *   gptneox: rope.dimension_count (the rotary dims), rope.freq_base, use_parallel_residual,
 *     attention.layer_norm_epsilon;
 *   bloom: attention.layer_norm_epsilon (llama.cpp fixes BLOOM's ALiBi max bias at 8);
 *   mpt: attention.layer_norm_epsilon, attention.max_alibi_bias, attention.clamp_kqv (clip_qkv);
 *   gpt2: attention.layer_norm_epsilon (context_length is n_positions, position_embd's rows);
 *   t5: decoder_block_count, attention.key_length / value_length (d_kv),
 *     attention.layer_norm_epsilon and layer_norm_rms_epsilon, attention.relative_buckets_count,
 *     decoder_start_token_id (conversion/t5.py's keys);
 *   gemma, gemma2: rope.dimension_count, rope.freq_base, attention.layer_norm_rms_epsilon,
 *     attention.key_length / value_length (head_dim); gemma2 also attn_logit_softcapping,
 *     final_logit_softcapping, attention.sliding_window; gemma3 (model_type gemma3_text)
 *     attention.sliding_window and rope.freq_base_swa, no soft-cap keys, q/k norms as 1 + w;
 *   with a linear rope_scaling (llama, gptneox): rope.scaling.type "linear", rope.scaling.factor
 *   and rope.scaling.original_context_length (the training length).
 * BLOOM and GPT-NeoX with tied embeddings get output.weight = the embedding (llama.cpp requires
 * it, and its converter writes it so); a tied T5 gets output.weight = the embedding times
 * d_model^-0.5 (HF's T5 scales the tied head's input so; llama.cpp's t5 runs its head unscaled). Refused (cp_gguf_export_check): BLOOM with
 * apply_residual_connection_post_layernorm, GPT-NeoX without attention biases or with a non-GELU
 * activation, MPT with a softmax_scale other than 1/sqrt(dh), GPT-2 with scale_attn_weights false,
 * scale_attn_by_inverse_layer_idx or a non-GELU activation, T5 with relative_attention_max_distance
 * other than 128
 * (llama.cpp's constant) or an FFN other than relu / gated-gelu, Gemma with an untied head, biases
 * or a non-tanh GELU, Gemma 2 with a query_pre_attn_scalar, soft-caps, window or sliding layers
 * llama.cpp would not run (gemma_check), stored ALiBi slopes.
 * Tokenizer of an HF folder: a byte-level BPE tokenizer.json becomes llama.cpp's "gpt2" vocabulary
 * (export/gguf/gguf_vocab.h); SentencePiece tokenizer.model and other tokenizer.json kinds are not
 * converted (the tokenizers floor exposes no vocabulary of them) and get tokenizer.ggml.model
 * "no_vocab" with bos/eos ids (token ids only; node-llama-cpp refuses such files). A patched GGUF
 * input's baked folder takes the input's tokenizer.ggml.* keys instead (`tokenizer_gguf`).
 * From a GGUF file: every tensor in file order with its name (already permuted), every key but
 * general.alignment / general.file_type / general.quantization_version and ctxpatch.* copied
 * with its type (tokenizer.ggml.* included); with a rope override, the {arch}.rope.scaling.* keys
 * are replaced.
 *
 * Tensor types: 1-D tensors F32 (as llama.cpp keeps norms); 2-D weights in `type`, except that
 * Q8_0 falls back to F16 for rows that are not whole blocks of 32 (llama.cpp's converter does the
 * same). general.file_type follows `type` (llama_ftype: 0 F32, 1 F16, 7 Q8_0, 32 BF16). Bytes
 * already stored in the output type are copied bit for bit; others pass through float32.
 *
 * Provenance: general.architecture, general.name, general.file_type, general.quantization_version
 * (Q8_0), ctxpatch.tool_version, ctxpatch.source (the input's file or folder name), then the
 * caller's keys (ctxpatch.* of a patch). Memory: a bounded chunk of rows at a time, never the
 * whole model. The output is written atomically (nothing on error) and deterministically.
 */
#ifndef CTXPATCH_EXPORT_GGUF_EXPORT_H
#define CTXPATCH_EXPORT_GGUF_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/model/families.h"
#include "ctxpatch/model/gguf_rows.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/formats/gguf.h"

/* An extra key: a string (s), a bool (b) or an f64 number (num), as `type` says. */
typedef struct {
  const char *key;
  cp_gguf_vtype type; /* CP_GGUF_STRING, CP_GGUF_BOOL or CP_GGUF_F32 */
  const char *s;
  bool b;
  double num;
} cp_gguf_meta;

typedef struct {
  uint32_t type;             /* CP_GGML_F32 (default 0), F16, BF16 or Q8_0 for 2-D weights */
  const char *name;          /* general.name; NULL: the input GGUF's, else the input's name */
  const cp_gguf_meta *meta;  /* extra keys, written last in this order (borrowed) */
  size_t n_meta;
  double rope_factor;        /* > 0: write linear rope scaling with this factor (patch rope-pi) */
  bool replace;              /* replace an existing OUT file (else CP_EEXIST) */
  const char *source;        /* the name ctxpatch.source and the default general.name take (NULL: `in`'s) */
  const cp_gguf_file *tokenizer_gguf; /* an HF folder's tokenizer.ggml.* copied from this GGUF instead
                                         (a patched GGUF input's baked folder); NULL: none */
  const char *digest_key;            /* non-NULL: this ctxpatch.* key, last, holds the file's content
                                         digest (cp_gguf_content_sha256 skipping ctxpatch.*; patch --to gguf) */
  int64_t train_len;                 /* > 0: the training length the user stated (--train-len), written as
                                         {arch}.context_length (and rope.scaling.original_context_length)
                                         in place of the config's or the input GGUF's */
} cp_gguf_export_params;

typedef struct {
  uint64_t tensors;
  char sha256[65]; /* of the file written */
} cp_gguf_export_stats;

/* Whether a model of config `cfg` (read from `in`) can be written for llama.cpp: a family with a
 * llama.cpp architecture and nothing llama.cpp would compute differently (see docs/gguf.md);
 * CP_ECFG_FAMILY or CP_EUNSUPPORTED with the reason. */
int cp_gguf_export_check(const cp_hf_config *cfg, const char *in);

/* "f32", "f16", "bf16", "q8_0" -> the ggml type (CP_EARG naming the text otherwise). */
int cp_gguf_dtype_from_name(uint32_t *out, const char *name);

/* Whether `out` may be written: a GGUF output is a file (cp_output_kind); an existing one only
 * with `replace` (CP_EEXIST otherwise). */
int cp_gguf_output_check(const char *out, bool replace);

/* Writes checkpoint `in` (file or folder) to the GGUF file `out`. `stats` may be NULL. */
int cp_gguf_export(cp_gguf_export_stats *stats, const char *in, const char *out, const cp_gguf_export_params *p);

#endif
