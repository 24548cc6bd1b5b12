/* Text services for the tokenizers: byte buffers, UTF-8, a string hash map, ICU wrappers
 * (normalization forms, regular expressions, grapheme clusters) and SentencePiece's
 * Precompiled charsmap. */
#include <stdlib.h>
#include <string.h>

#include <unicode/ubrk.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uregex.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "tokenizers/tokenizer_priv.h"

/* ---------------------------------------------------------------- buffers */

void tk_buf_put(tk_buf *b, const void *data, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) {
      if (cap > SIZE_MAX / 2) {
        b->oom = true;
        return;
      }
      cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
}

void tk_buf_free(tk_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------- UTF-8 */

size_t tk_utf8_len(const unsigned char *s, size_t n, uint32_t *cp) {
  if (n == 0) return 0;
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t need;
  uint32_t v, min;
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
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return need;
}

size_t tk_utf8_check(const char *s, size_t n) {
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    size_t l = tk_utf8_len((const unsigned char *)s + i, n - i, &cp);
    if (!l) return i;
    i += l;
  }
  return n;
}

void tk_utf8_put(tk_buf *b, uint32_t cp) {
  unsigned char t[4];
  size_t n;
  if (cp < 0x80) {
    t[0] = (unsigned char)cp, n = 1;
  } else if (cp < 0x800) {
    t[0] = (unsigned char)(0xC0 | (cp >> 6)), t[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
  } else if (cp < 0x10000) {
    t[0] = (unsigned char)(0xE0 | (cp >> 12)), t[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    t[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
  } else {
    t[0] = (unsigned char)(0xF0 | (cp >> 18)), t[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    t[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), t[3] = (unsigned char)(0x80 | (cp & 0x3F)), n = 4;
  }
  tk_buf_put(b, t, n);
}

void tk_buf_put_lossy(tk_buf *b, const char *s, size_t n) {
  size_t i = 0;
  uint32_t cp;
  while (i < n) {
    size_t l = tk_utf8_len((const unsigned char *)s + i, n - i, &cp);
    if (l) {
      tk_buf_put(b, s + i, l);
      i += l;
    } else {
      tk_utf8_put(b, 0xFFFD);
      i++;
    }
  }
}

/* ---------------------------------------------------------------- hash map */

static uint64_t tk_hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h ^ (h >> 29);
}

static int tk_map_grow(tk_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 1024;
  char **keys = calloc(cap, sizeof *keys);
  uint32_t *klen = calloc(cap, sizeof *klen);
  int32_t *vals = calloc(cap, sizeof *vals);
  if (!keys || !klen || !vals) {
    free(keys), free(klen), free(vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = tk_hash(m->keys[i], m->klen[i]) & (cap - 1);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i], klen[j] = m->klen[i], vals[j] = m->vals[i];
  }
  free(m->keys), free(m->klen), free(m->vals);
  m->keys = keys, m->klen = klen, m->vals = vals, m->cap = cap;
  return 0;
}

int tk_map_put(tk_map *m, const char *key, size_t len, int32_t val) {
  if (len > UINT32_MAX) return -1;
  if ((m->count + 1) * 2 > m->cap && tk_map_grow(m)) return -1;
  size_t j = tk_hash(key, len) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->klen[j] == len && !memcmp(m->keys[j], key, len)) {
      m->vals[j] = val;
      return 1;
    }
    j = (j + 1) & (m->cap - 1);
  }
  char *k = malloc(len + 1);
  if (!k) return -1;
  memcpy(k, key, len);
  k[len] = '\0';
  m->keys[j] = k, m->klen[j] = (uint32_t)len, m->vals[j] = val;
  m->count++;
  return 0;
}

bool tk_map_get(const tk_map *m, const char *key, size_t len, int32_t *val) {
  if (!m->cap) return false;
  size_t j = tk_hash(key, len) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->klen[j] == len && !memcmp(m->keys[j], key, len)) {
      *val = m->vals[j];
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return false;
}

void tk_map_free(tk_map *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys), free(m->klen), free(m->vals);
  memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- ICU */

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

static int put_u16(tk_buf *out, const UChar *u, int32_t ulen) {
  UErrorCode st = U_ZERO_ERROR;
  int32_t need = 0;
  u_strToUTF8WithSub(NULL, 0, &need, u, ulen, 0xFFFD, NULL, &st);
  if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st)) return cp_error_set(CP_EARG, "tokenizer: UTF-16 conversion failed");
  char *p = malloc((size_t)need + 1);
  if (!p) return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  st = U_ZERO_ERROR;
  u_strToUTF8WithSub(p, need + 1, NULL, u, ulen, 0xFFFD, NULL, &st);
  if (U_FAILURE(st)) {
    free(p);
    return cp_error_set(CP_EARG, "tokenizer: UTF-8 conversion failed");
  }
  tk_buf_put(out, p, (size_t)need);
  free(p);
  return out->oom ? cp_error_set(CP_ENOMEM, "tokenizer: out of memory") : 0;
}

