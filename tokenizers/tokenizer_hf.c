/* Hugging Face tokenizer.json: loading and the encode/decode pipeline of the `tokenizers` crate
 * (added tokens -> normalizer -> pre-tokenizer -> model -> post-processor; decoder chain).
 * Behaviour follows tokenizers' Rust sources; unsupported components are refused at load. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/error.h"
#include "base/json_strict.h"
#include "tokenizers/tokenizer_priv.h"

#define TK_MAX_DEPTH 64
#define TK_MAX_ID (1 << 24)    /* ids beyond 16M are refused: no real vocabulary is near */
#define TK_MAX_STEPS 64        /* normalizer / pre-tokenizer / decoder steps after flattening */
#define TK_MAX_PIECE_BYTES 256 /* longest Unigram piece considered */

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char WHITESPACE_PATTERN[] = "\\w+|[^\\w\\s]+";

/* ------------------------------------------------------------------ types */

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_PRECOMPILED, N_REPLACE, N_PREPEND, N_STRIP };
typedef struct {
  int type;
  char *a, *b; /* Replace: pattern string, content; Prepend: a */
  tk_regex *re;
  bool left, right;
  bool have_cm;
  tk_charsmap cm;
} norm_step;

enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_PREV, SPLIT_NEXT };
enum { P_BYTELEVEL, P_METASPACE, P_WSSPLIT, P_REGEX, P_STRING, P_DIGITS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
typedef struct {
  int type;
  bool add_prefix_space, use_regex, split, invert, individual;
  int behavior, prepend;
  tk_regex *re;
  char *str; /* P_STRING pattern or Metaspace replacement */
} pre_step;

enum { D_BYTELEVEL, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP };
typedef struct {
  int type;
  char *a, *b;
  int prepend;
  size_t start, stop;
} dec_step;

typedef struct {
  char *content;
  size_t len;
  int32_t id;
  bool special, lstrip, rstrip, normalized, single_word;
} added_tok;

typedef struct {
  uint64_t *keys; /* (left << 32 | right) + 1; 0 = empty */
  uint32_t *rank;
  int32_t *merged;
  size_t cap;
} merge_map;

struct tk_hf {
  char *path;
  bool unigram;
  /* vocabulary */
  tk_map vocab;
  char **id_to_tok; /* [nids], NULL where no token */
  size_t nids;
  /* BPE */
  merge_map merges;
  bool byte_fallback, fuse_unk, ignore_merges;
  int32_t unk_id; /* -1 if none */
  char *cont_prefix, *eow_suffix;
  /* Unigram */
  double *scores; /* [nscores] */
  size_t nscores;
  double min_score;
  size_t max_piece;
  /* added tokens */
  added_tok *added;
  size_t nadded;
  bool added_first[256]; /* first bytes of added tokens: most text positions skip the scan */
  /* pipeline */
  norm_step norm[TK_MAX_STEPS];
  size_t nnorm;
  pre_step pre[TK_MAX_STEPS];
  size_t npre;
  dec_step dec[TK_MAX_STEPS];
  size_t ndec;
  bool have_decoder;
  /* post-processor: ids before and after the sequence when adding special tokens */
  int32_t *post_pre, *post_post;
  size_t npost_pre, npost_post;
  int64_t bos, eos;
};

/* GPT-2 bytes_to_unicode: byte -> code point, and back. */
static uint32_t byte_cp[256];
static int16_t cp_byte[512];
static void init_bytelevel_once(void) {
  int n = 0;
  for (int i = 0; i < 512; i++) cp_byte[i] = -1;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    cp_byte[byte_cp[b]] = (int16_t)b;
  }
}

static void init_bytelevel(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_bytelevel_once);
}

/* ------------------------------------------------------------------ merge map */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33;
  return x;
}

static int merge_put(merge_map *m, int32_t l, int32_t r, uint32_t rank, int32_t merged, size_t expect) {
  if (!m->cap) {
    size_t cap = 1024;
    while (cap < expect * 2 + 2) cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->rank = calloc(cap, sizeof *m->rank);
    m->merged = calloc(cap, sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) return -1;
    m->cap = cap;
  }
  uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
  size_t j = mix64(key) & (m->cap - 1);
  while (m->keys[j] && m->keys[j] != key) j = (j + 1) & (m->cap - 1);
  if (m->keys[j]) return 0; /* duplicate merge: the first (lowest rank) wins, as in HF */
  m->keys[j] = key, m->rank[j] = rank, m->merged[j] = merged;
  return 0;
}

static bool merge_get(const merge_map *m, int32_t l, int32_t r, uint32_t *rank, int32_t *merged) {
  if (!m->cap) return false;
  uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
  size_t j = mix64(key) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->keys[j] == key) {
      *rank = m->rank[j], *merged = m->merged[j];
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return false;
}

/* ------------------------------------------------------------------ string lists */

typedef struct {
  char *s;
  size_t len;
  bool at0;   /* begins the original text (Metaspace prepend_scheme "first") */
  int32_t id; /* >= 0: an added token, already an id */
} piece;

typedef struct {
  piece *v;
  size_t n, cap;
  bool oom;
} pieces;

static void pieces_add(pieces *p, const char *s, size_t len, bool at0, int32_t id) {
  if (p->oom) return;
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 16;
    piece *v = realloc(p->v, cap * sizeof *v);
    if (!v) {
      p->oom = true;
      return;
    }
    p->v = v, p->cap = cap;
  }
  char *c = malloc(len + 1);
  if (!c) {
    p->oom = true;
    return;
  }
  if (len) memcpy(c, s, len);
  c[len] = '\0';
  p->v[p->n++] = (piece){c, len, at0, id};
}

static void pieces_free(pieces *p) {
  for (size_t i = 0; i < p->n; i++) free(p->v[i].s);
  free(p->v);
  memset(p, 0, sizeof *p);
}

/* ------------------------------------------------------------------ JSON helpers */

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = jget(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool jbool(const cJSON *o, const char *k, bool dflt) {
  const cJSON *v = jget(o, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}
static bool jid(const cJSON *v, int32_t *out) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble >= TK_MAX_ID || v->valuedouble != floor(v->valuedouble))
    return false;
  *out = (int32_t)v->valuedouble;
  return true;
}
static char *xstrdup(const char *s) {
  size_t n = strlen(s);
  char *p = malloc(n + 1);
  if (p) memcpy(p, s, n + 1);
  return p;
}

/* ------------------------------------------------------------------ loading */

/* Records id -> token; model tokens (in_model) also go into the token -> id map the models use. */
static int add_vocab(tk_hf *hf, const char *tok, int32_t id, const char *where, bool in_model) {
  if ((size_t)id >= hf->nids) {
    size_t n = hf->nids ? hf->nids : 1024;
    while (n <= (size_t)id) n *= 2;
    char **v = realloc(hf->id_to_tok, n * sizeof *v);
    if (!v) return cp_error_set(CP_ENOMEM, "%s: out of memory", hf->path);
    memset(v + hf->nids, 0, (n - hf->nids) * sizeof *v);
    hf->id_to_tok = v, hf->nids = n;
  }
  if (hf->id_to_tok[id]) return cp_error_set(CP_ETOK_JSON, "%s: %s: id %d used twice", hf->path, where, (int)id);
  if (!(hf->id_to_tok[id] = xstrdup(tok))) return cp_error_set(CP_ENOMEM, "%s: out of memory", hf->path);
  if (!in_model) return 0;
  int r = tk_map_put(&hf->vocab, tok, strlen(tok), id);
  if (r < 0) return cp_error_set(CP_ENOMEM, "%s: out of memory", hf->path);
  if (r > 0) return cp_error_set(CP_ETOK_JSON, "%s: %s: token '%.40s' appears twice", hf->path, where, tok);
  return 0;
}

