/* The tokenizer.json pre-tokenizer: loading the steps and splitting pieces with them
 * (tokenizers/hf_pretokenizer.h). */
#include "tokenizers/hf_pretokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/hf_bytelevel.h"

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char WHITESPACE_PATTERN[] = "\\w+|[^\\w\\s]+";

static int parse_behavior(const char *b, int *out) {
  if (!b) return -1;
  if (!strcmp(b, "Removed")) *out = SPLIT_REMOVED;
  else if (!strcmp(b, "Isolated")) *out = SPLIT_ISOLATED;
  else if (!strcmp(b, "MergedWithPrevious")) *out = SPLIT_PREV;
  else if (!strcmp(b, "MergedWithNext")) *out = SPLIT_NEXT;
  else return -1;
  return 0;
}

static int load_any(void *l, const cJSON *n, const char *p, int depth) { return tk_pretokenizers_load(l, n, p, depth); }

int tk_pretokenizers_load(tk_pretokenizers *l, const cJSON *n, const char *p, int depth) {
  const char *type;
  int rc = tk_node_head(&type, n, "pretokenizers", "pre_tokenizer", p, depth, load_any, l);
  if (rc != TK_NODE_ONE) return rc < 0 ? rc : 0;
  if (l->n == TK_MAX_STEPS) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre_tokenizer: too many steps", p);
  pre_step *s = &l->v[l->n];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "ByteLevel")) {
    s->type = P_BYTELEVEL;
    s->add_prefix_space = jbool(n, "add_prefix_space", true);
    s->use_regex = jbool(n, "use_regex", true);
    l->n++;
    return s->use_regex ? tk_regex_compile(&s->re, GPT2_PATTERN, p, "pre_tokenizer ByteLevel") : 0;
  }
  if (!strcmp(type, "Metaspace")) {
    const char *rep = jstr(n, "replacement");
    uint32_t cp;
    if (!rep || !*rep || cp_utf8_decode(&cp, (const unsigned char *)rep, strlen(rep)) != strlen(rep) ||
        parse_prepend(n, &s->prepend))
      return cp_error_set(CP_ETOK_JSON, "%s: pre_tokenizer Metaspace: bad replacement or prepend_scheme", p);
    s->type = P_METASPACE;
    s->split = jbool(n, "split", true);
    CP_CHECK_ALLOC(s->str = strdup(rep), p);
    l->n++;
    return 0;
  }
  if (!strcmp(type, "WhitespaceSplit")) {
    s->type = P_WSSPLIT;
    l->n++;
    return 0;
  }
  if (!strcmp(type, "Whitespace")) {
    s->type = P_REGEX, s->behavior = SPLIT_REMOVED, s->invert = true;
    l->n++;
    return tk_regex_compile(&s->re, WHITESPACE_PATTERN, p, "pre_tokenizer Whitespace");
  }
  if (!strcmp(type, "Digits")) {
    s->type = P_DIGITS;
    s->individual = jbool(n, "individual_digits", false);
    l->n++;
    return 0;
  }
  if (!strcmp(type, "Split")) {
    const cJSON *pat = jget(n, "pattern");
    const char *str = jstr(pat, "String"), *re = jstr(pat, "Regex");
    if ((!str && !re) || (str && !*str) || parse_behavior(jstr(n, "behavior"), &s->behavior))
      return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre_tokenizer Split: pattern or behavior not supported", p);
    s->invert = jbool(n, "invert", false);
    l->n++;
    if (str) {
      s->type = P_STRING;
      return (s->str = strdup(str)) ? 0 : cp_nomem("%s", p);
    }
    s->type = P_REGEX;
    return tk_regex_compile(&s->re, re, p, "pre_tokenizer Split");
  }
  return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre_tokenizer type '%.40s' is not supported", p, type);
}

void tk_pretokenizers_free(tk_pretokenizers *l) {
  for (size_t i = 0; i < l->n; i++) {
    tk_regex_free(l->v[i].re);
    free(l->v[i].str);
  }
  l->n = 0;
}

/* ---- applying */

typedef struct {
  size_t a, b;
  bool match;
} span;

typedef struct {
  span *v;
  size_t n, cap;
  bool oom;
} spans;

static void spans_add(spans *sp, size_t a, size_t b, bool match) {
  if (a >= b || sp->oom) return;
  if (CP_ARRAY_RESERVE(sp->v, sp->cap, sp->n + 1, "tokenizer spans")) {
    sp->oom = true;
    return;
  }
  sp->v[sp->n++] = (span){a, b, match};
}

typedef struct {
  spans *sp;
  size_t last;
} match_ctx;

static int match_span(void *vctx, size_t a, size_t b) {
  match_ctx *c = vctx;
  spans_add(c->sp, c->last, a, false);
  spans_add(c->sp, a, b, true);
  c->last = b;
  return 0;
}

/* HF's NormalizedString::split: spans (covering the text) -> pieces by behavior. */
static void emit_split(const piece *pc, const spans *sp, int behavior, bool invert, pieces *out) {
  size_t m = 0;
  span *res = malloc((sp->n ? sp->n : 1) * sizeof *res);
  if (!res) {
    out->oom = true;
    return;
  }
  bool prev = false;
  if (behavior == SPLIT_NEXT) {
    for (size_t k = sp->n; k-- > 0;) {
      span s = sp->v[k];
      bool is_m = s.match != invert;
      if (is_m && !prev && m) res[m - 1].a = s.a;
      else res[m++] = s;
      prev = is_m;
    }
    for (size_t i = 0; i < m / 2; i++) {
      span t = res[i];
      res[i] = res[m - 1 - i], res[m - 1 - i] = t;
    }
  } else {
    for (size_t k = 0; k < sp->n; k++) {
      span s = sp->v[k];
      bool is_m = s.match != invert;
      if (behavior == SPLIT_REMOVED && is_m) continue;
      if (behavior == SPLIT_PREV && is_m && !prev && m) res[m - 1].b = s.b;
      else res[m++] = s;
      prev = is_m;
    }
  }
  for (size_t i = 0; i < m; i++) pieces_add(out, pc->s + res[i].a, res[i].b - res[i].a, pc->at0 && res[i].a == 0, -1);
  free(res);
}

