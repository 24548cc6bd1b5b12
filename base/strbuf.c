/* The growable text buffer of include/ctxpatch/base/strbuf.h: one overflow-checked reserve
 * for put and printf. */
#include "ctxpatch/base/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `extra` more bytes and the terminator; false (and oom set) when memory runs out. */
static bool reserve(cp_strbuf *b, size_t extra) {
  if (b->oom) return false;
  if (extra > SIZE_MAX - b->len - 1) {
    b->oom = true;
    return false;
  }
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  char *p = realloc(b->s, cap);
  if (!p) {
    b->oom = true;
    return false;
  }
  b->s = p;
  b->cap = cap;
  return true;
}

void cp_strbuf_put(cp_strbuf *b, const char *s, size_t n) {
  if (!reserve(b, n)) return;
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

void cp_strbuf_str(cp_strbuf *b, const char *s) { cp_strbuf_put(b, s, strlen(s)); }

void cp_strbuf_printf(cp_strbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = true;
    return;
  }
  if (!reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

bool cp_strbuf_reserve(cp_strbuf *b, size_t extra) { return reserve(b, extra); }

void cp_strbuf_putc(cp_strbuf *b, char c) { cp_strbuf_put(b, &c, 1); }

void cp_strbuf_reset(cp_strbuf *b) {
  b->len = 0;
  if (b->s) b->s[0] = '\0';
}

void cp_strbuf_free(cp_strbuf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}
