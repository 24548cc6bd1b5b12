/* Private to tokenizers/tokenizer*.c: a string hash map, Unicode services
 * (ICU), the Precompiled charsmap, the Hugging Face tokenizer.json engine and the C side of the
 * libsentencepiece shim. */
#ifndef CTXPATCH_TOKENIZER_PRIV_H
#define CTXPATCH_TOKENIZER_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/strbuf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- string -> int32 hash map (keys copied) ---- */
typedef struct {
  char **keys;
  uint32_t *klen;
  int32_t *vals;
  size_t cap, count;
} tk_map;
int tk_map_put(tk_map *m, const char *key, size_t len, int32_t val); /* 0, 1 if key existed, <0 oom */
bool tk_map_get(const tk_map *m, const char *key, size_t len, int32_t *val);
void tk_map_free(tk_map *m);

/* ---- Unicode services (ICU) ---- */
typedef enum { TK_NFC, TK_NFD, TK_NFKC, TK_NFKD } tk_nf;
int tk_normalize(cp_strbuf *out, const char *s, size_t n, tk_nf form);
int tk_lowercase(cp_strbuf *out, const char *s, size_t n);
/* Compiled regular expression (ICU syntax after Rust/Oniguruma \s \S are mapped to Unicode
 * White_Space). */
typedef struct tk_regex tk_regex;
int tk_regex_compile(tk_regex **out, const char *pattern, const char *what);
void tk_regex_free(tk_regex *re);
/* Calls fn(start, end) for each match in s[0..n), left to right (byte offsets). */
typedef int (*tk_span_fn)(void *ctx, size_t start, size_t end);
int tk_regex_each(const tk_regex *re, const char *s, size_t n, tk_span_fn fn, void *ctx);
/* Calls fn(start, end) for each extended grapheme cluster of s[0..n). */
int tk_graphemes(const char *s, size_t n, tk_span_fn fn, void *ctx);
bool tk_is_whitespace(uint32_t cp);
bool tk_is_alnum(uint32_t cp); /* \w as in Rust regex: alphabetic, mark, digit, connector punct */
bool tk_is_punct(uint32_t cp);
bool tk_is_digit(uint32_t cp);

/* ---- Precompiled charsmap (SentencePiece normalizer rules) ---- */
typedef struct {
  uint32_t *units;
  size_t nunits;
  char *strings;
  size_t nstrings;
} tk_charsmap;
/* Decodes the raw blob (after base64). */
int tk_charsmap_init(tk_charsmap *cm, const unsigned char *blob, size_t len, const char *what);
void tk_charsmap_free(tk_charsmap *cm);
/* HF tokenizers' Precompiled normalizer (per grapheme, then per char). */
int tk_charsmap_normalize(const tk_charsmap *cm, cp_strbuf *out, const char *s, size_t n);
/* Walks the reachable trie: every transition and leaf value must stay inside the blob; with
 * strings_terminated the strings must end in NUL (SentencePiece reads them as C strings). */
int tk_charsmap_validate(const tk_charsmap *cm, bool strings_terminated, const char *what);
/* Protobuf wire-format walk of a SentencePiece ModelProto: refuses a malformed message and a
 * (de)normalizer precompiled_charsmap that libsentencepiece would read out of bounds. */
int tk_spm_precheck(const unsigned char *data, size_t len, const char *what);
int tk_base64_decode(unsigned char **out, size_t *out_len, const char *s, size_t n);

/* ---- Hugging Face tokenizer.json ---- */
typedef struct tk_hf tk_hf;
int tk_hf_load(tk_hf **out, const char *text, size_t len, const char *path);
void tk_hf_free(tk_hf *hf);
int tk_hf_encode(const tk_hf *hf, int64_t **ids, size_t *n, const char *text, size_t len, bool add_special);
int tk_hf_decode(const tk_hf *hf, cp_strbuf *out, const int64_t *ids, size_t n, bool skip_special);
int64_t tk_hf_token_id(const tk_hf *hf, const char *name);
size_t tk_hf_vocab_size(const tk_hf *hf);
int64_t tk_hf_bos(const tk_hf *hf);
int64_t tk_hf_eos(const tk_hf *hf);
const char *tk_hf_kind(const tk_hf *hf);

/* ---- libsentencepiece shim (tokenizer_spm.cpp); returns 0 or -1 (message in err) ---- */
typedef struct tk_spm tk_spm;
int tk_spm_load(tk_spm **out, const char *data, size_t len, char *err, size_t errlen);
void tk_spm_free(tk_spm *s);
/* *ids malloc'ed; -1 on a library failure (message in err). */
int tk_spm_encode(const tk_spm *s, int **ids, size_t *n, const char *text, size_t len, char *err, size_t errlen);
/* Decodes ids[0..n) (all in range) with SentencePiece's rules, appending to *text (malloc'ed). */
int tk_spm_decode(const tk_spm *s, char **text, size_t *len, const int *ids, size_t n, char *err, size_t errlen);
int tk_spm_size(const tk_spm *s);
int tk_spm_bos(const tk_spm *s);
int tk_spm_eos(const tk_spm *s);
/* -1 if the piece is not in the vocabulary. */
int tk_spm_piece_id(const tk_spm *s, const char *piece);
/* Borrowed, valid while s lives. */
const char *tk_spm_piece(const tk_spm *s, int id);
bool tk_spm_is_control(const tk_spm *s, int id);

#ifdef __cplusplus
}
#endif

#endif
