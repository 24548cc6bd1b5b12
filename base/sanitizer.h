/* Floor: base (private). Which sanitizer instruments this build, in C and C++: CP_ASAN is 1 under
 * AddressSanitizer and CP_TSAN under ThreadSanitizer, else 0. gcc says so with
 * __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__, clang only through __has_feature. Code that the
 * instrumentation makes too slow (engine/layer_ops.c), or that must tell it about the stacks it
 * switches (tests/cuda_emulate.cpp), asks here. */
#ifndef CTXPATCH_SANITIZER_H
#define CTXPATCH_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define CP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CP_ASAN 1
#endif
#endif
#ifndef CP_ASAN
#define CP_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define CP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CP_TSAN 1
#endif
#endif
#ifndef CP_TSAN
#define CP_TSAN 0
#endif

#endif
