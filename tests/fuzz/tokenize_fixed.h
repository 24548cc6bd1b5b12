/* Shared by the two tokenizer harnesses: opens the file as the CLI does and round-trips a fixed
 * text with digits, punctuation, whitespace runs and non-ASCII letters through it. */
#ifndef CTXPATCH_FUZZ_TOKENIZE_FIXED_H
#define CTXPATCH_FUZZ_TOKENIZE_FIXED_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/tokenizers/tokenizer.h"

static inline void tokenize_fixed(const char *path) {
  static const char text[] = "Hello, world! The passkey is 42917. \xc3\xa9t\xc3\xa9  \t\n\xe4\xb8\xad\xe6\x96\x87 1234567";
  cp_tokenizer *tok = NULL;
  if (!path || cp_tokenizer_open(&tok, path) != 0) return;
  int64_t *ids = NULL;
  size_t n = 0;
  if (cp_tokenizer_encode(tok, &ids, &n, text, strlen(text), true) == 0) {
    char *back = NULL;
    size_t len = 0;
    if (cp_tokenizer_decode(tok, &back, &len, ids, n, false) == 0) free(back);
  }
  free(ids);
  cp_tokenizer_free(tok);
}

#endif
