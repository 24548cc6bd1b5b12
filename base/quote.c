/* Quoting of untrusted names for error messages: see include/ctxpatch/base/quote.h. */
#include "ctxpatch/base/quote.h"

#include <stdio.h>
#include <string.h>

const char *cp_quote(char *dst, size_t cap, const char *s, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (o + 8 >= cap) { /* room for one more \xNN and "..." is gone */
      memcpy(dst + o, "...", 4);
      return dst;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\')
      dst[o++] = (char)c;
    else
      o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
  }
  dst[o] = 0;
  return dst;
}

const char *cp_quote_masked(char dst[CP_QUOTE_MASKED_CAP], const char *s, size_t len) {
  size_t o = 0;
  for (; o < len && o < 64; o++) {
    unsigned char c = (unsigned char)s[o];
    dst[o] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
  }
  if (o < len) {
    memcpy(dst + o, "...", 3);
    o += 3;
  }
  dst[o] = '\0';
  return dst;
}
