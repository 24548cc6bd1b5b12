/* Floor: base. One out-of-memory path and one array growth for the whole code base.
 *
 * CP_CHECK_ALLOC(p, what) returns CP_ENOMEM with "WHAT: out of memory" when p is NULL;
 * CP_CHECK_ALLOC_GOTO(p, what) sets `rc` and jumps to `done:` instead, for functions that clean up.
 * cp_nomem(fmt, ...) is the same error as an expression, for the shapes the macros do not fit
 * (a cp_strbuf's oom flag, a `cond ? ... : ...`); no other code sets CP_ENOMEM by hand
 * (tests/test_base_only.sh).
 * cp_array_reserve grows a heap array by doubling (cp_array_resize to an exact count), with the
 * element count and byte size checked for overflow; the array stays owned by the caller (free() it)
 * and is unchanged on failure.
 */
#ifndef CTXPATCH_BASE_ALLOC_H
#define CTXPATCH_BASE_ALLOC_H

#include <stddef.h>

#include "ctxpatch/base/error.h"

/* Sets CP_ENOMEM with the message "<fmt formatted>: out of memory" and returns CP_ENOMEM. */
int cp_nomem(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CP_CHECK_ALLOC(p, what)                  \
  do {                                           \
    if (!(p)) return cp_nomem("%s", (what));     \
  } while (0)

#define CP_CHECK_ALLOC_GOTO(p, what)             \
  do {                                           \
    if (!(p)) {                                  \
      rc = cp_nomem("%s", (what));               \
      goto done;                                 \
    }                                            \
  } while (0)

/* Makes *items (the address of a T * array of `elem`-byte elements with *cap slots) hold at
 * least `need` elements. Returns 0, CP_EOVERFLOW or CP_ENOMEM (message naming `what`). */
int cp_array_reserve(void *items, size_t *cap, size_t need, size_t elem, const char *what);

/* Typed form: CP_ARRAY_RESERVE(list->v, list->cap, list->n + 1, "rule list"). */
#define CP_ARRAY_RESERVE(arr, cap, need, what) \
  cp_array_reserve(&(arr), &(cap), (need), sizeof *(arr), (what))

/* Resizes *items (the address of a T * array of `elem`-byte elements) to exactly `n` elements, for
 * short lists that grow one at a time and keep no capacity. Returns 0, CP_EOVERFLOW or CP_ENOMEM
 * (message naming `what`); *items is unchanged on failure. */
int cp_array_resize(void *items, size_t n, size_t elem, const char *what);

/* Typed form: CP_ARRAY_RESIZE(*reasons, (size_t)*n + 1, "verify reasons"). */
#define CP_ARRAY_RESIZE(arr, n, what) cp_array_resize(&(arr), (n), sizeof *(arr), (what))

/* Overflow-checked a * b for sizes; false on overflow. */
static inline int cp_size_mul(size_t *out, size_t a, size_t b) {
  return !__builtin_mul_overflow(a, b, out);
}

#endif
