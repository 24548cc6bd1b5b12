/* A byte-level BPE vocabulary given as data (cp_bpe_vocab, e.g. a GGUF "gpt2" vocabulary) as the
 * tokenizer.json tree HF would serialise for it, loaded by the one tokenizer.json loader
 * (tokenizers/hf.h): model BPE {vocab, merges}, added_tokens for control / user-defined tokens,
 * the pre-tokenizer llama.cpp's name stands for (tokenizers/bpe_pre.c), ByteLevel decoder, a TemplateProcessing
 * post-processor for add_bos / add_eos. Every entry is checked here first, so a refusal names the
 * vocabulary's own entry. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/bpe_pre.h"
#include "tokenizers/hf.h"
#include "tokenizers/strmap.h"

/* Each token: non-empty, bounded, no NUL, valid UTF-8, type 1..6, not seen before. */
static int check_tokens(const cp_bpe_vocab *v, const char *what) {
  tk_map seen = {0};
  int rc = 0;
  for (size_t i = 0; i < v->n && !rc; i++) {
    const cp_spm_piece *t = &v->tokens[i];
    int32_t first;
    if (!t->len || t->len > CP_BPE_MAX_TOKEN_BYTES || memchr(t->piece, 0, t->len) ||
        cp_utf8_check(t->piece, t->len, CP_UTF8_STRICT) != t->len)
      rc = cp_error_set(CP_ETOK_MODEL, "%s: token %zu: %zu bytes: empty, over %d bytes, with a NUL or not UTF-8", what,
                        i, t->len, CP_BPE_MAX_TOKEN_BYTES);
    else if (t->type < 1 || t->type > 6)
      rc = cp_error_set(CP_ETOK_MODEL, "%s: token %zu: type %d, not 1..6", what, i, t->type);
    else if (tk_map_get(&seen, t->piece, t->len, &first))
      rc = cp_error_set(CP_ETOK_MODEL, "%s: token %zu '%.*s' repeats token %d", what, i, (int)(t->len < 40 ? t->len : 40),
                        t->piece, (int)first);
    else if (tk_map_put(&seen, t->piece, t->len, (int32_t)i) < 0)
      rc = cp_nomem("%s", what);
  }
  tk_map_free(&seen);
  return rc;
}

static int check_vocab(const cp_bpe_vocab *v, const char *what) {
  bool ignore_merges;
  int rc = tk_bpe_pre(NULL, &ignore_merges, v->pre, v->pre_len, what);
  if (rc) return rc;
  if (!v->n || v->n > CP_BPE_MAX_TOKENS || v->n_merges > CP_BPE_MAX_MERGES)
    return cp_error_set(CP_ETOK_MODEL, "%s: %zu tokens and %zu merges (1..%d tokens, at most %d merges)", what, v->n,
                        v->n_merges, CP_BPE_MAX_TOKENS, CP_BPE_MAX_MERGES);
  if (v->bos_id >= (int64_t)v->n || v->eos_id >= (int64_t)v->n || (v->add_bos && v->bos_id < 0) ||
      (v->add_eos && v->eos_id < 0))
    return cp_error_set(CP_ETOK_MODEL, "%s: bos id %d / eos id %d: not tokens of the %zu (or added without one)", what,
                        v->bos_id, v->eos_id, v->n);
  for (size_t i = 0; i < v->n_merges; i++) {
    const cp_str_span *m = &v->merges[i];
    const char *sp = m->len <= 2 * CP_BPE_MAX_TOKEN_BYTES + 1 ? memchr(m->s, ' ', m->len) : NULL;
    if (!sp || sp == m->s || sp == m->s + m->len - 1 || memchr(sp + 1, ' ', m->len - (size_t)(sp - m->s) - 1) ||
        memchr(m->s, 0, m->len))
      return cp_error_set(CP_ETOK_MODEL, "%s: merge %zu: %zu bytes, not 'left right' (two tokens, one space)", what, i,
                          m->len);
  }
  return check_tokens(v, what);
}

int cp_bpe_vocab_check(const cp_bpe_vocab *v, const char *what) { return check_vocab(v, what); }

/* Attaches item to parent (under key, or appended when key is NULL); on a failure, or when *ok is
 * already false, frees item and clears *ok. Returns item or NULL. */
static cJSON *add(cJSON *parent, const char *key, cJSON *item, bool *ok) {
  if (*ok && item && (key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item)))
    return item;
  cJSON_Delete(item);
  *ok = false;
  return NULL;
}

