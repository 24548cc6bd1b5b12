/* Floor: export (private). Vocabularies between GGUF's tokenizer.ggml.* keys and the tokenizers
 * floor (export/gguf/gguf_vocab.c): an HF tokenizer.json or a SentencePiece .model written as keys
 * for `convert --to gguf` (the reader: import/gguf/gguf_vocab_read.h). */
#ifndef CTXPATCH_EXPORT_GGUF_VOCAB_H
#define CTXPATCH_EXPORT_GGUF_VOCAB_H

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

/* When `folder` holds a SentencePiece tokenizer.model (and no tokenizer.json), writes
 * tokenizer.ggml.model "llama", .tokens, .scores, .token_type (padded to n_vocab with "[PAD<id>]"
 * pieces of score -1000 and type unused, as llama.cpp's converter pads), bos/eos/unknown/padding
 * ids (-1: none) from the pieces' types and the config, add_bos_token true, add_eos_token false,
 * and sets *written. Otherwise leaves *written false and writes nothing. A .model with more
 * pieces than n_vocab: CP_ETOK_MODEL. */
int cp_gguf_put_spm_vocab(bool *written, cp_gguf_writer *w, const char *folder, int64_t n_vocab, int bos, int eos,
                          int pad);

#endif
