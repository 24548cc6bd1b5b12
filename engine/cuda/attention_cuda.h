/* Boundary between the host side of the CUDA backend (engine/cuda_attention.c, C, part of
 * libctxpatch) and its device code (engine/cuda/attention.cu, built into ctxpatch_cuda only
 * when CTXPATCH_CUDA is on). Internal to engine/.
 *
 * The device code makes no rule decision: the host sends the call's tables (cp_attn_tables_build:
 * cp_plan_distance per distance, cp_t5_bucket per clamped relative position,
 * cp_plan_alibi_divisor per row, cp_plan_row_inv_tau per row under a temperature schedule, top-k
 * rows and terms) and the visible ranges of every row and
 * tile (cp_plan_visible_ranges). The
 * one formula evaluated on the device is FIRE's input psi(d') / psi(max(L, i)), a line-by-line
 * mirror of cp_fire_input (the backend-consistency test compares the two).
 *
 * Every pointer in cpcu_attn_args is a device pointer. Functions return 0 or -1 with a one-line
 * reason in `why`. */
#ifndef CTXPATCH_ENGINE_CUDA_ATTENTION_CUDA_H
#define CTXPATCH_ENGINE_CUDA_ATTENTION_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/engine/attn_pos.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  CPCU_MAX_DH = 256,          /* head dims 1 .. 256 */
  CPCU_MAX_TILE_RANGES = 4,   /* key ranges per query tile (a superset is always safe) */
  CPCU_T5_MAX_BUCKETS = 1024, /* per-head T5 table held in shared memory */
  CPCU_FIRE_MAX_WIDTH = 128,  /* FIRE MLP hidden width held in shared memory (W x W with two layers) */
  CPCU_TOPK_MAX = 64          /* top-k middle tokens per row, kept in shared memory */
};

typedef struct {
  int H, Hkv, dh;
  int n_q, n_keys, q_off;
  int causal;
  int bf16;    /* q, q_far, k, v, k_raw hold bfloat16 (uint16 bit patterns), else float */
  int pos;     /* cp_attn_pos */
  float scale; /* c of the spec */
  float softcap; /* Gemma 2: logits softcap tanh(z / softcap) (cp_attn_call.softcap); 0: none */
  float inv_tau;     /* 1/tau of every row, unless row_inv_tau is set */
  const float *row_inv_tau; /* temperature_schedule: [n_q] tab.inv_tau, each row's 1/tau; or NULL */

  const void *q;     /* [n_q, H*dh] */
  const void *q_far; /* [n_q, H*dh] RoPE with a ceiling: q rotated by the clamped distance; or NULL */
  const void *k, *v; /* [n_keys, Hkv*dh] */
  const void *k_raw; /* [n_keys, Hkv*dh] unrotated keys (with q_far), or NULL */

  const int *row_ranges;  /* [n_q, 4]: lo0, hi0, lo1, hi1 from cp_plan_visible_ranges (empty: lo = hi) */
  const int *tile_ranges; /* [n_tiles, 2 * CPCU_MAX_TILE_RANGES]: lo, hi pairs covering the tile's rows */
  const int *tile_nranges; /* [n_tiles] */
  const int *dprime;      /* causal: [n_keys] cp_plan_distance(d); else NULL */

  const int *t5_bucket;     /* causal: [n_keys] by d; bidirectional: [2 n_keys - 1] by r + n_keys - 1 */
  const float *t5_table;    /* [t5_nb, H] (the model's relative_attention_bias) */
  int t5_nb;

  const double *slopes;    /* ALiBi [H] */
  const double *alibi_div; /* ALiBi [n_q]: cp_plan_alibi_divisor of each row */

  const float *fire_w1, *fire_b1; /* [W] */
  const float *fire_wm, *fire_bm; /* [W, W], [W]: the second hidden layer (fire_layers 2); else NULL */
  const float *fire_w2;           /* [H, W] */
  const float *fire_b2;           /* [H] */
  int fire_width, fire_layers;    /* W; hidden layers 1 or 2 */
  double fire_c, fire_L;

  /* top-k middle tokens (decision 7): 0, or k for calls with top-k rows */
  int topk_k;
  const void *q_topk;        /* [n_q, H*dh] RoPE: q rotated by the top-k distance (against k_raw); or NULL */
  const int *topk_rows;      /* [n_q, 2]: tab.topk_range, the row's hidden keys [lo, hi) when it gets top-k, else empty */
  const int *topk_tile;      /* [n_tiles, 2]: the union of its rows' hidden ranges */
  const float *topk_bias;    /* [H, n_q]: positional term at the top-k distance */

  float *out;                          /* [n_q, H*dh] */
  float *row_pmax, *row_ent, *row_lstd; /* [H, n_q] each, or NULL */

  void *stream; /* cudaStream_t the kernel runs on and waits for; NULL: the legacy default stream */
} cpcu_attn_args;

/* Number of CUDA devices; -1 with the runtime's reason when the driver or runtime fails. */
int cpcu_device_count(int *count, char *why, size_t n);
/* Name and compute capability of device 0. */
int cpcu_device_name(char *name, size_t name_n, int *cc_major, int *cc_minor, char *why, size_t n);
/* Driver and runtime versions as the CUDA API reports them (1000 major + 10 minor). */
int cpcu_versions(int *driver, int *runtime, char *why, size_t n);
/* Query rows per thread block for head dim dh (the tile the host's tile_ranges must use). */
int cpcu_tile_rows(int dh);
/* Queues the fused kernel on a->stream (it does not wait: a later download or sync on that stream
 * reports a failure). With reps > 0 it runs reps more times afterwards and writes the mean kernel
 * time in milliseconds to *ms (CUDA events; benchmarks only). */
int cpcu_attention(const cpcu_attn_args *a, int reps, double *ms, char *why, size_t n);

int cpcu_malloc(void **p, size_t bytes, char *why, size_t n);
void cpcu_free(void *p); /* NULL is fine */
/* Copies on `stream` (a cudaStream_t; NULL: the legacy default stream): an upload returns once the
 * host bytes are taken, a download once they have arrived. */
int cpcu_upload(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n);
int cpcu_download(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n);
/* Pinned (page-locked) host memory, which a download on a stream can fill without the host
 * waiting (cudaMallocHost / cudaFreeHost). */
int cpcu_host_alloc(void **p, size_t bytes, char *why, size_t n);
void cpcu_host_free(void *p); /* NULL is fine */
/* A download into pinned memory that returns at once: the bytes are there after cpcu_sync. */
int cpcu_download_async(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n);
/* Waits for everything queued on `stream`. */
int cpcu_sync(void *stream, char *why, size_t n);

/* Where cp_cuda_attention's host side sends the resolved call: the CUDA runtime above, or
 * tests/cuda_emulate.cpp, which runs the same kernel source on host threads so that CI without a
 * GPU still checks the kernel's logic against the CPU engine (tests/test_cuda_emulated.c). */
typedef struct {
  int (*tile_rows)(int dh);
  int (*attention)(const cpcu_attn_args *a, int reps, double *ms, char *why, size_t n);
  int (*alloc)(void **p, size_t bytes, char *why, size_t n);
  void (*release)(void *p);
  int (*upload)(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n);
  int (*download)(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n);
  int (*host_alloc)(void **p, size_t bytes, char *why, size_t n);
  void (*host_release)(void *p);
  int (*download_async)(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n);
  int (*sync)(void *stream, char *why, size_t n);
} cpcu_backend;

#ifdef __cplusplus
}
#endif

#endif