static int load_bpe(tk_hf *hf, const cJSON *model) {
  const char *p = hf->path;
  const cJSON *vocab = jget(model, "vocab"), *merges = jget(model, "merges"), *it;
  if (!cJSON_IsObject(vocab)) return cp_error_set(CP_ETOK_JSON, "%s: model.vocab: not an object", p);
  if (!cJSON_IsArray(merges)) return cp_error_set(CP_ETOK_JSON, "%s: model.merges: not an array", p);
  if (cJSON_IsNumber(jget(model, "dropout")) && jget(model, "dropout")->valuedouble > 0)
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: model.dropout: BPE dropout is not deterministic", p);
  int rc;
  cJSON_ArrayForEach(it, vocab) {
    int32_t id;
    if (!jid(it, &id)) return cp_error_set(CP_ETOK_JSON, "%s: model.vocab['%.40s']: not an id", p, it->string);
    if ((rc = add_vocab(hf, it->string, id, "model.vocab", true))) return rc;
  }
  hf->byte_fallback = jbool(model, "byte_fallback", false);
  hf->fuse_unk = jbool(model, "fuse_unk", false);
  hf->ignore_merges = jbool(model, "ignore_merges", false);
  const char *unk = jstr(model, "unk_token"), *cp = jstr(model, "continuing_subword_prefix"),
             *eow = jstr(model, "end_of_word_suffix");
  hf->unk_id = -1;
  if (unk && !tk_map_get(&hf->vocab, unk, strlen(unk), &hf->unk_id))
    return cp_error_set(CP_ETOK_JSON, "%s: model.unk_token '%.40s' is not in the vocabulary", p, unk);
  if ((cp && *cp && !(hf->cont_prefix = xstrdup(cp))) || (eow && *eow && !(hf->eow_suffix = xstrdup(eow))))
    return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  size_t nm = (size_t)cJSON_GetArraySize(merges), rank = 0;
  tk_buf joined = {0};
  cJSON_ArrayForEach(it, merges) {
    const char *a, *b;
    size_t alen, blen;
    if (cJSON_IsString(it)) { /* "left right" */
      const char *sp = strchr(it->valuestring, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        tk_buf_free(&joined);
        return cp_error_set(CP_ETOK_JSON, "%s: model.merges[%zu]: not 'left right'", p, rank);
      }
      a = it->valuestring, alen = (size_t)(sp - a), b = sp + 1, blen = strlen(b);
    } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
      a = cJSON_GetArrayItem(it, 0)->valuestring, b = cJSON_GetArrayItem(it, 1)->valuestring;
      alen = strlen(a), blen = strlen(b);
    } else {
      tk_buf_free(&joined);
      return cp_error_set(CP_ETOK_JSON, "%s: model.merges[%zu]: not a pair of strings", p, rank);
    }
    int32_t l, r, m;
    joined.len = 0;
    tk_buf_put(&joined, a, alen);
    tk_buf_put(&joined, b, blen);
    if (joined.oom) {
      tk_buf_free(&joined);
      return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
    }
    /* HF accepts continuing_subword_prefix on the right part: the merged token drops it. */
    size_t cpl = hf->cont_prefix ? strlen(hf->cont_prefix) : 0;
    const char *mj = joined.p;
    size_t mjl = joined.len;
    if (cpl && blen >= cpl && !memcmp(b, hf->cont_prefix, cpl)) {
      memmove(joined.p + alen, joined.p + alen + cpl, blen - cpl);
      mjl = alen + blen - cpl;
    }
    if (!tk_map_get(&hf->vocab, a, alen, &l) || !tk_map_get(&hf->vocab, b, blen, &r) ||
        !tk_map_get(&hf->vocab, mj, mjl, &m)) {
      tk_buf_free(&joined);
      return cp_error_set(CP_ETOK_JSON, "%s: model.merges[%zu]: token not in the vocabulary", p, rank);
    }
    if (merge_put(&hf->merges, l, r, (uint32_t)rank, m, nm)) {
      tk_buf_free(&joined);
      return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
    }
    rank++;
  }
  tk_buf_free(&joined);
  return 0;
}

static int load_unigram(tk_hf *hf, const cJSON *model) {
  const char *p = hf->path;
  const cJSON *vocab = jget(model, "vocab"), *it;
  if (!cJSON_IsArray(vocab) || cJSON_GetArraySize(vocab) < 1)
    return cp_error_set(CP_ETOK_JSON, "%s: model.vocab: not a non-empty array", p);
  size_t n = (size_t)cJSON_GetArraySize(vocab);
  if (n >= TK_MAX_ID) return cp_error_set(CP_ETOK_JSON, "%s: model.vocab: %zu pieces is too many", p, n);
  hf->scores = calloc(n, sizeof *hf->scores);
  if (!hf->scores) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  hf->nscores = n;
  int32_t id = 0;
  hf->min_score = INFINITY;
  int rc;
  cJSON_ArrayForEach(it, vocab) {
    const cJSON *s = cJSON_GetArrayItem(it, 0), *sc = cJSON_GetArrayItem(it, 1);
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsString(s) || !cJSON_IsNumber(sc) ||
        !isfinite(sc->valuedouble))
      return cp_error_set(CP_ETOK_JSON, "%s: model.vocab[%d]: not [piece, score]", p, (int)id);
    if ((rc = add_vocab(hf, s->valuestring, id, "model.vocab", true))) return rc;
    hf->scores[id] = sc->valuedouble;
    if (sc->valuedouble < hf->min_score) hf->min_score = sc->valuedouble;
    size_t l = strlen(s->valuestring);
    if (l > hf->max_piece) hf->max_piece = l;
    id++;
  }
  if (hf->max_piece > TK_MAX_PIECE_BYTES) hf->max_piece = TK_MAX_PIECE_BYTES;
  hf->unk_id = -1;
  const cJSON *u = jget(model, "unk_id");
  if (u && !cJSON_IsNull(u) && (!jid(u, &hf->unk_id) || (size_t)hf->unk_id >= n))
    return cp_error_set(CP_ETOK_JSON, "%s: model.unk_id: not an id of the vocabulary", p);
  hf->byte_fallback = jbool(model, "byte_fallback", false);
  hf->fuse_unk = true; /* Unigram always fuses unknowns */
  return 0;
}

