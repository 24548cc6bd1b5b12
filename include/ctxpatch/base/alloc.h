/* Floor: base. One out-of-memory path and one array growth for the whole code base.
 *
 * CP_CHECK_ALLOC(p, what) returns CP_ENOMEM with "WHAT: out of memory" when p is NULL;
 * CP_CHECK_ALLOC_GOTO(p, what) sets `rc` and jumps to `done:` instead, for functions that clean up.
 * cp_array_reserve grows a heap array by doubling, with the element count and byte size checked
 * for overflow; the array stays owned by the caller (free() it) and is unchanged on failure.
 */
#ifndef CTXPATCH_BASE_ALLOC_H
#define CTXPATCH_BASE_ALLOC_H

#include <stddef.h>

#include "ctxpatch/base/error.h"

#define CP_CHECK_ALLOC(p, what)                                            \
  do {                                                                     \
    if (!(p)) return cp_error_set(CP_ENOMEM, "%s: out of memory", (what)); \
  } while (0)

#define CP_CHECK_ALLOC_GOTO(p, what)                               \
  do {                                                             \
    if (!(p)) {                                                    \
      rc = cp_error_set(CP_ENOMEM, "%s: out of memory", (what));   \
      goto done;                                                   \
    }                                                              \
  } while (0)

/* Makes *items (the address of a T * array of `elem`-byte elements with *cap slots) hold at
 * least `need` elements. Returns 0, CP_EOVERFLOW or CP_ENOMEM (message naming `what`). */
int cp_array_reserve(void *items, size_t *cap, size_t need, size_t elem, const char *what);

/* Typed form: CP_ARRAY_RESERVE(list->v, list->cap, list->n + 1, "rule list"). */
#define CP_ARRAY_RESERVE(arr, cap, need, what) \
  cp_array_reserve(&(arr), &(cap), (need), sizeof *(arr), (what))

/* Overflow-checked a * b for sizes; false on overflow. */
static inline int cp_size_mul(size_t *out, size_t a, size_t b) {
  return !__builtin_mul_overflow(a, b, out);
}

#endif
