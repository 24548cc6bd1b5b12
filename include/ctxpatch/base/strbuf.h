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
/* Room for `extra` more bytes and the terminator (the one growth path); false once oom is set. */
bool cp_strbuf_reserve(cp_strbuf *b, size_t extra);
void cp_strbuf_putc(cp_strbuf *b, char c);
/* Empties the text, keeping the memory (and the oom flag) for reuse. */
void cp_strbuf_reset(cp_strbuf *b);
/* Frees `s` and zeroes the buffer (ready for reuse). */
void cp_strbuf_free(cp_strbuf *b);

#endif
