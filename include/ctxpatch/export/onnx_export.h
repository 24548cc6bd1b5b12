/* Floor: export. `ctxpatch convert --to onnx`: a model folder exported as an ONNX graph that
 * computes the model under an attention rule (docs/onnx.md), in the layout Optimum and
 * transformers.js read:
 *   config.json, generation_config.json, tokenizer files   the input's, copied unchanged (a
 *                                      patched input's config keeps its "ctxpatch" block)
 *   onnx/model.onnx (+ onnx/model.onnx.data)   the graph (ctxpatch/formats/onnx.h); decoder-only
 *                                      inputs and outputs as export/onnx/onnx_decoder.h lists
 *   T5 instead: onnx/encoder_model.onnx and onnx/decoder_model_merged.onnx (+ their .data), Optimum's
 *                                      merged layout, as export/onnx/onnx_t5.h lists
 *   SHA256SUMS                         sha256sum manifest of every other file, onnx/ included
 * Graph metadata_props: "ctxpatch.rule" (canonical rule JSON, cp_rule_to_string),
 * "ctxpatch.fidelity" = "graph" (the graph computes the rule), "ctxpatch.version",
 * "ctxpatch.certificate_sha256" ("" when uncertified, as convert writes it).
 * The folder appears atomically; the same input and options give the same bytes.
 */
#ifndef CTXPATCH_EXPORT_ONNX_EXPORT_H
#define CTXPATCH_EXPORT_ONNX_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/export/convert.h"
#include "ctxpatch/import/model.h"
struct cp_onnx_import; /* ctxpatch/import/onnx_import.h (not installed) */
#include "ctxpatch/model/rule.h"
#include "ctxpatch/formats/tensor.h"

typedef struct {
  cp_dtype weight_dtype;          /* CP_F32 (default), CP_F16 or CP_BF16 storage of the weights */
  uint64_t external_threshold;    /* bytes; 0: CP_ONNX_DEFAULT_EXTERNAL_THRESHOLD (1024) */
  bool replace;                   /* replace an existing output folder */
  bool no_manifest;               /* write no SHA256SUMS (as cp_convert_params) */
  const char *certificate_sha256; /* NULL: "" (uncertified) */
} cp_onnx_export_params;

void cp_onnx_export_params_init(cp_onnx_export_params *p);

typedef struct {
  uint64_t model_bytes, data_bytes; /* onnx/model.onnx and onnx/model.onnx.data (0 when absent);
                                       T5: the sums over its two graphs */
  uint64_t graphs;                  /* 1, or 2 for T5 (encoder_model.onnx + decoder_model_merged.onnx) */
  uint64_t aux_files;
} cp_onnx_export_stats;

/* The effective rule of an export, as the engine resolves it (cp_engine_set_rule): the caller's
 * when not the identity, else the model's metadata rule, else the identity; both at once is
 * refused (CP_ERULE_MODEL). Checked against the model. */
int cp_onnx_export_rule(cp_rule *out, const cp_model *m, const cp_rule *rule);

/* Writes onnx/model.onnx (+ data), or T5's two graphs, for m under `rule` (resolved by cp_onnx_export_rule) into the
 * existing folder `dir`, adding their digests to *files. */
int cp_onnx_write_graph(cp_folder_result *files, cp_onnx_export_stats *stats, const char *dir, const cp_model *m,
                        const cp_rule *rule, const cp_onnx_export_params *params);

/* Whether the own export im (read back from `path` into m) is the graph ctxpatch writes for m:
 * regenerated into a temporary folder (under $TMPDIR, else /tmp; removed) and compared node by node
 * (op, name, inputs, outputs, attributes), with its inputs, outputs and every initializer's bytes;
 * a `graph-rewrite` export is compared with the regenerated export rewritten again under its rule.
 * 0, or CP_EONNX_RECOVER naming the first node or initializer that differs. Installed by the
 * program with cp_onnx_set_own_check (ctxpatch/import/onnx_import.h). */
int cp_onnx_own_check(const char *path, const struct cp_onnx_import *im, const cp_model *m);

/* The whole export of the checkpoint folder `in` into the folder `out`; rule may be NULL
 * (identity). `stats` may be NULL. */
int cp_onnx_export(cp_onnx_export_stats *stats, const char *in, const char *out, const cp_rule *rule,
                   const cp_onnx_export_params *params);

#endif
