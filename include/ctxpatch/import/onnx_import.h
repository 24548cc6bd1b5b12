/* Floor: import. An ONNX decoder graph read back as a checkpoint (issue 14, "Recover the model
 * description"): its initializers recognised by name and turned into the Hugging Face tensors of
 * the family (names and layouts of families.h), its config recovered, so the model loader
 * (import/model_load.c) builds the same cp_model from it as from the safetensors folder, with the
 * same shape checks against the config.
 *
 * Read by names only ctxpatch's own exports (then checked to be the graph ctxpatch writes):
 *   ctxpatch's own exports (metadata_props `ctxpatch.version` set; docs/onnx.md): initializers
 *     `model.embed_tokens.weight`, `model.layers.{i}.attn.q.weight` [in, out], ... (`NAME.stored`
 *     with a Cast under --dtype fp16|bf16), `const/N` graph constants ignored. Linear weights are
 *     transposed back to [out, in] (kept [in, out] for GPT-2's Conv1D), q/k/v fused again in the
 *     family's layout (BLOOM / GPT-NeoX per-head interleaved, MPT / GPT-2 concatenated). The config
 *     is metadata_props `ctxpatch.config` (the model's config.json text), else config.json in the
 *     model's folder or its parent (the export folder); FIRE's learned scalars c and L are
 *     `ctxpatch.fire` ("c L" per MLP, ';'-separated, %.9g). `ctxpatch.rule` becomes the model's
 *     metadata rule (the graph computes the model under it).
 *   ctxpatch's own T5 exports (import/onnx/onnx_import_t5.c): onnx/encoder_model.onnx +
 *     onnx/decoder_model_merged.onnx (export/onnx/onnx_t5.c), either file opening both (the other one
 *     beside it, by its Optimum name). Initializers `shared.weight` (in both graphs: byte-equal),
 *     `encoder.block.{l}.self_attn.{q,k,v,o,norm}.weight`, `encoder.block.{l}.mlp.{gate,up,down,norm}
 *     .weight`, `encoder.relative_attention_bias.weight`, `encoder.final.norm.weight`, the same under
 *     `decoder.` plus `decoder.block.{l}.cross_attn.{q,k,v,o,norm}.weight`, `lm_head.weight` (absent
 *     when tied), each `NAME.stored` under --dtype fp16|bf16; linear weights transposed back to
 *     [out, in]; HF names of the family table (`encoder.block.{l}.layer.0.SelfAttention.q.weight`,
 *     ...). Config and rule from the metadata_props, which must be the same in both graphs
 *     (`ctxpatch.version`, `.config`, `.rule`, `.fidelity`, `.certificate_sha256`).
 *   Hugging Face / Optimum names kept by the exporter (`transformer.h.0.attn.c_attn.weight`,
 *     `model.embed_tokens.weight`) are not a way to read a graph: names say what each weight is,
 *     not what the nodes compute (issue 33), so such a graph is recovered from its nodes like any
 *     third-party graph below, and refused when no recovery explains it. A config.json in its
 *     folder or the parent (Optimum's layout) is then a cross-check: its family and sizes must
 *     equal the recovered ones (CP_EONNX_METADATA naming the key).
 *   Third-party graphs (docs/onnx.md "Recovering third-party graphs"): recovered from
 *     the graph itself, weights taken by their role whatever their names, hyper-parameters from
 *     attributes, shapes and constants (each with its provenance): onnxruntime's contrib ops
 *     (import/onnx/onnx_contrib.c: the ORT-fused GPT-2, onnxruntime-genai's Llama with
 *     RotaryEmbedding and MultiHeadAttention / GroupQueryAttention) or the plain-op pattern
 *     (import/onnx/onnx_pattern.c: torch.onnx's GPT-2); a genai_config.json beside the graph is
 *     cross-checked (import/onnx/onnx_genai.c). Graphs that hold no model are refused with why (no
 *     stored weights, weights fed as graph inputs, no token embedding, the node that does not fit).
 * Refused (CP_EONNX_RECOVER unless said), one line naming the file and the initializer or key: in
 * a ctxpatch export, an initializer outside its names (`model.`, `lm_head.`, `const/` prefixes); in
 * any graph, an unused float initializer of 2+ dims with a d_model side (it could be a weight the
 * model would lack); a graph that holds no model (no stored weights, no token embedding, a node
 * that does not fit the pattern); a missing initializer the config needs (CP_EMODEL_TENSOR); no
 * config anywhere (CP_ENOTFOUND); q/k/v that do not fuse; T5 graphs that are not ctxpatch's own
 * exports; a malformed `ctxpatch.fire`, a genai_config.json or (HF names) a config.json that
 * disagrees with the graph (CP_EONNX_METADATA; one that is not JSON: CP_ECFG_JSON). A T5 export is
 * also refused when its other graph is missing (CP_ENOTFOUND) or not the other half, when the two graphs'
 * metadata_props differ (CP_EONNX_METADATA) or a weight both hold is not byte-equal (two exports
 * mixed), and for any initializer outside its names but `const/N`. Unused initializers that
 * cannot be weights are listed
 * (cp_onnx_import_ignored).
 *
 * Ownership: the import owns every tensor (float32, borrowed views) until cp_onnx_import_free.
 */
