/* Internal to engine/ and its tests: cp_cuda_attention (include/ctxpatch/engine/cuda.h) with the
 * backend chosen by the caller. The host side (tile ranges, table conversion, uploads, downloads)
 * is the same code for the CUDA runtime and for the host emulation of tests/cuda_emulate.cpp. */
#ifndef CTXPATCH_ENGINE_CUDA_ATTENTION_H
#define CTXPATCH_ENGINE_CUDA_ATTENTION_H

#include "ctxpatch/engine/cuda.h"
#include "engine/cuda/attention_cuda.h"

int cp_cuda_attention_on(const cpcu_backend *be, const cp_attn_call *c, const cp_cuda_opts *opts);
/* The same for the CUDA engine, whose tensors live on the device: c's q, q_far, q_topk, k, v, k_raw
 * and out are device pointers of `be` (float), its tables and row statistics host memory. The
 * tables' copies and the kernel go on `stream` (the engine's cudaStream_t), and the call waits
 * for that stream only. */
int cp_cuda_attention_resident(const cpcu_backend *be, const cp_attn_call *c, void *stream);
/* The CUDA runtime backend (built with CTXPATCH_WITH_CUDA only). */
const cpcu_backend *cp_cuda_runtime_backend(void);

#endif
