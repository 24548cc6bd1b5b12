/* Floor: tokenizers. Text bytes <-> token ids, as the model's own tokenizer does it.
 *
 * Two file formats are read:
 *   tokenizer.json  Hugging Face `tokenizers` serialisation: a JSON object with
 *                   "added_tokens" [{id, content, special, lstrip, rstrip, normalized}],
 *                   "normalizer" (NFC/NFD/NFKC/NFKD/Lowercase/Precompiled/Replace/Prepend/
 *                   Strip/Sequence), "pre_tokenizer" (ByteLevel/Metaspace/WhitespaceSplit/
 *                   Whitespace/Split/Digits/Sequence), "model" (BPE {vocab, merges,
 *                   byte_fallback, ignore_merges, unk_token, fuse_unk} or Unigram {vocab
 *                   [[piece, score]], unk_id, byte_fallback}), "post_processor"
 *                   (TemplateProcessing/ByteLevel/RobertaProcessing/BertProcessing/Sequence) and
 *                   "decoder" (ByteLevel/Metaspace/Replace/ByteFallback/Fuse/Strip/Sequence).
 *                   Precompiled's "precompiled_charsmap" is base64 of
 *                   [u32 LE trie_size][darts-clone double array, trie_size bytes of u32 LE units]
 *                   [NUL-terminated replacement strings]; a trie value is an offset into the
 *                   strings.
 *   *.model         SentencePiece ModelProto (protobuf), encoded and decoded by Debian's
 *                   libsentencepiece through a small C++ shim. The wire format is walked first
 *                   (bounds of every field) and the normalizer's precompiled_charsmap trie is
 *                   validated, since the library does not bound-check its trie lookups. With
 *                   add_special, BOS is prepended when the model defines one (Llama), else EOS is
 *                   appended when it defines one (T5), as transformers' slow tokenizers do.
 *                   SentencePiece breaks Unigram ties its own way: a T5 spiece.model can differ
 *                   from the same model's tokenizer.json on ties ("!!!!!!").
 *
 * Every input is untrusted: sizes are bounded, every index is range-checked, and an unknown
 * component is refused with CP_ETOK_UNSUPPORTED rather than approximated.
 * A cp_tokenizer is immutable after open; encode/decode may run concurrently on one handle.
 */
#ifndef CTXPATCH_TOKENIZER_H
#define CTXPATCH_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cp_tokenizer cp_tokenizer;

/* Opens a tokenizer.json, a SentencePiece .model, or a model folder (tokenizer.json preferred,
 * else tokenizer.model, else spiece.model; none: CP_ETOK_MISSING). Caller frees *out. */
int cp_tokenizer_open(cp_tokenizer **out, const char *path);
/* NULL is a no-op. */
void cp_tokenizer_free(cp_tokenizer *tok);

/* Encodes UTF-8 `text[0..len)` (invalid UTF-8: CP_ETOK_TEXT). With add_special the special
 * tokens are added as the post-processor adds them (HF add_special_tokens=True).
 * *ids is heap-allocated (caller frees; non-NULL even when *n == 0). */
int cp_tokenizer_encode(const cp_tokenizer *tok, int64_t **ids, size_t *n, const char *text, size_t len,
                        bool add_special);
/* Decodes ids to UTF-8 (malformed byte sequences become U+FFFD). Special tokens are left out
 * when skip_special. An id outside the vocabulary: CP_ETOK_ID. *text is heap-allocated and
 * NUL-terminated (caller frees). */
int cp_tokenizer_decode(const cp_tokenizer *tok, char **text, size_t *len, const int64_t *ids, size_t n,
                        bool skip_special);

/* Id of a token by its exact text (vocabulary or added tokens); -1 if there is none. */
int64_t cp_tokenizer_token_id(const cp_tokenizer *tok, const char *name);
/* Number of ids: one past the largest id of the vocabulary and added tokens. */
size_t cp_tokenizer_vocab_size(const cp_tokenizer *tok);
/* Beginning/end-of-sequence ids; -1 if the tokenizer has none. */
int64_t cp_tokenizer_bos_id(const cp_tokenizer *tok);
int64_t cp_tokenizer_eos_id(const cp_tokenizer *tok);
/* "bpe", "unigram" (tokenizer.json models) or "sentencepiece" (.model). Borrowed. */
const char *cp_tokenizer_kind(const cp_tokenizer *tok);
/* The file actually read (for a folder: the file chosen in it). Borrowed. */
const char *cp_tokenizer_path(const cp_tokenizer *tok);

