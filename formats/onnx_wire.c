/* The protobuf layer of the ONNX reader (formats/onnx_wire.h): a bounded walk of the wire format
 * over protobuf-c's descriptors before unpacking, so that truncated varints, wrong wire types,
 * lengths past the end, NUL bytes in strings and deep nesting are refused with the offset and the
 * field (protobuf-c would fail without saying where, and recurses without a bound), nodes
 * without an op_type are refused, and the memory protobuf-c will allocate is added up from the
 * bytes that call for it (each message, array slot, string and unknown field); then protobuf-c's
 * unpack under an allocator capped at that sum and at the memory limit (base/memory.h). */
#include "formats/onnx_wire.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/memory.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "onnx.pb-c.h"

/* What protobuf-c's unpack allocates besides what the fields hold, as upper bounds: per field
 * occurrence, its scanned-member record (32 bytes in 1.4, kept in slabs that double: 2x); per
 * message, the bitmap of required fields and the unknown-field array's slack. */
#define SCRATCH_PER_FIELD 64
#define SCRATCH_PER_MESSAGE 64

typedef struct {
  const char *path;
  const uint8_t *base; /* the whole file, for offsets */
  uint64_t need;       /* bytes protobuf-c will allocate, at most (see cp_onnx_wire_unpack) */
} wire_ctx;

/* Reads a varint at *pos (< end); 0, or the refusal naming the offset. */
static int read_varint(uint64_t *out, const wire_ctx *c, const uint8_t **pos, const uint8_t *end, const char *what) {
  uint64_t v = 0;
  const uint8_t *p = *pos;
  for (int k = 0; k < 10; k++, p++) {
    if (p >= end)
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: truncated varint (%s)", c->path, (size_t)(*pos - c->base),
                          what);
    v |= (uint64_t)(*p & 0x7f) << (7 * k);
    if (!(*p & 0x80)) {
      *out = v, *pos = p + 1;
      return 0;
    }
  }
  return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: varint longer than 10 bytes (%s)", c->path,
                      (size_t)(*pos - c->base), what);
}

/* The wire type a scalar field of this type is written with (2 for strings, bytes, messages). */
static unsigned wire_of(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE: return 1;
  case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_FLOAT: return 5;
  case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_BYTES: case PROTOBUF_C_TYPE_MESSAGE: return 2;
  default: return 0;
  }
}

/* A packed repeated scalar field: whole varints or whole fixed-size elements; each element
 * takes at most 8 bytes unpacked. */
static int scan_packed(wire_ctx *c, const ProtobufCFieldDescriptor *f, const uint8_t *p, const uint8_t *end) {
  unsigned w = wire_of(f->type);
  if (w != 0) {
    size_t esz = w == 1 ? 8 : 4;
    if ((size_t)(end - p) % esz)
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: packed field '%s' holds %zu bytes, not a multiple of %zu",
                          c->path, (size_t)(p - c->base), f->name, (size_t)(end - p), esz);
    c->need += (uint64_t)(end - p) / esz * 8;
    return 0;
  }
  while (p < end) {
    uint64_t v;
    int rc = read_varint(&v, c, &p, end, f->name);
    if (rc < 0) return rc;
    c->need += 8;
  }
  return 0;
}

/* Bytes protobuf-c allocates for one occurrence of field f holding n payload bytes (wire 2),
 * beyond a submessage's own fields: the array slot of a repeated field, a string's copy and its
 * NUL, a bytes field's copy, a message's struct. */
static uint64_t field_cost(const ProtobufCFieldDescriptor *f, uint64_t n) {
  uint64_t cost = SCRATCH_PER_FIELD;
  if (f->label == PROTOBUF_C_LABEL_REPEATED)
    cost += f->type == PROTOBUF_C_TYPE_BYTES ? sizeof(ProtobufCBinaryData) : 8;
  switch (f->type) {
  case PROTOBUF_C_TYPE_STRING: return cost + n + 1;
  case PROTOBUF_C_TYPE_BYTES: return cost + n;
  case PROTOBUF_C_TYPE_MESSAGE: return cost + ((const ProtobufCMessageDescriptor *)f->descriptor)->sizeof_message;
  default: return cost;
  }
}

/* A NodeProto's op_type (field 4; the last occurrence counts) must be there and not empty:
 * nothing can run a node without one, and refusing it here costs no memory. */
static int check_node(const wire_ctx *c, const ProtobufCMessageDescriptor *d, const uint8_t *start, size_t index,
                      uint64_t op_len) {
  if (d != &onnx__node_proto__descriptor || op_len) return 0;
  return cp_error_set(CP_EONNX_GRAPH, "%s: offset %zu: node %zu of its graph has an empty op_type", c->path,
                      (size_t)(start - c->base), index);
}