#ifndef CTXPATCH_IMPORT_ONNX_IMPORT_H
#define CTXPATCH_IMPORT_ONNX_IMPORT_H

#include <stddef.h>

#include "ctxpatch/formats/onnx_graph.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/formats/tensor.h"

#define CP_ONNX_META_CONFIG "ctxpatch.config" /* the exported model's config.json text */
#define CP_ONNX_META_FIRE "ctxpatch.fire"     /* FIRE models: "c L;c L;..." one pair per MLP */

typedef struct cp_onnx_import cp_onnx_import;

/* Reads the graph at `path` (a .onnx file; for a T5 export either of its two graphs) and recovers
 * its tensors and config. *out is the caller's (cp_onnx_import_free). */
int cp_onnx_import_open(cp_onnx_import **out, const char *path);
/* cp_onnx_import_open on `graph`, the file at `path` already read (cp_onnx_model_open), so that a
 * caller that also edits the graph reads it once. Borrowed: it must outlive *out. */
int cp_onnx_import_open_graph(cp_onnx_import **out, const char *path, const cp_onnx_model *graph);
void cp_onnx_import_free(cp_onnx_import *im);

/* "ctxpatch" (own export), "pattern" (plain-op graph recovered by its pattern) or "contrib"
 * (onnxruntime's fused contrib ops recovered by their attributes). */
const char *cp_onnx_import_naming(const cp_onnx_import *im);
/* Recovered graphs: each hyper-parameter and where its value came from (a node's attribute, an
 * initializer's shape, a constant, genai_config.json), in the order found. Returns the key and
 * sets *source; both borrowed. */
size_t cp_onnx_import_provenance_count(const cp_onnx_import *im);
const char *cp_onnx_import_provenance(const cp_onnx_import *im, size_t i, const char **source);
/* Where the config came from: "metadata_props ctxpatch.config" or a config.json path. */
const char *cp_onnx_import_config_source(const cp_onnx_import *im);
/* A fresh parse of the recovered config (rule of `ctxpatch.rule` as its ctxpatch_rule). */
int cp_onnx_import_config(cp_hf_config **out, const cp_onnx_import *im);

/* The recovered tensors, HF names and layouts, float32. */
size_t cp_onnx_import_count(const cp_onnx_import *im);
const cp_tensor *cp_onnx_import_tensor(const cp_onnx_import *im, size_t i);
/* Initializers not used for the model (graph constants, scalars, integer tensors). */
size_t cp_onnx_import_ignored_count(const cp_onnx_import *im);
const char *cp_onnx_import_ignored(const cp_onnx_import *im, size_t i);

/* The graph file that stands for the ONNX export folder `dir` (the export folder, or its onnx/
 * subfolder): DIR/onnx/NAME, or DIR/NAME when DIR is named `onnx`, for NAME model.onnx
 * (decoder-only), decoder_model_merged.onnx then encoder_model.onnx (T5: either opens both); NULL
 * when there is none (or out of memory). The caller frees. */
char *cp_onnx_export_graph(const char *dir);

/* The graph read (borrowed) and, for ctxpatch's T5 export, the export's other graph (else NULL). */
const cp_onnx_model *cp_onnx_import_graph(const cp_onnx_import *im);
const cp_onnx_model *cp_onnx_import_pair(const cp_onnx_import *im);

/* A graph claiming to be ctxpatch's own export (ctxpatch.version set, read by its initializer names)
 * must be the graph ctxpatch writes for the weights read from it (issue 33). That check regenerates
 * the export, so it lives above import/ (export/, cp_onnx_own_check in ctxpatch/export/onnx_export.h)
 * and is installed here by the program: cp_model_open calls it on every own ONNX export it loads,
 * after the model is built (0 or a negative cp_err). Without one installed (a library user that
 * sets none), own exports are read by their names alone. The ctxpatch program installs it first. */
typedef int (*cp_onnx_own_check_fn)(const char *path, const cp_onnx_import *im, const cp_model *m);
void cp_onnx_set_own_check(cp_onnx_own_check_fn fn);
/* The installed check on (path, im, m); 0 when none is installed or im is not an own export. */
int cp_onnx_run_own_check(const char *path, const cp_onnx_import *im, const cp_model *m);

/* The `ctxpatch.fire` value of m (NULL when out of memory; caller frees). */
char *cp_onnx_fire_meta(const cp_model *m);

#endif
