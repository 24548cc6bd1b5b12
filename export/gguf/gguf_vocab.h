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

/* Writes the tokenizer.json at `path` as llama.cpp's convert_hf_to_gguf.py does and sets *written:
 * a byte-level BPE as tokenizer.ggml.model "gpt2" with .pre (llama.cpp's name of its
 * pre-tokenizer: "gpt-2", "llama-bpe", "qwen2", "tekken", ...) and .merges; a BPE with byte
 * fallback made from a SentencePiece model (Gemma, Llama 2, Phi-3) as "llama" with .scores and
 * .add_space_prefix. Both with .tokens by id (padded to n_vocab with "[PAD<id>]" pieces of type
 * unused, as llama.cpp's converter pads), .token_type (3 special added tokens, 4 other added
 * tokens, 6 byte pieces, 2 the unknown token, 1 else), bos/eos/unknown/padding ids (-1: none; bos
 * and eos from the post-processor when config.json names none) and add_bos/add_eos_token (what
 * the post-processor's template adds). Another tokenizer.json (not BPE, or BPE without ByteLevel
 * or byte fallback) leaves *written false and writes nothing. A BPE one llama.cpp cannot express
 * (a pre-tokenizer it has no name for, a normalizer): CP_ETOK_UNSUPPORTED naming the file and
 * the key; bad entries: CP_ETOK_JSON / CP_ETOK_MODEL naming the file. */
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
