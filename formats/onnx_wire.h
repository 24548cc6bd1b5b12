/* Private to formats/onnx_*.c: protobuf messages of ONNX unpacked after a bounded wire-format walk
 * (formats/onnx_wire.c), with one-line refusals naming the offset and the field. */
#ifndef CTXPATCH_FORMATS_ONNX_WIRE_H
#define CTXPATCH_FORMATS_ONNX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Walks buf[0..len) as a message of type d (varints, wire types, lengths, nesting at most
 * CP_ONNX_MAX_NESTING, no NUL in strings, no NodeProto without an op_type), then unpacks it with
 * at most the bytes its fields call for allocated, refused first when that passes
 * cp_memory_limit() (base/memory.h). *out is freed with cp_onnx_wire_free. `path` names the file in messages. */
int cp_onnx_wire_unpack(ProtobufCMessage **out, const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                        const char *path);
void cp_onnx_wire_free(ProtobufCMessage *m);

#endif
