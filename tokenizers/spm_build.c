/* A SentencePiece ModelProto written from a vocabulary given as data (cp_spm_vocab in
 * include/ctxpatch/tokenizers/tokenizer.h), in protobuf wire format, for the libsentencepiece
 * shim to load. Fields (sentencepiece_model.proto): ModelProto 1 pieces {1 piece, 2 score,
 * 3 type}, 2 trainer_spec {3 model_type, 35 byte_fallback, 40 unk_id, 41 bos_id, 42 eos_id,
 * 43 pad_id}, 3 normalizer_spec {1 name, 3 add_dummy_prefix, 4 remove_extra_whitespaces,
 * 5 escape_whitespaces}. */
#include <stdint.h>
#include <string.h>

#include "ctxpatch/base/strbuf.h"
#include "tokenizers/spm.h"

static void varint(cp_strbuf *b, uint64_t v) {
  do {
    cp_strbuf_putc(b, (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v);
}

/* A varint field; int32 negatives are sign-extended to 64 bits as protobuf does. */
static void field_int(cp_strbuf *b, unsigned field, int64_t v) {
  varint(b, (uint64_t)field << 3);
  varint(b, (uint64_t)v);
}

static void field_bytes(cp_strbuf *b, unsigned field, const char *s, size_t n) {
  varint(b, (uint64_t)field << 3 | 2);
  varint(b, n);
  cp_strbuf_put(b, s, n);
}

void tk_spm_serialize(cp_strbuf *out, const cp_spm_vocab *v) {
  cp_strbuf sub = {0};
  for (size_t i = 0; i < v->n; i++) {
    const cp_spm_piece *p = &v->pieces[i];
    cp_strbuf_reset(&sub);
    field_bytes(&sub, 1, p->piece, p->len);
    uint32_t bits;
    memcpy(&bits, &p->score, 4);
    cp_strbuf_putc(&sub, (char)(2 << 3 | 5));
    for (int k = 0; k < 4; k++) cp_strbuf_putc(&sub, (char)(bits >> (8 * k)));
    field_int(&sub, 3, p->type);
    field_bytes(out, 1, sub.s, sub.len);
  }
  cp_strbuf_reset(&sub);
  field_int(&sub, 3, v->bpe ? 2 : 1);
  field_int(&sub, 35, v->byte_fallback);
  field_int(&sub, 40, v->unk_id);
  field_int(&sub, 41, v->bos_id);
  field_int(&sub, 42, v->eos_id);
  field_int(&sub, 43, v->pad_id);
  field_bytes(out, 2, sub.s, sub.len);
  cp_strbuf_reset(&sub);
  field_bytes(&sub, 1, "identity", 8);
  field_int(&sub, 3, v->add_dummy_prefix);
  field_int(&sub, 4, v->remove_extra_whitespaces);
  field_int(&sub, 5, 1);
  field_bytes(out, 3, sub.s, sub.len);
  if (sub.oom) out->oom = true;
  cp_strbuf_free(&sub);
}
