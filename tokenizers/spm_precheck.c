/* Protobuf wire-format walk of a SentencePiece ModelProto before libsentencepiece reads it:
 * every field bounded, each (de)normalizer precompiled_charsmap trie validated, and what the
 * library recurses or works on at load bounded: the pieces (its double-array trie builder
 * recurses once per byte of a piece: a 150,000-byte piece overflows the stack) and the
 * self-test samples (encoded at load). */
#include "tokenizers/spm.h"

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/base/error.h"
#include "tokenizers/charsmap.h"

/* Protobuf wire format: reads a varint at *pos (bounded by n). */
static bool pb_varint(const unsigned char *p, size_t n, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= n) return false;
    unsigned char b = p[(*pos)++];
    *v |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/* Walks one message; for each length-delimited field `want`, calls fn(data, len). */
static int pb_each(const unsigned char *p, size_t n, uint64_t want, int (*fn)(void *, const unsigned char *, size_t),
                   void *ctx, const char *what) {
  size_t pos = 0;
  while (pos < n) {
    uint64_t key, len;
    size_t at = pos;
    if (!pb_varint(p, n, &pos, &key)) return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: truncated field key", what, at);
    switch (key & 7) {
    case 0:
      if (!pb_varint(p, n, &pos, &len)) return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: truncated varint", what, at);
      break;
    case 1:
    case 5:
      len = (key & 7) == 1 ? 8 : 4;
      if (len > n - pos) return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: truncated fixed field", what, at);
      pos += len;
      break;
    case 2:
      if (!pb_varint(p, n, &pos, &len) || len > n - pos)
        return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: field length past the end", what, at);
      if ((key >> 3) == want) {
        int rc = fn(ctx, p + pos, (size_t)len);
        if (rc) return rc;
      }
      pos += len;
      break;
    default:
      return cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: unsupported wire type %u", what, at, (unsigned)(key & 7));
    }
  }
  return 0;
}

static int check_charsmap_blob(void *ctx, const unsigned char *p, size_t n) {
  const char *what = ctx;
  if (!n) return 0;
  tk_charsmap cm;
  if (n < 4) return cp_error_set(CP_ETOK_MODEL, "%s: precompiled charsmap shorter than 4 bytes", what);
  int rc = tk_charsmap_init(&cm, p, n, what);
  if (rc) return cp_error_set(CP_ETOK_MODEL, "%s", cp_error_message());
  rc = tk_charsmap_validate(&cm, true, what);
  tk_charsmap_free(&cm);
  return rc;
}

static int check_normalizer_spec(void *ctx, const unsigned char *p, size_t n) {
  return pb_each(p, n, 2, check_charsmap_blob, ctx, ctx); /* NormalizerSpec.precompiled_charsmap */
}

/* ---- pieces and self-test samples */

typedef struct {
  const char *what;
  size_t count;  /* pieces, or self-test samples, seen so far */
  size_t bytes;  /* self-test input bytes so far */
} walk_ctx;

static int check_piece_text(void *vctx, const unsigned char *p, size_t n) {
  walk_ctx *c = vctx;
  (void)p;
  if (n > TK_SPM_MAX_PIECE_BYTES)
    return cp_error_set(CP_ETOK_MODEL, "%s: piece %zu: %zu bytes, more than the limit of %d", c->what, c->count - 1, n,
                        TK_SPM_MAX_PIECE_BYTES);
  return 0;
}

static int check_piece(void *vctx, const unsigned char *p, size_t n) {
  walk_ctx *c = vctx;
  if (++c->count > TK_SPM_MAX_PIECES)
    return cp_error_set(CP_ETOK_MODEL, "%s: piece %zu: more than the limit of %d pieces", c->what, c->count - 1,
                        TK_SPM_MAX_PIECES);
  return pb_each(p, n, 1, check_piece_text, c, c->what); /* SentencePiece.piece */
}

static int check_sample_input(void *vctx, const unsigned char *p, size_t n) {
  walk_ctx *c = vctx;
  (void)p;
  c->bytes += n;
  if (c->bytes > TK_SPM_MAX_SELFTEST_BYTES)
    return cp_error_set(CP_ETOK_MODEL, "%s: self-test sample %zu: sample inputs exceed the limit of %d bytes", c->what,
                        c->count - 1, TK_SPM_MAX_SELFTEST_BYTES);
  return 0;
}

static int check_sample(void *vctx, const unsigned char *p, size_t n) {
  walk_ctx *c = vctx;
  if (++c->count > TK_SPM_MAX_SELFTEST_SAMPLES)
    return cp_error_set(CP_ETOK_MODEL, "%s: self-test sample %zu: more than the limit of %d samples", c->what,
                        c->count - 1, TK_SPM_MAX_SELFTEST_SAMPLES);
  return pb_each(p, n, 1, check_sample_input, c, c->what); /* Sample.input */
}

static int check_self_test(void *vctx, const unsigned char *p, size_t n) {
  walk_ctx *c = vctx;
  return pb_each(p, n, 1, check_sample, c, c->what); /* SelfTestData.samples */
}

int tk_spm_precheck(const unsigned char *data, size_t len, const char *what) {
  walk_ctx pieces = {what, 0, 0}, tests = {what, 0, 0};
  int rc = pb_each(data, len, 3, check_normalizer_spec, (void *)what, what); /* ModelProto.normalizer_spec */
  if (!rc) rc = pb_each(data, len, 5, check_normalizer_spec, (void *)what, what); /* denormalizer_spec */
  if (!rc) rc = pb_each(data, len, 1, check_piece, &pieces, what); /* pieces */
  if (!rc) rc = pb_each(data, len, 4, check_self_test, &tests, what); /* self_test_data */
  return rc;
}