/* A string node from s[0..len) (no NUL inside: checked). */
static cJSON *str_node(const char *s, size_t len) {
  char *z = malloc(len + 1);
  if (!z) return NULL;
  memcpy(z, s, len);
  z[len] = '\0';
  cJSON *n = cJSON_CreateString(z);
  free(z);
  return n;
}

/* {"type": "TemplateProcessing", "single": [bos?, $A, eos?], "special_tokens": {bos?, eos?}}. */
static void post_processor(cJSON *root, const cp_bpe_vocab *v, bool *ok) {
  cJSON *pp = add(root, "post_processor", cJSON_CreateObject(), ok);
  add(pp, "type", cJSON_CreateString("TemplateProcessing"), ok);
  cJSON *single = add(pp, "single", cJSON_CreateArray(), ok), *specials = add(pp, "special_tokens", cJSON_CreateObject(), ok);
  const int ids[3] = {v->add_bos ? v->bos_id : -1, -1, v->add_eos ? v->eos_id : -1};
  static const char *const names[3] = {"bos", "A", "eos"};
  for (int k = 0; k < 3 && *ok; k++) {
    if (k != 1 && ids[k] < 0) continue;
    cJSON *item = add(single, NULL, cJSON_CreateObject(), ok);
    cJSON *inner = add(item, k == 1 ? "Sequence" : "SpecialToken", cJSON_CreateObject(), ok);
    add(inner, "id", cJSON_CreateString(names[k]), ok);
    if (k == 1) continue;
    cJSON *sp = add(specials, names[k], cJSON_CreateObject(), ok);
    add(add(sp, "ids", cJSON_CreateArray(), ok), NULL, cJSON_CreateNumber(ids[k]), ok);
  }
}

/* {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true} under key. */
static void byte_level(cJSON *root, const char *key, bool *ok) {
  cJSON *n = add(root, key, cJSON_CreateObject(), ok);
  add(n, "type", cJSON_CreateString("ByteLevel"), ok);
  add(n, "add_prefix_space", cJSON_CreateFalse(), ok);
  add(n, "use_regex", cJSON_CreateTrue(), ok);
}

/* The tokenizer.json tree of v (checked), or NULL when out of memory. */
static cJSON *build_tree(const cp_bpe_vocab *v) {
  bool ok = true, ignore_merges = false;
  cJSON *root = cJSON_CreateObject(), *pre = NULL;
  if (!root) return NULL;
  if (tk_bpe_pre(&pre, &ignore_merges, v->pre, v->pre_len, "vocabulary")) ok = false; /* known: checked */
  add(root, "pre_tokenizer", pre, &ok);
  cJSON *model = add(root, "model", cJSON_CreateObject(), &ok);
  add(model, "type", cJSON_CreateString("BPE"), &ok);
  add(model, "ignore_merges", cJSON_CreateBool(ignore_merges), &ok);
  cJSON *vocab = add(model, "vocab", cJSON_CreateObject(), &ok), *merges = add(model, "merges", cJSON_CreateArray(), &ok);
  cJSON *added = add(root, "added_tokens", cJSON_CreateArray(), &ok);
  add(root, "normalizer", cJSON_CreateNull(), &ok);
  for (size_t i = 0; i < v->n && ok; i++) {
    const cp_spm_piece *t = &v->tokens[i];
    cJSON *key = str_node(t->piece, t->len);
    if (!key) ok = false;
    add(vocab, key ? key->valuestring : NULL, cJSON_CreateNumber((double)i), &ok);
    if (ok && (t->type == 3 || t->type == 4)) {
      cJSON *a = add(added, NULL, cJSON_CreateObject(), &ok);
      add(a, "id", cJSON_CreateNumber((double)i), &ok);
      add(a, "content", cJSON_Duplicate(key, false), &ok);
      add(a, "special", cJSON_CreateBool(t->type == 3), &ok);
      add(a, "normalized", cJSON_CreateFalse(), &ok);
    }
    cJSON_Delete(key);
  }
  for (size_t i = 0; i < v->n_merges && ok; i++) add(merges, NULL, str_node(v->merges[i].s, v->merges[i].len), &ok);
  byte_level(root, "decoder", &ok);
  post_processor(root, v, &ok);
  if (!ok) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

int tk_hf_from_bpe_vocab(tk_hf **out, const cp_bpe_vocab *v, const char *what) {
  *out = NULL;
  int rc = check_vocab(v, what);
  if (rc) return rc;
  cJSON *root = build_tree(v);
  CP_CHECK_ALLOC(root, what);
  rc = tk_hf_load_tree(out, root, what);
  cJSON_Delete(root);
  if (rc == 0) tk_hf_set_bos_eos(*out, v->bos_id, v->eos_id);
  return rc;
}
