/* SentencePiece's Precompiled charsmap (a darts-clone trie of normalization rules), as HF
 * tokenizers' Precompiled normalizer applies it: decoding, validation and normalization. */
#include "tokenizers/charsmap.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/unicode.h"

int tk_base64_decode(unsigned char **out, size_t *out_len, const char *s, size_t n) {
  *out = NULL, *out_len = 0;
  unsigned char *p = malloc(n / 4 * 3 + 3);
  CP_CHECK_ALLOC(p, "tokenizer");
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
    return cp_nomem("%s", what);
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
    rc = cp_nomem("%s", what);
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
      if (top == cap && (rc = CP_ARRAY_RESERVE(stack, cap, top + 1, what)) < 0) goto done;
      stack[top++] = (uint32_t)child;
    }
  }
done:
  free(stack);
  free(seen);
  return rc;
}

typedef struct {
  const tk_charsmap *cm;
  cp_strbuf *out;
  const char *s;
  size_t limit; /* out->len past it: CP_ETOK_LIMIT (the replacements come from the file) */
} cm_ctx;

static int cm_grapheme(void *vctx, size_t a, size_t b) {
  cm_ctx *c = vctx;
  const unsigned char *g = (const unsigned char *)c->s + a;
  size_t glen = b - a;
  const char *r;
  /* HF: a whole grapheme under 6 bytes first ("weird, yes, absolutely necessary"), then
   * char by char. */
  if (glen < 6 && (r = cm_transform(c->cm, g, glen))) {
    cp_strbuf_str(c->out, r);
    return c->out->len > c->limit ? CP_ETOK_LIMIT : 0;
  }
  size_t i = 0;
  uint32_t cp;
  while (i < glen) {
    size_t l = cp_utf8_decode(&cp, g + i, glen - i);
    if (!l) l = 1; /* input was validated; defensive */
    if ((r = cm_transform(c->cm, g + i, l))) cp_strbuf_str(c->out, r);
    else cp_strbuf_put(c->out, (const char *)g + i, l);
    i += l;
  }
  return c->out->len > c->limit ? CP_ETOK_LIMIT : 0;
}

int tk_charsmap_normalize(const tk_charsmap *cm, cp_strbuf *out, const char *s, size_t n, size_t limit) {
  cm_ctx c = {cm, out, s, limit};
  int rc = tk_graphemes(s, n, cm_grapheme, &c);
  if (!rc && out->oom) rc = cp_nomem("tokenizer");
  return rc;
}
