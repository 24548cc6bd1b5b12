/* Private to formats/onnx_*.c: a protobuf message's bytes cut into its fields (spans) without
 * unpacking them, so that a field can be copied, replaced or left out byte for byte (the in-place
 * editor, formats/onnx_edit.c; the graph digest, formats/onnx_digest.c). */
#ifndef CTXPATCH_FORMATS_ONNX_SPAN_H
#define CTXPATCH_FORMATS_ONNX_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  size_t start, body, end; /* the whole field [start, end); a length-delimited body [body, end) */
  unsigned field, wire;
} cp_pb_span;

/* Appends the fields of the message body buf[start, end) to *out (*n used, *cap allocated; the
 * caller frees *out): varints of at most 10 bytes, wire types 0, 1, 2 and 5, lengths inside the
 * body; anything else is CP_EONNX_WIRE naming `path` and the field's offset. */
int cp_pb_scan(cp_pb_span **out, size_t *n, size_t *cap, const uint8_t *buf, size_t start, size_t end,
               const char *path);

/* The last length-delimited field number `field` in the body of the message field s (protobuf's
 * rule: the last occurrence of a string wins): true with its bytes buf[*at, *at + *len); false
 * when there is none or the body is malformed. */
bool cp_pb_string(size_t *at, size_t *len, const uint8_t *buf, const cp_pb_span *s, unsigned field);

#endif
