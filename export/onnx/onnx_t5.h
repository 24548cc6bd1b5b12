/* Private to export/: T5 (encoder-decoder) as ONNX graphs (onnx_t5.c), in Optimum's layout
 * that transformers.js runs:
 *
 *   onnx/encoder_model.onnx
 *     inputs  input_ids [batch_size, encoder_sequence_length] int64,
 *             attention_mask [batch_size, encoder_sequence_length] int64 (0 hides a key)
 *     outputs last_hidden_state [batch_size, encoder_sequence_length, d_model] float
 *   onnx/decoder_model_merged.onnx
 *     inputs  input_ids [batch_size, decoder_sequence_length] int64,
 *             encoder_attention_mask [batch_size, encoder_sequence_length] int64,
 *             encoder_hidden_states [batch_size, encoder_sequence_length, d_model] float,
 *             past_key_values.{i}.decoder.key / .value [batch_size, H, past_decoder_sequence_length, d_kv],
 *             past_key_values.{i}.encoder.key / .value [batch_size, H, encoder_sequence_length_out, d_kv],
 *             use_cache_branch [1] bool (false: every past input is ignored, as if empty)
 *     outputs logits [batch_size, decoder_sequence_length, vocab] float,
 *             present.{i}.decoder.key / .value [batch_size, H, present_decoder_sequence_length, d_kv],
 *             present.{i}.encoder.key / .value [batch_size, H, encoder_sequence_length_out, d_kv].
 *
 * The merged decoder has no If node. Optimum's merged graph switches, on use_cache_branch,
 * between a branch that projects the cross-attention keys/values from encoder_hidden_states and
 * one that passes the past ones through; computing them from encoder_hidden_states on every step
 * instead would cost 2 * layers * enc * d_model * (H d_kv) multiply-adds per generated token,
 * dozens of times the step's own work at long encoder lengths. Here each past input is first cut
 * to its first `use_cache_branch ? past_len : 0` positions (a Slice), and the cross keys/values
 * are concat(past encoder keys, project(encoder_hidden_states[:, kept:])): on the first step
 * (use_cache_branch false, any dummy past) every encoder row is projected; on later steps (the
 * past holds all of them) zero rows are. One straight-line graph serves both, the ONNX writer
 * needs no subgraphs, and present.*.encoder is always the full cross cache, so a runner that
 * feeds present.* back (ort_run.mjs) and one that keeps the first step's encoder cache
 * (transformers.js) both work. Decoder query positions are kept_past + 0 .. s-1.
 */
#ifndef CTXPATCH_EXPORT_ONNX_T5_H
#define CTXPATCH_EXPORT_ONNX_T5_H

#include <stdbool.h>

#include "export/onnx/onnx_attention.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/export/onnx_builder.h"
#include "ctxpatch/model/rule.h"

/* The two graphs of m (family T5) under `rule` (checked against the model by the caller), each
 * into its own builder. Return 0 or the builder's error. */
int cp_onnx_t5_encoder_graph(cp_og *g, const cp_model *m, const cp_rule *rule);
int cp_onnx_t5_decoder_graph(cp_og *g, const cp_model *m, const cp_rule *rule);

/* HF's T5Attention._relative_position_bucket of rel (int64 r = j - i, any shape; a distance
 * ceiling passes the clamped r) in the float32 steps of cp_t5_bucket
 * (model/rule.c): int64 buckets of the same shape. */
const char *cp_onnx_t5_bucket(cp_og *g, const char *rel, bool bidirectional, int num_buckets, int max_distance);

#endif