static int scan_message(wire_ctx *c, const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                        int depth, size_t index) {
  if (depth > CP_ONNX_MAX_NESTING)
    return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: messages nested deeper than %d (%s)", c->path,
                        (size_t)(p - c->base), CP_ONNX_MAX_NESTING, d->name);
  const uint8_t *start = p;
  uint64_t op_len = 0;
  size_t n_nodes = 0; /* NodeProtos met so far in this message (a graph's or a function's index) */
  c->need += SCRATCH_PER_MESSAGE;
  while (p < end) {
    const uint8_t *at = p;
    uint64_t tag = 0, v = 0;
    int rc = read_varint(&tag, c, &p, end, d->name);
    if (rc < 0) return rc;
    unsigned wire = (unsigned)(tag & 7);
    uint64_t id = tag >> 3;
    if (id == 0 || id > 0x1fffffff)
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: field number %" PRIu64 " in %s", c->path,
                          (size_t)(at - c->base), id, d->name);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, (unsigned)id);
    const char *fname = f ? f->name : "(unknown field)";
    bool packed = f && f->label == PROTOBUF_C_LABEL_REPEATED && wire == 2 && wire_of(f->type) != 2;
    if (wire > 2 && wire != 5)
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: wire type %u (field %" PRIu64 " '%s' of %s) is not supported",
                          c->path, (size_t)(at - c->base), wire, id, fname, d->name);
    if (f && wire != wire_of(f->type) && !packed)
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: wrong wire type %u for field '%s' of %s (expected %u)",
                          c->path, (size_t)(at - c->base), wire, f->name, d->name, wire_of(f->type));
    if (wire == 0) {
      if ((rc = read_varint(&v, c, &p, end, fname)) < 0) return rc;
      c->need += f ? field_cost(f, 0) : sizeof(ProtobufCMessageUnknownField) + (uint64_t)(p - at);
      continue;
    }
    size_t need = wire == 1 ? 8 : 4;
    if (wire == 2) {
      if ((rc = read_varint(&v, c, &p, end, fname)) < 0) return rc;
      if (v > (uint64_t)(end - p))
        return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: length %" PRIu64 " of field '%s' of %s runs past the end "
                            "(%zu bytes left)", c->path, (size_t)(at - c->base), v, fname, d->name,
                            (size_t)(end - p));
      need = (size_t)v;
    } else if ((size_t)(end - p) < need) {
      return cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: fixed-size field '%s' of %s runs past the end", c->path,
                          (size_t)(at - c->base), fname, d->name);
    }
    const uint8_t *sub = p;
    p += need;
    if (!f) c->need += sizeof(ProtobufCMessageUnknownField) + (uint64_t)(p - at);
    else if (!packed) c->need += field_cost(f, need);
    if (f && d == &onnx__node_proto__descriptor && f->id == 4) op_len = need;
    if (!f || wire != 2) continue;
    if (packed) rc = scan_packed(c, f, sub, p);
    else if (f->type == PROTOBUF_C_TYPE_MESSAGE)
      rc = scan_message(c, f->descriptor, sub, p, depth + 1,
                        f->descriptor == &onnx__node_proto__descriptor ? n_nodes++ : 0);
    else if (f->type == PROTOBUF_C_TYPE_STRING && memchr(sub, 0, need))
      rc = cp_error_set(CP_EONNX_WIRE, "%s: offset %zu: string field '%s' of %s holds a NUL byte", c->path,
                        (size_t)(at - c->base), f->name, d->name);
    if (rc < 0) return rc;
  }
  return check_node(c, d, start, index, op_len);
}

/* protobuf-c's allocations, each with its size in front, counted against a cap. */
typedef struct {
  uint64_t used, cap;
  bool refused; /* an allocation passed the cap */
} mem_cap;
typedef union {
  size_t n;
  max_align_t align;
} mem_head;

static void *cap_alloc(void *data, size_t size) {
  mem_cap *m = data;
  if (size > m->cap - m->used || size > SIZE_MAX - sizeof(mem_head)) {
    m->refused = true;
    return NULL;
  }
  mem_head *h = malloc(sizeof *h + size);
  if (!h) return NULL;
  h->n = size, m->used += size;
  return h + 1;
}

/* The cap bounds what one unpack takes at once or in all: frees are not credited back. */
static void cap_free(void *data, void *ptr) {
  (void)data;
  if (ptr) free((mem_head *)ptr - 1);
}

int cp_onnx_wire_unpack(ProtobufCMessage **out, const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                        const char *path) {
  *out = NULL;
  wire_ctx c = {path, buf, d->sizeof_message};
  int rc = scan_message(&c, d, buf, buf + len, 0, 0);
  if (rc < 0) return rc;
  /* The walk's sum bounds what the bytes can call for (at most 192 times the file's size: an
   * empty AttributeProto, 2 bytes on the wire, counts 384), the memory limit any file. */
  uint64_t limit = cp_memory_limit();
  if (c.need > limit)
    return cp_error_set(CP_EOVERFLOW, "%s: unpacking its %zu bytes would take %" PRIu64 " bytes of memory, over the "
                        "limit of %" PRIu64 " (CTXPATCH_MEMORY_LIMIT, else the machine's RAM)", path, len, c.need, limit);
  mem_cap cap = {0, c.need, false};
  ProtobufCAllocator a = {cap_alloc, cap_free, &cap};
  *out = protobuf_c_message_unpack(d, &a, len, buf);
  if (!*out) {
    if (cap.refused) /* more than the walk allows for: singular fields repeated, which protobuf-c merges */
      return cp_error_set(CP_EOVERFLOW, "%s: unpacking would take more than the %" PRIu64 " bytes of memory its fields "
                          "call for (repeated singular messages?)", path, c.need);
    return cp_error_set(CP_EONNX_WIRE, "%s: not a readable %s (protobuf unpack failed)", path, d->name);
  }
  return 0;
}

void cp_onnx_wire_free(ProtobufCMessage *m) {
  if (!m) return;
  ProtobufCAllocator a = {cap_alloc, cap_free, NULL};
  protobuf_c_message_free_unpacked(m, &a);
}
