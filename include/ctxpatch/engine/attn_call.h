/* Floor: engine. One attention call as every backend takes it: n_q query rows at absolute
 * positions q_off .. q_off+n_q-1 against keys 0 .. n_keys-1 of one attention module. The CPU
 * streaming kernel (engine/attention_cpu.h) and the CUDA backend (ctxpatch/engine/cuda.h) run the
 * same cp_attn_call, and read the same per-call tables: cp_attn_tables_build resolves the rule's
 * decisions for this call's rows and distances once, through ctxpatch/model/rule.h, so the
 * backends share every decision and differ only in arithmetic. */
#ifndef CTXPATCH_ENGINE_ATTN_CALL_H
#define CTXPATCH_ENGINE_ATTN_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/base/arena.h"
#include "ctxpatch/engine/attn_pos.h"

/* What the rule decides for one call, resolved on the host. Owned by the call that
 * cp_attn_tables_build filled (free with cp_attn_tables_free), or by the call's `work` arena when it
 * has one; NULL where the call needs none. */
typedef struct {
  int64_t *dprime;      /* causal: [n_keys] cp_plan_distance(d) for d in [0, n_keys) */
  int64_t rope_far;     /* RoPE, causal: the one distance the ceiling maps every changed distance
                           to (q_far is q rotated by it); -1 when the ceiling changes none */
  int *t5_bucket;       /* T5: causal [n_keys] bucket of distance d (after the ceiling);
                           bidirectional [2 n_keys - 1] bucket of r = j - i at r + n_keys - 1 */
  double *alibi_div;    /* ALiBi: [n_q] cp_plan_alibi_divisor of each row */
  int64_t *topk_range;  /* top-k: [n_q, 2] the row's Lambda-hidden keys [lo, hi) when it gets
                           top-k (cp_plan_topk_row), else the empty [0, 0) */
  bool topk_any;        /* some row has a non-empty topk_range */
  float *topk_bias;     /* top-k: [H, n_q] positional term at the top-k distance (0 for RoPE) */
  double fire_L;        /* FIRE: effective threshold (the rule's fire_threshold, else the model's L) */
  float *inv_tau;       /* temperature_schedule: [n_q] cp_plan_row_inv_tau of each row (tau(T) with T
                           the row's length); NULL: every row uses plan->inv_tau */
  bool in_arena;        /* the arrays belong to the call's `work` arena: cp_attn_tables_free skips them */
} cp_attn_tables;

typedef struct {
  const cp_attn_plan *plan;
  int H, Hkv, dh;           /* H % Hkv == 0 */
  int64_t q_off, n_q, n_keys;
  int64_t last_prompt_row;  /* for cp_plan_topk_row */
  float scale;              /* c of the spec */
  float softcap;            /* Gemma 2's attn_logit_softcapping: each logit (c q.k / tau) becomes
                               softcap tanh(logit / softcap) before the mask (decision 17); 0: none */

  /* The model's positional term, what the tables are built from. */
  cp_attn_pos pos;
  const float *t5_table;    /* T5: [t5_num_buckets, H] relative_attention_bias */
  int t5_num_buckets, t5_max_distance;
  const double *slopes;     /* ALiBi: [H] */
  const cp_fire_mlp *fire;  /* FIRE: the layer's MLP */

  const float *q;       /* [n_q, H*dh]; RoPE: rotated to each row's position */
  const float *q_far;   /* [n_q, H*dh] RoPE with tab.rope_far >= 0: q rotated by it; else NULL */
  const float *q_topk;  /* [n_q, H*dh] RoPE with top_k: q rotated by the top-k distance; else NULL */
  const float *k, *v;   /* [n_keys, Hkv*dh]; RoPE: k rotated to each key's position */
  const float *k_raw;   /* [n_keys, Hkv*dh] RoPE: unrotated keys (needed with q_far or q_topk) */

  float *out;           /* [n_q, H*dh] */
  float *row_pmax, *row_ent; /* [H, n_q] per-row largest probability and entropy, or NULL */
  float *row_lstd;      /* [H, n_q] std of each row's logits as they enter the softmax (over its
                           visible keys, top-k candidates included), or NULL */

  size_t fire_table_bytes; /* CPU, FIRE rows past L: bytes one chunk's bias table may take (0: the
                              kernel's 32 MiB; a smaller value only makes more chunks, same output) */

  cp_attn_tables tab;   /* cp_attn_tables_build */
  cp_arena *work;       /* scratch for the tables and the CPU kernel (reset by the owner between
                           calls, so a decode loop allocates nothing per step), or NULL: malloc */
} cp_attn_call;

/* Fills c->tab from c->plan, the shape and the positional term (T5 needs t5_table, ALiBi slopes,
 * FIRE fire). Returns 0, CP_ENOMEM, or CP_EUNSUPPORTED for RoPE whose ceiling maps distances to
 * more than one value; on failure c->tab holds nothing. */
int cp_attn_tables_build(cp_attn_call *c);
void cp_attn_tables_free(cp_attn_tables *t); /* NULL members are fine; leaves *t empty */

/* 1 / tau of row r (0 .. n_q-1) of the call: the schedule's table, else the plan's constant. */
static inline float cp_attn_row_inv_tau(const cp_attn_call *c, int64_t r) {
  return c->tab.inv_tau ? c->tab.inv_tau[r] : c->plan->inv_tau;
}

/* Zeroed or malloc'd count * elem bytes for call c: from c->work when set, else the heap (free()).
 * NULL on overflow or when out of memory. */
void *cp_attn_scratch(const cp_attn_call *c, size_t count, size_t elem);

/* The call of attention module (plan->kind, plan->layer) of stack `st` of model m: shape, scale
 * and positional term from the model (cross-attention has none), then cp_attn_tables_build with
 * `work` (may be NULL) as its scratch. Tensors and outputs are the caller's to set; free c->tab
 * with cp_attn_tables_free. */
int cp_attn_call_for_model(cp_attn_call *c, const cp_model *m, const cp_stack *st, const cp_attn_plan *plan,
                           int64_t q_off, int64_t n_q, int64_t n_keys, int64_t last_prompt_row, cp_arena *work);

#endif
