/* Piece and id lists of the tokenizer.json pipeline: see tokenizers/pieces.h. */
#include "tokenizers/pieces.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

void pieces_add(pieces *p, const char *s, size_t len, bool at0, int32_t id) {
  if (p->oom) return;
  char *c = malloc(len + 1);
  if (!c || CP_ARRAY_RESERVE(p->v, p->cap, p->n + 1, "tokenizer pieces")) {
    free(c);
    p->oom = true;
    return;
  }
  if (len) memcpy(c, s, len);
  c[len] = '\0';
  p->v[p->n++] = (piece){c, len, at0, id};
}

void pieces_free(pieces *p) {
  for (size_t i = 0; i < p->n; i++) free(p->v[i].s);
  free(p->v);
  memset(p, 0, sizeof *p);
}

void ids_add(idvec *iv, int64_t id) {
  if (iv->oom) return;
  if (CP_ARRAY_RESERVE(iv->v, iv->cap, iv->n + 1, "tokenizer ids")) {
    iv->oom = true;
    return;
  }
  iv->v[iv->n++] = id;
}

size_t tk_grow_limit(size_t in, size_t base) {
  size_t cap = TK_MAX_TEXT_BYTES, a = (cap - TK_GROW_SLACK) / TK_GROW_FACTOR;
  size_t by_in = in > a ? cap : in * TK_GROW_FACTOR + TK_GROW_SLACK;
  size_t by_base = base > a ? cap : base * TK_GROW_FACTOR + TK_GROW_SLACK;
  return by_in < by_base ? by_in : by_base;
}

int tk_grow_error(const char *path, const char *stage, size_t limit) {
  return cp_error_set(CP_ETOK_LIMIT, "%s: %s: text would grow past the limit of %zu bytes (%dx its input + %d)", path,
                      stage, limit, TK_GROW_FACTOR, TK_GROW_SLACK);
}

int tk_replace_all(cp_strbuf *out, const char *s, size_t n, const char *pat, const char *rep, size_t limit) {
  size_t pl = strlen(pat), rl = strlen(rep), i = 0, hits = 0;
  /* The result's size first: nothing is built past the limit. */
  for (size_t j = 0; j + pl <= n;) {
    if (!memcmp(s + j, pat, pl)) hits++, j += pl;
    else j++;
  }
  if (rl > pl && hits > (limit > n ? limit - n : 0) / (rl - pl)) return CP_ETOK_LIMIT;
  if (rl <= pl && n > limit) return CP_ETOK_LIMIT;
  while (i < n) {
    if (pl <= n - i && !memcmp(s + i, pat, pl)) {
      cp_strbuf_str(out, rep);
      i += pl;
    } else {
      cp_strbuf_putc(out, s[i]);
      i++;
    }
  }
  return out->oom ? cp_nomem("tokenizer") : 0;
}
