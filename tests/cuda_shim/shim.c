/* Host implementation of the test-only CUDA runtime and cuBLAS subset declared in
 * tests/cuda_shim/cuda_runtime_api.h and cublas_v2.h: allocations in a table checked by every
 * copy, memset, free and GEMM; a column-major GEMM with cuBLAS's argument semantics. */
#define _GNU_SOURCE 1 /* PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_v2.h"
#include "cuda_runtime_api.h"

typedef struct {
  unsigned char *p;
  size_t bytes;
} shim_alloc;

/* Two engines may run on two host threads (the two sides of a certification): every entry point
 * holds one recursive lock (entry points call each other), released on return. */
static pthread_mutex_t g_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static void shim_unlock(pthread_mutex_t **m) { pthread_mutex_unlock(*m); }
static pthread_mutex_t *shim_lock(void) {
  pthread_mutex_lock(&g_mu);
  return &g_mu;
}
#define SHIM_LOCK() pthread_mutex_t *shim_held_ __attribute__((cleanup(shim_unlock), unused)) = shim_lock()

static shim_alloc *g_allocs;
static size_t g_n, g_cap, g_live_bytes, g_peak_bytes;
static int g_violations, g_devices = 1;
static size_t g_total = (size_t)80 << 30;
static long g_gemms;
static _Thread_local cudaError_t g_last = cudaSuccess; /* per host thread, as the runtime's */
static shim_alloc *g_pinned; /* cudaMallocHost's blocks (host memory) */
static size_t g_n_pinned, g_cap_pinned;
static cpcu_shim_counts g_counts;
static long g_work, g_work_null;
static void *g_work_stream;
static int g_work_mixed;

struct CUstream_st {
  int magic;
};
struct cublasContext {
  int magic;
  cudaStream_t stream;
};
enum { STREAM_MAGIC = 0x5713, HANDLE_MAGIC = 0xb1a5 };

void cpcu_shim_violation(const char *fmt, ...) {
  SHIM_LOCK();
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cuda shim: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  g_violations++;
}

void cpcu_shim_note_stream(void *stream, const char *what) {
  SHIM_LOCK();
  g_work++;
  if (what && !strcmp(what, "attention")) g_counts.attn_calls++;
  if (!stream) g_work_null++;
  else if (!g_work_stream) g_work_stream = stream;
  else if (g_work_stream != stream) g_work_mixed = 1;
}

void cpcu_shim_streams_reset(void) {
  SHIM_LOCK();
  g_work = g_work_null = 0;
  g_work_stream = NULL;
  g_work_mixed = 0;
}

long cpcu_shim_streams(cudaStream_t *only, long *on_null, int *mixed) {
  SHIM_LOCK();
  *only = g_work_mixed ? NULL : g_work_stream;
  *on_null = g_work_null;
  *mixed = g_work_mixed;
  return g_work;
}

static cudaError_t fail(cudaError_t e) {
  g_last = e;
  return e;
}

/* Index of the live allocation holding [p, p + bytes), or -1. */
static long find(const void *p, size_t bytes) {
  const uintptr_t q = (uintptr_t)p; /* addresses as integers: p may belong to no allocation */
  for (size_t i = 0; i < g_n; i++) {
    const uintptr_t lo = (uintptr_t)g_allocs[i].p, n = g_allocs[i].bytes;
    if (q >= lo && q - lo < n + (n == 0)) {
      if (bytes && q - lo + bytes > n) return -2; /* starts inside, runs past the end */
      return (long)i;
    }
  }
  return -1;
}

int cpcu_shim_is_device(const void *p, size_t bytes) { return p && find(p, bytes) >= 0; }

int cpcu_shim_violations(void) { return g_violations; }
size_t cpcu_shim_live(size_t *bytes) {
  SHIM_LOCK();
  if (bytes) *bytes = g_live_bytes;
  return g_n;
}
size_t cpcu_shim_peak_bytes(void) { return g_peak_bytes; }
void cpcu_shim_reset_peak(void) { g_peak_bytes = g_live_bytes; }
void cpcu_shim_set_device(int count, size_t total_bytes) {
  SHIM_LOCK();
  g_devices = count;
  g_total = total_bytes;
}
long cpcu_shim_gemm_calls(void) { return g_gemms; }

