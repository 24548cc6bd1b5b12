/* Unicode services through ICU for the tokenizers: normalization forms, lowercasing, regular
 * expressions, grapheme clusters and character classes. See tokenizers/unicode.h. */
#include "tokenizers/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/ubrk.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uregex.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"

/* UTF-8 (valid) -> heap UTF-16; *ulen in code units. */
static UChar *to_u16(const char *s, size_t n, int32_t *ulen) {
  if (n > INT32_MAX / 2) return NULL;
  UChar *u = malloc((n + 1) * sizeof *u);
  if (!u) return NULL;
  UErrorCode st = U_ZERO_ERROR;
  u_strFromUTF8WithSub(u, (int32_t)n + 1, ulen, s, (int32_t)n, 0xFFFD, NULL, &st);
  if (U_FAILURE(st)) {
    free(u);
    return NULL;
  }
  return u;
}

static int put_u16(cp_strbuf *out, const UChar *u, int32_t ulen) {
  UErrorCode st = U_ZERO_ERROR;
  int32_t need = 0;
  u_strToUTF8WithSub(NULL, 0, &need, u, ulen, 0xFFFD, NULL, &st);
  if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st)) return cp_error_set(CP_EARG, "tokenizer: UTF-16 conversion failed");
  char *p = malloc((size_t)need + 1);
  CP_CHECK_ALLOC(p, "tokenizer");
  st = U_ZERO_ERROR;
  u_strToUTF8WithSub(p, need + 1, NULL, u, ulen, 0xFFFD, NULL, &st);
  if (U_FAILURE(st)) {
    free(p);
    return cp_error_set(CP_EARG, "tokenizer: UTF-8 conversion failed");
  }
  cp_strbuf_put(out, p, (size_t)need);
  free(p);
  return out->oom ? cp_nomem("tokenizer") : 0;
}

static bool all_ascii(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] >= 0x80) return false;
  return true;
}

int tk_normalize(cp_strbuf *out, const char *s, size_t n, tk_nf form) {
  if (all_ascii(s, n)) { /* every form is the identity on ASCII */
    cp_strbuf_put(out, s, n);
    return out->oom ? cp_nomem("tokenizer") : 0;
  }
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2 *nf = form == TK_NFC    ? unorm2_getNFCInstance(&st)
                           : form == TK_NFD  ? unorm2_getNFDInstance(&st)
                           : form == TK_NFKC ? unorm2_getNFKCInstance(&st)
                                             : unorm2_getNFKDInstance(&st);
  if (U_FAILURE(st)) return cp_error_set(CP_EUNSUPPORTED, "tokenizer: ICU normalizer unavailable: %s", u_errorName(st));
  int32_t ulen = 0;
  UChar *u = to_u16(s, n, &ulen);
  CP_CHECK_ALLOC(u, "tokenizer");
  int rc = 0;
  UChar *d = NULL;
  int32_t cap = ulen * 3 + 16; /* decompositions expand at most ~3x (18x in theory: retried) */
  for (int attempt = 0; attempt < 2; attempt++) {
    free(d);
    d = malloc((size_t)cap * sizeof *d);
    CP_CHECK_ALLOC_GOTO(d, "tokenizer");
    st = U_ZERO_ERROR;
    int32_t got = unorm2_normalize(nf, u, ulen, d, cap, &st);
    if (st == U_BUFFER_OVERFLOW_ERROR && attempt == 0) {
      cap = got + 1;
      continue;
    }
    if (U_FAILURE(st)) {
      rc = cp_error_set(CP_EARG, "tokenizer: normalization failed: %s", u_errorName(st));
      goto done;
    }
    rc = put_u16(out, d, got);
    break;
  }
done:
  free(u);
  free(d);
  return rc;
}

