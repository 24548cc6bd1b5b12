/* Host emulation of the CUDA engine's small kernels (engine/cuda/kernels.cu), for
 * tests/test_cuda_engine_emulated.c: compiles the kernel source with g++ and runs every launch as
 * plain loops over its blocks and threads (the kernels share no memory and meet at no barrier, so
 * the order does not matter). The launch configuration (blocks, threads) is the product's. */
#define CPCU_EMULATE 1

#include <stdint.h>

#include <cmath>
#include <cstring>

#include "cuda_runtime_api.h" /* tests/cuda_shim: the launches report their stream */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

namespace {
struct emu_dim3 {
  unsigned x, y, z;
};
thread_local emu_dim3 threadIdx, blockIdx, blockDim, gridDim; /* two engines may launch from two threads */
/* The device intrinsics the kernels use; launches run one thread at a time, so atomics are plain. */
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline unsigned long long atomicMin(unsigned long long *a, unsigned long long v) {
  const unsigned long long old = *a;
  if (v < old) *a = v;
  return old;
}
} // namespace

#define CPCU_LAUNCH(kernel, blocks, threads, stream, ...)               \
  do {                                                                  \
    cpcu_shim_note_stream((stream), #kernel);                           \
    gridDim = {(unsigned)(blocks), 1, 1};                               \
    blockDim = {(unsigned)(threads), 1, 1};                             \
    for (unsigned bx_ = 0; bx_ < gridDim.x; bx_++)                      \
      for (unsigned tx_ = 0; tx_ < blockDim.x; tx_++) {                 \
        blockIdx = {bx_, 0, 0};                                         \
        threadIdx = {tx_, 0, 0};                                        \
        kernel(__VA_ARGS__);                                            \
      }                                                                 \
  } while (0)

#include "engine/cuda/kernels.cu"