cudaError_t cudaGetDeviceCount(int *count) {
  SHIM_LOCK();
  *count = g_devices;
  return g_devices ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
  SHIM_LOCK();
  return device >= 0 && device < g_devices ? cudaSuccess : fail(cudaErrorInvalidValue);
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  SHIM_LOCK();
  if (device < 0 || device >= g_devices) return fail(cudaErrorInvalidValue);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "host emulation (tests/cuda_shim)");
  prop->totalGlobalMem = g_total;
  prop->major = 9, prop->minor = 0, prop->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
  SHIM_LOCK();
  *v = 0; /* no driver */
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  SHIM_LOCK();
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  SHIM_LOCK();
  if (!g_devices) return fail(cudaErrorNoDevice);
  *total_bytes = g_total;
  *free_bytes = g_total > g_live_bytes ? g_total - g_live_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
  SHIM_LOCK();
  *p = NULL;
  if (!g_devices) return fail(cudaErrorNoDevice);
  if (bytes > g_total - (g_live_bytes < g_total ? g_live_bytes : g_total)) return fail(cudaErrorMemoryAllocation);
  if (g_n == g_cap) {
    size_t cap = g_cap ? 2 * g_cap : 64;
    shim_alloc *a = realloc(g_allocs, cap * sizeof *a);
    if (!a) return fail(cudaErrorMemoryAllocation);
    g_allocs = a, g_cap = cap;
  }
  /* Garbage contents, as fresh device memory: host code must not rely on zeros. */
  unsigned char *m = malloc(bytes ? bytes : 1);
  if (!m) return fail(cudaErrorMemoryAllocation);
  memset(m, 0xa5, bytes);
  g_allocs[g_n++] = (shim_alloc){m, bytes};
  g_counts.mallocs++;
  g_live_bytes += bytes;
  if (g_live_bytes > g_peak_bytes) g_peak_bytes = g_live_bytes;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  SHIM_LOCK();
  if (!p) return cudaSuccess;
  for (size_t i = 0; i < g_n; i++)
    if (g_allocs[i].p == p) {
      g_live_bytes -= g_allocs[i].bytes;
      free(p);
      g_allocs[i] = g_allocs[--g_n];
      g_counts.frees++;
      return cudaSuccess;
    }
  cpcu_shim_violation("cudaFree(%p): not the start of a live allocation", p);
  return fail(cudaErrorInvalidDevicePointer);
}

/* Index of the pinned block holding [p, p + bytes), or -1. */
static long pinned_find(const void *p, size_t bytes) {
  const uintptr_t q = (uintptr_t)p;
  for (size_t i = 0; i < g_n_pinned; i++) {
    const uintptr_t lo = (uintptr_t)g_pinned[i].p;
    if (q >= lo && q - lo + bytes <= g_pinned[i].bytes) return (long)i;
  }
  return -1;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
  SHIM_LOCK();
  *p = NULL;
  if (g_n_pinned == g_cap_pinned) {
    size_t cap = g_cap_pinned ? 2 * g_cap_pinned : 16;
    shim_alloc *a = realloc(g_pinned, cap * sizeof *a);
    if (!a) return fail(cudaErrorMemoryAllocation);
    g_pinned = a, g_cap_pinned = cap;
  }
  unsigned char *m = malloc(bytes ? bytes : 1);
  if (!m) return fail(cudaErrorMemoryAllocation);
  memset(m, 0x5a, bytes);
  g_pinned[g_n_pinned++] = (shim_alloc){m, bytes};
  g_counts.host_allocs++;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
  SHIM_LOCK();
  if (!p) return cudaSuccess;
  for (size_t i = 0; i < g_n_pinned; i++)
    if (g_pinned[i].p == p) {
      free(p);
      g_pinned[i] = g_pinned[--g_n_pinned];
      g_counts.host_frees++;
      return cudaSuccess;
    }
  cpcu_shim_violation("cudaFreeHost(%p): not a block of cudaMallocHost", p);
  return fail(cudaErrorInvalidValue);
}

void cpcu_shim_get_counts(cpcu_shim_counts *c) {
  SHIM_LOCK();
  *c = g_counts;
  c->pinned_live = (long)g_n_pinned;
}

/* A device range must lie in one allocation; a host range must not touch device memory. */
static int check_side(const void *p, size_t bytes, int device, const char *call, const char *which) {
  if (!bytes) return 0;
  if (!p) {
    cpcu_shim_violation("%s: %s is NULL", call, which);
    return -1;
  }
  long i = find(p, bytes);
  if (device && i < 0) {
    cpcu_shim_violation("%s: %s %p + %zu bytes is %s", call, which, p, bytes,
                        i == -2 ? "past the end of its allocation" : "not device memory");
    return -1;
  }
  if (!device && i != -1) {
    cpcu_shim_violation("%s: %s %p is device memory, given as host memory", call, which, p);
    return -1;
  }
  return 0;
}

static cudaError_t copy_checked(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  SHIM_LOCK();
  cpcu_shim_note_stream(NULL, "cudaMemcpy");
  return copy_checked(dst, src, bytes, kind);
}

static cudaError_t copy_checked(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  int dd, sd;
  switch (kind) {
    case cudaMemcpyHostToDevice: dd = 1, sd = 0; break;
    case cudaMemcpyDeviceToHost: dd = 0, sd = 1; break;
    case cudaMemcpyDeviceToDevice: dd = 1, sd = 1; break;
    default:
      cpcu_shim_violation("cudaMemcpy: kind %d (the engine names every direction)", (int)kind);
      return fail(cudaErrorInvalidMemcpyDirection);
  }
  if (check_side(dst, bytes, dd, "cudaMemcpy", "dst") || check_side(src, bytes, sd, "cudaMemcpy", "src"))
    return fail(cudaErrorInvalidValue);
  if (bytes) memmove(dst, src, bytes);
  return cudaSuccess;
}

