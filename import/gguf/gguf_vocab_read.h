/* Floor: import (private). A GGUF "gpt2" (byte-level BPE) vocabulary read back as a tokenizer
 * (the writer of such vocabularies: export/gguf/gguf_vocab.h). */
#ifndef CTXPATCH_IMPORT_GGUF_VOCAB_READ_H
#define CTXPATCH_IMPORT_GGUF_VOCAB_READ_H

#include <stddef.h>

#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/tokenizers/tokenizer.h"

/* A GGUF's "gpt2" vocabulary as a tokenizer: `tokens` (tokenizer.ggml.tokens with token_type,
 * read by the caller) with tokenizer.ggml.merges (required, strings), .pre (required: llama.cpp's
 * pre-tokenizer name, see cp_bpe_vocab; an unknown one is refused by name with
 * CP_ETOK_UNSUPPORTED), .add_bos_token /
 * .add_eos_token (default false) and the bos/eos ids (-1: none). Inconsistent vocabularies are
 * refused with one line (cp_tokenizer_from_bpe_vocab's checks). Caller frees *out. */
int cp_gguf_bpe_tokenizer(cp_tokenizer **out, const cp_gguf_file *g, const cp_spm_piece *tokens, size_t n, int bos,
                          int eos);

#endif
