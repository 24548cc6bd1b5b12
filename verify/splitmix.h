/* Private to verify/: splitmix64, the generator every probe draws from (small, fast, and the
 * same on every platform; the Python references reimplement it in three lines). */
#ifndef CTXPATCH_VERIFY_SPLITMIX_H
#define CTXPATCH_VERIFY_SPLITMIX_H

#include <stdint.h>

static inline uint64_t cp_splitmix64_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#endif