static int check_stream(cudaStream_t s, const char *call) {
  if (s && s->magic != STREAM_MAGIC) {
    cpcu_shim_violation("%s: stream %p was not created by cudaStreamCreate (or destroyed)", call, (void *)s);
    return -1;
  }
  return 0;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s) {
  SHIM_LOCK();
  if (check_stream(s, "cudaMemcpyAsync")) return fail(cudaErrorInvalidResourceHandle);
  cpcu_shim_note_stream(s, "cudaMemcpyAsync");
  if (kind == cudaMemcpyDeviceToHost) { /* the host waits for a copy into pageable memory (the runtime stages it) */
    if (pinned_find(dst, bytes) >= 0) g_counts.d2h_pinned++;
    else g_counts.d2h_pageable++;
  }
  return copy_checked(dst, src, bytes, kind);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
  SHIM_LOCK();
  if (check_stream(s, "cudaMemsetAsync")) return fail(cudaErrorInvalidResourceHandle);
  cpcu_shim_note_stream(s, "cudaMemsetAsync");
  if (check_side(p, bytes, 1, "cudaMemsetAsync", "ptr")) return fail(cudaErrorInvalidValue);
  if (bytes) memset(p, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
  SHIM_LOCK();
  *s = malloc(sizeof **s);
  if (!*s) return fail(cudaErrorMemoryAllocation);
  (*s)->magic = STREAM_MAGIC;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  SHIM_LOCK();
  if (!s || check_stream(s, "cudaStreamDestroy")) return fail(cudaErrorInvalidResourceHandle);
  s->magic = 0;
  free(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  SHIM_LOCK();
  g_counts.syncs++;
  return check_stream(s, "cudaStreamSynchronize") ? fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
  cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "error (host emulation)";
  }
}

/* ---------------------------------------------------------------- cuBLAS */

cublasStatus_t cublasCreate(cublasHandle_t *h) {
  SHIM_LOCK();
  if (!g_devices) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = calloc(1, sizeof **h);
  if (!*h) return CUBLAS_STATUS_ALLOC_FAILED;
  (*h)->magic = HANDLE_MAGIC;
  return CUBLAS_STATUS_SUCCESS;
}
static int check_handle(cublasHandle_t h, const char *call) {
  if (!h || h->magic != HANDLE_MAGIC) {
    cpcu_shim_violation("%s: handle %p was not created by cublasCreate", call, (void *)h);
    return -1;
  }
  return 0;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  SHIM_LOCK();
  if (check_handle(h, "cublasDestroy")) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  SHIM_LOCK();
  if (check_handle(h, "cublasSetStream") || check_stream(s, "cublasSetStream")) return CUBLAS_STATUS_INVALID_VALUE;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

/* The stored (column-major) matrix of rows x cols at p with leading dimension ld must lie in one
 * allocation: its last element is at (cols - 1) * ld + rows - 1. */
static int check_matrix(const void *p, int rows, int cols, int ld, const char *which) {
  if (rows == 0 || cols == 0) return 0;
  size_t last = ((size_t)cols - 1) * (size_t)ld + (size_t)rows - 1;
  if (find(p, (last + 1) * sizeof(float)) < 0) {
    cpcu_shim_violation("cublasGemmEx: %s (%d x %d, ld %d) at %p is not inside one device allocation", which, rows,
                        cols, ld, p);
    return -1;
  }
  return 0;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  SHIM_LOCK();
  (void)algo;
  if (check_handle(h, "cublasGemmEx")) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  /* The library's own argument checks (cublas docs, cublas<t>gemm): */
  const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
  const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || m < 0 || n < 0 ||
      k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1)) {
    cpcu_shim_violation("cublasGemmEx: invalid value (transa %d transb %d m %d n %d k %d lda %d ldb %d ldc %d)",
                        (int)ta, (int)tb, m, n, k, lda, ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!alpha || !beta || cpcu_shim_is_device(alpha, 1) || cpcu_shim_is_device(beta, 1)) {
    cpcu_shim_violation("cublasGemmEx: alpha and beta must be host pointers (CUBLAS_POINTER_MODE_HOST)");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((k > 0 && (check_matrix(A, arows, acols, lda, "A") || check_matrix(B, brows, bcols, ldb, "B"))) ||
      check_matrix(C, m, n, ldc, "C"))
    return CUBLAS_STATUS_INVALID_VALUE;
  g_gemms++;
  cpcu_shim_note_stream(h->stream, "cublasGemmEx");
  const float al = *(const float *)alpha, be = *(const float *)beta;
  const float *a = A, *b = B;
  float *c = C;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      float s = 0.0f;
      for (int p = 0; p < k; p++) {
        const float av = ta == CUBLAS_OP_N ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        const float bv = tb == CUBLAS_OP_N ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
        s += av * bv;
      }
      float *cij = &c[(size_t)j * ldc + i];
      *cij = be == 0.0f ? al * s : al * s + be * *cij; /* beta 0: C is not read (may hold NaN) */
    }
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
