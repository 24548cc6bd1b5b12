/* Private to tokenizers/: SentencePiece .model files: the wire-format precheck
 * (spm_precheck.c) and the C side of the libsentencepiece shim (tokenizer_spm.cpp). */
#ifndef CTXPATCH_TOKENIZERS_SPM_H
#define CTXPATCH_TOKENIZERS_SPM_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/tokenizers/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits on what libsentencepiece is handed (real models: Llama-2 and T5 pieces are at most 48
 * bytes, vocabularies at most ~262K pieces, no self-test samples). */
#define TK_SPM_MAX_PIECE_BYTES 1024      /* its trie builder recurses once per byte */
#define TK_SPM_MAX_PIECES (1 << 19)
#define TK_SPM_MAX_SELFTEST_BYTES (1 << 16) /* sample inputs, all together: encoded at load */
#define TK_SPM_MAX_SELFTEST_SAMPLES 1024

/* Protobuf wire-format walk of a SentencePiece ModelProto: refuses a malformed message, a
 * (de)normalizer precompiled_charsmap that libsentencepiece would read out of bounds, and
 * pieces or self-test samples past the limits above (CP_ETOK_MODEL naming the piece). */
int tk_spm_precheck(const unsigned char *data, size_t len, const char *what);

/* Appends the ModelProto of `v` to out (spm_build.c); out->oom on allocation failure. */
void tk_spm_serialize(cp_strbuf *out, const cp_spm_vocab *v);

/* ---- libsentencepiece shim (tokenizer_spm.cpp); returns 0 or -1 (message in err) ---- */
typedef struct tk_spm tk_spm;
int tk_spm_load(tk_spm **out, const char *data, size_t len, char *err, size_t errlen);
void tk_spm_free(tk_spm *s);
/* *ids malloc'ed; -1 on a library failure (message in err). */
int tk_spm_encode(const tk_spm *s, int **ids, size_t *n, const char *text, size_t len, char *err, size_t errlen);
/* Decodes ids[0..n) (all in range) with SentencePiece's rules, appending to *text (malloc'ed). */
int tk_spm_decode(const tk_spm *s, char **text, size_t *len, const int *ids, size_t n, char *err, size_t errlen);
int tk_spm_size(const tk_spm *s);
int tk_spm_bos(const tk_spm *s);
int tk_spm_eos(const tk_spm *s);
/* -1 if the piece is not in the vocabulary. */
int tk_spm_piece_id(const tk_spm *s, const char *piece);
/* Borrowed, valid while s lives. */
const char *tk_spm_piece(const tk_spm *s, int id);
bool tk_spm_is_control(const tk_spm *s, int id);
float tk_spm_score(const tk_spm *s, int id);
/* The piece's type as ModelProto numbers it: 1 normal, 2 unknown, 3 control, 5 unused, 6 byte
 * (libsentencepiece does not tell user-defined pieces, 4, from normal ones: they answer 1). */
int tk_spm_type(const tk_spm *s, int id);

#ifdef __cplusplus
}
#endif

#endif