static bool all_ascii(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] >= 0x80) return false;
  return true;
}

int tk_normalize(tk_buf *out, const char *s, size_t n, tk_nf form) {
  if (all_ascii(s, n)) { /* every form is the identity on ASCII */
    tk_buf_put(out, s, n);
    return out->oom ? cp_error_set(CP_ENOMEM, "tokenizer: out of memory") : 0;
  }
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2 *nf = form == TK_NFC    ? unorm2_getNFCInstance(&st)
                           : form == TK_NFD  ? unorm2_getNFDInstance(&st)
                           : form == TK_NFKC ? unorm2_getNFKCInstance(&st)
                                             : unorm2_getNFKDInstance(&st);
  if (U_FAILURE(st)) return cp_error_set(CP_EUNSUPPORTED, "tokenizer: ICU normalizer unavailable: %s", u_errorName(st));
  int32_t ulen = 0;
  UChar *u = to_u16(s, n, &ulen);
  if (!u) return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  int rc = 0;
  UChar *d = NULL;
  int32_t cap = ulen * 3 + 16; /* decompositions expand at most ~3x (18x in theory: retried) */
  for (int attempt = 0; attempt < 2; attempt++) {
    free(d);
    d = malloc((size_t)cap * sizeof *d);
    if (!d) {
      rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
      goto done;
    }
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

int tk_lowercase(tk_buf *out, const char *s, size_t n) {
  if (all_ascii(s, n)) {
    size_t start = out->len;
    tk_buf_put(out, s, n);
    if (out->oom) return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    for (size_t i = start; i < out->len; i++)
      if (out->p[i] >= 'A' && out->p[i] <= 'Z') out->p[i] = (char)(out->p[i] - 'A' + 'a');
    return 0;
  }
  int32_t ulen = 0;
  UChar *u = to_u16(s, n, &ulen);
  if (!u) return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  UErrorCode st = U_ZERO_ERROR;
  int32_t need = u_strToLower(NULL, 0, u, ulen, "", &st);
  int rc = 0;
  UChar *d = malloc(((size_t)need + 1) * sizeof *d);
  if (!d) {
    rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
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
};

int tk_regex_compile(tk_regex **out, const char *pattern, const char *what) {
  *out = NULL;
  tk_buf p = {0};
  size_t n = strlen(pattern);
  /* Rust regex / Oniguruma \s is Unicode White_Space; ICU's \s is [\t\n\f\r\p{Z}]. */
  for (size_t i = 0; i < n; i++) {
    if (pattern[i] == '\\' && i + 1 < n) {
      if (pattern[i + 1] == 's') tk_buf_puts(&p, "\\p{White_Space}");
      else if (pattern[i + 1] == 'S') tk_buf_puts(&p, "\\P{White_Space}");
      else tk_buf_put(&p, pattern + i, 2);
      i++;
    } else {
      tk_buf_put(&p, pattern + i, 1);
    }
  }
  if (p.oom || !p.p) {
    tk_buf_free(&p);
    return cp_error_set(n ? CP_ENOMEM : CP_ETOK_UNSUPPORTED, "%s: empty or unusable regex", what);
  }
  int32_t ulen = 0;
  UChar *u = to_u16(p.p, p.len, &ulen);
  tk_buf_free(&p);
  if (!u) return cp_error_set(CP_ENOMEM, "%s: out of memory", what);
  UErrorCode st = U_ZERO_ERROR;
  UParseError pe;
  URegularExpression *re = uregex_open(u, ulen, 0, &pe, &st);
  free(u);
  if (U_FAILURE(st)) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: regex not supported: %s", what, u_errorName(st));
  tk_regex *r = malloc(sizeof *r);
  if (!r) {
    uregex_close(re);
    return cp_error_set(CP_ENOMEM, "%s: out of memory", what);
  }
  r->re = re;
  *out = r;
  return 0;
}

void tk_regex_free(tk_regex *re) {
  if (!re) return;
  uregex_close(re->re);
  free(re);
}

int tk_regex_each(const tk_regex *r, const char *s, size_t n, tk_span_fn fn, void *ctx) {
  UErrorCode st = U_ZERO_ERROR;
  /* A compiled ICU regex is not thread-safe; a clone per call keeps encode reentrant. */
  URegularExpression *re = uregex_clone(r->re, &st);
  if (U_FAILURE(st)) return cp_error_set(CP_ENOMEM, "tokenizer: regex clone failed: %s", u_errorName(st));
  UText *ut = utext_openUTF8(NULL, s, (int64_t)n, &st);
  int rc = 0;
  if (U_FAILURE(st)) {
    rc = cp_error_set(CP_ENOMEM, "tokenizer: utext failed: %s", u_errorName(st));
    goto done;
  }
  uregex_setUText(re, ut, &st);
  while (U_SUCCESS(st) && uregex_findNext(re, &st)) {
    int64_t a = uregex_start64(re, 0, &st), b = uregex_end64(re, 0, &st);
    if (U_FAILURE(st) || a < 0 || b < a || (uint64_t)b > n) break;
    if (b == a) continue; /* empty matches split nothing */
    if ((rc = fn(ctx, (size_t)a, (size_t)b))) goto done;
  }
  if (U_FAILURE(st)) rc = cp_error_set(CP_EARG, "tokenizer: regex failed: %s", u_errorName(st));
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
bool tk_is_digit(uint32_t cp) { return u_charType((UChar32)cp) == U_DECIMAL_DIGIT_NUMBER; }

/* ---------------------------------------------------------------- Precompiled charsmap */

int tk_base64_decode(unsigned char **out, size_t *out_len, const char *s, size_t n) {
  *out = NULL, *out_len = 0;
  unsigned char *p = malloc(n / 4 * 3 + 3);
  if (!p) return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0, i = 0;
  for (; i < n && s[i] != '='; i++) {
    char c = s[i];
    int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
            : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (v < 0) {
      free(p);
      return cp_error_set(CP_ETOK_JSON, "precompiled_charsmap: offset %zu: not base64", i);
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      p[o++] = (unsigned char)(acc >> bits);
    }
  }
  *out = p, *out_len = o;
  return 0;
}

int tk_charsmap_init(tk_charsmap *cm, const unsigned char *blob, size_t len, const char *what) {
  memset(cm, 0, sizeof *cm);
  if (len < 4) return cp_error_set(CP_ETOK_JSON, "%s: precompiled_charsmap shorter than 4 bytes", what);
  uint32_t tsize = cp_le32(blob);
  if (tsize == 0 || tsize % 4 || tsize > len - 4)
    return cp_error_set(CP_ETOK_JSON, "%s: precompiled_charsmap trie size %u does not fit %zu bytes", what, tsize, len);
  cm->nunits = tsize / 4;
  cm->units = malloc(tsize);
  cm->nstrings = len - 4 - tsize;
  cm->strings = malloc(cm->nstrings + 1);
  if (!cm->units || !cm->strings) {
    tk_charsmap_free(cm);
    return cp_error_set(CP_ENOMEM, "%s: out of memory", what);
  }
  for (size_t i = 0; i < cm->nunits; i++) cm->units[i] = cp_le32(blob + 4 + 4 * i);
  memcpy(cm->strings, blob + 4 + tsize, cm->nstrings);
  cm->strings[cm->nstrings] = '\0'; /* the last string is terminated even in a hostile blob */
  return 0;
}

void tk_charsmap_free(tk_charsmap *cm) {
  free(cm->units);
  free(cm->strings);
  memset(cm, 0, sizeof *cm);
}

/* darts-clone unit fields */
static inline uint32_t du_offset(uint32_t u) { return (u >> 10) << ((u & (1U << 9)) >> 6); }
static inline uint32_t du_label(uint32_t u) { return u & ((1U << 31) | 0xFF); }
static inline bool du_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t du_value(uint32_t u) { return u & ((1U << 31) - 1); }

/* spm_precompiled's transform(): the replacement of the FIRST (shortest) prefix of s that is a
 * key, or NULL. A key never spans a NUL byte. */
static const char *cm_transform(const tk_charsmap *cm, const unsigned char *s, size_t n) {
  size_t pos = 0;
  if (!cm->nunits) return NULL;
  pos ^= du_offset(cm->units[0]);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == 0) break;
    pos ^= s[i];
    if (pos >= cm->nunits) return NULL;
    uint32_t u = cm->units[pos];
    if (du_label(u) != s[i]) return NULL;
    pos ^= du_offset(u);
    if (pos >= cm->nunits) return NULL;
    if (du_has_leaf(u)) {
      uint32_t v = du_value(cm->units[pos]);
      return v < cm->nstrings ? cm->strings + v : NULL;
    }
  }
  return NULL;
}

int tk_charsmap_validate(const tk_charsmap *cm, bool strings_terminated, const char *what) {
  /* Walks every reachable trie node: each transition and each leaf value must stay inside the
   * blob, so a lookup (ours or SentencePiece's unchecked one) can never read outside it. */
  if (!cm->nunits) return cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap: empty trie", what);
  if (strings_terminated && cm->nstrings && cm->strings[cm->nstrings - 1] != '\0')
    return cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap: last string not NUL-terminated", what);
  size_t cap = 1024, top = 0;
  uint32_t *stack = malloc(cap * sizeof *stack);
  unsigned char *seen = calloc(cm->nunits, 1);
  int rc = 0;
  if (!stack || !seen) {
    rc = cp_error_set(CP_ENOMEM, "%s: out of memory", what);
    goto done;
  }
  stack[top++] = 0;
  seen[0] = 1;
  while (top) {
    uint32_t node = stack[--top];
    size_t base = node ^ du_offset(cm->units[node]);
    if ((base | 0xFF) >= cm->nunits) {
      rc = cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap: trie unit %u points outside the trie", what, node);
      goto done;
    }
    for (unsigned c = 1; c < 256; c++) {
      size_t child = base ^ c;
      uint32_t u = cm->units[child];
      if (du_label(u) != c || seen[child]) continue;
      seen[child] = 1;
      size_t cbase = child ^ du_offset(u);
      if (cbase >= cm->nunits) {
        rc = cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap: trie unit %zu points outside the trie", what, child);
        goto done;
      }
      if (du_has_leaf(u) && du_value(cm->units[cbase]) >= cm->nstrings) {
        rc = cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap: trie unit %zu: value outside the strings", what, child);
        goto done;
      }
      if (top == cap) {
        uint32_t *ns = realloc(stack, (cap *= 2) * sizeof *ns);
        if (!ns) {
          rc = cp_error_set(CP_ENOMEM, "%s: out of memory", what);
          goto done;
        }
        stack = ns;
      }
      stack[top++] = (uint32_t)child;
    }
  }
done:
  free(stack);
  free(seen);
  return rc;
}

/* Protobuf wire format: reads a varint at *pos (bounded by n). */
static bool pb_varint(const unsigned char *p, size_t n, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= n) return false;
    unsigned char b = p[(*pos)++];
    *v |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* Walks one message; for each length-delimited field `want`, calls fn(data, len). */
static int pb_each(const unsigned char *p, size_t n, uint64_t want, int (*fn)(void *, const unsigned char *, size_t),
                   void *ctx, const char *what) {
  size_t pos = 0;
  while (pos < n) {
    uint64_t key, len;
    size_t at = pos;
    if (!pb_varint(p, n, &pos, &key)) return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: truncated field key", what, at);
    switch (key & 7) {
    case 0:
      if (!pb_varint(p, n, &pos, &len)) return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: truncated varint", what, at);
      break;
    case 1:
    case 5:
      len = (key & 7) == 1 ? 8 : 4;
      if (len > n - pos) return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: truncated fixed field", what, at);
      pos += len;
      break;
    case 2:
      if (!pb_varint(p, n, &pos, &len) || len > n - pos)
        return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: field length past the end", what, at);
      if ((key >> 3) == want) {
        int rc = fn(ctx, p + pos, (size_t)len);
        if (rc) return rc;
      }
      pos += len;
      break;
    default:
      return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: unsupported wire type %u", what, at, (unsigned)(key & 7));
    }
  }
  return 0;
}

static int check_charsmap_blob(void *ctx, const unsigned char *p, size_t n) {
  const char *what = ctx;
  if (!n) return 0;
  tk_charsmap cm;
  if (n < 4) return cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap shorter than 4 bytes", what);
  int rc = tk_charsmap_init(&cm, p, n, what);
  if (rc) return cp_error_set(CP_ETOK_MODEL, "%s", cp_error_message());
  rc = tk_charsmap_validate(&cm, true, what);
  tk_charsmap_free(&cm);
  return rc;
}

static int check_normalizer_spec(void *ctx, const unsigned char *p, size_t n) {
  return pb_each(p, n, 2, check_charsmap_blob, ctx, ctx); /* NormalizerSpec.precompiled_charsmap */
}

int tk_spm_precheck(const unsigned char *data, size_t len, const char *what) {
  int rc = pb_each(data, len, 3, check_normalizer_spec, (void *)what, what); /* ModelProto.normalizer_spec */
  if (!rc) rc = pb_each(data, len, 5, check_normalizer_spec, (void *)what, what); /* denormalizer_spec */
  return rc;
}

typedef struct {
  const tk_charsmap *cm;
  tk_buf *out;
  const char *s;
} cm_ctx;

static int cm_grapheme(void *vctx, size_t a, size_t b) {
  cm_ctx *c = vctx;
  const unsigned char *g = (const unsigned char *)c->s + a;
  size_t glen = b - a;
  const char *r;
  /* HF: a whole grapheme under 6 bytes first ("weird, yes, absolutely necessary"), then
   * char by char. */
  if (glen < 6 && (r = cm_transform(c->cm, g, glen))) {
    tk_buf_puts(c->out, r);
    return 0;
  }
  size_t i = 0;
  uint32_t cp;
  while (i < glen) {
    size_t l = tk_utf8_len(g + i, glen - i, &cp);
    if (!l) l = 1; /* input was validated; defensive */
    if ((r = cm_transform(c->cm, g + i, l))) tk_buf_puts(c->out, r);
    else tk_buf_put(c->out, g + i, l);
    i += l;
  }
  return 0;
}

int tk_charsmap_normalize(const tk_charsmap *cm, tk_buf *out, const char *s, size_t n) {
  cm_ctx c = {cm, out, s};
  int rc = tk_graphemes(s, n, cm_grapheme, &c);
  if (!rc && out->oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  return rc;
}
