/* Floor: export. Patching a third-party ONNX graph in place (issue 14): the attention sites of
 * a graph are found and the rule is spliced into it through the byte-preserving editor
 * (include/ctxpatch/formats/onnx_edit.h), so every node, initializer and external data reference
 * the rule does not need stays byte for byte as it was. docs/onnx.md "Patching a third-party
 * graph in place" has the patterns and what is refused.
 *
 * Sites, in the main graph's topological order (layer k is the k-th site):
 *   softmax  a default-domain Softmax whose input comes, through elementwise ops only (Where,
 *            Add, Sub, Mul, Div, Cast, Reshape, Identity, Transpose, at most 8 steps), from a
 *            MatMul (or com.microsoft FusedMatMul): MatMul(q, k^T) -> [Div/Mul scale] -> [Add
 *            mask / Where mask] -> Softmax; ctxpatch's own exports have this shape too;
 *   contrib  com.microsoft Attention, MultiHeadAttention or GroupQueryAttention.
 * Rules:
 *   temperature (one tau or one per site): softmax sites get Mul(x, 1/tau) in front of the
 *            Softmax (the spec's s'/tau: after the mask); contrib sites get `scale` = the node's
 *            scale (its attribute, else 1/sqrt(head_size) with the head size read from the
 *            weights that feed it) / tau;
 *   temperature_schedule on softmax sites: Mul(x, 1/tau(T) [S, 1]) per row, T = qpos + 1, the
 *            layer's piecewise schedule (cp_tau_schedule) in double;
 *   lambda_mask on softmax sites: Add(x, bias) before the Softmax (after the temperature), bias
 *            [S, T] = 0 where kpos < n_global or qpos - kpos < n_local, else the lowest finite
 *            value of the logits' type, with T, S from the logits' shape, kpos = 0 .. T-1,
 *            qpos = T - S .. T-1 (a causal pass over a cache of T - S keys); on contrib sites
 *            from the node's runtime shapes (T = past + S): an Attention without a past and a
 *            MultiHeadAttention get the bias [1, 1, S, T] as their attention_bias (input 5,
 *            added to one they have), a GroupQueryAttention [B, 1, S, T] as its input 10 (each
 *            sequence's positions from seqlens_k), an Attention with a past (onnxruntime
 *            refuses it an attention_bias) the keep mask ANDed with its 2-D mask_index as a
 *            [B, S, T] int32 mask_index (export/onnx/rewrite/onnx_rewrite_contrib.c);
 *   alibi_scale static: the ALiBi slopes constant upstream of the softmax sites (float32 or
 *            float64 [H], the BLOOM/MPT slopes for an integer max bias) replaced by m_h / F;
 *   alibi_scale dynamic / progressive: at each softmax site, the term made from that constant
 *            (proportional to it: times a distance, or BLOOM's cumulated mask) is multiplied by
 *            1 / F where the Add on the logits chain reads it, F computed at run time from the
 *            shape [..., S, T] of the scores it is added to (T keys of the pass, cache included;
 *            rows at T - S .. T - 1): max(1, T / train_len) per pass, or max(1, (i + 1) /
 *            train_len) per row as [S, 1] (export/onnx/onnx_attention.h cp_onnx_alibi_divisor,
 *            the exporter's nodes); train_len is the rule's, else params->train_len.
 * Refused (CP_EONNX_SITE, one line naming the node): no site; a training graph (backward
 *   ops); a graph that already carries a ctxpatch rule; per-layer taus whose count is not the
 *   number of sites; a contrib node whose head size cannot be told; a schedule on a contrib
 *   node; lambda_mask with rotary embeddings or ALiBi slopes (the ceiling it implies moves a
 *   distance computed before the site), on a MultiHeadAttention / GroupQueryAttention whose keys
 *   are not projected from the query's hidden states, with a shared past/present buffer, or on an
 *   Attention with a past whose mask_index is not 2-D; alibi_scale with no slopes found; dynamic
 *   or progressive without a training length (CP_ERULE_MODEL), on a site with no term from the slopes, or whose
 *   term is not proportional to them (added to another term before the distance product);
 *   distance_ceiling,
 *   top_k and fire_threshold (not expressed by the rewriter); logits of a type other than
 *   float / float16; an opset below 11 when nodes that need it are added.
 *
 * The output model gets metadata_props ctxpatch.rewrite_version, ctxpatch.rule (the rule's JSON, with
 * the train_len the graph holds for dynamic / progressive ALiBi),
 * ctxpatch.fidelity = "graph-rewrite", the entries of params (e.g. the certificate digest) and,
 * last, ctxpatch.graph_sha256: the graph digest of the bytes written and their external data
 * (include/ctxpatch/formats/onnx_digest.h); ctxpatch.version stays what it was (set only on
 * ctxpatch's own exports, which the importer reads by their names: import/onnx/onnx_import.c).
 * External data files are referenced by the same relative locations; the caller places them
 * beside out_path first (the digest reads them, and the output is read back with them). */
