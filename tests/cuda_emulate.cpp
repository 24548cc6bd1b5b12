/* Host emulation of the CUDA attention kernel, for tests/test_cuda_emulated.c: compiles the
 * kernel source of engine/cuda/attention.cu with g++ and runs each thread block as NT fibers
 * (ucontext) on the calling thread, so that CI without a GPU (or without nvcc) still checks the
 * kernel's indexing, masks, positional terms and online softmax against the CPU engine.
 *
 * What it models: blockIdx/threadIdx, dynamic shared memory (one buffer per block),
 * __syncthreads (a barrier: each fiber runs until it reaches the barrier, in thread order, and
 * the next round starts once all NT have; a block whose threads do not all reach the same
 * barriers is reported and aborts) and __shfl_xor_sync (an exchange through a per-block array and
 * a barrier, so every thread must reach every shuffle, as the hardware requires of a full-mask
 * shuffle). What it does not: warp scheduling, memory coalescing, timing, the real bfloat16 and
 * exp/log instructions (host libm is used). Fibers rather than host threads: a barrier of 128
 * threads costs futex wake-ups, which made this emulation most of the CI's time (the engine test
 * spent 90% of its CPU in the kernel's futexes); a fiber switch is a function call. The order is
 * deterministic: a read of shared memory that a missing barrier leaves unordered sees whatever the
 * fixed thread order gives, which the host threads also did not always catch. */
#define CPCU_EMULATE 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <cmath>
#include <functional>

#include "base/sanitizer.h"
#if CP_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)