int tk_lowercase(cp_strbuf *out, const char *s, size_t n) {
  if (all_ascii(s, n)) {
    size_t start = out->len;
    cp_strbuf_put(out, s, n);
    if (out->oom) return cp_nomem("tokenizer");
    for (size_t i = start; i < out->len; i++)
      if (out->s[i] >= 'A' && out->s[i] <= 'Z') out->s[i] = (char)(out->s[i] - 'A' + 'a');
    return 0;
  }
  int32_t ulen = 0;
  UChar *u = to_u16(s, n, &ulen);
  CP_CHECK_ALLOC(u, "tokenizer");
  UErrorCode st = U_ZERO_ERROR;
  int32_t need = u_strToLower(NULL, 0, u, ulen, "", &st);
  int rc = 0;
  UChar *d = malloc(((size_t)need + 1) * sizeof *d);
  if (!d) {
    rc = cp_nomem("tokenizer");
  } else {
    st = U_ZERO_ERROR;
    u_strToLower(d, need + 1, u, ulen, "", &st);
    rc = U_FAILURE(st) ? cp_error_set(CP_EARG, "tokenizer: lowercase failed: %s", u_errorName(st)) : put_u16(out, d, need);
  }
  free(u);
  free(d);
  return rc;
}

struct tk_regex {
  URegularExpression *re;
  char where[512]; /* "file: stage regex 'pattern'" for messages */
};

int tk_regex_compile(tk_regex **out, const char *pattern, const char *path, const char *what) {
  *out = NULL;
  cp_strbuf p = {0};
  size_t n = strlen(pattern);
  char where[512], q[160];
  snprintf(where, sizeof where, "%s: %s regex '%s'", path, what, cp_quote(q, sizeof q, pattern, n));
  /* Rust regex / Oniguruma \s is Unicode White_Space; ICU's \s is [\t\n\f\r\p{Z}]. */
  for (size_t i = 0; i < n; i++) {
    if (pattern[i] == '\\' && i + 1 < n) {
      if (pattern[i + 1] == 's') cp_strbuf_str(&p, "\\p{White_Space}");
      else if (pattern[i + 1] == 'S') cp_strbuf_str(&p, "\\P{White_Space}");
      else cp_strbuf_put(&p, pattern + i, 2);
      i++;
    } else {
      cp_strbuf_put(&p, pattern + i, 1);
    }
  }
  if (p.oom || !p.s) {
    cp_strbuf_free(&p);
    return n ? cp_nomem("%s: regex", where) : cp_error_set(CP_ETOK_UNSUPPORTED, "%s: empty or unusable regex", where);
  }
  int32_t ulen = 0;
  UChar *u = to_u16(p.s, p.len, &ulen);
  cp_strbuf_free(&p);
  CP_CHECK_ALLOC(u, where);
  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  URegularExpression *re = uregex_open(u, ulen, 0, &pe, &st);
  free(u);
  if (U_FAILURE(st)) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: not supported: %s", where, u_errorName(st));
  tk_regex *r = malloc(sizeof *r);
  if (!r) {
    uregex_close(re);
    return cp_nomem("%s", where);
  }
  r->re = re;
  memcpy(r->where, where, sizeof where);
  *out = r;
  return 0;
}

void tk_regex_free(tk_regex *re) {
  if (!re) return;
  uregex_close(re->re);
  free(re);
}

/* ICU calls this once per tick (10,000 engine steps) of a match attempt: the ticks of all the
 * attempts of one walk are counted against one budget, linear in the text. */
static _Thread_local size_t ticks_seen; /* this thread's ticks, for tests of the work bound */

static UBool regex_tick(const void *vctx, int32_t steps) {
  size_t *left = (size_t *)vctx;
  (void)steps;
  ticks_seen++;
  if (!*left) return false;
  (*left)--;
  return true;
}

size_t tk_regex_ticks(void) { return ticks_seen; }

