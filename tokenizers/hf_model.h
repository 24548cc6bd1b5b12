/* Private to tokenizers/: the "model" of a tokenizer.json, BPE (hf_bpe.c) or Unigram
 * (hf_unigram.c), with the vocabulary both share (hf_model.c): loading, and encoding one
 * pre-token to ids as HF tokenizers does. */
#ifndef CTXPATCH_TOKENIZERS_HF_MODEL_H
#define CTXPATCH_TOKENIZERS_HF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizers/pieces.h"
#include "tokenizers/strmap.h"

typedef struct {
  uint64_t *keys; /* [cap] (left << 32 | right) + 1; 0 = empty */
  uint32_t *rank;
  int32_t *merged;
  size_t cap;
} merge_map;

typedef struct {
  bool unigram;
  /* vocabulary */
  tk_map vocab;     /* model tokens -> id */
  char **id_to_tok; /* [nids], NULL where no token; added tokens too */
  size_t nids;
  /* BPE */
  merge_map merges;
  bool byte_fallback, fuse_unk, ignore_merges;
  int32_t unk_id; /* -1 if none */
  char *cont_prefix, *eow_suffix;
  /* Unigram */
  double *scores; /* [nscores] */
  size_t nscores;
  double min_score;
  size_t max_piece;
} hf_model;

/* Loads node `model` (BPE or Unigram, by "type" or, in old files, by its fields); messages name
 * file `p`. What was loaded before a failure stays owned by m (tk_model_free frees it). */
int tk_model_load(hf_model *m, const cJSON *model, const char *p);
void tk_model_free(hf_model *m);
/* Records id -> tok; model tokens (in_model) also go into the token -> id map the models use.
 * `where` names the tokenizer.json key in messages. */
int tk_model_add_token(hf_model *m, const char *p, const char *tok, int32_t id, const char *where, bool in_model);
/* Id of the byte-fallback token <0xXX> of byte b; false when the vocabulary lacks it. */
bool tk_model_byte_id(const hf_model *m, unsigned char b, int32_t *id);
/* Appends the ids of pre-token w[0..n) (valid UTF-8). */
int tk_model_encode_word(const hf_model *m, const char *w, size_t n, idvec *out);

int tk_bpe_load(hf_model *m, const cJSON *model, const char *p);
int tk_bpe_word(const hf_model *m, const char *w, size_t n, idvec *out);
int tk_unigram_load(hf_model *m, const cJSON *model, const char *p);
int tk_unigram_word(const hf_model *m, const char *w, size_t n, idvec *out);

#endif
