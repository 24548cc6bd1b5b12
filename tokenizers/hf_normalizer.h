/* Private to tokenizers/: the normalizer of a tokenizer.json ("normalizer": NFC/NFD/NFKC/NFKD/
 * Lowercase/Precompiled/Replace/Prepend/Strip, Sequence flattened), as HF tokenizers runs it. */
#ifndef CTXPATCH_TOKENIZERS_HF_NORMALIZER_H
#define CTXPATCH_TOKENIZERS_HF_NORMALIZER_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/strbuf.h"
#include "tokenizers/charsmap.h"
#include "tokenizers/hf_json.h"
#include "tokenizers/unicode.h"

enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_PRECOMPILED, N_REPLACE, N_PREPEND, N_STRIP };
typedef struct {
  int type;
  char *a, *b; /* Replace: pattern string, content; Prepend: a */
  tk_regex *re;
  bool left, right;
  bool have_cm;
  tk_charsmap cm;
} norm_step;

typedef struct {
  norm_step v[TK_MAX_STEPS]; /* [n], owned */
  size_t n;
  const char *path; /* for messages; borrowed from the tokenizer */
} tk_normalizers;

/* Appends the steps of node `n` (NULL or null: none); messages name file `p`. Steps added
 * before a failure stay owned by l (tk_normalizers_free frees them). */
int tk_normalizers_load(tk_normalizers *l, const cJSON *n, const char *p, int depth);
/* Appends s[0..n) normalized by every step, in order; text growing past tk_grow_limit at a
 * step is CP_ETOK_LIMIT. */
int tk_normalizers_apply(const tk_normalizers *steps, cp_strbuf *out, const char *s, size_t n);
void tk_normalizers_free(tk_normalizers *l);

#endif
