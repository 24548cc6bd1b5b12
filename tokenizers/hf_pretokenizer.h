/* Private to tokenizers/: the pre-tokenizer of a tokenizer.json ("pre_tokenizer": ByteLevel/
 * Metaspace/WhitespaceSplit/Whitespace/Split (string or regex)/Digits, Sequence flattened), as
 * HF tokenizers runs it: each step splits every piece of the previous one. */
#ifndef CTXPATCH_TOKENIZERS_HF_PRETOKENIZER_H
#define CTXPATCH_TOKENIZERS_HF_PRETOKENIZER_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "tokenizers/hf_json.h"
#include "tokenizers/pieces.h"
#include "tokenizers/unicode.h"

enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_PREV, SPLIT_NEXT };
enum { P_BYTELEVEL, P_METASPACE, P_WSSPLIT, P_REGEX, P_STRING, P_DIGITS };
typedef struct {
  int type;
  bool add_prefix_space, use_regex, split, invert, individual;
  int behavior, prepend;
  tk_regex *re;
  char *str; /* P_STRING pattern or Metaspace replacement */
} pre_step;

typedef struct {
  pre_step v[TK_MAX_STEPS]; /* [n], owned */
  size_t n;
} tk_pretokenizers;

/* Appends the steps of node `n` (NULL or null: none); messages name file `p`. Steps added
 * before a failure stay owned by l. */
int tk_pretokenizers_load(tk_pretokenizers *l, const cJSON *n, const char *p, int depth);
/* Splits piece `pc` with step `st`, appending the parts to out. */
int tk_pretokenizer_apply(const pre_step *st, const piece *pc, pieces *out);
void tk_pretokenizers_free(tk_pretokenizers *l);

#endif
