/* Floor: formats. An in-place editor of an ONNX model file at the protobuf field level (issue 14,
 * "patching a third-party graph in place"): the ModelProto's bytes are kept and only what an edit
 * names is spliced in, so every untouched field stays byte for byte what it was (node names,
 * other nodes, initializers, value_info, external data references, unknown fields, metadata).
 *
 * Byte layout handled (protobuf wire format, onnx.proto field numbers):
 *   ModelProto:   ... graph = 7 (length-delimited GraphProto) ... metadata_props = 14
 *                 (StringStringEntryProto: key = 1, value = 2) ...
 *   GraphProto:   node = 1 (NodeProto), initializer = 5 (TensorProto: name = 8), other fields kept.
 * The output is: every top-level field of the input in its order, the graph field rewritten
 * (its node entries in order, each kept or replaced, new nodes spliced in before the node they
 * were inserted before, replaced initializers in their place, new initializers after the last
 * field of the graph) with its new length,
 * metadata entries whose key is set replaced in place, new metadata entries at the end. A node
 * that is edited (an input renamed, an attribute set) is re-serialised by protobuf-c from its own
 * bytes (its unknown fields kept); every other byte is copied. Output deterministic.
 *
 * The editor reads the file itself (at most 2 GiB, as the reader) and refuses, with the offset,
 * what is not a well-formed ModelProto (CP_EONNX_WIRE) with exactly one graph (CP_EONNX_GRAPH);
 * callers open the file with cp_onnx_model_open first (the full checks) and use its node indexes,
 * which are the main graph's file order here too.
 *
 * Ownership: the editor owns everything it holds; cp_onnx_edit_free releases it. */
#ifndef CTXPATCH_FORMATS_ONNX_EDIT_H
#define CTXPATCH_FORMATS_ONNX_EDIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_onnx_edit cp_onnx_edit;

/* An attribute of a new node: FLOAT, INT or INTS (ONNX's AttributeType numbers 1, 2, 7). */
typedef struct {
  const char *name;
  int type;             /* 1 FLOAT, 2 INT, 7 INTS */
  float f;
  int64_t i;
  const int64_t *ints;  /* [n_ints] */
  size_t n_ints;
} cp_onnx_edit_attr;

/* A node to splice in (strings borrowed for the call). */
typedef struct {
  const char *name, *op_type, *domain; /* domain NULL or "": the default */
  const char *const *inputs;           /* [n_inputs] */
  size_t n_inputs;
  const char *const *outputs;          /* [n_outputs] */
  size_t n_outputs;
  const cp_onnx_edit_attr *attrs;      /* [n_attrs] */
  size_t n_attrs;
} cp_onnx_edit_node;

int cp_onnx_edit_open(cp_onnx_edit **out, const char *path);
void cp_onnx_edit_free(cp_onnx_edit *e);
/* Main-graph nodes in the input file. */
size_t cp_onnx_edit_n_nodes(const cp_onnx_edit *e);

/* Node `node` (file order) reads `name` as its input `input` (< 64); past its last input, the
 * inputs between are added as omitted (""). */
int cp_onnx_edit_set_input(cp_onnx_edit *e, size_t node, size_t input, const char *name);
/* Node `node` gets the FLOAT attribute `name` = v (replacing one of that name). */
int cp_onnx_edit_set_attr_float(cp_onnx_edit *e, size_t node, const char *name, float v);
/* Splices a new node in right before node `before` (n_nodes: at the end). Several insertions
 * before one node keep the order they were made in. */
int cp_onnx_edit_insert_node(cp_onnx_edit *e, size_t before, const cp_onnx_edit_node *n);
/* A new initializer; elem_type 1 (FLOAT: data is float), 10 (FLOAT16: data is float, rounded
 * to nearest even), 7 (INT64: data is int64_t) or 11 (DOUBLE: data is double), raw_data
 * little-endian. */
int cp_onnx_edit_add_initializer(cp_onnx_edit *e, const char *name, int32_t elem_type, const int64_t *shape /* [ndim] */,
                                 int ndim, const void *data /* [prod(shape)] */);
/* The main-graph initializer `name` replaced in place (same position) by one of that name with
 * these data (types as cp_onnx_edit_add_initializer; raw_data, so one that was external becomes
 * inline); CP_ENOTFOUND when there is none. */
int cp_onnx_edit_replace_initializer(cp_onnx_edit *e, const char *name, int32_t elem_type, const int64_t *shape,
                                     int ndim, const void *data);
/* metadata_props `key` = value: the entry of that key replaced in place, else appended. */
int cp_onnx_edit_set_meta(cp_onnx_edit *e, const char *key, const char *value);

/* Every external data reference of the main graph (initializers, tensor attributes, subgraphs)
 * whose location is `from` now names `to` (the tensors re-serialised, their other fields kept);
 * *n_changed counts them. CP_EUNSUPPORTED when a field outside the main graph (a model-local
 * function) mentions `from`: a reference there could not be moved. */
int cp_onnx_edit_set_location(size_t *n_changed, cp_onnx_edit *e, const char *from, const char *to);
/* The edited model as bytes: *out (malloc, the caller's) of *len bytes. */
int cp_onnx_edit_serialize(uint8_t **out, size_t *len, const cp_onnx_edit *e);
/* The edited model written to `path` atomically. */
int cp_onnx_edit_write(const cp_onnx_edit *e, const char *path);

#endif