int tk_regex_each(const tk_regex *r, const char *s, size_t n, tk_span_fn fn, void *ctx) {
  UErrorCode st = U_ZERO_ERROR;
  /* A compiled ICU regex is not thread-safe; a clone per call keeps encode reentrant. */
  URegularExpression *re = uregex_clone(r->re, &st);
  if (U_FAILURE(st)) return cp_nomem("tokenizer: regex clone failed (%s)", u_errorName(st));
  /* Backtracking is bounded (a pattern like (a+)+$ never returns otherwise); set on the clone,
   * which does not inherit callbacks or limits. */
  size_t budget = TK_REGEX_BASE_TICKS + n / TK_REGEX_BYTES_PER_TICK, left = budget;
  uregex_setMatchCallback(re, regex_tick, &left, &st);
  uregex_setStackLimit(re, TK_REGEX_STACK_LIMIT, &st);
  UText *ut = U_SUCCESS(st) ? utext_openUTF8(NULL, s, (int64_t)n, &st) : NULL;
  int rc = 0;
  if (U_FAILURE(st)) {
    rc = cp_nomem("tokenizer: utext failed (%s)", u_errorName(st));
    goto done;
  }
  uregex_setUText(re, ut, &st);
  while (U_SUCCESS(st) && uregex_findNext(re, &st)) {
    int64_t a = uregex_start64(re, 0, &st), b = uregex_end64(re, 0, &st);
    if (U_FAILURE(st) || a < 0 || b < a || (uint64_t)b > n) break;
    if (b == a) continue; /* empty matches split nothing */
    if ((rc = fn(ctx, (size_t)a, (size_t)b))) goto done;
  }
  if (st == U_REGEX_STOPPED_BY_CALLER)
    rc = cp_error_set(CP_ETOK_LIMIT, "%s: matching stopped at the limit of %zu ticks of 10,000 steps for %zu bytes of text",
                      r->where, budget, n);
  else if (st == U_REGEX_STACK_OVERFLOW)
    rc = cp_error_set(CP_ETOK_LIMIT, "%s: matching stopped at the backtracking stack limit of %d bytes", r->where,
                      TK_REGEX_STACK_LIMIT);
  else if (U_FAILURE(st)) rc = cp_error_set(CP_EARG, "%s: matching failed: %s", r->where, u_errorName(st));
done:
  utext_close(ut);
  uregex_close(re);
  return rc;
}

int tk_graphemes(const char *s, size_t n, tk_span_fn fn, void *ctx) {
  UErrorCode st = U_ZERO_ERROR;
  UText *ut = utext_openUTF8(NULL, s, (int64_t)n, &st);
  UBreakIterator *bi = U_SUCCESS(st) ? ubrk_open(UBRK_CHARACTER, "", NULL, 0, &st) : NULL;
  int rc = 0;
  if (U_SUCCESS(st)) ubrk_setUText(bi, ut, &st);
  if (U_FAILURE(st)) {
    rc = cp_error_set(CP_EUNSUPPORTED, "tokenizer: ICU break iterator: %s", u_errorName(st));
    goto done;
  }
  int32_t a = ubrk_first(bi);
  for (int32_t b = ubrk_next(bi); b != UBRK_DONE; a = b, b = ubrk_next(bi)) {
    if (a < 0 || b < a || (size_t)b > n) break;
    if ((rc = fn(ctx, (size_t)a, (size_t)b))) goto done;
  }
done:
  if (bi) ubrk_close(bi);
  utext_close(ut);
  return rc;
}

bool tk_is_whitespace(uint32_t cp) { return u_hasBinaryProperty((UChar32)cp, UCHAR_WHITE_SPACE); }
bool tk_is_alnum(uint32_t cp) {
  return u_hasBinaryProperty((UChar32)cp, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(cp) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         cp == 0x200C || cp == 0x200D;
}
bool tk_is_punct(uint32_t cp) { return (U_GET_GC_MASK(cp) & U_GC_P_MASK) != 0; }
/* Rust's char::is_numeric (HF's Digits): Nd, Nl and No, so ½ Ⅻ ① split off as digits do. */
bool tk_is_numeric(uint32_t cp) { return (U_GET_GC_MASK(cp) & U_GC_N_MASK) != 0; }
