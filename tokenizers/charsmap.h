/* Private to tokenizers/: SentencePiece's Precompiled charsmap, the normalization rules of
 * HF's Precompiled normalizer and of a .model's normalizer_spec.
 * Blob layout: [u32 LE trie_size][darts-clone units, trie_size bytes of u32 LE]
 * [NUL-terminated replacement strings]; a trie value is an offset into the strings. */
#ifndef CTXPATCH_TOKENIZERS_CHARSMAP_H
#define CTXPATCH_TOKENIZERS_CHARSMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/strbuf.h"

typedef struct {
  uint32_t *units; /* [nunits], owned */
  size_t nunits;
  char *strings; /* [nstrings + 1], owned, always NUL-terminated */
  size_t nstrings;
} tk_charsmap;

/* Decodes the raw blob (after base64); free with tk_charsmap_free. */
int tk_charsmap_init(tk_charsmap *cm, const unsigned char *blob, size_t len, const char *what);
void tk_charsmap_free(tk_charsmap *cm);
/* HF tokenizers' Precompiled normalizer (per grapheme, then per char), appended to out; once
 * out->len passes `limit`, stops with CP_ETOK_LIMIT and no message (the caller sets it). */
int tk_charsmap_normalize(const tk_charsmap *cm, cp_strbuf *out, const char *s, size_t n, size_t limit);
/* Walks the reachable trie: every transition and leaf value must stay inside the blob; with
 * strings_terminated the strings must end in NUL (SentencePiece reads them as C strings). */
int tk_charsmap_validate(const tk_charsmap *cm, bool strings_terminated, const char *what);
/* Standard base64 (stops at '='); *out is heap-allocated (caller frees). */
int tk_base64_decode(unsigned char **out, size_t *out_len, const char *s, size_t n);

#endif
