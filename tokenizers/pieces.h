/* Private to tokenizers/hf_*.c: what the stages of the tokenizer.json pipeline pass on: lists
 * of text pieces (added tokens -> normalizer -> pre-tokenizer -> model; the decoder chain),
 * the id list the models append to, and the literal replacement three stages share.
 * Appends never fail loudly: out of memory sets `oom`, checked once by the caller. */
#ifndef CTXPATCH_TOKENIZERS_PIECES_H
#define CTXPATCH_TOKENIZERS_PIECES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/strbuf.h"

typedef struct {
  char *s; /* [len + 1], NUL-terminated, owned */
  size_t len;
  bool at0;   /* begins the original text (Metaspace prepend_scheme "first") */
  int32_t id; /* >= 0: an added token, already an id */
} piece;

typedef struct {
  piece *v; /* [n] */
  size_t n, cap;
  bool oom;
} pieces;

/* Appends a copy of s[0..len). */
void pieces_add(pieces *p, const char *s, size_t len, bool at0, int32_t id);
void pieces_free(pieces *p);

typedef struct {
  int64_t *v; /* [n], owned */
  size_t n, cap;
  bool oom;
} idvec;

void ids_add(idvec *iv, int64_t id);

/* Text growth through the stages (normalizers, pre-tokenizers, decoders): a stage may turn `in`
 * bytes into at most FACTOR * in + SLACK bytes, and never past FACTOR * base + SLACK (`base`:
 * the bytes the chain started from) nor TK_MAX_TEXT_BYTES, so chained steps (40 Replace a ->
 * aa; 64 ByteLevel) cannot compound. 16x covers Unicode's largest decomposition (11x). */
#define TK_GROW_FACTOR 16
#define TK_GROW_SLACK 1024
#define TK_MAX_TEXT_BYTES ((size_t)256 << 20)
size_t tk_grow_limit(size_t in, size_t base);
/* CP_ETOK_LIMIT with the message "path: stage: text would grow past the limit of L bytes". */
int tk_grow_error(const char *path, const char *stage, size_t limit);

/* Appends s[0..n) with every occurrence of `pat` (non-empty) replaced by `rep`; when the
 * result would pass `limit` bytes, appends nothing and returns CP_ETOK_LIMIT with no message
 * (the caller, who knows the file, sets it). */
int tk_replace_all(cp_strbuf *out, const char *s, size_t n, const char *pat, const char *rep, size_t limit);

#endif
