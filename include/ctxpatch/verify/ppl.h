/* Floor: verify. The perplexity probe's corpus and windows (docs/certificate.md, "ppl").
 *
 * Corpus: a UTF-8 text file split into documents at every occurrence of a delimiter (default
 * "<|endoftext|>", the GPT-2 / TinyStories separator; a file without it is one document; "\n\n"
 * splits at blank lines). Each document loses its leading and trailing ASCII whitespace, empty
 * ones are dropped, and each is encoded without special tokens and preceded by the tokenizer's
 * BOS when it has one. The documents' ids, concatenated, form one stream.
 *
 * Windows: window w of length L starts at next_u64(seed + L * 1000003 + w) % (n_ids - L + 1)
 * (splitmix64, as the retrieval probes), so any reimplementation cuts the same windows
 * (tests/reference/make_ppl_golden.py does). In a window, position t >= 1 is scored by the NLL
 * of ids[t] under the logits of position t - 1, in bucket floor(t * B / L).
 */
#ifndef CTXPATCH_VERIFY_PPL_H
#define CTXPATCH_VERIFY_PPL_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/tokenizers/tokenizer.h"

#define CP_PPL_DEFAULT_DELIMITER "<|endoftext|>"

typedef struct {
  int64_t *ids;      /* [n_ids] the stream, owned */
  size_t n_ids;
  size_t n_docs;
  char *path;        /* owned copies, as given */
  char *delimiter;
  char sha256[65];   /* of the file's bytes */
} cp_ppl_corpus;

/* Reads and tokenizes `path` (at most 1 GiB) with `tok`; `delimiter` NULL = the default.
 * CP_EVERIFY_LENGTH when it holds no token. Caller frees with cp_ppl_corpus_free. */
int cp_ppl_corpus_load(cp_ppl_corpus *out, const char *path, const char *delimiter, const cp_tokenizer *tok);
void cp_ppl_corpus_free(cp_ppl_corpus *c);

/* Start of window `w` of `length` tokens (see above); CP_EVERIFY_LENGTH when the stream is
 * shorter than `length`. */
int cp_ppl_window_start(int64_t *start, const cp_ppl_corpus *c, int64_t length, int w, uint64_t seed);

/* Adds the NLL (nats) of each scored position of ids [length] to sum[bucket] and counts it in
 * count[bucket] (both [n_buckets]), given the logits of every position [length, vocab]. */
void cp_ppl_score(double *sum, int64_t *count, const float *logits /* [length, vocab] */, const int64_t *ids,
                  int64_t length, int64_t vocab, int n_buckets);
/* The same for the logits of positions [row0, row0 + n_rows) only (a block of
 * cp_engine_forward_blocks): the blocks of one window, in any order, add up to cp_ppl_score. */
void cp_ppl_score_rows(double *sum, int64_t *count, const float *logits /* [n_rows, vocab] */, int64_t row0,
                       int64_t n_rows, const int64_t *ids, int64_t length, int64_t vocab, int n_buckets);

#endif
