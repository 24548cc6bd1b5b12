/* Private to tokenizers/: the decoder of a tokenizer.json ("decoder": ByteLevel/Metaspace/
 * Replace (string)/ByteFallback/Fuse/Strip, Sequence flattened): each step maps the list of
 * token texts to a new list, as HF tokenizers' decode_chain does. */
#ifndef CTXPATCH_TOKENIZERS_HF_DECODER_H
#define CTXPATCH_TOKENIZERS_HF_DECODER_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "tokenizers/hf_json.h"
#include "tokenizers/pieces.h"

enum { D_BYTELEVEL, D_METASPACE, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP };
typedef struct {
  int type;
  char *a, *b; /* Metaspace replacement; Replace pattern and content; Strip content */
  int prepend;
  size_t start, stop;
} dec_step;

typedef struct {
  dec_step v[TK_MAX_STEPS]; /* [n], owned */
  size_t n;
  bool have_decoder; /* without one, HF joins the tokens with spaces */
  const char *path;  /* for messages; borrowed from the tokenizer */
} tk_decoders;

/* Appends the steps of node `n` (NULL or null: none); messages name file `p`. Steps added
 * before a failure stay owned by l. */
int tk_decoders_load(tk_decoders *l, const cJSON *n, const char *p, int depth);
/* Runs every step over the token texts in *toks, replacing them with the result; text growing
 * past tk_grow_limit at a step (Replace content from the file, chained) is CP_ETOK_LIMIT. */
int tk_decoders_apply(const tk_decoders *l, pieces *toks);
void tk_decoders_free(tk_decoders *l);

#endif