int tk_pretokenizer_apply(const pre_step *st, const piece *pc, pieces *out) {
  spans sp = {0};
  int rc = 0;
  const char *s = pc->s;
  size_t n = pc->len;
  switch (st->type) {
  case P_BYTELEVEL: {
    cp_strbuf pre = {0};
    if (st->add_prefix_space && (n == 0 || s[0] != ' ')) cp_strbuf_put(&pre, " ", 1);
    cp_strbuf_put(&pre, s, n);
    if (pre.oom) {
      cp_strbuf_free(&pre);
      return cp_nomem("tokenizer");
    }
    pieces words = {0};
    piece whole = {pre.s ? pre.s : (char *)"", pre.len, pc->at0, -1};
    if (st->use_regex) {
      match_ctx mc = {&sp, 0};
      rc = tk_regex_each(st->re, whole.s, whole.len, match_span, &mc);
      spans_add(&sp, mc.last, whole.len, false);
      if (!rc) emit_split(&whole, &sp, SPLIT_ISOLATED, false, &words);
    } else {
      pieces_add(&words, whole.s, whole.len, whole.at0, -1);
    }
    for (size_t k = 0; k < words.n && !rc; k++) { /* bytes -> GPT-2 printable code points */
      cp_strbuf mapped = {0};
      for (size_t i = 0; i < words.v[k].len; i++) cp_utf8_put(&mapped, tk_bytelevel_cp((unsigned char)words.v[k].s[i]));
      if (mapped.oom) rc = cp_nomem("tokenizer");
      else pieces_add(out, mapped.s, mapped.len, words.v[k].at0, -1);
      cp_strbuf_free(&mapped);
    }
    if (!rc && words.oom) rc = cp_nomem("tokenizer");
    pieces_free(&words);
    cp_strbuf_free(&pre);
    break;
  }
  case P_METASPACE: {
    cp_strbuf t = {0};
    size_t rl = strlen(st->str);
    bool prepend = st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && pc->at0);
    if (prepend && !(n >= rl && !memcmp(s, st->str, rl))) cp_strbuf_str(&t, st->str);
    tk_replace_all(&t, s, n, " ", st->str, SIZE_MAX); /* one code point per space: checked after the stage */
    if (t.oom) {
      cp_strbuf_free(&t);
      return cp_nomem("tokenizer");
    }
    piece whole = {t.s ? t.s : (char *)"", t.len, pc->at0, -1};
    if (st->split) {
      size_t last = 0;
      for (size_t i = 0; i + rl <= t.len;) {
        if (!memcmp(t.s + i, st->str, rl)) {
          spans_add(&sp, last, i, false);
          spans_add(&sp, i, i + rl, true);
          i += rl, last = i;
        } else {
          i++;
        }
      }
      spans_add(&sp, last, t.len, false);
      emit_split(&whole, &sp, SPLIT_NEXT, false, out);
    } else {
      pieces_add(out, whole.s, whole.len, whole.at0, -1);
    }
    cp_strbuf_free(&t);
    break;
  }
  case P_WSSPLIT:
  case P_DIGITS: {
    size_t i = 0, last = 0;
    uint32_t cp;
    while (i < n) {
      size_t l = cp_utf8_decode(&cp, (const unsigned char *)s + i, n - i);
      if (!l) l = 1, cp = 0xFFFD;
      bool hit = st->type == P_WSSPLIT ? tk_is_whitespace(cp) : tk_is_numeric(cp);
      if (hit) {
        spans_add(&sp, last, i, false);
        if (st->type == P_DIGITS && !st->individual && sp.n && sp.v[sp.n - 1].match && sp.v[sp.n - 1].b == i)
          sp.v[sp.n - 1].b = i + l; /* Contiguous digits stay one piece */
        else
          spans_add(&sp, i, i + l, true);
        last = i + l;
      }
      i += l;
    }
    spans_add(&sp, last, n, false);
    emit_split(pc, &sp, st->type == P_WSSPLIT ? SPLIT_REMOVED : SPLIT_ISOLATED, false, out);
    break;
  }
  case P_STRING: {
    size_t rl = strlen(st->str), last = 0;
    for (size_t i = 0; i + rl <= n;) {
      if (!memcmp(s + i, st->str, rl)) {
        spans_add(&sp, last, i, false);
        spans_add(&sp, i, i + rl, true);
        i += rl, last = i;
      } else {
        i++;
      }
    }
    spans_add(&sp, last, n, false);
    emit_split(pc, &sp, st->behavior, st->invert, out);
    break;
  }
  case P_REGEX: {
    match_ctx mc = {&sp, 0};
    rc = tk_regex_each(st->re, s, n, match_span, &mc);
    spans_add(&sp, mc.last, n, false);
    if (!rc) emit_split(pc, &sp, st->behavior, st->invert, out);
    break;
  }
  }
  if (!rc && (sp.oom || out->oom)) rc = cp_nomem("tokenizer");
  free(sp.v);
  return rc;
}