/* A SentencePiece vocabulary given as data (for model files that carry one, e.g. GGUF's
 * tokenizer.ggml.*): `type` numbers pieces as SentencePiece does (1 normal, 2 unknown, 3 control,
 * 4 user defined, 5 unused, 6 byte). Ids are the array positions; -1 means none. */
typedef struct {
  const char *piece; /* not NUL-terminated */
  size_t len;
  float score;
  int type;
} cp_spm_piece;

typedef struct {
  const cp_spm_piece *pieces; /* [n] */
  size_t n;
  bool bpe;                      /* SentencePiece BPE (Llama), else Unigram */
  int unk_id, bos_id, eos_id, pad_id;
  bool add_dummy_prefix;         /* prepend U+2581 to the text */
  bool remove_extra_whitespaces; /* collapse runs of spaces, strip the ends */
  bool byte_fallback;            /* unknown characters as <0xXX> byte pieces */
} cp_spm_vocab;

/* Builds a SentencePiece ModelProto from `v` (identity normaliser) and opens it as a .model file
 * is opened; `what` names the source in messages and becomes cp_tokenizer_path. */
int cp_tokenizer_from_spm_vocab(cp_tokenizer **out, const cp_spm_vocab *v, const char *what);

/* Piece `id` of a SentencePiece tokenizer (.model, or one built by cp_tokenizer_from_spm_vocab)
 * with its score and type (numbered as above, except that libsentencepiece reports user-defined
 * pieces as normal, 1); out->piece is borrowed, NUL-terminated and valid
 * while tok lives. CP_EARG when tok is not SentencePiece or id is past its pieces. */
int cp_tokenizer_spm_piece(cp_spm_piece *out, const cp_tokenizer *tok, size_t id);

/* A byte-level BPE vocabulary given as data (GGUF tokenizer.ggml.model "gpt2"): tokens in GPT-2's
 * byte-to-unicode alphabet, ranked merges "left right", the pre-tokenizer named as llama.cpp names
 * it (tokenizer.ggml.pre: gpt-2, mpt, olmo, phi-2, llama-bpe / llama3 / llama-v3, smaug-bpe, dbrx,
 * qwen2, deepseek-r1-qwen, starcoder, refact, command-r, tekken, deepseek-v3, deepseek-coder,
 * deepseek-llm, falcon: each the regex Split sequence of the model's tokenizer.json, then ByteLevel;
 * ignore_merges where llama.cpp sets it), ByteLevel decoder, no normaliser (as llama.cpp). Control (3) and user-defined (4) tokens are matched
 * in the text before BPE, as tokenizer.json's added tokens are (control ones are special: skipped
 * when decoding with skip_special); every token is also in the BPE vocabulary. */
typedef struct {
  const char *s; /* not NUL-terminated */
  size_t len;
} cp_str_span;

typedef struct {
  const cp_spm_piece *tokens; /* [n]: piece, len, type (1..6 as above); score unused */
  size_t n;
  const cp_str_span *merges; /* [n_merges], rank order */
  size_t n_merges;
  int bos_id, eos_id;    /* -1: none */
  bool add_bos, add_eos; /* what add_special adds */
  const char *pre;       /* pre-tokenizer name (not NUL-terminated); NULL: "gpt-2" */
  size_t pre_len;
} cp_bpe_vocab;

/* Limits on a cp_bpe_vocab (refused with CP_ETOK_MODEL past them): */
#define CP_BPE_MAX_TOKENS (1 << 21)
#define CP_BPE_MAX_MERGES (1 << 22)
#define CP_BPE_MAX_TOKEN_BYTES 1024

/* Opens `v` as a tokenizer.json of that shape is opened. Refused with CP_ETOK_MODEL naming
 * `what` and the entry: no tokens, counts or lengths past the limits, an empty token, one with a
 * NUL byte or invalid UTF-8, a token twice, a type outside 1..6, a merge that is not two tokens
 * whose concatenation is a token, bos/eos outside the tokens; an unknown pre-tokenizer name with
 * CP_ETOK_UNSUPPORTED. */
int cp_tokenizer_from_bpe_vocab(cp_tokenizer **out, const cp_bpe_vocab *v, const char *what);

/* The checks cp_tokenizer_from_bpe_vocab makes before building (counts, each token's bounds, no
 * token twice, merges 'left right', bos/eos), without building: for writers of such vocabularies
 * (export/gguf/gguf_vocab.c), so they refuse what the reader would. Same errors. */
int cp_bpe_vocab_check(const cp_bpe_vocab *v, const char *what);

#endif
