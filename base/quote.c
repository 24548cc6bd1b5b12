/* Quoting of untrusted names for messages and tables: see include/ctxpatch/base/quote.h. */
#include "ctxpatch/base/quote.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctxpatch/base/utf8.h"

const char *cp_quote(char *dst, size_t cap, const char *s, size_t len) {
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (o + 8 >= cap) { /* room for one more \xNN and "..." is gone */
      memcpy(dst + o, "...", 4);
      return dst;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\') dst[o++] = (char)c;
    else o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c);
  }
  dst[o] = 0;
  return dst;
}

const char *cp_quote_masked(char dst[CP_QUOTE_MASKED_CAP], const char *s, size_t len) {
  size_t o = 0, i = 0;
  while (i < len && o < 64) {
    uint32_t cp = 0;
    size_t n = cp_utf8_decode(&cp, (const unsigned char *)s + i, len - i);
    if (n && o + n > 64) break; /* a character is shown whole or not at all */
    if (n && cp_quote_cp_safe(cp)) {
      memcpy(dst + o, s + i, n);
      o += n;
    } else {
      dst[o++] = '?';
    }
    i += n ? n : 1;
  }
  if (i < len) {
    memcpy(dst + o, "...", 3);
    o += 3;
  }
  dst[o] = '\0';
  return dst;
}

int cp_quote_cp_safe(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return 0;
  return cp != 0x61c && cp != 0x200e && cp != 0x200f && !(cp >= 0x202a && cp <= 0x202e) &&
         !(cp >= 0x2066 && cp <= 0x2069);
}

size_t cp_quote_text(char *dst, size_t cap, const char *s, size_t len, unsigned flags) {
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    const unsigned char *u = (const unsigned char *)s + i;
    uint32_t cp = 0;
    size_t n = cp_utf8_decode(&cp, u, len - i);
    bool space = u[0] == '\t' || u[0] == '\r' || (u[0] == '\n' && !(flags & CP_QUOTE_LINES));
    bool keep = u[0] == '\n' || (n && cp_quote_cp_safe(cp));
    size_t need = space ? 1 : keep ? n : 4 * (n ? n : 1);
    if (o + need + 4 > cap) { /* room for "..." and the terminator is gone */
      memcpy(dst + o, "...", 4);
      return o + 3;
    }
    if (space) {
      dst[o++] = ' ';
    } else if (keep) {
      memcpy(dst + o, u, n);
      o += n;
    } else {
      for (size_t k = 0; k < (n ? n : 1); k++) o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", u[k]);
    }
    i += n ? n : 1;
  }
  dst[o] = 0;
  return o;
}
