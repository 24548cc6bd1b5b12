/* The attention backend the emulated CUDA engine uses (tests/test_cuda_engine_emulated.c): the
 * fused kernel run on host threads (tests/cuda_emulate.cpp), with its buffers allocated, filled
 * and read back through the shim's cudaMalloc / cudaMemcpyAsync on the call's stream (so the
 * attention host code's uploads are bounds-checked as the engine's are, and their stream noted),
 * and every tensor the engine hands the kernel checked to be device memory of the call's extent. */
#include <pthread.h>
#include <stdio.h>

#include "cuda_runtime_api.h"
#include "engine/cuda/attention_cuda.h"

const cpcu_backend *cpcu_emulated_backend(void); /* tests/cuda_emulate.cpp */

static int sb_fail(cudaError_t e, const char *what, char *why, size_t n) {
  if (why && n) snprintf(why, n, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return -1;
}

static long g_attn_allocs; /* two engines on two threads may both allocate */
static pthread_mutex_t g_attn_mu = PTHREAD_MUTEX_INITIALIZER;

static void count_alloc(void) {
  pthread_mutex_lock(&g_attn_mu);
  g_attn_allocs++;
  pthread_mutex_unlock(&g_attn_mu);
}

long cpcu_shim_attn_allocs(void) {
  pthread_mutex_lock(&g_attn_mu);
  long n = g_attn_allocs;
  pthread_mutex_unlock(&g_attn_mu);
  return n;
}

static int sb_alloc(void **p, size_t bytes, char *why, size_t n) {
  count_alloc();
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  return e == cudaSuccess ? 0 : sb_fail(e, "cudaMalloc", why, n);
}

static void sb_release(void *p) {
  if (p) cudaFree(p);
}

static int sb_upload(void *dst, const void *src, size_t bytes, void *s, char *why, size_t n) {
  cudaError_t e = bytes ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s) : cudaSuccess;
  return e == cudaSuccess ? 0 : sb_fail(e, "cudaMemcpyAsync to device", why, n);
}

static int sb_download(void *dst, const void *src, size_t bytes, void *s, char *why, size_t n) {
  cudaError_t e = bytes ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s) : cudaSuccess;
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? 0 : sb_fail(e, "cudaMemcpyAsync to host", why, n);
}

static int sb_host_alloc(void **p, size_t bytes, char *why, size_t n) {
  count_alloc();
  cudaError_t e = cudaMallocHost(p, bytes ? bytes : 1);
  return e == cudaSuccess ? 0 : sb_fail(e, "cudaMallocHost", why, n);
}

static void sb_host_release(void *p) {
  if (p) cudaFreeHost(p);
}

static int sb_download_async(void *dst, const void *src, size_t bytes, void *s, char *why, size_t n) {
  cudaError_t e = bytes ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s) : cudaSuccess;
  return e == cudaSuccess ? 0 : sb_fail(e, "cudaMemcpyAsync to host", why, n);
}

static int sb_sync(void *s, char *why, size_t n) {
  cudaError_t e = cudaStreamSynchronize(s);
  return e == cudaSuccess ? 0 : sb_fail(e, "cudaStreamSynchronize", why, n);
}

static int check(const void *p, size_t rows, size_t width, const char *what, char *why, size_t n) {
  if (!p || cpcu_shim_is_device(p, rows * width * sizeof(float))) return 0;
  cpcu_shim_violation("attention: %s (%zu x %zu floats) is not inside one device allocation", what, rows, width);
  if (why && n) snprintf(why, n, "attention: %s is not device memory of the call's extent", what);
  return -1;
}

static int sb_attention(const cpcu_attn_args *a, int reps, double *ms, char *why, size_t n) {
  const size_t qw = (size_t)a->H * a->dh, kw = (size_t)a->Hkv * a->dh, nq = (size_t)a->n_q, nk = (size_t)a->n_keys;
  if (a->bf16) { /* the engine hands float tensors */
    cpcu_shim_violation("attention: bfloat16 call from the engine");
    return -1;
  }
  if (check(a->q, nq, qw, "q", why, n) || check(a->q_far, nq, qw, "q_far", why, n) ||
      check(a->q_topk, nq, qw, "q_topk", why, n) || check(a->k, nk, kw, "k", why, n) ||
      check(a->v, nk, kw, "v", why, n) || check(a->k_raw, nk, kw, "k_raw", why, n) ||
      check(a->out, nq, qw, "out", why, n))
    return -1;
  cpcu_shim_note_stream(a->stream, "attention");
  return cpcu_emulated_backend()->attention(a, reps, ms, why, n);
}

static int sb_tile_rows(int dh) { return cpcu_emulated_backend()->tile_rows(dh); }

static const cpcu_backend SHIM = {sb_tile_rows, sb_attention,    sb_alloc,          sb_release, sb_upload,
                                  sb_download,  sb_host_alloc,   sb_host_release,   sb_download_async, sb_sync};

const cpcu_backend *cpcu_shim_backend(void) { return &SHIM; }
