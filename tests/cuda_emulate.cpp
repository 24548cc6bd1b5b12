/* Host emulation of the CUDA attention kernel, for tests/test_cuda_emulated.c: compiles the
 * kernel source of engine/cuda/attention.cu with g++ and runs each thread block as NT host
 * threads, so that CI without a GPU (or without nvcc) still checks the kernel's indexing, masks,
 * positional terms and online softmax against the CPU engine.
 *
 * What it models: blockIdx/threadIdx, dynamic shared memory (one buffer per block),
 * __syncthreads (a barrier of the block's threads) and __shfl_xor_sync (an exchange through a
 * per-block array and a barrier, so every thread must reach every shuffle, as the hardware
 * requires of a full-mask shuffle). What it does not: warp scheduling, memory
 * coalescing, timing, the real bfloat16 and exp/log instructions (host libm is used). */
#define CPCU_EMULATE 1

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)

namespace {
struct emu_dim3 {
  unsigned x, y, z;
};
thread_local emu_dim3 threadIdx, blockIdx;
thread_local unsigned char *emu_smem;
pthread_barrier_t *emu_bar;
float emu_slot[2][1024];

inline void __syncthreads() { pthread_barrier_wait(emu_bar); }
/* Two slot arrays used in turn need one barrier per shuffle: a thread writes a slot array again
 * only after the next shuffle's barrier, which every thread reaches after its last read of it. */
thread_local unsigned emu_parity;
inline float __shfl_xor_sync(unsigned, float v, int o) {
  const unsigned t = threadIdx.x, p = emu_parity;
  emu_parity ^= 1u;
  emu_slot[p][t] = v;
  pthread_barrier_wait(emu_bar);
  return emu_slot[p][t ^ (unsigned)o];
}
struct __nv_bfloat16 {
  uint16_t x;
};
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = (uint32_t)b.x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
inline int min(int a, int b) { return a < b ? a : b; }
} // namespace

#define CPCU_SMEM_DECL unsigned char *smem = emu_smem;
#define CPCU_UNROLL

#include "engine/cuda/attention.cu"

namespace {

/* NT host threads kept for the whole process (thread creation per launch made the engine test
 * spend most of its time in the kernel): a launch hands them a job and meets them at `go` and
 * `done`; the kernel's own barrier (emu_bar) is separate. Joined at exit. */
struct emu_pool {
  std::vector<std::thread> th;
  pthread_barrier_t go, done;
  std::function<void(unsigned)> job;
  bool quit = false;
};
emu_pool *pool_get() {
  static emu_pool *p = [] {
    emu_pool *q = new emu_pool;
    pthread_barrier_init(&q->go, nullptr, NT + 1);
    pthread_barrier_init(&q->done, nullptr, NT + 1);
    for (unsigned t = 0; t < (unsigned)NT; t++)
      q->th.emplace_back([q, t] {
        for (;;) {
          pthread_barrier_wait(&q->go);
          if (q->quit) return;
          q->job(t);
          pthread_barrier_wait(&q->done);
        }
      });
    atexit([] {
      emu_pool *r = pool_get();
      r->quit = true;
      pthread_barrier_wait(&r->go);
      for (auto &x : r->th) x.join();
      pthread_barrier_destroy(&r->go);
      pthread_barrier_destroy(&r->done);
      delete r;
    });
    return q;
  }();
  return p;
}

/* Runs job(t) on every pool thread t and waits for all of them. */
void pool_run(std::function<void(unsigned)> job) {
  emu_pool *p = pool_get();
  p->job = std::move(job);
  pthread_barrier_wait(&p->go);
  pthread_barrier_wait(&p->done);
  p->job = nullptr;
}

template <typename T, int MAXD, int TPR>
int emu_launch(const cpcu_attn_args *a) {
  constexpr int BM = NT / TPR;
  const smem_layout L = make_layout(MAXD, BM, a->q_far != nullptr, a->pos == CP_ATTN_POS_T5 ? a->t5_nb : 0,
                                    a->pos == CP_ATTN_POS_FIRE ? a->fire_width : 0, a->fire_layers == 2 ? 2 : 1,
                                    a->topk_k);
  unsigned char *buf = static_cast<unsigned char *>(aligned_alloc(16, (L.total + 15) / 16 * 16));
  if (!buf) return -1;
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, nullptr, NT);
  emu_bar = &bar;
  const unsigned tiles = (unsigned)((a->n_q + BM - 1) / BM);
  /* The pool's NT threads run the blocks one after another; a barrier before and after each
   * block's fresh shared memory keeps every thread on the same block. */
  pool_run([=, &bar](unsigned t) {
      for (unsigned by = 0; by < (unsigned)a->H; by++)
        for (unsigned bx = 0; bx < tiles; bx++) {
          pthread_barrier_wait(&bar); /* every thread has left the previous block */
          if (t == 0) memset(buf, 0xff, L.total); /* garbage, as fresh shared memory would be */
          pthread_barrier_wait(&bar);
          threadIdx = {t, 0, 0};
          blockIdx = {bx, by, 0};
          emu_smem = buf;
          emu_parity = 0;
          attn_kernel<T, MAXD, TPR>(*a);
        }
    });
  pthread_barrier_destroy(&bar);
  free(buf);
  return 0;
}

template <typename T>
int emu_dispatch(const cpcu_attn_args *a) {
  if (a->dh <= 64) return emu_launch<T, 64, 4>(a);
  if (a->dh <= 128) return emu_launch<T, 128, 4>(a);
  return emu_launch<T, 256, 8>(a);
}

/* One launch at a time: the pool, its barrier and the shuffle slots are shared, and two engines
 * may launch from two host threads. */
std::mutex emu_launch_mu;

int emu_attention(const cpcu_attn_args *a, int, double *, char *why, size_t n) {
  if (a->n_q == 0) return 0;
  std::lock_guard<std::mutex> hold(emu_launch_mu);
  int rc = a->bf16 ? emu_dispatch<__nv_bfloat16>(a) : emu_dispatch<float>(a);
  if (rc && why && n) snprintf(why, n, "emulated kernel: out of memory");
  return rc;
}
int emu_alloc(void **p, size_t bytes, char *why, size_t n) {
  *p = malloc(bytes ? bytes : 1);
  if (!*p && why && n) snprintf(why, n, "emulated device: out of memory");
  return *p ? 0 : -1;
}
void emu_release(void *p) { free(p); }
int emu_copy(void *dst, const void *src, size_t bytes, void *, char *, size_t) {
  if (bytes) memcpy(dst, src, bytes);
  return 0;
}

int emu_sync(void *, char *, size_t) { return 0; }

const cpcu_backend EMULATED = {tile_rows_for, emu_attention, emu_alloc,   emu_release, emu_copy,
                               emu_copy,      emu_alloc,     emu_release, emu_copy,    emu_sync};

} // namespace

extern "C" const cpcu_backend *cpcu_emulated_backend(void) { return &EMULATED; }
