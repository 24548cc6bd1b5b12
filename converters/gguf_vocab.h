/* Floor: converters (private). Vocabularies between GGUF's tokenizer.ggml.* keys and the tokenizers
 * floor (converters/gguf_vocab.c): an HF tokenizer.json or a SentencePiece .model written as keys
 * for `convert --to gguf`, and a "gpt2" (byte-level BPE) vocabulary read back as a tokenizer. */
#ifndef CTXPATCH_CONVERTERS_GGUF_VOCAB_H
#define CTXPATCH_CONVERTERS_GGUF_VOCAB_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/gguf_write.h"
#include "ctxpatch/tokenizers/tokenizer.h"

/* When `path` is a byte-level BPE tokenizer.json (model BPE, ByteLevel pre-tokenizer with GPT-2's
 * regex and no prefix space, no normalizer), writes tokenizer.ggml.model "gpt2", .pre "gpt-2",
 * .tokens (by id, padded to n_vocab with "[PAD<id>]" pieces of type unused, as llama.cpp's
 * converter pads), .token_type (3 for special added tokens, 1 else), .merges, bos/eos/padding
 * ids (-1: none) and sets *written. Another tokenizer.json leaves *written false and writes
 * nothing. Errors: CP_ETOK_JSON / CP_ETOK_MODEL naming the file. */
int cp_gguf_put_hf_vocab(bool *written, cp_gguf_writer *w, const char *path, int64_t n_vocab, int bos, int eos,
                         int pad);

/* A GGUF's "gpt2" vocabulary as a tokenizer: `tokens` (tokenizer.ggml.tokens with token_type,
 * read by the caller) with tokenizer.ggml.merges (required, strings), .pre (required, "gpt-2"
 * only: another pre-tokenizer regex is refused by name with CP_ETOK_UNSUPPORTED), .add_bos_token /
 * .add_eos_token (default false) and the bos/eos ids (-1: none). Inconsistent vocabularies are
 * refused with one line (cp_tokenizer_from_bpe_vocab's checks). Caller frees *out. */
int cp_gguf_bpe_tokenizer(cp_tokenizer **out, const cp_gguf_file *g, const cp_spm_piece *tokens, size_t n, int bos,
                          int eos);

/* When `folder` holds a SentencePiece tokenizer.model (and no tokenizer.json), writes
 * tokenizer.ggml.model "llama", .tokens, .scores, .token_type (padded to n_vocab with "[PAD<id>]"
 * pieces of score -1000 and type unused, as llama.cpp's converter pads), bos/eos/unknown/padding
 * ids (-1: none) from the pieces' types and the config, add_bos_token true, add_eos_token false,
 * and sets *written. Otherwise leaves *written false and writes nothing. A .model with more
 * pieces than n_vocab: CP_ETOK_MODEL. */
int cp_gguf_put_spm_vocab(bool *written, cp_gguf_writer *w, const char *folder, int64_t n_vocab, int bos, int eos,
                          int pad);

#endif
