/* Streaming attention kernel of the CPU engine (internal to verify/).
 *
 * One call is one attention module for n_q query rows at absolute positions q_off .. q_off+n_q-1
 * against keys 0 .. n_keys-1. Work items are (head, tile of rows); each walks only the key
 * blocks that some row of its tile can see (cp_plan_visible_ranges), keeping an online softmax
 * (running max m, l = sum e^(s-m), t = sum e^(s-m) (s-m)), so memory is O(rows + keys) and the
 * row entropy is log l - t/l exactly, without a second pass. */
#ifndef CTXPATCH_VERIFY_ATTENTION_CPU_H
#define CTXPATCH_VERIFY_ATTENTION_CPU_H

#include <stdint.h>

#include "ctxpatch/converters/model.h"
#include "ctxpatch/converters/rule.h"
#include "engine/pool.h"

typedef enum { ATT_POS_NONE, ATT_POS_T5, ATT_POS_ALIBI, ATT_POS_ROPE, ATT_POS_FIRE } att_pos;

typedef struct {
  const cp_attn_plan *plan;
  int H, Hkv, dh;
  int64_t q_off, n_q, n_keys;
  int64_t last_prompt_row;  /* for cp_plan_topk_row */
  float scale;              /* c of the spec */

  const float *q;       /* [n_q, H*dh]; RoPE: rotated to each row's position */
  const float *q_far;   /* RoPE with a ceiling: q rotated by far_distance; else NULL */
  const float *q_topk;  /* RoPE with top_k: q rotated by the top-k distance; else NULL */
  const float *k, *v;   /* [n_keys, Hkv*dh]; RoPE: k rotated to each key's position */
  const float *k_raw;   /* RoPE: unrotated keys (needed with q_far or q_topk) */

  att_pos pos;
  /* Causal calls: dprime[d] = cp_plan_distance(d) for d in [0, n_keys).
   * Bidirectional (T5 encoder): unused. */
  const int64_t *dprime;
  const float *dprime_f;     /* the same as floats; filled by cp_cpu_attention (ALiBi) */
  /* T5: causal [H, n_keys + n_q] by d; bidirectional [H, 2*n_keys - 1] by r + n_keys - 1. */
  const float *t5_bias;
  const float *t5_topk_bias; /* [H]: T5 bias at the top-k distance */
  const double *slopes;      /* ALiBi [H] */
  const cp_fire_mlp *fire;
  double fire_L;             /* effective FIRE threshold */

  float *out;                /* [n_q, H*dh] */
  float *row_pmax, *row_ent; /* [H, n_q] per-row statistics, or NULL */
  float *row_lstd;            /* [H, n_q] std of each row's logits as they enter the softmax
                                (over its visible keys, top-k candidates included), or NULL */
} att_call;

/* Runs the call on the pool. Returns 0 or CP_ENOMEM (scratch allocation). */
int cp_cpu_attention(cp_pool *pool, const att_call *c);

#endif
