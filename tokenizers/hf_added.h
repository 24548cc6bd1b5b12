/* Private to tokenizers/: the "added_tokens" of a tokenizer.json: tokens matched in the text
 * before the model sees it (leftmost-longest, as HF's Aho-Corasick), honouring lstrip/rstrip/
 * single_word; `normalized` ones are matched after the normalizer, the others before it. */
#ifndef CTXPATCH_TOKENIZERS_HF_ADDED_H
#define CTXPATCH_TOKENIZERS_HF_ADDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizers/hf_model.h"
#include "tokenizers/pieces.h"

typedef struct {
  char *content; /* owned */
  size_t len;
  int32_t id;
  bool special, lstrip, rstrip, normalized, single_word;
} added_tok;

typedef struct {
  added_tok *v; /* [n], owned */
  size_t n;
  bool first[256]; /* first bytes of added tokens: most text positions skip the scan */
} tk_added;

/* Loads `list` (NULL or null: none); a token with a new id is recorded in m's id -> token
 * table. Messages name file `p`. */
int tk_added_load(tk_added *at, hf_model *m, const cJSON *list, const char *p);
void tk_added_free(tk_added *at);
/* Id of the added token with exactly this content, or -1. */
int64_t tk_added_find(const tk_added *at, const char *content);
bool tk_added_is_special(const tk_added *at, int64_t id);
/* Splits each not-yet-tokenized piece of `in` on the added tokens with normalized == want_norm;
 * matched tokens become pieces with their id. */
void tk_added_split(const tk_added *at, const pieces *in, pieces *out, bool want_norm);

#endif
