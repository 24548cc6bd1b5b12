/* Private to tokenizers/: a Hugging Face tokenizer.json tokenizer (tokenizer_hf.c), as
 * cp_tokenizer (tokenizer.c) uses it. Immutable after load; encode/decode are reentrant. */
#ifndef CTXPATCH_TOKENIZERS_HF_H
#define CTXPATCH_TOKENIZERS_HF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/tokenizers/tokenizer.h"

typedef struct tk_hf tk_hf;
/* Parses text[0..len) (the file `path`, named in messages). Caller frees *out with tk_hf_free. */
int tk_hf_load(tk_hf **out, const char *text, size_t len, const char *path);
/* The same from a parsed tokenizer.json tree (borrowed; e.g. one built from a GGUF vocabulary). */
int tk_hf_load_tree(tk_hf **out, const cJSON *root, const char *path);
void tk_hf_free(tk_hf *hf);
/* Overrides the BOS / EOS ids the loader guessed (-1: keep). */
void tk_hf_set_bos_eos(tk_hf *hf, int64_t bos, int64_t eos);
/* A tk_hf for a byte-level BPE vocabulary given as data (hf_vocab.c; bounds and messages there). */
int tk_hf_from_bpe_vocab(tk_hf **out, const cp_bpe_vocab *v, const char *what);
/* text must be valid UTF-8; *ids is heap-allocated (caller frees). */
int tk_hf_encode(const tk_hf *hf, int64_t **ids, size_t *n, const char *text, size_t len, bool add_special);
/* Appends the decoded text to out (never leaves out->s NULL on success). */
int tk_hf_decode(const tk_hf *hf, cp_strbuf *out, const int64_t *ids, size_t n, bool skip_special);
/* -1 when there is no such token. */
int64_t tk_hf_token_id(const tk_hf *hf, const char *name);
size_t tk_hf_vocab_size(const tk_hf *hf);
int64_t tk_hf_bos(const tk_hf *hf);
int64_t tk_hf_eos(const tk_hf *hf);
/* "bpe" or "unigram". */
const char *tk_hf_kind(const tk_hf *hf);

#endif
