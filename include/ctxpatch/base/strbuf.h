/* Floor: base. A growable NUL-terminated text buffer for writers that build headers and documents.
 * Appends never fail loudly: an allocation failure sets `oom`, later appends are ignored, and
 * the caller checks `oom` once at the end. The caller frees `s`. */
#ifndef CTXPATCH_STRBUF_H
#define CTXPATCH_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *s;
  size_t len, cap;
  bool oom;
} cp_strbuf;

void cp_strbuf_put(cp_strbuf *b, const char *s, size_t n);
void cp_strbuf_str(cp_strbuf *b, const char *s);
void cp_strbuf_printf(cp_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
