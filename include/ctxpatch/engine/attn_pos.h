/* Floor: engine. The kinds of positional term an attention call adds to its logits: one enum for
 * the CPU kernel, the CUDA host and the device code (plain C, so engine/cuda/ includes it too). */
#ifndef CTXPATCH_ENGINE_ATTN_POS_H
#define CTXPATCH_ENGINE_ATTN_POS_H

typedef enum {
  CP_ATTN_POS_NONE,  /* no positional term in the logits (cross-attention) */
  CP_ATTN_POS_T5,    /* T5 relative buckets */
  CP_ATTN_POS_ALIBI,
  CP_ATTN_POS_ROPE,  /* q, k already rotated; q_far / q_topk against k_raw */
  CP_ATTN_POS_FIRE,
} cp_attn_pos;

#endif