#ifndef CTXPATCH_ONNX_REWRITE_H
#define CTXPATCH_ONNX_REWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/model/rule.h"
#include "ctxpatch/formats/onnx_edit.h"
#include "ctxpatch/formats/onnx_graph.h"

typedef enum { CP_ONNX_SITE_SOFTMAX, CP_ONNX_SITE_CONTRIB } cp_onnx_site_kind;

typedef struct {
  cp_onnx_site_kind kind;
  size_t node;       /* the Softmax or the contrib node (main graph, file order) */
  size_t matmul;     /* softmax: the MatMul found upstream */
  int32_t elem_type; /* softmax: the logits' ONNX type (1 float, 10 float16); contrib: its query's */
  float scale;       /* contrib: the scale it uses now (0: unknown head size) */
  bool self_attention; /* contrib: keys from the query's own hidden states (packed, or q and k
                          projected from one value); an Attention always */
  int mask_rank;     /* contrib Attention: rank of its mask_index (0: none; -1: not declared) */
} cp_onnx_site;

/* The attention sites of m's main graph (*out malloc'd, the caller's; *n >= 1), or the refusal. */
int cp_onnx_find_sites(cp_onnx_site **out, size_t *n, const cp_onnx_model *m);

typedef struct {
  const char *const *meta_keys;   /* [n_meta] extra metadata_props */
  const char *const *meta_values; /* [n_meta] */
  size_t n_meta;
  int64_t train_len; /* the model's training length, for a rule that needs one and gives none (0: none) */
} cp_onnx_rewrite_params;

/* What was done, for the CLI's report. */
typedef struct {
  size_t n_softmax, n_contrib; /* sites rewritten */
  size_t n_nodes_added, n_nodes_changed, n_initializers_added, n_initializers_changed;
} cp_onnx_rewrite_report;

/* cp_onnx_rewrite's work but the writing: every check and the edit of the model at m->path under
 * `rule` in memory, the rewrite's own metadata_props set (train_len as params->train_len). *out
 * (the caller's, cp_onnx_edit_free) takes the caller's entries (cp_onnx_edit_set_meta) and is
 * written with cp_onnx_edit_write_digested: a caller that checks before a long step and writes
 * after it edits once. */
int cp_onnx_rewrite_edit(cp_onnx_edit **out, cp_onnx_rewrite_report *rep, const cp_onnx_model *m, const cp_rule *rule,
                         int64_t train_len);

/* Rewrites the model at m->path under `rule` into out_path (atomic; NULL: a dry run that makes
 * every check and the edit in memory, writing nothing). p may be NULL. */
int cp_onnx_rewrite(cp_onnx_rewrite_report *rep, const cp_onnx_model *m, const cp_rule *rule, const char *out_path,
                    const cp_onnx_rewrite_params *p);

#endif
