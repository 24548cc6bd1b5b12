/* The tokenizer.json normalizer: loading the steps and applying them (tokenizers/hf_normalizer.h). */
#include "tokenizers/hf_normalizer.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/pieces.h"

static int load_any(void *l, const cJSON *n, const char *p, int depth) { return tk_normalizers_load(l, n, p, depth); }

int tk_normalizers_load(tk_normalizers *l, const cJSON *n, const char *p, int depth) {
  l->path = p; /* named in encode-time errors */
  const char *type;
  int rc = tk_node_head(&type, n, "normalizers", "normalizer", p, depth, load_any, l);
  if (rc != TK_NODE_ONE) return rc < 0 ? rc : 0;
  if (l->n == TK_MAX_STEPS) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: normalizer: too many steps", p);
  norm_step *s = &l->v[l->n];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "NFC")) s->type = N_NFC;
  else if (!strcmp(type, "NFD")) s->type = N_NFD;
  else if (!strcmp(type, "NFKC")) s->type = N_NFKC;
  else if (!strcmp(type, "NFKD")) s->type = N_NFKD;
  else if (!strcmp(type, "Lowercase")) s->type = N_LOWER;
  else if (!strcmp(type, "Strip")) {
    s->type = N_STRIP;
    s->left = jbool(n, "strip_left", true), s->right = jbool(n, "strip_right", true);
  } else if (!strcmp(type, "Prepend")) {
    const char *pre = jstr(n, "prepend");
    if (!pre) return cp_error_set(CP_ETOK_JSON, "%s: normalizer Prepend: no prepend string", p);
    s->type = N_PREPEND;
    CP_CHECK_ALLOC(s->a = strdup(pre), p);
  } else if (!strcmp(type, "Replace")) {
    const cJSON *pat = jget(n, "pattern");
    const char *content = jstr(n, "content"), *str = jstr(pat, "String"), *re = jstr(pat, "Regex");
    if (!content || (!str && !re) || (str && !*str))
      return cp_error_set(CP_ETOK_JSON, "%s: normalizer Replace: bad pattern or content", p);
    s->type = N_REPLACE;
    CP_CHECK_ALLOC(s->b = strdup(content), p);
    l->n++; /* owned from here on, freed with the tokenizer */
    if (str) {
      CP_CHECK_ALLOC(s->a = strdup(str), p);
      return 0;
    }
    return tk_regex_compile(&s->re, re, p, "normalizer Replace");
  } else if (!strcmp(type, "Precompiled")) {
    s->type = N_PRECOMPILED;
    const cJSON *b64 = jget(n, "precompiled_charsmap");
    if (b64 && !cJSON_IsNull(b64)) {
      if (!cJSON_IsString(b64)) return cp_error_set(CP_ETOK_JSON, "%s: precompiled_charsmap: not a string", p);
      unsigned char *blob = NULL;
      size_t blen = 0;
      rc = tk_base64_decode(&blob, &blen, b64->valuestring, strlen(b64->valuestring));
      if (!rc) rc = tk_charsmap_init(&s->cm, blob, blen, p);
      free(blob);
      if (rc) return rc;
      s->have_cm = true;
    }
  } else {
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: normalizer type '%.40s' is not supported", p, type);
  }
  l->n++;
  return 0;
}

void tk_normalizers_free(tk_normalizers *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->v[i].a), free(l->v[i].b);
    tk_regex_free(l->v[i].re);
    if (l->v[i].have_cm) tk_charsmap_free(&l->v[i].cm);
  }
  l->n = 0;
}

typedef struct {
  cp_strbuf *out;
  const char *s;
  const char *rep;
  size_t last, limit;
  const char *path;
} re_rep_ctx;

static int re_rep_span(void *vctx, size_t a, size_t b) {
  re_rep_ctx *c = vctx;
  if (c->out->len + (a - c->last) + strlen(c->rep) > c->limit) return tk_grow_error(c->path, "normalizer Replace", c->limit);
  cp_strbuf_put(c->out, c->s + c->last, a - c->last);
  cp_strbuf_str(c->out, c->rep);
  c->last = b;
  return 0;
}

static const char *const step_names[] = {"normalizer NFC",       "normalizer NFD",     "normalizer NFKC",
                                          "normalizer NFKD",      "normalizer Lowercase", "normalizer Precompiled",
                                          "normalizer Replace",   "normalizer Prepend", "normalizer Strip"};

int tk_normalizers_apply(const tk_normalizers *steps, cp_strbuf *out, const char *s, size_t n) {
  cp_strbuf cur = {0}, next = {0};
  int rc = 0;
  cp_strbuf_put(&cur, s, n);
  for (size_t k = 0; k < steps->n && !rc; k++) {
    const norm_step *st = &steps->v[k];
    next.len = 0;
    const char *c = cur.s ? cur.s : "";
    size_t cl = cur.len, limit = tk_grow_limit(cl, n);
    switch (st->type) {
    case N_NFC: rc = tk_normalize(&next, c, cl, TK_NFC); break;
    case N_NFD: rc = tk_normalize(&next, c, cl, TK_NFD); break;
    case N_NFKC: rc = tk_normalize(&next, c, cl, TK_NFKC); break;
    case N_NFKD: rc = tk_normalize(&next, c, cl, TK_NFKD); break;
    case N_LOWER: rc = tk_lowercase(&next, c, cl); break;
    case N_PRECOMPILED:
      if (st->have_cm) rc = tk_charsmap_normalize(&st->cm, &next, c, cl, limit);
      else cp_strbuf_put(&next, c, cl);
      break;
    case N_PREPEND:
      if (cl && cl + strlen(st->a) > limit) rc = CP_ETOK_LIMIT;
      else if (cl) cp_strbuf_str(&next, st->a); /* HF prepends only to non-empty text */
      cp_strbuf_put(&next, c, cl);
      break;
    case N_REPLACE:
      if (st->re) {
        re_rep_ctx rctx = {&next, c, st->b, 0, limit, steps->path};
        rc = tk_regex_each(st->re, c, cl, re_rep_span, &rctx);
        cp_strbuf_put(&next, c + rctx.last, cl - rctx.last);
      } else {
        rc = tk_replace_all(&next, c, cl, st->a, st->b, limit);
      }
      break;
    case N_STRIP: {
      size_t a = 0, b = cl;
      uint32_t cp;
      size_t l;
      if (st->left)
        while (a < b && (l = cp_utf8_decode(&cp, (const unsigned char *)c + a, b - a)) && tk_is_whitespace(cp)) a += l;
      if (st->right)
        while (b > a) {
          size_t j = b - 1;
          while (j > a && ((unsigned char)c[j] & 0xC0) == 0x80) j--;
          if (!cp_utf8_decode(&cp, (const unsigned char *)c + j, b - j) || !tk_is_whitespace(cp)) break;
          b = j;
        }
      cp_strbuf_put(&next, c + a, b - a);
      break;
    }
    }
    /* Every step, file-driven or not (NFKD, Lowercase), is held to the same bound. */
    if ((rc == CP_ETOK_LIMIT && !st->re) || (!rc && next.len > limit)) rc = tk_grow_error(steps->path, step_names[st->type], limit);
    cp_strbuf tmp = cur;
    cur = next, next = tmp;
    if (!rc && cur.oom) rc = cp_nomem("tokenizer");
  }
  if (!rc) {
    cp_strbuf_put(out, cur.s ? cur.s : "", cur.len);
    if (out->oom) rc = cp_nomem("tokenizer");
  }
  cp_strbuf_free(&cur);
  cp_strbuf_free(&next);
  return rc;
}
