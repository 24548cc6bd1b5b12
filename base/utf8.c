/* UTF-8 decoding, validation and encoding: see include/ctxpatch/base/utf8.h. */
#include "ctxpatch/base/utf8.h"

#include <stdbool.h>

static size_t decode(uint32_t *cp, const unsigned char *s, size_t n, bool surrogates) {
  if (n == 0) return 0;
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t need;
  uint32_t v, min;
  /* C0, C1 and F5..FF never start a sequence: C0/C1 forms are always overlong. */
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (n < need) return 0;
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (!surrogates && v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return need;
}

size_t cp_utf8_decode(uint32_t *cp, const unsigned char *s, size_t n) { return decode(cp, s, n, false); }

size_t cp_utf8_check(const char *s, size_t n, unsigned flags) {
  const unsigned char *u = (const unsigned char *)s;
  bool surrogates = (flags & CP_UTF8_SURROGATEPASS) != 0;
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    if (u[i] < 0x80) { /* ASCII runs are most of every input */
      i++;
      continue;
    }
    size_t l = decode(&cp, u + i, n - i, surrogates);
    if (!l) return i;
    i += l;
  }
  return n;
}

void cp_utf8_put(cp_strbuf *b, uint32_t cp) {
  char t[4];
  size_t n;
  if (cp < 0x80) {
    t[0] = (char)cp, n = 1;
  } else if (cp < 0x800) {
    t[0] = (char)(0xC0 | (cp >> 6)), t[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
  } else if (cp < 0x10000) {
    t[0] = (char)(0xE0 | (cp >> 12)), t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    t[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
  } else {
    t[0] = (char)(0xF0 | (cp >> 18)), t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    t[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), t[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
  }
  cp_strbuf_put(b, t, n);
}

void cp_utf8_put_lossy(cp_strbuf *b, const char *s, size_t n) {
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    size_t l = cp_utf8_decode(&cp, (const unsigned char *)s + i, n - i);
    if (l) {
      cp_strbuf_put(b, s + i, l);
      i += l;
    } else {
      cp_utf8_put(b, 0xFFFD);
      i++;
    }
  }
}
