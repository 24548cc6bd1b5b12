/* The one out-of-memory error and array growth with overflow checks: see include/ctxpatch/base/alloc.h. */
#include "ctxpatch/base/alloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cp_nomem(const char *fmt, ...) {
  char what[1000];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return cp_error_set(CP_ENOMEM, "%s: out of memory", what);
}

int cp_array_reserve(void *items, size_t *cap, size_t need, size_t elem, const char *what) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap : 8;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) {
      ncap = need;
      break;
    }
    ncap *= 2;
  }
  size_t bytes;
  if (!cp_size_mul(&bytes, ncap, elem))
    return cp_error_set(CP_EOVERFLOW, "%s: %zu elements of %zu bytes overflow", what, ncap, elem);
  void *old;
  memcpy(&old, items, sizeof old);
  void *grown = realloc(old, bytes);
  if (!grown) return cp_error_set(CP_ENOMEM, "%s: out of memory (%zu bytes)", what, bytes);
  memcpy(items, &grown, sizeof grown);
  *cap = ncap;
  return 0;
}

int cp_array_resize(void *items, size_t n, size_t elem, const char *what) {
  size_t bytes;
  if (!cp_size_mul(&bytes, n, elem))
    return cp_error_set(CP_EOVERFLOW, "%s: %zu elements of %zu bytes overflow", what, n, elem);
  void *old;
  memcpy(&old, items, sizeof old);
  void *grown = realloc(old, bytes ? bytes : 1);
  if (!grown) return cp_error_set(CP_ENOMEM, "%s: out of memory (%zu bytes)", what, bytes);
  memcpy(items, &grown, sizeof grown);
  return 0;
}
