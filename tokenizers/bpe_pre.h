/* Private to tokenizers/: llama.cpp's byte-level BPE pre-tokenizer names (GGUF
 * tokenizer.ggml.pre: "gpt-2", "llama-bpe", "qwen2", "tekken", ...) as tokenizer.json
 * pre_tokenizer nodes (tokenizers/bpe_pre.c), for cp_bpe_vocab. */
#ifndef CTXPATCH_TOKENIZERS_BPE_PRE_H
#define CTXPATCH_TOKENIZERS_BPE_PRE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* The pre_tokenizer node of name[0..len) (NULL: "gpt-2") into *out (caller frees; out NULL: only
 * check the name) and whether llama.cpp sets ignore_merges for it. An unknown name is
 * CP_ETOK_UNSUPPORTED naming `what`, the name and the known ones. */
int tk_bpe_pre(cJSON **out, bool *ignore_merges, const char *name, size_t len, const char *what);
/* The reverse: the llama.cpp name of a tokenizer.json byte-level pre_tokenizer node (Split regexes
 * equal to the table's, Digits, ByteLevel) whose model has `ignore_merges`; *name is the kind's
 * first name (static: "gpt-2", "llama-bpe", "smaug-bpe", "qwen2", "starcoder", "tekken", ...).
 * Another shape, or a known one with the other ignore_merges: CP_ETOK_UNSUPPORTED naming `what`
 * and the key. */
int tk_bpe_pre_name(const char **name, const cJSON *pre, bool ignore_merges, const char *what);
/* The supported names, comma-separated (for messages and docs). */
const char *tk_bpe_pre_known(void);

#endif
