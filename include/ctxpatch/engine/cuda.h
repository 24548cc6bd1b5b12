/* CUDA attention backend (issue 7): the fused rule-aware attention kernel of engine/cuda/, behind
 * a host-memory API that mirrors the CPU engine's attention call, so that the two can be compared
 * op for op (tests/test_cuda_consistency.c) and timed (bench/bench_attention_cuda.c).
 *
 * Built when CMake finds nvcc (option CTXPATCH_CUDA, default ON then, OFF in sanitizer builds);
 * without it every function here still exists and refuses with a one-line reason. The CPU engine
 * stays the oracle: every rule decision is resolved on the host through ctxpatch/rule.h and only
 * the resolved numbers reach the device.
 *
 * Not yet on the device: the full `--device cuda` engine (weights on the device, cuBLAS
 * projections). Top-k middle tokens run on the device for k <= 64 (larger k: CP_EUNSUPPORTED).
 */
#ifndef CTXPATCH_CUDA_H
#define CTXPATCH_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/converters/model.h"
#include "ctxpatch/converters/rule.h"

typedef enum {
  CP_CUDA_POS_NONE,  /* no positional term in the logits (cross-attention) */
  CP_CUDA_POS_T5,    /* T5 relative buckets */
  CP_CUDA_POS_ALIBI,
  CP_CUDA_POS_ROPE,  /* q, k already rotated; q_far / k_raw under a ceiling */
  CP_CUDA_POS_FIRE,
} cp_cuda_pos;

/* One attention module for n_q query rows at absolute positions q_off .. q_off+n_q-1 against keys
 * 0 .. n_keys-1, with the meaning of engine/attention_cpu.h's att_call. All arrays are host
 * memory; the call copies them to the device, runs the kernel and copies the results back. */
typedef struct {
  const cp_attn_plan *plan;
  int H, Hkv, dh;           /* H % Hkv == 0; 1 <= dh <= 256 */
  int64_t q_off, n_q, n_keys;
  int64_t last_prompt_row;  /* for cp_plan_topk_row (top-k rows are refused, see above) */
  float scale;              /* c of the spec */
  bool bf16;                /* round q, k, v (and q_far, k_raw) to bfloat16 for the device */

  const float *q;      /* [n_q, H*dh] */
  const float *q_far;  /* RoPE with a ceiling (causal only): q rotated by the clamped distance; else NULL */
  const float *k, *v;  /* [n_keys, Hkv*dh] */
  const float *q_topk; /* RoPE with top_k: q rotated by the top-k distance (against k_raw); else NULL */
  const float *k_raw;  /* [n_keys, Hkv*dh] unrotated keys, required with q_far or q_topk */

  cp_cuda_pos pos;
  const float *t5_table;   /* T5: [num_buckets, H] */
  int t5_num_buckets, t5_max_distance;
  const double *slopes;    /* ALiBi [H] */
  const cp_fire_mlp *fire; /* FIRE (causal only) */
  double fire_L;           /* effective FIRE threshold */

  float *out;                           /* [n_q, H*dh] */
  float *row_pmax, *row_ent, *row_lstd; /* [H, n_q] each, or NULL (as att_call) */

  int bench_reps;     /* > 0: afterwards time the kernel alone this many times ... */
  double *bench_ms;   /* ... and write the mean milliseconds here */
} cp_cuda_attn_call;

/* Whether a CUDA device can be used. false, with a one-line reason in why[0..n) (built without
 * CUDA, no driver, no device), otherwise true and the device's name and compute capability. */
bool cp_cuda_available(char *why, size_t n);

/* Runs one call on device 0. 0, or CP_EUNSUPPORTED (built without CUDA; top-k with k > 64; dh or
 * table sizes beyond the kernel's limits), CP_EARG (inconsistent call), CP_ECUDA (runtime failure),
 * CP_ENOMEM, each with a one-line message. */
int cp_cuda_attention(const cp_cuda_attn_call *c);

#endif
