/* The added tokens of a tokenizer.json: loading, and splitting text on them before and after
 * normalization (tokenizers/hf_added.h). */
#include "tokenizers/hf_added.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/hf_json.h"
#include "tokenizers/unicode.h"

int tk_added_load(tk_added *at, hf_model *m, const cJSON *list, const char *p) {
  if (!list || cJSON_IsNull(list)) return 0;
  if (!cJSON_IsArray(list)) return cp_error_set(CP_ETOK_JSON, "%s: added_tokens: not an array", p);
  size_t n = (size_t)cJSON_GetArraySize(list), i = 0;
  if (n > 1000000) return cp_error_set(CP_ETOK_JSON, "%s: added_tokens: %zu entries is too many", p, n);
  at->v = calloc(n ? n : 1, sizeof *at->v);
  CP_CHECK_ALLOC(at->v, p);
  const cJSON *it;
  cJSON_ArrayForEach(it, list) {
    added_tok *a = &at->v[i];
    const char *content = jstr(it, "content");
    if (!content || !*content || !jid(jget(it, "id"), &a->id))
      return cp_error_set(CP_ETOK_JSON, "%s: added_tokens[%zu]: missing content or id", p, i);
    CP_CHECK_ALLOC(a->content = strdup(content), p);
    a->len = strlen(content);
    at->first[(unsigned char)content[0]] = true;
    a->special = jbool(it, "special", false);
    a->lstrip = jbool(it, "lstrip", false), a->rstrip = jbool(it, "rstrip", false);
    a->single_word = jbool(it, "single_word", false);
    a->normalized = jbool(it, "normalized", !a->special);
    at->n = ++i;
    /* An added token may repeat a vocabulary entry (same id); a new id extends id_to_tok. */
    if ((size_t)a->id >= m->nids || !m->id_to_tok[a->id]) {
      int rc = tk_model_add_token(m, p, content, a->id, "added_tokens", false);
      if (rc) return rc;
    }
  }
  return 0;
}

void tk_added_free(tk_added *at) {
  for (size_t i = 0; i < at->n; i++) free(at->v[i].content);
  free(at->v);
  memset(at, 0, sizeof *at);
}

int64_t tk_added_find(const tk_added *at, const char *content) {
  for (size_t i = 0; i < at->n; i++)
    if (!strcmp(at->v[i].content, content)) return at->v[i].id;
  return -1;
}

bool tk_added_is_special(const tk_added *at, int64_t id) {
  for (size_t i = 0; i < at->n; i++)
    if (at->v[i].id == id && at->v[i].special) return true;
  return false;
}

/* Splits each not-yet-tokenized piece of `in` on the added tokens with normalized == want_norm
 * (leftmost-longest, as HF's Aho-Corasick), honouring lstrip/rstrip/single_word. */
void tk_added_split(const tk_added *at, const pieces *in, pieces *out, bool want_norm) {
  for (size_t k = 0; k < in->n; k++) {
    const piece *pc = &in->v[k];
    if (pc->id >= 0) {
      pieces_add(out, pc->s, pc->len, pc->at0, pc->id);
      continue;
    }
    const char *s = pc->s;
    size_t n = pc->len, start = 0, i = 0;
    while (i < n) {
      const added_tok *best = NULL;
      if (!at->first[(unsigned char)s[i]]) {
        i++;
        continue;
      }
      for (size_t t = 0; t < at->n; t++) {
        const added_tok *a = &at->v[t];
        if (a->normalized != want_norm || a->len > n - i || (best && a->len <= best->len)) continue;
        if (memcmp(s + i, a->content, a->len)) continue;
        if (a->single_word) {
          uint32_t cp;
          size_t j = i;
          while (j > 0 && ((unsigned char)s[j - 1] & 0xC0) == 0x80) j--;
          bool left_ok = i == 0 || !(j < i && cp_utf8_decode(&cp, (const unsigned char *)s + j, n - j) && tk_is_alnum(cp));
          bool right_ok = i + a->len == n ||
                          !(cp_utf8_decode(&cp, (const unsigned char *)s + i + a->len, n - i - a->len) && tk_is_alnum(cp));
          if (!left_ok || !right_ok) continue;
        }
        best = a;
      }
      if (!best) {
        i++;
        continue;
      }
      size_t a0 = i, b0 = i + best->len;
      uint32_t cp;
      if (best->lstrip)
        while (a0 > start) { /* whitespace is ASCII or multi-byte: step back one char */
          size_t j = a0 - 1;
          while (j > start && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
          if (!cp_utf8_decode(&cp, (const unsigned char *)s + j, n - j) || !tk_is_whitespace(cp)) break;
          a0 = j;
        }
      if (best->rstrip)
        while (b0 < n) {
          size_t l = cp_utf8_decode(&cp, (const unsigned char *)s + b0, n - b0);
          if (!l || !tk_is_whitespace(cp)) break;
          b0 += l;
        }
      if (a0 > start) pieces_add(out, s + start, a0 - start, pc->at0 && start == 0, -1);
      pieces_add(out, s + a0, b0 - a0, false, best->id);
      start = i = b0;
    }
    if (start < n) pieces_add(out, s + start, n - start, pc->at0 && start == 0, -1);
  }
}
