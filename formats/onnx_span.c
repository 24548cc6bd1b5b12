/* Protobuf fields as byte spans (formats/onnx_span.h): a bounded walk of one message level. */
#include "formats/onnx_span.h"

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

static int read_varint(uint64_t *v, const uint8_t *b, size_t *pos, size_t end) {
  uint64_t x = 0;
  for (int k = 0; k < 10 && *pos < end; k++) {
    uint8_t c = b[(*pos)++];
    x |= (uint64_t)(c & 0x7f) << (7 * k);
    if (!(c & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* One field at *pos (< end) into *s; *pos moves past it. -1: malformed. */
static int next_field(cp_pb_span *s, const uint8_t *buf, size_t *pos, size_t end) {
  uint64_t tag, v;
  s->start = *pos, s->body = 0;
  if (read_varint(&tag, buf, pos, end) < 0) return -1;
  s->field = (unsigned)(tag >> 3), s->wire = (unsigned)(tag & 7);
  if (s->wire == 0) {
    if (read_varint(&v, buf, pos, end) < 0) return -1;
  } else if (s->wire == 1 || s->wire == 5) {
    size_t need = s->wire == 1 ? 8 : 4;
    if (end - *pos < need) return -1;
    *pos += need;
  } else if (s->wire == 2) {
    if (read_varint(&v, buf, pos, end) < 0 || v > end - *pos) return -1;
    s->body = *pos, *pos += (size_t)v;
  } else {
    return -1;
  }
  s->end = *pos;
  return 0;
}

int cp_pb_scan(cp_pb_span **out, size_t *n, size_t *cap, const uint8_t *buf, size_t start, size_t end,
               const char *path) {
  size_t pos = start;
  while (pos < end) {
    cp_pb_span s;
    size_t at = pos;
    if (next_field(&s, buf, &pos, end) < 0)
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: malformed protobuf field", path, at);
    int rc = CP_ARRAY_RESERVE(*out, *cap, *n + 1, path);
    if (rc < 0) return rc;
    (*out)[(*n)++] = s;
  }
  return 0;
}

bool cp_pb_string(size_t *at, size_t *len, const uint8_t *buf, const cp_pb_span *s, unsigned field) {
  bool found = false;
  if (s->wire != 2) return false;
  for (size_t pos = s->body; pos < s->end;) {
    cp_pb_span f;
    if (next_field(&f, buf, &pos, s->end) < 0) return false;
    if (f.field == field && f.wire == 2) *at = f.body, *len = f.end - f.body, found = true;
  }
  return found;
}
