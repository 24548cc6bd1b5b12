/* Floor: model. The rotary frequencies of a config's RoPE, as transformers computes them
 * (modeling_rope_utils: the default, linear, llama3, yarn, dynamic and longrope parameters), in double. The engines
 * (CPU and CUDA) and the ONNX builder rotate with these tables, so a RoPE scaling type is
 * written once. Nothing here allocates. */
#ifndef CTXPATCH_MODEL_ROPE_H
#define CTXPATCH_MODEL_ROPE_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/model/hf_config.h"

/* Rotated dims up to this (the pairs table holds half of it). */
#define CP_ROPE_MAX_DIMS 1024

typedef struct {
  int n;                            /* pairs: rotary dims / 2 */
  double inv[CP_ROPE_MAX_DIMS / 2]; /* inverse frequency of pair a (dims a and a + n, rotate-half) */
  double mscale; /* cos and sin are multiplied by this: yarn's or longrope's attention factor, else 1 */
} cp_rope_table;

_Static_assert(CP_ROPE_MAX_DIMS / 2 == CP_HF_ROPE_MAX_PAIRS, "longrope factor lists hold one factor per pair");

/* True when the config's table depends on the length of the forward call (dynamic, longrope):
 * callers then take cp_rope_table_at per call instead of one table per model. */
bool cp_rope_by_length(const cp_hf_config *cfg);

/* Fills `t` for `rot_dims` rotated dims (even, 2..CP_ROPE_MAX_DIMS) of a config with RoPE
 * theta `theta` and rope_scaling fields of `cfg` (type "" / "linear" / "llama3" / "yarn" /
 * "dynamic" / "longrope"; a NULL `cfg` is no scaling, as Gemma 3's sliding layers), for a call
 * whose sequence length is `seq_len`: transformers' dynamic_rope_update takes max(position_ids)
 * + 1, so a forward over T tokens is T and a decode step at position p is p + 1 (0: the table
 * transformers builds at init: dynamic's default frequencies, longrope's short factors). Only
 * dynamic and longrope read seq_len: dynamic rescales theta once seq_len passes
 * max_position_embeddings, longrope takes its long factors once it passes
 * original_max_position_embeddings. Pair a's default inverse frequency is 1 / theta^(2a /
 * rot_dims), computed as the CPU engine always has (so unscaled and linear models rotate bit for
 * bit as before). The linear factor is not in the table: it divides positions
 * (cp_model.rope_scale), as it always has. 0, or CP_ECFG_FIELD naming `what` for a type or size it
 * cannot compute. */
int cp_rope_table_at(cp_rope_table *t, const cp_hf_config *cfg, double theta, int rot_dims, int64_t seq_len,
                     const char *what);

/* cp_rope_table_at(t, cfg, theta, rot_dims, 0, what). */
int cp_rope_table_init(cp_rope_table *t, const cp_hf_config *cfg, double theta, int rot_dims, const char *what);

/* llama.cpp's per-pair frequency divisors of a config (its GGUF `rope_freqs` tensor: pair a
 * rotates at default inverse frequency / factors[a]), `rot_dims / 2` of them: the default table
 * divided by the config's. 0, or cp_rope_table_init's error. */
int cp_rope_freq_factors(float *factors, const cp_hf_config *cfg, double theta, int rot_dims, const char *what);

/* The rope_scaling that a `rope_freqs` tensor stands for. llama.cpp's converter writes one only
 * for llama3 scaling, and a llama3 table depends on (original, low, high) only through the line
 * smooth = A * inv + B over the blended pairs, so the parameters are recovered with
 * low_freq_factor 1 (any other choice gives the same table). */
typedef struct {
  char type[16];           /* "" (every factor 1), "linear" (every factor equal) or "llama3" */
  double factor;           /* the largest factor */
  double low_freq_factor;  /* llama3: 1 */
  double high_freq_factor; /* llama3 */
  int original_max_pos;    /* llama3 */
} cp_rope_fit;

/* Recovers the scaling of `n` factors (finite, >= 1, non-decreasing, n == rot_dims / 2) and checks
 * that its table reproduces every factor within 2e-6 of it. 0, or CP_ECFG_POSITION naming `what`
 * and the first factor that no llama3 or linear table gives. */
int cp_rope_fit_factors(cp_rope_fit *fit, const float *factors, int n, double theta, int rot_dims, const char *what);

#endif
