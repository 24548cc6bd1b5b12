/* Floor: converters (private). An HF tokenizer.json's vocabulary as llama.cpp's tokenizer.ggml.*
 * keys, for `convert --to gguf` (converters/gguf_vocab.c). */
#ifndef CTXPATCH_CONVERTERS_GGUF_VOCAB_H
#define CTXPATCH_CONVERTERS_GGUF_VOCAB_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/formats/gguf_write.h"

/* When `path` is a byte-level BPE tokenizer.json (model BPE, ByteLevel pre-tokenizer with GPT-2's
 * regex and no prefix space, no normalizer), writes tokenizer.ggml.model "gpt2", .pre "gpt-2",
 * .tokens (by id, padded to n_vocab with "[PAD<id>]" pieces of type unused, as llama.cpp's
 * converter pads), .token_type (3 for special added tokens, 1 else), .merges, bos/eos/padding
 * ids (-1: none) and sets *written. Another tokenizer.json leaves *written false and writes
 * nothing. Errors: CP_ETOK_JSON / CP_ETOK_MODEL naming the file. */
int cp_gguf_put_hf_vocab(bool *written, cp_gguf_writer *w, const char *path, int64_t n_vocab, int bos, int eos,
                         int pad);

#endif
