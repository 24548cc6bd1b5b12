/* Private to export/: the decoder-only graph of the ONNX export (onnx_decoder.c). */
#ifndef CTXPATCH_EXPORT_ONNX_DECODER_H
#define CTXPATCH_EXPORT_ONNX_DECODER_H

#include "ctxpatch/import/model.h"
#include "ctxpatch/export/onnx_builder.h"
#include "ctxpatch/model/rule.h"

/* Builds the whole decoder-only graph of m under `rule` (checked against the model by the
 * caller) into g, Optimum's layout (docs/onnx.md):
 *   inputs  input_ids [batch_size, sequence_length] int64,
 *           attention_mask [batch_size, total_sequence_length] int64 (0 hides a key),
 *           position_ids [batch_size, sequence_length] int64 (absolute query positions; GPT-2
 *           also gathers its learned position rows with them, so each must be below n_positions),
 *           past_key_values.{i}.key / .value [batch_size, Hkv, past_sequence_length, d_head] float;
 *   outputs logits [batch_size, sequence_length, vocab] float,
 *           present.{i}.key / .value [batch_size, Hkv, total_sequence_length, d_head] float
 *           (RoPE keys rotated, as the engine caches them, except under a rule with a distance
 *           ceiling or top-k: those need the unrotated keys (cp_onnx_attn_needs_raw_keys), so
 *           the cache holds them unrotated and the graph rotates them to 0 .. T-1 each step;
 *           cp_onnx_decoder_kv_cache says which, for the "ctxpatch.kv_cache" metadata).
 * Returns 0 or the builder's error (CP_EONNX_EXPORT for T5, see export/onnx/onnx_t5.h). */
int cp_onnx_decoder_graph(cp_og *g, const cp_model *m, const cp_rule *rule);

/* "unrotated" when some layer of m under `rule` caches unrotated RoPE keys (see above), else
 * "rotated" (a static string). */
const char *cp_onnx_decoder_kv_cache(const cp_model *m, const cp_rule *rule);

#endif
