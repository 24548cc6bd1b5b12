/* Floor: export (private). Which llama.cpp vocabulary a tokenizer.json becomes, and the scores and
 * types of a SentencePiece-derived one (export/gguf/gguf_vocab_json.c), for
 * export/gguf/gguf_vocab.c. */
#ifndef CTXPATCH_EXPORT_GGUF_VOCAB_JSON_H
#define CTXPATCH_EXPORT_GGUF_VOCAB_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ctxpatch/tokenizers/tokenizer.h"

typedef enum {
  CP_GGUF_HF_NONE,  /* not a BPE tokenizer.json: not written as a vocabulary */
  CP_GGUF_HF_GPT2,  /* byte-level BPE: tokenizer.ggml.model "gpt2" with a pre name */
  CP_GGUF_HF_LLAMA, /* BPE with byte fallback made from a SentencePiece model: "llama" */
} cp_gguf_hf_kind;

/* The kind of tokenizer.json `root`; for GPT2 *pre is llama.cpp's pre-tokenizer name (static),
 * for LLAMA *space_prefix says whether a U+2581 is prepended (tokenizer.ggml.add_space_prefix).
 * A BPE tokenizer.json that llama.cpp's vocabularies cannot express (a pre-tokenizer with no
 * llama.cpp name, a normalizer other than NFC, a SentencePiece-style one other than a space
 * replacement with or without a prepended U+2581): CP_ETOK_UNSUPPORTED naming `path` and the key. */
int cp_gguf_hf_kind_of(cp_gguf_hf_kind *kind, const char **pre, bool *space_prefix, const cJSON *root,
                       const char *path);

/* A SentencePiece-derived vocabulary: tokens by id, merges in rank order with their left parts. */
typedef struct {
  const char *const *tok; /* [n], NUL-terminated */
  const size_t *len;      /* [n] */
  size_t n;
  const cp_str_span *merges; /* [n_merges], "left right" */
  const size_t *left;        /* [n_merges]: bytes of the left part */
  size_t n_merges;
} cp_gguf_spm_json;

/* type[] (from cp_gguf_put_hf_vocab: 1 normal, 3 special added, 4 other added, 5 padding) gains
 * 6 for the byte pieces <0xXX> and 2 for model.unk_token, whose id goes to *unk (-1: none). */
int cp_gguf_spm_json_types(int32_t *type, int *unk, const cp_gguf_spm_json *s, const cJSON *root, const char *path);

/* score[id] = -(rank of the first merge producing the token), -(n_merges + 1) for a token no
 * merge produces: llama.cpp's SentencePiece tokenizer merges the adjacent pair whose
 * concatenation scores highest, leftmost first, which is then the BPE's rank order. */
int cp_gguf_spm_json_scores(float *score, const cp_gguf_spm_json *s, const char *path);

#endif
