/* Test-only host stand-in for the subset of the CUDA runtime API (cuda_runtime_api.h) that
 * engine/cuda/engine_cuda.c calls, so that the CUDA engine's host code runs in CI without a GPU
 * (tests/test_cuda_engine_emulated.c). Never part of the product: the product includes the real
 * header and links libcudart.
 *
 * "Device" memory is host memory from malloc, but every allocation is recorded, and every copy,
 * memset and free is checked against the allocations: a device-side range must lie inside one
 * live allocation, a host-side pointer must not be device memory, and freeing anything that is
 * not the start of a live allocation is refused. A violation returns an error code as the runtime
 * would and is counted (cpcu_shim_violations) and printed, so the test fails even when the host
 * code ignores the code. Streams are handles that do nothing (every call is synchronous).
 * cudaMallocHost's pinned blocks are host memory the shim also records, so that a test can tell a
 * download into pinned memory (which the real runtime overlaps) from one into pageable memory.
 * Every entry point holds one lock: two engines may run on two host threads.
 * Values and names follow the real runtime. */
#ifndef CPCU_SHIM_CUDA_RUNTIME_API_H
#define CPCU_SHIM_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719
} cudaError_t;

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef struct CUstream_st *cudaStream_t;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

/* ---- test controls (not CUDA API) */
/* Number of checks that failed since the start (each also printed to stderr). */
int cpcu_shim_violations(void);
/* Live device allocations and their bytes; the peak of the bytes since the last reset. */
size_t cpcu_shim_live(size_t *bytes);
size_t cpcu_shim_peak_bytes(void);
void cpcu_shim_reset_peak(void);
/* What cudaMemGetInfo reports as free and total (default 80 GiB); 0 devices makes
 * cudaGetDeviceCount report none. */
void cpcu_shim_set_device(int count, size_t total_bytes);
/* Whether [p, p + bytes) lies inside one live allocation (for the emulated kernels' launchers). */
int cpcu_shim_is_device(const void *p, size_t bytes);
/* Records a violation found outside the shim (the emulated launchers): prints and counts it. */
void cpcu_shim_violation(const char *fmt, ...);
/* The stream of each piece of device work (kernel launch, GEMM, copy, memset, attention call):
 * the emulated launchers and the attention backend report theirs with cpcu_shim_note_stream (void *:
 * the emulated kernels see no CUDA types); copies, memsets and GEMMs are noted by the shim itself,
 * cudaMemcpy as the legacy default stream (NULL). cpcu_shim_streams returns the work noted since
 * cpcu_shim_streams_reset, sets *on_null to how much of it ran on the legacy default stream and
 * *only to the one other stream all the rest ran on (NULL if none, or if two or more: *mixed). */
void cpcu_shim_note_stream(void *stream, const char *what);
/* Calls counted since the start: cudaMalloc / cudaFree, cudaMallocHost / cudaFreeHost,
 * cudaStreamSynchronize, device-to-host cudaMemcpyAsync into pinned or pageable memory, attention
 * calls (noted with what "attention"); and the pinned blocks live now. */
typedef struct {
  long mallocs, frees, host_allocs, host_frees, syncs, d2h_pinned, d2h_pageable, attn_calls, pinned_live;
} cpcu_shim_counts;
void cpcu_shim_get_counts(cpcu_shim_counts *c);
void cpcu_shim_streams_reset(void);
long cpcu_shim_streams(cudaStream_t *only, long *on_null, int *mixed);

#ifdef __cplusplus
}
#endif

#endif