namespace {
struct emu_dim3 {
  unsigned x, y, z;
};
/* Per host thread (two engines may launch from two threads): the running fiber's indices, set by
 * the scheduler before each resume, and its block's shared state. */
thread_local emu_dim3 threadIdx, blockIdx;
thread_local unsigned char *emu_smem;
thread_local float emu_slot[2][1024];
thread_local unsigned emu_parity; /* the running fiber's, saved and restored by the scheduler */

void emu_barrier();
inline void __syncthreads() { emu_barrier(); }
/* Two slot arrays used in turn need one barrier per shuffle: a thread writes a slot array again
 * only after the next shuffle's barrier, which every thread reaches after its last read of it. */
inline float __shfl_xor_sync(unsigned, float v, int o) {
  const unsigned t = threadIdx.x, p = emu_parity;
  emu_parity ^= 1u;
  emu_slot[p][t] = v;
  emu_barrier();
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
}  // namespace

#define CPCU_SMEM_DECL unsigned char *smem = emu_smem;
#define CPCU_UNROLL

#include "engine/cuda/attention.cu"

namespace {

/* A block's NT fibers, per host thread: stacks allocated on the thread's first launch and freed
 * when it exits; a block makes each fiber afresh. */
/* The kernel's frames are small. The sanitizer intercepts swapcontext and clears the shadow of
 * the whole target stack on every switch, so its fibers get a smaller one (the tests pass with it). */
enum { EMU_STACK = (CP_ASAN ? 64 : 256) << 10 };
struct emu_fiber {
  ucontext_t ctx;
  unsigned char *stack = nullptr;
  unsigned parity = 0;
  bool done = false;
  void *fake_stack = nullptr; /* the sanitizer's bookkeeping of a fiber it switches away from */
};
struct emu_fiber_set {
  emu_fiber f[NT];
  ~emu_fiber_set() {
    for (emu_fiber &x : f) free(x.stack);
  }
};
thread_local emu_fiber_set emu_set;
thread_local emu_fiber *emu_fibers = emu_set.f;
thread_local ucontext_t emu_main;
thread_local unsigned emu_cur;
thread_local const std::function<void()> *emu_job;
#if CP_ASAN
thread_local const void *emu_main_bottom; /* the scheduler's stack, as the sanitizer reports it */
thread_local size_t emu_main_size;
#endif

[[noreturn]] void emu_abort(const char *why) {
  fprintf(stderr, "cuda_emulate: %s\n", why);
  abort();
}

/* Switches from fiber emu_cur to the scheduler (`final`: the fiber has finished and is not resumed). */
void emu_to_main(bool final) {
  emu_fiber *f = &emu_fibers[emu_cur];
#if CP_ASAN
  __sanitizer_start_switch_fiber(final ? nullptr : &f->fake_stack, emu_main_bottom, emu_main_size);
#endif
  if (final) {
    setcontext(&emu_main);
    emu_abort("setcontext failed");
  }
  if (swapcontext(&f->ctx, &emu_main)) emu_abort("swapcontext failed");
#if CP_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &emu_main_bottom, &emu_main_size);
#endif
}

void emu_barrier() { emu_to_main(false); }

void emu_fiber_entry() {
#if CP_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &emu_main_bottom, &emu_main_size);
#endif
  (*emu_job)();
  emu_fibers[emu_cur].done = true;
  emu_to_main(true);
}

/* Resumes fiber t until its next barrier or its end; true when it has ended. Its own function:
 * locals live across swapcontext, which returns twice as far as the compiler knows. */
__attribute__((noinline)) bool emu_resume(unsigned t) {
  emu_fiber *f = &emu_fibers[t];
  emu_cur = t;
  threadIdx = {t, 0, 0};
  emu_parity = f->parity;
  void *fake = nullptr;
#if CP_ASAN
  __sanitizer_start_switch_fiber(&fake, f->stack, EMU_STACK);
#endif
  if (swapcontext(&emu_main, &f->ctx)) emu_abort("swapcontext failed");
#if CP_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  (void)fake;
  f = &emu_fibers[emu_cur]; /* emu_cur is still t; t itself may not survive the switch */
  f->parity = emu_parity;
  return f->done;
}

/* Sets fiber f to start the block's job (a function of its own: getcontext returns twice). */
__attribute__((noinline)) void emu_make(emu_fiber *f) {
  if (!f->stack && !(f->stack = static_cast<unsigned char *>(malloc(EMU_STACK))))
    emu_abort("no memory for a fiber stack");
  if (getcontext(&f->ctx)) emu_abort("getcontext failed");
  f->ctx.uc_stack.ss_sp = f->stack;
  f->ctx.uc_stack.ss_size = EMU_STACK;
  f->ctx.uc_link = nullptr;
  makecontext(&f->ctx, emu_fiber_entry, 0);
  f->parity = 0;
  f->done = false;
}

/* Runs one block: every fiber from the start of `job` to its first barrier in thread order, then
 * to the next, and so on; all must finish in the same round (no thread left waiting at a barrier
 * that the others never reach, which hangs or corrupts a real block). */
void emu_run_block(const std::function<void()> &job) {
  emu_job = &job;
  for (unsigned t = 0; t < (unsigned)NT; t++) emu_make(&emu_fibers[t]);
  for (unsigned finished = 0; finished < (unsigned)NT;) {
    unsigned now = 0;
    for (unsigned t = 0; t < (unsigned)NT; t++) now += emu_resume(t);
    if (now && now != (unsigned)NT) emu_abort("a block's threads do not all reach the same barriers");
    finished += now;
  }
}

template <typename T, int MAXD, int TPR>
int emu_launch(const cpcu_attn_args *a) {
  constexpr int BM = NT / TPR;
  const smem_layout L =
      make_layout(MAXD, BM, a->q_far != nullptr, a->pos == CP_ATTN_POS_T5 ? a->t5_nb : 0,
                  a->pos == CP_ATTN_POS_FIRE ? a->fire_width : 0, a->fire_layers == 2 ? 2 : 1, a->topk_k);
  unsigned char *buf = static_cast<unsigned char *>(aligned_alloc(16, (L.total + 15) / 16 * 16));
  if (!buf) return -1;
  const unsigned tiles = (unsigned)((a->n_q + BM - 1) / BM);
  const std::function<void()> job = [a] { attn_kernel<T, MAXD, TPR>(*a); };
  for (unsigned by = 0; by < (unsigned)a->H; by++)
    for (unsigned bx = 0; bx < tiles; bx++) {
      memset(buf, 0xff, L.total); /* garbage, as fresh shared memory would be */
      blockIdx = {bx, by, 0};
      emu_smem = buf;
      emu_run_block(job);
    }
  free(buf);
  return 0;
}

template <typename T>
int emu_dispatch(const cpcu_attn_args *a) {
  if (a->dh <= 64) return emu_launch<T, 64, 4>(a);
  if (a->dh <= 128) return emu_launch<T, 128, 4>(a);
  return emu_launch<T, 256, 8>(a);
}

int emu_attention(const cpcu_attn_args *a, int, double *, char *why, size_t n) {
  if (a->n_q == 0) return 0;
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

}  // namespace

extern "C" const cpcu_backend *cpcu_emulated_backend(void) { return &EMULATED; }
