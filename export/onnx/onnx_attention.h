/* Private to export/: the one place where an ONNX graph turns attention scores into
 * probabilities, for every exporter (decoder-only, T5). The caller builds q, k (heads expanded),
 * the positions and the visibility mask; cp_onnx_attention_probs adds the scale, the model's
 * positional term and every rule of ../shared/spec/attention-rules.md, masks and normalises, each
 * decision taken from the cp_attn_plan of ctxpatch/model/rule.h like the engines
 * (engine/attn_call.c, engine/attention_cpu.c), in the spec's order:
 *   positional term at d' = min(d, D) with the scaled ALiBi slopes -> add to c q.k (RoPE: pairs
 *   with d > D score c (R(D) q_raw) . k_raw) -> times 1/tau (constant, per layer, or the
 *   schedule's tau(T) per row) -> visibility (causal and attention_mask from the caller, the
 *   Lambda mask, top-k middle keys added back with their logits at the top-k distance) ->
 *   softmax. (Multiplying by 1/tau before the mask is the same function, and keeps the masked
 *   fill finite.)
 *
 * Shapes (B batch, H query heads, S rows of this pass, T = past + S keys, dh head width):
 * value names are the graph builder's (ctxpatch/export/onnx_builder.h). Positions are int64. */
#ifndef CTXPATCH_EXPORT_ONNX_ATTENTION_H
#define CTXPATCH_EXPORT_ONNX_ATTENTION_H

#include <stdbool.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/export/onnx_builder.h"
#include "ctxpatch/model/rule.h"

/* Values one export computes once and every layer may reuse, keyed by what they depend on (a
 * tag, an object such as a FIRE MLP, and the qpos / kpos value names of the call): rule-wide
 * terms (clamped distances, ALiBi bias, Lambda masks, the schedule's log-length segments,
 * RoPE tables) are built once per stack. Owned by the exporter, zeroed at its start; a full
 * memo only means values are built again. */
#define CP_ONNX_MEMO_MAX 48
typedef struct {
  const char *tag;
  const void *obj, *qpos, *kpos;
  const char *val;
} cp_onnx_memo_entry;
typedef struct {
  cp_onnx_memo_entry e[CP_ONNX_MEMO_MAX];
  int n;
} cp_onnx_attn_memo;

typedef struct cp_onnx_attn_ctx cp_onnx_attn_ctx;

/* A positional term the exporter computes itself (T5: the relative-attention table gathered at
 * the buckets of the distance). dist: int64 d' (cp_onnx_attn_distance's convention, d = qpos -
 * kpos, clamped), of a shape that broadcasts to [B, 1, S, T]: the full [B, 1, S, T] for the
 * logits, a scalar (the top-k distance) for top-k candidates. Returns the float bias that
 * broadcasts against [B, H, S, T] (NULL on a builder error). The result for the full distance is
 * memoised per (user, qpos, kpos), so one stack's table is gathered once. */
typedef const char *(*cp_onnx_pos_fn)(void *user, const cp_onnx_attn_ctx *c, const char *dist);

struct cp_onnx_attn_ctx {
  cp_og *g;
  const cp_model *m;
  const cp_attn_plan *plan;  /* cp_rule_plan of (kind, layer) */
  cp_attn_kind kind;
  int layer;
  const cp_fire_mlp *fire;   /* FIRE: this layer's MLP (shared or its own); else NULL */

  const char *q;       /* [B, H, S, dh] RoPE: rotated to the query positions */
  const char *k;       /* [B, H, T, dh] heads expanded (GQA); RoPE: rotated to the key positions */
  const char *q_raw;   /* [B, H, S, dh] RoPE: q before rotation; NULL otherwise */
  const char *k_raw;   /* [B, H, T, dh] RoPE when cp_onnx_attn_needs_raw_keys: the unrotated keys
                          (the exporter keeps them, cache included); NULL otherwise */
  const char *qpos;    /* [1, 1, S, 1] int64 query positions in the cache (the decoder: T - S + row) */
  const char *kpos;    /* [1, 1, 1, T] int64 key positions 0 .. T-1 */
  const char *n_keys;  /* [] int64 T */
  const char *visible; /* [B, 1, S, T] bool: causal (kpos <= qpos where causal) and attention_mask */
  cp_onnx_pos_fn pos_bias; /* non-NULL: the positional term (T5), in place of the model's ALiBi / FIRE */
  void *pos_user;
  cp_onnx_attn_memo *memo;
};

