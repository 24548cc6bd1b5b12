/* Private to converters/: the one place where an ONNX graph turns attention scores into
 * probabilities, for every exporter (decoder-only now, T5 later). The caller builds q, k (heads
 * expanded), the positions and the visibility mask; cp_onnx_attention_probs adds the scale, the
 * model's positional term and the rule, masks and normalises. Every rule subgraph goes here,
 * decided through the cp_attn_plan of ctxpatch/converters/rule.h like the engines.
 *
 * Shapes (B batch, H query heads, S rows of this pass, T = past + S keys, dh head width):
 * value names are the graph builder's (ctxpatch/converters/onnx_graph.h). */
#ifndef CTXPATCH_CONVERTERS_ONNX_ATTENTION_H
#define CTXPATCH_CONVERTERS_ONNX_ATTENTION_H

#include <stdbool.h>

#include "ctxpatch/converters/model.h"
#include "ctxpatch/converters/onnx_graph.h"
#include "ctxpatch/converters/rule.h"

/* Values one export computes once and every layer may reuse (the builder's names, or NULL until
 * first made). Owned by the exporter, zeroed at its start. */
typedef struct {
  const cp_fire_mlp *fire_key; /* shared FIRE: the MLP whose bias fire_bias holds (a rule that
                                  changes the bias per layer must not reuse it) */
  const char *fire_bias;       /* [B, H, S, T] */
  const char *alibi_slopes;    /* [H, 1, 1] the model's slopes (initializer) */
  const char *dist_f;          /* [B, 1, S, T] float qpos - kpos */
  const char *rel;             /* [B, 1, S, T] int64 kpos - qpos (T5's r = j - i) */
  const char *t5_table;        /* T5: this graph's bucket table [num_buckets, H] (initializer) */
  const char *t5_rel, *t5_bias; /* T5: the rel value t5_bias [B, H, S, T] was computed from */
} cp_onnx_attn_memo;

typedef struct {
  cp_og *g;
  const cp_model *m;
  const cp_attn_plan *plan;  /* cp_rule_plan of (kind, layer) */
  cp_attn_kind kind;
  int layer;
  const cp_fire_mlp *fire;   /* FIRE: this layer's MLP (shared or its own); else NULL */
  const char *prefix;        /* weight-name prefix of this layer ("model.layers.3") */

  const char *q;       /* [B, H, S, dh] RoPE: rotated to the query positions */
  const char *k;       /* [B, H, T, dh] heads expanded (GQA); RoPE: rotated to the key positions */
  const char *q_raw;   /* [B, H, S, dh] RoPE: q before rotation; NULL otherwise */
  const char *k_raw;   /* [B, H, T, dh] RoPE when the exporter keeps unrotated keys (see
                          cp_onnx_attn_needs_raw_keys); NULL otherwise */
  const char *qpos;    /* [B, 1, S, 1] int64 absolute query positions (position_ids) */
  const char *kpos;    /* [1, 1, 1, T] int64 key positions 0 .. T-1 */
  const char *n_keys;  /* [] int64 T */
  const char *visible; /* [B, 1, S, T] bool: causal (kpos <= qpos) and attention_mask */
  cp_onnx_attn_memo *memo;
} cp_onnx_attn_ctx;

/* Whether the rule needs the unrotated RoPE keys of this module (a distance ceiling or top-k, as
 * the engine's rope_needs_raw): the exporter then keeps them (cache included) and sets k_raw. */
bool cp_onnx_attn_needs_raw_keys(const cp_model *m, const cp_attn_plan *plan);

/* Checks the rule of this plan can be written as graph nodes: 0, or CP_EUNSUPPORTED naming the
 * rule key that is not yet supported. */
int cp_onnx_attn_check_plan(const cp_attn_plan *plan, const char *what);

/* softmax over keys of the masked logits (c q.k + positional term) * (1 / tau):
 * returns probabilities [B, H, S, T]; masked keys get exactly 0 (see the .c for the fill value). */
const char *cp_onnx_attention_probs(cp_onnx_attn_ctx *c);

#endif