static int load_normalizer(tk_hf *hf, const cJSON *n, int depth) {
  const char *p = hf->path;
  if (!n || cJSON_IsNull(n)) return 0;
  const char *type = jstr(n, "type");
  if (!type) return cp_error_set(CP_ETOK_JSON, "%s: normalizer: no type", p);
  if (!strcmp(type, "Sequence")) {
    const cJSON *it, *list = jget(n, "normalizers");
    if (!cJSON_IsArray(list) || depth > 4) return cp_error_set(CP_ETOK_JSON, "%s: normalizer Sequence: bad list", p);
    cJSON_ArrayForEach(it, list) {
      int rc = load_normalizer(hf, it, depth + 1);
      if (rc) return rc;
    }
    return 0;
  }
  if (hf->nnorm == TK_MAX_STEPS) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: normalizer: too many steps", p);
  norm_step *s = &hf->norm[hf->nnorm];
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
    if (!(s->a = xstrdup(pre))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  } else if (!strcmp(type, "Replace")) {
    const cJSON *pat = jget(n, "pattern");
    const char *content = jstr(n, "content"), *str = jstr(pat, "String"), *re = jstr(pat, "Regex");
    if (!content || (!str && !re) || (str && !*str))
      return cp_error_set(CP_ETOK_JSON, "%s: normalizer Replace: bad pattern or content", p);
    s->type = N_REPLACE;
    if (!(s->b = xstrdup(content))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
    hf->nnorm++; /* owned from here on, freed with the tokenizer */
    if (str) {
      if (!(s->a = xstrdup(str))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
      return 0;
    }
    return tk_regex_compile(&s->re, re, "normalizer Replace");
  } else if (!strcmp(type, "Precompiled")) {
    s->type = N_PRECOMPILED;
    const cJSON *b64 = jget(n, "precompiled_charsmap");
    if (b64 && !cJSON_IsNull(b64)) {
      if (!cJSON_IsString(b64)) return cp_error_set(CP_ETOK_JSON, "%s: precompiled_charsmap: not a string", p);
      unsigned char *blob = NULL;
      size_t blen = 0;
      int rc = tk_base64_decode(&blob, &blen, b64->valuestring, strlen(b64->valuestring));
      if (!rc) rc = tk_charsmap_init(&s->cm, blob, blen, p);
      free(blob);
      if (rc) return rc;
      s->have_cm = true;
    }
  } else {
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: normalizer type '%.40s' is not supported", p, type);
  }
  hf->nnorm++;
  return 0;
}

static int parse_behavior(const char *b, int *out) {
  if (!b) return -1;
  if (!strcmp(b, "Removed")) *out = SPLIT_REMOVED;
  else if (!strcmp(b, "Isolated")) *out = SPLIT_ISOLATED;
  else if (!strcmp(b, "MergedWithPrevious")) *out = SPLIT_PREV;
  else if (!strcmp(b, "MergedWithNext")) *out = SPLIT_NEXT;
  else return -1;
  return 0;
}

static int parse_prepend(const cJSON *o, int *out) {
  const char *ps = jstr(o, "prepend_scheme");
  if (!ps) *out = jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
  else if (!strcmp(ps, "always")) *out = PREPEND_ALWAYS;
  else if (!strcmp(ps, "first")) *out = PREPEND_FIRST;
  else if (!strcmp(ps, "never")) *out = PREPEND_NEVER;
  else return -1;
  return 0;
}

static int load_pre(tk_hf *hf, const cJSON *n, int depth) {
  const char *p = hf->path;
  if (!n || cJSON_IsNull(n)) return 0;
  const char *type = jstr(n, "type");
  if (!type) return cp_error_set(CP_ETOK_JSON, "%s: pre_tokenizer: no type", p);
  if (!strcmp(type, "Sequence")) {
    const cJSON *it, *list = jget(n, "pretokenizers");
    if (!cJSON_IsArray(list) || depth > 4) return cp_error_set(CP_ETOK_JSON, "%s: pre_tokenizer Sequence: bad list", p);
    cJSON_ArrayForEach(it, list) {
      int rc = load_pre(hf, it, depth + 1);
      if (rc) return rc;
    }
    return 0;
  }
  if (hf->npre == TK_MAX_STEPS) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre_tokenizer: too many steps", p);
  pre_step *s = &hf->pre[hf->npre];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "ByteLevel")) {
    s->type = P_BYTELEVEL;
    s->add_prefix_space = jbool(n, "add_prefix_space", true);
    s->use_regex = jbool(n, "use_regex", true);
    hf->npre++;
    return s->use_regex ? tk_regex_compile(&s->re, GPT2_PATTERN, "pre_tokenizer ByteLevel") : 0;
  }
  if (!strcmp(type, "Metaspace")) {
    const char *rep = jstr(n, "replacement");
    uint32_t cp;
    if (!rep || !*rep || tk_utf8_len((const unsigned char *)rep, strlen(rep), &cp) != strlen(rep) ||
        parse_prepend(n, &s->prepend))
      return cp_error_set(CP_ETOK_JSON, "%s: pre_tokenizer Metaspace: bad replacement or prepend_scheme", p);
    s->type = P_METASPACE;
    s->split = jbool(n, "split", true);
    if (!(s->str = xstrdup(rep))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
    hf->npre++;
    return 0;
  }
  if (!strcmp(type, "WhitespaceSplit")) {
    s->type = P_WSSPLIT;
    hf->npre++;
    return 0;
  }
  if (!strcmp(type, "Whitespace")) {
    s->type = P_REGEX, s->behavior = SPLIT_REMOVED, s->invert = true;
    hf->npre++;
    return tk_regex_compile(&s->re, WHITESPACE_PATTERN, "pre_tokenizer Whitespace");
  }
  if (!strcmp(type, "Digits")) {
    s->type = P_DIGITS;
    s->individual = jbool(n, "individual_digits", false);
    hf->npre++;
    return 0;
  }
  if (!strcmp(type, "Split")) {
    const cJSON *pat = jget(n, "pattern");
    const char *str = jstr(pat, "String"), *re = jstr(pat, "Regex");
    if ((!str && !re) || (str && !*str) || parse_behavior(jstr(n, "behavior"), &s->behavior))
      return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre_tokenizer Split: pattern or behavior not supported", p);
    s->invert = jbool(n, "invert", false);
    hf->npre++;
    if (str) {
      s->type = P_STRING;
      return (s->str = xstrdup(str)) ? 0 : cp_error_set(CP_ENOMEM, "%s: out of memory", p);
    }
    s->type = P_REGEX;
    return tk_regex_compile(&s->re, re, "pre_tokenizer Split");
  }
  return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre_tokenizer type '%.40s' is not supported", p, type);
}

static int load_decoder(tk_hf *hf, const cJSON *n, int depth) {
  const char *p = hf->path;
  if (!n || cJSON_IsNull(n)) return 0;
  const char *type = jstr(n, "type");
  if (!type) return cp_error_set(CP_ETOK_JSON, "%s: decoder: no type", p);
  hf->have_decoder = true;
  if (!strcmp(type, "Sequence")) {
    const cJSON *it, *list = jget(n, "decoders");
    if (!cJSON_IsArray(list) || depth > 4) return cp_error_set(CP_ETOK_JSON, "%s: decoder Sequence: bad list", p);
    cJSON_ArrayForEach(it, list) {
      int rc = load_decoder(hf, it, depth + 1);
      if (rc) return rc;
    }
    return 0;
  }
  if (hf->ndec == TK_MAX_STEPS) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: decoder: too many steps", p);
  dec_step *s = &hf->dec[hf->ndec];
  memset(s, 0, sizeof *s);
  if (!strcmp(type, "ByteLevel")) s->type = D_BYTELEVEL;
  else if (!strcmp(type, "ByteFallback")) s->type = D_BYTEFALLBACK;
  else if (!strcmp(type, "Fuse")) s->type = D_FUSE;
  else if (!strcmp(type, "Metaspace")) {
    const char *rep = jstr(n, "replacement");
    if (!rep || !*rep || parse_prepend(n, &s->prepend))
      return cp_error_set(CP_ETOK_JSON, "%s: decoder Metaspace: bad replacement or prepend_scheme", p);
    s->type = D_METASPACE;
    if (!(s->a = xstrdup(rep))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  } else if (!strcmp(type, "Replace")) {
    const char *str = jstr(jget(n, "pattern"), "String"), *content = jstr(n, "content");
    if (!str || !*str || !content)
      return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: decoder Replace: only String patterns are supported", p);
    s->type = D_REPLACE;
    s->a = xstrdup(str), s->b = xstrdup(content);
    hf->ndec++;
    return s->a && s->b ? 0 : cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  } else if (!strcmp(type, "Strip")) {
    const char *content = jstr(n, "content");
    const cJSON *a = jget(n, "start"), *b = jget(n, "stop");
    int32_t start = 0, stop = 0;
    if (!content || !*content || !jid(a, &start) || !jid(b, &stop))
      return cp_error_set(CP_ETOK_JSON, "%s: decoder Strip: bad content/start/stop", p);
    s->type = D_STRIP;
    s->start = (size_t)start, s->stop = (size_t)stop;
    if (!(s->a = xstrdup(content))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  } else {
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: decoder type '%.40s' is not supported", p, type);
  }
  hf->ndec++;
  return 0;
}

static int post_append(tk_hf *hf, bool before, int32_t id) {
  int32_t **v = before ? &hf->post_pre : &hf->post_post;
  size_t *n = before ? &hf->npost_pre : &hf->npost_post;
  if (*n >= 64) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: post_processor: too many special tokens", hf->path);
  int32_t *nv = realloc(*v, (*n + 1) * sizeof **v);
  if (!nv) return cp_error_set(CP_ENOMEM, "%s: out of memory", hf->path);
  nv[(*n)++] = id;
  *v = nv;
  return 0;
}

static int load_post(tk_hf *hf, const cJSON *n, int depth) {
  const char *p = hf->path;
  if (!n || cJSON_IsNull(n)) return 0;
  const char *type = jstr(n, "type");
  if (!type) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: no type", p);
  int rc;
  if (!strcmp(type, "Sequence")) {
    const cJSON *it, *list = jget(n, "processors");
    if (!cJSON_IsArray(list) || depth > 4) return cp_error_set(CP_ETOK_JSON, "%s: post_processor Sequence: bad list", p);
    cJSON_ArrayForEach(it, list) if ((rc = load_post(hf, it, depth + 1))) return rc;
    return 0;
  }
  if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
  if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
    const cJSON *cls = jget(n, "cls"), *sep = jget(n, "sep");
    int32_t c, s;
    if (!jid(cJSON_GetArrayItem(cls, 1), &c) || !jid(cJSON_GetArrayItem(sep, 1), &s))
      return cp_error_set(CP_ETOK_JSON, "%s: post_processor %s: bad cls/sep", p, type);
    if ((rc = post_append(hf, true, c)) || (rc = post_append(hf, false, s))) return rc;
    return 0;
  }
  if (!strcmp(type, "TemplateProcessing")) {
    const cJSON *single = jget(n, "single"), *specials = jget(n, "special_tokens"), *it;
    if (!cJSON_IsArray(single)) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: template 'single' missing", p);
    bool seen_seq = false;
    cJSON_ArrayForEach(it, single) {
      if (jget(it, "Sequence")) {
        if (seen_seq) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: two sequences in 'single'", p);
        seen_seq = true;
        continue;
      }
      const char *name = jstr(jget(it, "SpecialToken"), "id");
      const cJSON *ids = name ? jget(jget(specials, name), "ids") : NULL, *idv;
      if (!cJSON_IsArray(ids))
        return cp_error_set(CP_ETOK_JSON, "%s: post_processor: special token '%.40s' undefined", p, name ? name : "?");
      cJSON_ArrayForEach(idv, ids) {
        int32_t id;
        if (!jid(idv, &id)) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: '%.40s': bad id", p, name);
        if ((rc = post_append(hf, !seen_seq, id))) return rc;
      }
    }
    if (!seen_seq) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: no $A in 'single'", p);
    return 0;
  }
  return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: post_processor type '%.40s' is not supported", p, type);
}

static int load_added(tk_hf *hf, const cJSON *list) {
  const char *p = hf->path;
  if (!list || cJSON_IsNull(list)) return 0;
  if (!cJSON_IsArray(list)) return cp_error_set(CP_ETOK_JSON, "%s: added_tokens: not an array", p);
  size_t n = (size_t)cJSON_GetArraySize(list), i = 0;
  if (n > 1000000) return cp_error_set(CP_ETOK_JSON, "%s: added_tokens: %zu entries is too many", p, n);
  hf->added = calloc(n ? n : 1, sizeof *hf->added);
  if (!hf->added) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
  const cJSON *it;
  cJSON_ArrayForEach(it, list) {
    added_tok *a = &hf->added[i];
    const char *content = jstr(it, "content");
    if (!content || !*content || !jid(jget(it, "id"), &a->id))
      return cp_error_set(CP_ETOK_JSON, "%s: added_tokens[%zu]: missing content or id", p, i);
    if (!(a->content = xstrdup(content))) return cp_error_set(CP_ENOMEM, "%s: out of memory", p);
    a->len = strlen(content);
    hf->added_first[(unsigned char)content[0]] = true;
    a->special = jbool(it, "special", false);
    a->lstrip = jbool(it, "lstrip", false), a->rstrip = jbool(it, "rstrip", false);
    a->single_word = jbool(it, "single_word", false);
    a->normalized = jbool(it, "normalized", !a->special);
    hf->nadded = ++i;
    /* An added token may repeat a vocabulary entry (same id); a new id extends id_to_tok. */
    if ((size_t)a->id >= hf->nids || !hf->id_to_tok[a->id]) {
      int rc = add_vocab(hf, content, a->id, "added_tokens", false);
      if (rc) return rc;
    }
  }
  return 0;
}

void tk_hf_free(tk_hf *hf) {
  if (!hf) return;
  tk_map_free(&hf->vocab);
  for (size_t i = 0; i < hf->nids; i++) free(hf->id_to_tok[i]);
  free(hf->id_to_tok);
  free(hf->merges.keys), free(hf->merges.rank), free(hf->merges.merged);
  free(hf->cont_prefix), free(hf->eow_suffix), free(hf->scores);
  for (size_t i = 0; i < hf->nadded; i++) free(hf->added[i].content);
  free(hf->added);
  for (size_t i = 0; i < hf->nnorm; i++) {
    free(hf->norm[i].a), free(hf->norm[i].b);
    tk_regex_free(hf->norm[i].re);
    if (hf->norm[i].have_cm) tk_charsmap_free(&hf->norm[i].cm);
  }
  for (size_t i = 0; i < hf->npre; i++) {
    tk_regex_free(hf->pre[i].re);
    free(hf->pre[i].str);
  }
  for (size_t i = 0; i < hf->ndec; i++) free(hf->dec[i].a), free(hf->dec[i].b);
  free(hf->post_pre), free(hf->post_post);
  free(hf->path);
  free(hf);
}

static int64_t find_named(const tk_hf *hf, const char *const *names) {
  for (; *names; names++) {
    int64_t id = tk_hf_token_id(hf, *names);
    if (id >= 0) return id;
  }
  return -1;
}

int tk_hf_load(tk_hf **out, const char *text, size_t len, const char *path) {
  *out = NULL;
  init_bytelevel();
  cJSON *root = NULL;
  tk_hf *hf = calloc(1, sizeof *hf);
  int rc;
  if (!hf || !(hf->path = xstrdup(path))) {
    rc = cp_error_set(CP_ENOMEM, "%s: out of memory", path);
    goto done;
  }
  if ((rc = cp_json_parse_strict(&root, text, len, path, TK_MAX_DEPTH, CP_ETOK_JSON, CP_ETOK_JSON, CP_ETOK_JSON,
                                 CP_ETOK_JSON)))
    goto done;
  if (!cJSON_IsObject(root)) {
    rc = cp_error_set(CP_ETOK_JSON, "%s: offset 0: top level is not an object", path);
    goto done;
  }
  const cJSON *model = jget(root, "model");
  const char *mtype = jstr(model, "type");
  if (!cJSON_IsObject(model)) {
    rc = cp_error_set(CP_ETOK_JSON, "%s: key 'model': missing or not an object", path);
    goto done;
  }
  if (!mtype) { /* old serialisations have no model.type: BPE has merges, Unigram has unk_id */
    mtype = jget(model, "merges") ? "BPE" : jget(model, "unk_id") ? "Unigram" : "?";
  }
  if (!strcmp(mtype, "BPE")) {
    rc = load_bpe(hf, model);
  } else if (!strcmp(mtype, "Unigram")) {
    hf->unigram = true;
    rc = load_unigram(hf, model);
  } else {
    rc = cp_error_set(CP_ETOK_UNSUPPORTED, "%s: model type '%.40s' is not supported (BPE, Unigram)", path, mtype);
  }
  if (rc || (rc = load_added(hf, jget(root, "added_tokens"))) || (rc = load_normalizer(hf, jget(root, "normalizer"), 0)) ||
      (rc = load_pre(hf, jget(root, "pre_tokenizer"), 0)) || (rc = load_post(hf, jget(root, "post_processor"), 0)) ||
      (rc = load_decoder(hf, jget(root, "decoder"), 0)))
    goto done;
  for (size_t i = 0; i < hf->npost_pre + hf->npost_post; i++) {
    int32_t id = i < hf->npost_pre ? hf->post_pre[i] : hf->post_post[i - hf->npost_pre];
    if ((size_t)id >= hf->nids || !hf->id_to_tok[id]) {
      rc = cp_error_set(CP_ETOK_JSON, "%s: post_processor: id %d is not a token", path, (int)id);
      goto done;
    }
  }
  /* No tokenizer.json field names BOS/EOS: the post-processor's tokens, else common names. */
  static const char *const bos_names[] = {"<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|endoftext|>", NULL};
  static const char *const eos_names[] = {"</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|endoftext|>", NULL};
  hf->bos = hf->npost_pre ? hf->post_pre[0] : find_named(hf, bos_names);
  hf->eos = hf->npost_post ? hf->post_post[hf->npost_post - 1] : find_named(hf, eos_names);
  *out = hf;
  hf = NULL;
done:
  cJSON_Delete(root);
  tk_hf_free(hf);
  return rc;
}

/* ------------------------------------------------------------------ added tokens */

/* Splits each not-yet-tokenized piece of `in` on the added tokens with normalized == want_norm
 * (leftmost-longest, as HF's Aho-Corasick), honouring lstrip/rstrip/single_word. */
static void split_added(const tk_hf *hf, const pieces *in, pieces *out, bool want_norm) {
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
      if (!hf->added_first[(unsigned char)s[i]]) {
        i++;
        continue;
      }
      for (size_t t = 0; t < hf->nadded; t++) {
        const added_tok *a = &hf->added[t];
        if (a->normalized != want_norm || a->len > n - i || (best && a->len <= best->len)) continue;
        if (memcmp(s + i, a->content, a->len)) continue;
        if (a->single_word) {
          uint32_t cp;
          size_t j = i;
          while (j > 0 && ((unsigned char)s[j - 1] & 0xC0) == 0x80) j--;
          bool left_ok = i == 0 || !(j < i && tk_utf8_len((const unsigned char *)s + j, n - j, &cp) && tk_is_alnum(cp));
          bool right_ok = i + a->len == n ||
                          !(tk_utf8_len((const unsigned char *)s + i + a->len, n - i - a->len, &cp) && tk_is_alnum(cp));
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
          if (!tk_utf8_len((const unsigned char *)s + j, n - j, &cp) || !tk_is_whitespace(cp)) break;
          a0 = j;
        }
      if (best->rstrip)
        while (b0 < n) {
          size_t l = tk_utf8_len((const unsigned char *)s + b0, n - b0, &cp);
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

/* ------------------------------------------------------------------ normalizer */

static int replace_all(tk_buf *out, const char *s, size_t n, const char *pat, const char *rep) {
  size_t pl = strlen(pat), i = 0;
  while (i < n) {
    if (pl <= n - i && !memcmp(s + i, pat, pl)) {
      tk_buf_puts(out, rep);
      i += pl;
    } else {
      tk_buf_put(out, s + i, 1);
      i++;
    }
  }
  return out->oom ? cp_error_set(CP_ENOMEM, "tokenizer: out of memory") : 0;
}

typedef struct {
  tk_buf *out;
  const char *s;
  const char *rep;
  size_t last;
} re_rep_ctx;

static int re_rep_span(void *vctx, size_t a, size_t b) {
  re_rep_ctx *c = vctx;
  tk_buf_put(c->out, c->s + c->last, a - c->last);
  tk_buf_puts(c->out, c->rep);
  c->last = b;
  return 0;
}

static int normalize(const tk_hf *hf, tk_buf *out, const char *s, size_t n) {
  tk_buf cur = {0}, next = {0};
  int rc = 0;
  tk_buf_put(&cur, s, n);
  for (size_t k = 0; k < hf->nnorm && !rc; k++) {
    const norm_step *st = &hf->norm[k];
    next.len = 0;
    const char *c = cur.p ? cur.p : "";
    size_t cl = cur.len;
    switch (st->type) {
    case N_NFC: rc = tk_normalize(&next, c, cl, TK_NFC); break;
    case N_NFD: rc = tk_normalize(&next, c, cl, TK_NFD); break;
    case N_NFKC: rc = tk_normalize(&next, c, cl, TK_NFKC); break;
    case N_NFKD: rc = tk_normalize(&next, c, cl, TK_NFKD); break;
    case N_LOWER: rc = tk_lowercase(&next, c, cl); break;
    case N_PRECOMPILED:
      if (st->have_cm) rc = tk_charsmap_normalize(&st->cm, &next, c, cl);
      else tk_buf_put(&next, c, cl);
      break;
    case N_PREPEND:
      if (cl) tk_buf_puts(&next, st->a); /* HF prepends only to non-empty text */
      tk_buf_put(&next, c, cl);
      break;
    case N_REPLACE:
      if (st->re) {
        re_rep_ctx rctx = {&next, c, st->b, 0};
        rc = tk_regex_each(st->re, c, cl, re_rep_span, &rctx);
        tk_buf_put(&next, c + rctx.last, cl - rctx.last);
      } else {
        rc = replace_all(&next, c, cl, st->a, st->b);
      }
      break;
    case N_STRIP: {
      size_t a = 0, b = cl;
      uint32_t cp;
      size_t l;
      if (st->left)
        while (a < b && (l = tk_utf8_len((const unsigned char *)c + a, b - a, &cp)) && tk_is_whitespace(cp)) a += l;
      if (st->right)
        while (b > a) {
          size_t j = b - 1;
          while (j > a && ((unsigned char)c[j] & 0xC0) == 0x80) j--;
          if (!tk_utf8_len((const unsigned char *)c + j, b - j, &cp) || !tk_is_whitespace(cp)) break;
          b = j;
        }
      tk_buf_put(&next, c + a, b - a);
      break;
    }
    }
    tk_buf tmp = cur;
    cur = next, next = tmp;
    if (!rc && cur.oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  }
  if (!rc) {
    tk_buf_put(out, cur.p ? cur.p : "", cur.len);
    if (out->oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  }
  tk_buf_free(&cur);
  tk_buf_free(&next);
  return rc;
}

/* ------------------------------------------------------------------ pre-tokenizer */

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
  if (sp->n == sp->cap) {
    size_t cap = sp->cap ? sp->cap * 2 : 16;
    span *v = realloc(sp->v, cap * sizeof *v);
    if (!v) {
      sp->oom = true;
      return;
    }
    sp->v = v, sp->cap = cap;
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

static int pre_step_apply(const pre_step *st, const piece *pc, pieces *out) {
  spans sp = {0};
  int rc = 0;
  const char *s = pc->s;
  size_t n = pc->len;
  switch (st->type) {
  case P_BYTELEVEL: {
    tk_buf pre = {0};
    if (st->add_prefix_space && (n == 0 || s[0] != ' ')) tk_buf_put(&pre, " ", 1);
    tk_buf_put(&pre, s, n);
    if (pre.oom) {
      tk_buf_free(&pre);
      return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    }
    pieces words = {0};
    piece whole = {pre.p ? pre.p : (char *)"", pre.len, pc->at0, -1};
    if (st->use_regex) {
      match_ctx mc = {&sp, 0};
      rc = tk_regex_each(st->re, whole.s, whole.len, match_span, &mc);
      spans_add(&sp, mc.last, whole.len, false);
      if (!rc) emit_split(&whole, &sp, SPLIT_ISOLATED, false, &words);
    } else {
      pieces_add(&words, whole.s, whole.len, whole.at0, -1);
    }
    for (size_t k = 0; k < words.n && !rc; k++) { /* bytes -> GPT-2 printable code points */
      tk_buf mapped = {0};
      for (size_t i = 0; i < words.v[k].len; i++) tk_utf8_put(&mapped, byte_cp[(unsigned char)words.v[k].s[i]]);
      if (mapped.oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
      else pieces_add(out, mapped.p, mapped.len, words.v[k].at0, -1);
      tk_buf_free(&mapped);
    }
    if (!rc && words.oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    pieces_free(&words);
    tk_buf_free(&pre);
    break;
  }
  case P_METASPACE: {
    tk_buf t = {0};
    size_t rl = strlen(st->str);
    bool prepend = st->prepend == PREPEND_ALWAYS || (st->prepend == PREPEND_FIRST && pc->at0);
    if (prepend && !(n >= rl && !memcmp(s, st->str, rl))) tk_buf_puts(&t, st->str);
    replace_all(&t, s, n, " ", st->str);
    if (t.oom) {
      tk_buf_free(&t);
      return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    }
    piece whole = {t.p ? t.p : (char *)"", t.len, pc->at0, -1};
    if (st->split) {
      size_t last = 0;
      for (size_t i = 0; i + rl <= t.len;) {
        if (!memcmp(t.p + i, st->str, rl)) {
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
    tk_buf_free(&t);
    break;
  }
  case P_WSSPLIT:
  case P_DIGITS: {
    size_t i = 0, last = 0;
    uint32_t cp;
    while (i < n) {
      size_t l = tk_utf8_len((const unsigned char *)s + i, n - i, &cp);
      if (!l) l = 1, cp = 0xFFFD;
      bool hit = st->type == P_WSSPLIT ? tk_is_whitespace(cp) : tk_is_digit(cp);
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
  if (!rc && (sp.oom || out->oom)) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  free(sp.v);
  return rc;
}

/* ------------------------------------------------------------------ models */

typedef struct {
  int64_t *v;
  size_t n, cap;
  bool oom;
} idvec;

static void ids_add(idvec *iv, int64_t id) {
  if (iv->oom) return;
  if (iv->n == iv->cap) {
    size_t cap = iv->cap ? iv->cap * 2 : 64;
    int64_t *v = realloc(iv->v, cap * sizeof *v);
    if (!v) {
      iv->oom = true;
      return;
    }
    iv->v = v, iv->cap = cap;
  }
  iv->v[iv->n++] = id;
}

/* <0xXX> ids of every byte, or false if one is missing. */
static bool byte_ids(const tk_hf *hf, const char *s, size_t n, int32_t *out) {
  for (size_t i = 0; i < n; i++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", (unsigned char)s[i]);
    if (!tk_map_get(&hf->vocab, name, 6, &out[i])) return false;
  }
  return true;
}

typedef struct {
  uint32_t rank;
  uint32_t pos;
  int32_t merged;
} qent;

static bool qless(qent a, qent b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void qpush(qent *h, size_t *n, qent e) {
  size_t i = (*n)++;
  h[i] = e;
  while (i && qless(h[i], h[(i - 1) / 2])) {
    qent t = h[i];
    h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static qent qpop(qent *h, size_t *n) {
  qent top = h[0];
  h[0] = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && qless(h[l], h[m])) m = l;
    if (r < *n && qless(h[r], h[m])) m = r;
    if (m == i) break;
    qent t = h[i];
    h[i] = h[m], h[m] = t;
    i = m;
  }
  return top;
}

/* HF BPE::merge_word + word_to_tokens on one pre-token. */
static int bpe_word(const tk_hf *hf, const char *w, size_t n, idvec *out) {
  int32_t id;
  if (hf->ignore_merges && tk_map_get(&hf->vocab, w, n, &id)) {
    ids_add(out, id);
    return 0;
  }
  /* symbols: ids with a doubly linked list; at most one per byte */
  int32_t *sym = malloc((n + 1) * sizeof *sym);
  int32_t *prv = malloc((n + 1) * sizeof *prv), *nxt = malloc((n + 1) * sizeof *nxt);
  qent *heap = malloc((2 * n + 2) * sizeof *heap);
  tk_buf tmp = {0};
  int rc = 0;
  size_t ns = 0, nh = 0;
  if (!sym || !prv || !nxt || !heap) {
    rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    goto done;
  }
  bool last_unk = false;
  size_t cpl = hf->cont_prefix ? strlen(hf->cont_prefix) : 0, eol = hf->eow_suffix ? strlen(hf->eow_suffix) : 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t l = tk_utf8_len((const unsigned char *)w + i, n - i, &cp);
    if (!l) l = 1;
    tmp.len = 0;
    if (cpl && i > 0) tk_buf_put(&tmp, hf->cont_prefix, cpl);
    tk_buf_put(&tmp, w + i, l);
    if (eol && i + l == n) tk_buf_put(&tmp, hf->eow_suffix, eol);
    if (tmp.oom) {
      rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
      goto done;
    }
    int32_t bids[4];
    if (tk_map_get(&hf->vocab, tmp.p, tmp.len, &id)) {
      sym[ns++] = id, last_unk = false;
    } else if (hf->byte_fallback && byte_ids(hf, w + i, l, bids)) {
      for (size_t k = 0; k < l; k++) sym[ns++] = bids[k];
      last_unk = false;
    } else if (hf->unk_id >= 0) {
      if (!(hf->fuse_unk && last_unk)) sym[ns++] = hf->unk_id;
      last_unk = true;
    } /* no unk token: HF drops the character */
    i += l;
  }
  for (size_t i = 0; i < ns; i++) prv[i] = (int32_t)i - 1, nxt[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
  uint32_t rank;
  int32_t merged;
  for (size_t i = 0; i + 1 < ns; i++)
    if (merge_get(&hf->merges, sym[i], sym[i + 1], &rank, &merged)) qpush(heap, &nh, (qent){rank, (uint32_t)i, merged});
  while (nh) {
    qent top = qpop(heap, &nh);
    size_t p = top.pos;
    if (sym[p] < 0 || nxt[p] < 0) continue;
    int32_t r = nxt[p];
    if (!merge_get(&hf->merges, sym[p], sym[r], &rank, &merged) || merged != top.merged) continue;
    sym[p] = merged;
    sym[r] = -1; /* dead */
    nxt[p] = nxt[r];
    if (nxt[r] >= 0) prv[nxt[r]] = (int32_t)p;
    if (nh + 2 > 2 * n + 2) continue; /* cannot happen: every push follows a merge */
    if (prv[p] >= 0 && merge_get(&hf->merges, sym[prv[p]], sym[p], &rank, &merged))
      qpush(heap, &nh, (qent){rank, (uint32_t)prv[p], merged});
    if (nxt[p] >= 0 && merge_get(&hf->merges, sym[p], sym[nxt[p]], &rank, &merged))
      qpush(heap, &nh, (qent){rank, (uint32_t)p, merged});
  }
  for (int32_t i = ns ? 0 : -1; i >= 0; i = nxt[i]) ids_add(out, sym[i]);
done:
  free(sym), free(prv), free(nxt), free(heap);
  tk_buf_free(&tmp);
  return rc;
}

/* HF Unigram::encode_optimized: Viterbi over pieces, ties keep the earlier candidate. */
static int unigram_word(const tk_hf *hf, const char *w, size_t n, idvec *out) {
  typedef struct {
    double score;
    int64_t start; /* -1: unreached */
    int32_t id;
  } node;
  node *best = malloc((n + 1) * sizeof *best);
  size_t *stack = malloc((n + 1) * sizeof *stack);
  if (!best || !stack) {
    free(best), free(stack);
    return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  }
  for (size_t i = 0; i <= n; i++) best[i] = (node){0, -1, -1};
  best[0].start = 0;
  double unk_score = hf->min_score - 10.0;
  for (size_t s = 0; s < n;) {
    uint32_t cp;
    size_t mblen = tk_utf8_len((const unsigned char *)w + s, n - s, &cp);
    if (!mblen) mblen = 1;
    double base = best[s].score;
    bool single = false;
    size_t maxl = n - s < hf->max_piece ? n - s : hf->max_piece;
    for (size_t l = 1; l <= maxl; l++) {
      int32_t id;
      if (!tk_map_get(&hf->vocab, w + s, l, &id) || id < 0 || (size_t)id >= hf->nscores) continue;
      double cand = base + hf->scores[id];
      if (best[s + l].start < 0 || cand > best[s + l].score) best[s + l] = (node){cand, (int64_t)s, id};
      if (l == mblen) single = true;
    }
    if (!single) {
      double cand = base + unk_score;
      if (best[s + mblen].start < 0 || cand > best[s + mblen].score) best[s + mblen] = (node){cand, (int64_t)s, hf->unk_id};
    }
    s += mblen;
  }
  /* backtrack, fusing consecutive unknowns */
  size_t ns = 0;
  for (size_t e = n; e > 0;) {
    stack[ns++] = e;
    e = (size_t)best[e].start;
  }
  bool prev_unk = false;
  for (size_t k = ns; k-- > 0;) {
    size_t e = stack[k], s = (size_t)best[e].start;
    int32_t id = best[e].id;
    if (id == hf->unk_id || id < 0) {
      if (hf->byte_fallback) {
        int32_t b;
        bool ok = true;
        for (size_t i = s; i < e && ok; i++) {
          char name[8];
          snprintf(name, sizeof name, "<0x%02X>", (unsigned char)w[i]);
          ok = tk_map_get(&hf->vocab, name, 6, &b);
        }
        if (ok) {
          for (size_t i = s; i < e; i++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)w[i]);
            tk_map_get(&hf->vocab, name, 6, &b);
            ids_add(out, b);
          }
          prev_unk = false;
          continue;
        }
      }
      if (!prev_unk && hf->unk_id >= 0) ids_add(out, hf->unk_id);
      prev_unk = true;
      continue;
    }
    ids_add(out, id);
    prev_unk = false;
  }
  free(best), free(stack);
  return 0;
}

/* ------------------------------------------------------------------ encode / decode */

int tk_hf_encode(const tk_hf *hf, int64_t **ids, size_t *n, const char *text, size_t len, bool add_special) {
  *ids = NULL, *n = 0;
  pieces a = {0}, b = {0}, c = {0};
  idvec out = {0};
  int rc = 0;
  pieces_add(&a, text, len, true, -1);
  split_added(hf, &a, &b, false); /* raw text first: tokens matched before normalization */
  for (size_t k = 0; k < b.n && !rc; k++) {
    if (b.v[k].id >= 0) {
      pieces_add(&c, b.v[k].s, b.v[k].len, false, b.v[k].id);
      continue;
    }
    tk_buf nb = {0};
    rc = normalize(hf, &nb, b.v[k].s, b.v[k].len);
    if (!rc) pieces_add(&c, nb.p ? nb.p : "", nb.len, b.v[k].at0, -1);
    tk_buf_free(&nb);
  }
  pieces_free(&a);
  if (!rc) split_added(hf, &c, &a, true);
  for (size_t k = 0; k < a.n && !rc; k++) {
    if (a.v[k].id >= 0) {
      ids_add(&out, a.v[k].id);
      continue;
    }
    pieces words = {0}, next = {0};
    pieces_add(&words, a.v[k].s, a.v[k].len, a.v[k].at0, -1);
    for (size_t s = 0; s < hf->npre && !rc; s++) {
      for (size_t w = 0; w < words.n && !rc; w++) rc = pre_step_apply(&hf->pre[s], &words.v[w], &next);
      pieces_free(&words);
      words = next;
      memset(&next, 0, sizeof next);
    }
    for (size_t w = 0; w < words.n && !rc; w++) {
      if (!words.v[w].len) continue;
      rc = hf->unigram ? unigram_word(hf, words.v[w].s, words.v[w].len, &out)
                       : bpe_word(hf, words.v[w].s, words.v[w].len, &out);
    }
    if (!rc && words.oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    pieces_free(&words);
    pieces_free(&next);
  }
  if (!rc && (a.oom || b.oom || c.oom)) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  pieces_free(&a), pieces_free(&b), pieces_free(&c);
  if (rc) {
    free(out.v);
    return rc;
  }
  size_t total = out.n + (add_special ? hf->npost_pre + hf->npost_post : 0);
  int64_t *res = malloc((total + 1) * sizeof *res);
  if (!res || out.oom) {
    free(res), free(out.v);
    return cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
  }
  size_t o = 0;
  if (add_special)
    for (size_t i = 0; i < hf->npost_pre; i++) res[o++] = hf->post_pre[i];
  for (size_t i = 0; i < out.n; i++) res[o++] = out.v[i];
  if (add_special)
    for (size_t i = 0; i < hf->npost_post; i++) res[o++] = hf->post_post[i];
  free(out.v);
  *ids = res, *n = o;
  return 0;
}

static bool is_special_id(const tk_hf *hf, int64_t id) {
  for (size_t i = 0; i < hf->nadded; i++)
    if (hf->added[i].id == id && hf->added[i].special) return true;
  return false;
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

typedef struct {
  tk_buf *v;
  size_t n, cap;
  bool oom;
} bufs;

static void bufs_add(bufs *l, const char *s, size_t n) {
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    tk_buf *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      l->oom = true;
      return;
    }
    l->v = v, l->cap = cap;
  }
  l->v[l->n] = (tk_buf){0};
  tk_buf_put(&l->v[l->n], s, n);
  if (!l->v[l->n].p) tk_buf_put(&l->v[l->n], "", 0);
  if (l->v[l->n].oom) l->oom = true;
  l->n++;
}

static void bufs_free(bufs *l) {
  for (size_t i = 0; i < l->n; i++) tk_buf_free(&l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static void dec_apply(const dec_step *st, const bufs *in, bufs *out) {
  switch (st->type) {
  case D_BYTELEVEL: {
    tk_buf raw = {0};
    for (size_t k = 0; k < in->n; k++) {
      const char *t = in->v[k].p;
      size_t tl = in->v[k].len, i = 0, start = raw.len;
      bool ok = true;
      while (i < tl) {
        uint32_t cp;
        size_t l = tk_utf8_len((const unsigned char *)t + i, tl - i, &cp);
        if (!l || cp >= 512 || cp_byte[cp] < 0) {
          ok = false;
          break;
        }
        char byte = (char)cp_byte[cp];
        tk_buf_put(&raw, &byte, 1);
        i += l;
      }
      if (!ok) { /* a char outside the byte alphabet: HF keeps the token's own bytes */
        raw.len = start;
        tk_buf_put(&raw, t, tl);
      }
    }
    tk_buf lossy = {0};
    tk_buf_put_lossy(&lossy, raw.p ? raw.p : "", raw.len);
    bufs_add(out, lossy.p ? lossy.p : "", lossy.len);
    if (raw.oom || lossy.oom) out->oom = true;
    tk_buf_free(&raw), tk_buf_free(&lossy);
    break;
  }
  case D_METASPACE: {
    size_t rl = strlen(st->a);
    for (size_t k = 0; k < in->n; k++) {
      tk_buf t = {0};
      const char *s = in->v[k].p;
      for (size_t i = 0; i < in->v[k].len;) {
        if (rl <= in->v[k].len - i && !memcmp(s + i, st->a, rl)) {
          if (!(k == 0 && st->prepend != PREPEND_NEVER)) tk_buf_put(&t, " ", 1);
          i += rl;
        } else {
          tk_buf_put(&t, s + i, 1);
          i++;
        }
      }
      bufs_add(out, t.p ? t.p : "", t.len);
      if (t.oom) out->oom = true;
      tk_buf_free(&t);
    }
    break;
  }
  case D_REPLACE:
    for (size_t k = 0; k < in->n; k++) {
      tk_buf t = {0};
      replace_all(&t, in->v[k].p, in->v[k].len, st->a, st->b);
      bufs_add(out, t.p ? t.p : "", t.len);
      if (t.oom) out->oom = true;
      tk_buf_free(&t);
    }
    break;
  case D_BYTEFALLBACK: {
    tk_buf run = {0};
    for (size_t k = 0; k <= in->n; k++) {
      int b = k < in->n ? byte_token(in->v[k].p) : -1;
      if (b >= 0) {
        char c = (char)b;
        tk_buf_put(&run, &c, 1);
        continue;
      }
      if (run.len) {
        if (tk_utf8_check(run.p, run.len) == run.len) {
          bufs_add(out, run.p, run.len);
        } else {
          for (size_t i = 0; i < run.len; i++) bufs_add(out, "\xEF\xBF\xBD", 3);
        }
        run.len = 0;
      }
      if (k < in->n) bufs_add(out, in->v[k].p, in->v[k].len);
    }
    if (run.oom) out->oom = true;
    tk_buf_free(&run);
    break;
  }
  case D_FUSE: {
    tk_buf t = {0};
    for (size_t k = 0; k < in->n; k++) tk_buf_put(&t, in->v[k].p, in->v[k].len);
    bufs_add(out, t.p ? t.p : "", t.len);
    if (t.oom) out->oom = true;
    tk_buf_free(&t);
    break;
  }
  case D_STRIP: {
    size_t cl = strlen(st->a);
    for (size_t k = 0; k < in->n; k++) {
      const char *s = in->v[k].p;
      size_t a = 0, b = in->v[k].len;
      for (size_t i = 0; i < st->start && b - a >= cl && !memcmp(s + a, st->a, cl); i++) a += cl;
      for (size_t i = 0; i < st->stop && b - a >= cl && !memcmp(s + b - cl, st->a, cl); i++) b -= cl;
      bufs_add(out, s + a, b - a);
    }
    break;
  }
  }
}

int tk_hf_decode(const tk_hf *hf, tk_buf *out, const int64_t *ids, size_t n, bool skip_special) {
  bufs cur = {0}, next = {0};
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || (uint64_t)ids[i] >= hf->nids || !hf->id_to_tok[ids[i]]) {
      rc = cp_error_set(CP_ETOK_ID, "%s: id %lld at position %zu is not a token", hf->path, (long long)ids[i], i);
      goto done;
    }
    if (skip_special && is_special_id(hf, ids[i])) continue;
    bufs_add(&cur, hf->id_to_tok[ids[i]], strlen(hf->id_to_tok[ids[i]]));
  }
  for (size_t s = 0; s < hf->ndec && !cur.oom; s++) {
    dec_apply(&hf->dec[s], &cur, &next);
    bufs_free(&cur);
    cur = next;
    memset(&next, 0, sizeof next);
  }
  if (cur.oom) {
    rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
    goto done;
  }
  for (size_t k = 0; k < cur.n; k++) {
    if (!hf->have_decoder && k) tk_buf_put(out, " ", 1); /* HF without a decoder joins with spaces */
    tk_buf_put(out, cur.v[k].p, cur.v[k].len);
  }
  if (!out->p) tk_buf_put(out, "", 0);
  if (out->oom) rc = cp_error_set(CP_ENOMEM, "tokenizer: out of memory");
done:
  bufs_free(&cur), bufs_free(&next);
  return rc;
}

int64_t tk_hf_token_id(const tk_hf *hf, const char *name) {
  for (size_t i = 0; i < hf->nadded; i++)
    if (!strcmp(hf->added[i].content, name)) return hf->added[i].id;
  int32_t id;
  return tk_map_get(&hf->vocab, name, strlen(name), &id) ? id : -1;
}

size_t tk_hf_vocab_size(const tk_hf *hf) {
  size_t n = hf->nids;
  while (n && !hf->id_to_tok[n - 1]) n--;
  return n;
}

int64_t tk_hf_bos(const tk_hf *hf) { return hf->bos; }
int64_t tk_hf_eos(const tk_hf *hf) { return hf->eos; }
const char *tk_hf_kind(const tk_hf *hf) { return hf->unigram ? "unigram" : "bpe"; }
