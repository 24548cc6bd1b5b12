/* The tokenizer.json decoder chain: loading the steps and running them over the tokens' text
 * (tokenizers/hf_decoder.h). */
#include "tokenizers/hf_decoder.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/hf_bytelevel.h"

static int load_any(void *l, const cJSON *n, const char *p, int depth) { return tk_decoders_load(l, n, p, depth); }

int tk_decoders_load(tk_decoders *l, const cJSON *n, const char *p, int depth) {
  l->path = p; /* named in encode-time errors */
  const char *type;
  int rc = tk_node_head(&type, n, "decoders", "decoder", p, depth, load_any, l);
  if (rc > 0) l->have_decoder = true;
  if (rc != TK_NODE_ONE) return rc < 0 ? rc : 0;
  if (l->n == TK_MAX_STEPS) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: decoder: too many steps", p);
  dec_step *s = &l->v[l->n];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "ByteLevel")) s->type = D_BYTELEVEL;
  else if (!strcmp(type, "ByteFallback")) s->type = D_BYTEFALLBACK;
  else if (!strcmp(type, "Fuse")) s->type = D_FUSE;
  else if (!strcmp(type, "Metaspace")) {
    const char *rep = jstr(n, "replacement");
    if (!rep || !*rep || parse_prepend(n, &s->prepend))
      return cp_error_set(CP_ETOK_JSON, "%s: decoder Metaspace: bad replacement or prepend_scheme", p);
    s->type = D_METASPACE;
    CP_CHECK_ALLOC(s->a = strdup(rep), p);
  } else if (!strcmp(type, "Replace")) {
    const char *str = jstr(jget(n, "pattern"), "String"), *content = jstr(n, "content");
    if (!str || !*str || !content)
      return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: decoder Replace: only String patterns are supported", p);
    s->type = D_REPLACE;
    s->a = strdup(str), s->b = strdup(content);
    l->n++;
    return s->a && s->b ? 0 : cp_nomem("%s", p);
  } else if (!strcmp(type, "Strip")) {
    const char *content = jstr(n, "content");
    const cJSON *a = jget(n, "start"), *b = jget(n, "stop");
    int32_t start = 0, stop = 0;
    if (!content || !*content || !jid(a, &start) || !jid(b, &stop))
      return cp_error_set(CP_ETOK_JSON, "%s: decoder Strip: bad content/start/stop", p);
    s->type = D_STRIP;
    s->start = (size_t)start, s->stop = (size_t)stop;
    CP_CHECK_ALLOC(s->a = strdup(content), p);
  } else {
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: decoder type '%.40s' is not supported", p, type);
  }
  l->n++;
  return 0;
}

void tk_decoders_free(tk_decoders *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i].a), free(l->v[i].b);
  l->n = 0;
}

