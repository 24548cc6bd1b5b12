/* Internal to engine/ and its tests: cp_cuda_attention (include/ctxpatch/engine/cuda.h) with the
 * backend chosen by the caller. The host side (tile ranges, table conversion, uploads, downloads)
 * is the same code for the CUDA runtime and for the host emulation of tests/cuda_emulate.cpp. */
#ifndef CTXPATCH_ENGINE_CUDA_ATTENTION_H
#define CTXPATCH_ENGINE_CUDA_ATTENTION_H

#include "ctxpatch/engine/cuda.h"
#include "engine/cuda/attention_cuda.h"

int cp_cuda_attention_on(const cpcu_backend *be, const cp_attn_call *c, const cp_cuda_opts *opts);
/* An engine's buffers for its attention calls, kept across calls so that a call allocates and
 * frees nothing (cudaFree waits for the whole device): `dev` holds one call's tables and
 * statistics on the device, `host` (pinned) the statistics copied back. Both grow, at least
 * doubling, when a call needs more; zero-initialised; freed by cp_cuda_attn_bufs_free. */
typedef struct {
  void *dev, *host;
  size_t dev_cap, host_cap;
  long grows; /* allocations so far (tests count them) */
} cp_cuda_attn_bufs;
void cp_cuda_attn_bufs_free(const cpcu_backend *be, cp_cuda_attn_bufs *b);
/* The same for the CUDA engine, whose tensors live on the device: c's q, q_far, q_topk, k, v, k_raw
 * and out are device pointers of `be` (float), its tables and row statistics host memory. The
 * tables' copies and the kernel are queued on `stream` (the engine's cudaStream_t) in slices of
 * bufs->dev. The call waits for that stream only when it asks for statistics (once, after their
 * copies into bufs->host); otherwise it returns with the kernel queued. */
int cp_cuda_attention_resident(const cpcu_backend *be, const cp_attn_call *c, void *stream, cp_cuda_attn_bufs *bufs);
/* The CUDA runtime backend (built with CTXPATCH_WITH_CUDA only). */
const cpcu_backend *cp_cuda_runtime_backend(void);

#endif
