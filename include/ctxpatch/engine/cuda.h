/* Floor: engine. CUDA attention backend (issue 7): the fused rule-aware attention kernel of
 * engine/cuda/, behind a host-memory API that takes the CPU engine's attention call
 * (ctxpatch/engine/attn_call.h) and its tables, so that the two can be compared op for op
 * (tests/test_cuda_consistency.c) and timed (bench/bench_attention_cuda.c).
 *
 * Built when CMake finds nvcc (option CTXPATCH_CUDA, default ON then, OFF in sanitizer builds);
 * without it every function here still exists and refuses with a one-line reason. The CPU engine
 * stays the oracle: every rule decision is resolved on the host through ctxpatch/rule.h and only
 * the resolved numbers reach the device.
 *
 * The whole engine runs on the device with cp_engine_params.device = CP_DEVICE_CUDA
 * (engine/cuda/engine_cuda.c: weights uploaded once, cuBLAS projections, this kernel for attention,
 * small kernels for norms, activations and RoPE, KV caches on the device). Top-k middle tokens
 * run on the device for k <= 64 (larger k: CP_EUNSUPPORTED).
 */
#ifndef CTXPATCH_ENGINE_CUDA_H
#define CTXPATCH_ENGINE_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/engine/attn_call.h"

/* How the device runs a call; the call itself is the backend-neutral cp_attn_call. */
typedef struct {
  bool bf16;          /* round q, k, v (and q_far, q_topk, k_raw) to bfloat16 for the device */
  int bench_reps;     /* > 0: afterwards time the kernel alone this many times ... */
  double *bench_ms;   /* ... and write the mean milliseconds here */
} cp_cuda_opts;

/* Whether this build has the CUDA backend and engine (-DCTXPATCH_CUDA=ON). */
bool cp_cuda_built(void);

/* Whether a CUDA device can be used. false, with a one-line reason in why[0..n) (built without
 * CUDA, no driver, no device), otherwise true and "NAME (compute capability X.Y), driver A.B,
 * runtime C.D". */
bool cp_cuda_available(char *why, size_t n);

/* Runs one call on device 0: all its arrays are host memory (the call copies them to the device,
 * runs the kernel and copies the results back); its tables must come from cp_attn_tables_build.
 * opts NULL: float inputs, no timing. Limits: 1 <= dh <= 256, int indexing. 0, or CP_EUNSUPPORTED
 * (built without CUDA; top-k with k > 64; dh or table sizes beyond the kernel's limits), CP_EARG
 * (inconsistent call), CP_ECUDA (runtime failure), CP_ENOMEM, each with a one-line message. */
int cp_cuda_attention(const cp_attn_call *c, const cp_cuda_opts *opts);

/* Device memory the CUDA engine needs, estimated before it allocates anything (every build has
 * it; docs/cuda.md): *weights, the model's weights as the engine uploads them (each distinct
 * array once, float32 as the model holds them), and *run, the most one run holds at once: for
 * n_ids input ids (T5: the encoder input, with n_dec decoder ids; ignored otherwise) and n_new
 * generated tokens (0: one forward pass), the KV caches, activations, logits and the attention
 * call's tables. An upper bound (unrotated RoPE keys are counted whether or not the rule needs
 * them). 0, CP_EARG (negative sizes) or CP_EOVERFLOW. */
int cp_cuda_engine_bytes(uint64_t *weights, uint64_t *run, const cp_model *m, int64_t n_ids, int64_t n_dec,
                         int64_t n_new);

#endif