/* Whether the rule needs the unrotated RoPE keys of this module (a distance ceiling or top-k, as
 * the engine's rope_needs_raw): the exporter then keeps them (cache included) and sets k_raw. */
bool cp_onnx_attn_needs_raw_keys(const cp_model *m, const cp_attn_plan *plan);

/* Checks the rule of this plan can be written as graph nodes: 0, or CP_EONNX_EXPORT naming the
 * rule key (only a distance ceiling on a bidirectional RoPE call, which no family has and the
 * engine does not run either). */
int cp_onnx_attn_check_plan(const cp_model *m, const cp_attn_plan *plan, const char *what);

/* int64 [B, 1, S, T] d' = clamp(qpos - kpos, -D, D) (cp_plan_distance: min(d, D) for d >= 0,
 * sign kept), or the unclamped difference without a ceiling. T5 buckets take r' = -d'. */
const char *cp_onnx_attn_distance(cp_onnx_attn_ctx *c);

/* softmax over keys of the rule's logits (see the top of this file): returns probabilities
 * [B, H, S, T]; masked keys get exactly 0 (see the .c for the fill value). */
const char *cp_onnx_attention_probs(cp_onnx_attn_ctx *c);

/* A node builder over either ONNX writer, so that a rule's subgraph has one copy: the exporter's
 * cp_og (onnx_attention.c) and the in-place rewriter's editor (onnx_rewrite.c) implement it.
 * Every callback returns the new value's name (owned by the emitter, valid while it lives), or
 * NULL once a call has failed (the emitter keeps the error). */
typedef struct {
  void *user;
  const char *(*op)(void *user, const char *op, const char *const *in, int n_in); /* one output */
  const char *(*cast)(void *user, const char *x, int to); /* to: an ONNX TensorProto type */
  const char *(*f64)(void *user, double v);               /* a float64 scalar constant */
} cp_onnx_emit;

/* ALiBi's slope divisor of alibi_scale dynamic or progressive as float64 nodes, computed as
 * cp_plan_alibi_divisor: dynamic F = max(1, T / train_len) of n_keys (int64 T, a scalar);
 * progressive F_i = max(1, (i + 1) / train_len) of qpos (int64 absolute query positions i, any
 * shape; the result has its shape). The plan must be one of the two modes. */
const char *cp_onnx_alibi_divisor(const cp_onnx_emit *e, const cp_attn_plan *plan, const char *n_keys, const char *qpos);

/* RoPE tables of decoder layer `layer` at int64 positions pos [..., 1]: *cos, *sin [..., rope_dims]
 * float, angles in double as the engine's rope_rotate: pos * inv[a] / div of the layer's table
 * (cp_model_rope_at: Gemma 3's sliding layers have their own), cos and sin times its mscale (squared
 * when `relative`: a query rotation scored against unrotated keys), the first half repeated for the
 * second (rotate-half layout). A scalar-like pos [1] gives [rope_dims]. */
void cp_onnx_rope_tables(cp_og *g, const cp_model *m, int layer, const char *pos, bool relative, const char **cos,
                         const char **sin);
/* x [B, h, n, dh] with its first rope_dims of each head rotated by the tables (broadcast over
 * [B, h, n, rope_dims]): x1 cos - x2 sin | x2 cos + x1 sin. */
const char *cp_onnx_rope(cp_og *g, const cp_model *m, const char *x, const char *cos, const char *sin);

#endif
