/* Floor: base. The one UTF-8 decoder, validator and encoder of the code base.
 *
 * Well-formed UTF-8 is RFC 3629's (and Rust's str::from_utf8's): no overlong forms, nothing past
 * U+10FFFF and, unless CP_UTF8_SURROGATEPASS is given, no encoded UTF-16 surrogates
 * (U+D800..U+DFFF). Python pickles are decoded with errors="surrogatepass", hence the flag.
 */
#ifndef CTXPATCH_BASE_UTF8_H
#define CTXPATCH_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/strbuf.h"

enum {
  CP_UTF8_STRICT = 0,
  CP_UTF8_SURROGATEPASS = 1, /* accept encoded surrogates (Python's errors="surrogatepass") */
};

/* Decodes the sequence at s[0..n): its length (1..4) with the code point in *cp, or 0 (and *cp
 * untouched) when it is malformed, truncated or n is 0. */
size_t cp_utf8_decode(uint32_t *cp, const unsigned char *s, size_t n);

/* Offset of the first byte of the first malformed sequence of s[0..n), or n when all of it is
 * well formed. `flags`: CP_UTF8_STRICT or CP_UTF8_SURROGATEPASS. */
size_t cp_utf8_check(const char *s, size_t n, unsigned flags);

/* Appends code point `cp` (at most U+10FFFF) encoded as UTF-8. */
void cp_utf8_put(cp_strbuf *b, uint32_t cp);

/* Appends s[0..n) with each byte that does not start a well-formed sequence replaced by U+FFFD
 * (Rust's from_utf8_lossy differs only in grouping some truncated sequences). */
void cp_utf8_put_lossy(cp_strbuf *b, const char *s, size_t n);

#endif