/* <0xXX> -> 0..255, else -1 */
static int byte_token(const char *t) {
  if (strlen(t) != 6 || memcmp(t, "<0x", 3) || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; i++) {
    char c = t[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* Returns 0, or CP_ETOK_LIMIT (no message) when a Replace would pass `limit` bytes in all. */
static int dec_apply(const dec_step *st, const pieces *in, pieces *out, size_t limit) {
  switch (st->type) {
  case D_BYTELEVEL: {
    cp_strbuf raw = {0};
    for (size_t k = 0; k < in->n; k++) {
      const char *t = in->v[k].s;
      size_t tl = in->v[k].len, i = 0, start = raw.len;
      bool ok = true;
      while (i < tl) {
        uint32_t cp;
        size_t l = cp_utf8_decode(&cp, (const unsigned char *)t + i, tl - i);
        int byte = l ? tk_bytelevel_byte(cp) : -1;
        if (byte < 0) {
          ok = false;
          break;
        }
        cp_strbuf_putc(&raw, (char)byte);
        i += l;
      }
      if (!ok) { /* a char outside the byte alphabet: HF keeps the token's own bytes */
        raw.len = start;
        cp_strbuf_put(&raw, t, tl);
      }
    }
    cp_strbuf lossy = {0};
    cp_utf8_put_lossy(&lossy, raw.s ? raw.s : "", raw.len);
    pieces_add(out, lossy.s ? lossy.s : "", lossy.len, false, -1);
    if (raw.oom || lossy.oom) out->oom = true;
    cp_strbuf_free(&raw), cp_strbuf_free(&lossy);
    break;
  }
  case D_METASPACE: {
    size_t rl = strlen(st->a);
    for (size_t k = 0; k < in->n; k++) {
      cp_strbuf t = {0};
      const char *s = in->v[k].s;
      for (size_t i = 0; i < in->v[k].len;) {
        if (rl <= in->v[k].len - i && !memcmp(s + i, st->a, rl)) {
          if (!(k == 0 && st->prepend != PREPEND_NEVER)) cp_strbuf_put(&t, " ", 1);
          i += rl;
        } else {
          cp_strbuf_put(&t, s + i, 1);
          i++;
        }
      }
      pieces_add(out, t.s ? t.s : "", t.len, false, -1);
      if (t.oom) out->oom = true;
      cp_strbuf_free(&t);
    }
    break;
  }
  case D_REPLACE:
    for (size_t k = 0, used = 0; k < in->n; k++) {
      cp_strbuf t = {0};
      if (tk_replace_all(&t, in->v[k].s, in->v[k].len, st->a, st->b, limit - used)) {
        cp_strbuf_free(&t);
        return CP_ETOK_LIMIT;
      }
      used += t.len;
      pieces_add(out, t.s ? t.s : "", t.len, false, -1);
      if (t.oom) out->oom = true;
      cp_strbuf_free(&t);
    }
    break;
  case D_BYTEFALLBACK: {
    cp_strbuf run = {0};
    for (size_t k = 0; k <= in->n; k++) {
      int b = k < in->n ? byte_token(in->v[k].s) : -1;
      if (b >= 0) {
        char c = (char)b;
        cp_strbuf_put(&run, &c, 1);
        continue;
      }
      if (run.len) {
        if (cp_utf8_check(run.s, run.len, CP_UTF8_STRICT) == run.len) {
          pieces_add(out, run.s, run.len, false, -1);
        } else {
          for (size_t i = 0; i < run.len; i++) pieces_add(out, "\xEF\xBF\xBD", 3, false, -1);
        }
        run.len = 0;
      }
      if (k < in->n) pieces_add(out, in->v[k].s, in->v[k].len, false, -1);
    }
    if (run.oom) out->oom = true;
    cp_strbuf_free(&run);
    break;
  }
  case D_FUSE: {
    cp_strbuf t = {0};
    for (size_t k = 0; k < in->n; k++) cp_strbuf_put(&t, in->v[k].s, in->v[k].len);
    pieces_add(out, t.s ? t.s : "", t.len, false, -1);
    if (t.oom) out->oom = true;
    cp_strbuf_free(&t);
    break;
  }
  case D_STRIP: {
    size_t cl = strlen(st->a);
    for (size_t k = 0; k < in->n; k++) {
      const char *s = in->v[k].s;
      size_t a = 0, b = in->v[k].len;
      for (size_t i = 0; i < st->start && b - a >= cl && !memcmp(s + a, st->a, cl); i++) a += cl;
      for (size_t i = 0; i < st->stop && b - a >= cl && !memcmp(s + b - cl, st->a, cl); i++) b -= cl;
      pieces_add(out, s + a, b - a, false, -1);
    }
    break;
  }
  }
  return 0;
}

static size_t pieces_bytes(const pieces *p) {
  size_t n = 0;
  for (size_t k = 0; k < p->n; k++) n += p->v[k].len;
  return n;
}

int tk_decoders_apply(const tk_decoders *l, pieces *toks) {
  pieces next = {0};
  size_t base = pieces_bytes(toks);
  for (size_t s = 0; s < l->n && !toks->oom; s++) {
    size_t limit = tk_grow_limit(pieces_bytes(toks), base);
    int rc = dec_apply(&l->v[s], toks, &next, limit);
    if (rc || pieces_bytes(&next) > limit) {
      pieces_free(&next);
      return tk_grow_error(l->path, "decoder", limit);
    }
    pieces_free(toks);
    *toks = next;
    memset(&next, 0, sizeof next);
  }
  return toks->oom ? cp_nomem("tokenizer") : 0;
}
