/* Floor: formats. The full, hardened ONNX reader: a ModelProto (onnx.proto, Debian's
 * libonnx-dev schema; later fields are kept as unknown fields) read into plain C views of the
 * model, its main graph and every subgraph, their nodes, attributes of every kind, typed values
 * and initializers, with the elements of any initializer as float or int64. Built for recovering
 * a model description from third-party graphs and for rewriting them (issue 14); `inspect`'s
 * summary (cp_onnx_read_info, onnx.h) is made from it. No protobuf-c type appears here.
 *
 * What is refused, each with one line naming the file and the place (a byte offset, a tensor,
 * a node or an attribute), with the code of its group (include/ctxpatch/base/error.h) unless said:
 *   protobuf, CP_EONNX_WIRE: truncated varints, varints over 10 bytes, wire types that do not fit
 *                 the field, group wire types, lengths past the end of the enclosing message,
 *                 field number 0, NUL bytes inside strings, messages nested deeper than
 *                 CP_ONNX_MAX_NESTING; a model file over 2 GiB (protobuf's own limit) and
 *                 unpacking whose memory (added up from the bytes that call for it: each
 *                 message, array slot, string and unknown field) passes the memory limit
 *                 (CTXPATCH_MEMORY_LIMIT, else the RAM: base/memory.h) are CP_EOVERFLOW;
 *                 a node with an absent or empty op_type is CP_EONNX_GRAPH, refused during the
 *                 walk (before any allocation) with its offset and its index in its graph;
 *   graphs, CP_EONNX_GRAPH: no graph, subgraphs (attributes of type GRAPH / GRAPHS) nested deeper
 *                 than the bound (params.max_graph_depth), attributes of unknown type or without
 *                 their value, value shapes with negative or too many dims, duplicate graph input
 *                 or initializer names, a name produced twice (node outputs, graph inputs,
 *                 initializers: SSA; two exceptions onnxruntime makes too: a graph input that is
 *                 also an initializer, its default, and a name several Constant nodes define:
 *                 the last in file order defines it, as in onnxruntime/gpt2_past.onnx),
 *                 shadowing of an outer scope's name, node inputs no node / input / initializer
 *                 / outer scope produces, cycles (Kahn's algorithm over names; sources are
 *                 initializers, graph inputs and outer-scope names), and, with
 *                 params.require_sorted, nodes out of topological order. Graphs merely out of
 *                 file order are read (real exports are like that: onnxruntime's
 *                 gpt2_past.onnx) and a topological order is given;
 *   tensors, CP_EONNX_TENSOR: unknown data types (UNDEFINED or past FLOAT4E2M1 = 23), more than
 *                 CP_MAX_DIMS dims, negative dims, raw_data whose size is not shape x dtype, a
 *                 typed field (float_data, int32_data, int64_data, double_data, uint64_data)
 *                 whose count is not numel or that does not carry the dtype, raw_data and a typed
 *                 field both, external data and bytes in the model both, no data for numel > 0;
 *                 dim products or byte sizes that overflow 2^63 are CP_EOVERFLOW; STRING
 *                 initializers, sparse initializers and SPARSE_TENSOR(S) attributes are
 *                 CP_EONNX_DTYPE;
 *   external data, CP_EONNX_EXTERNAL (onnx's CVE-2022-25882 and CVE-2024-27318 rules): a location
 *                 that is empty, absolute, or has a ".." or empty component, or names a symlink
 *                 as its final or a parent component (CP_EFILETYPE: every component is opened with
 *                 openat + O_NOFOLLOW from the model's folder, so nothing outside that folder is
 *                 ever opened: a hard link is a file inside it and is read), anything but a
 *                 regular file (CP_EFILETYPE; FIFOs never block), a file that is not there
 *                 (CP_ENOTFOUND), no location, offset or length not decimal numbers, offset +
 *                 length past the end of the file (overflow-checked), length other than the
 *                 tensor's byte size (an absent length means the tensor's byte size), an offset
 *                 not a multiple of the element size (the alignment the dtype declares, so
 *                 mapped views are aligned).
 *                 Data files of any size are mapped read-only (64-bit offsets: files past 2 GiB
 *                 work); each file is opened and mapped once, and only the byte ranges tensors
 *                 use are ever touched (cp_onnx_data_ranges: what the graph digest hashes and
 *                 `patch` copies). Ranges may overlap (tied weights share bytes; ONNX forbids
 *                 nothing there): the union is what counts.
 *
 * Ownership: cp_onnx_model owns everything reachable from it (strings, views, mapped data files);
 * all pointers stay valid until cp_onnx_model_free.
 */
#ifndef CTXPATCH_FORMATS_ONNX_GRAPH_H
#define CTXPATCH_FORMATS_ONNX_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/onnx.h"
#include "ctxpatch/formats/tensor.h"

#define CP_ONNX_MAX_GRAPH_DEPTH 16   /* default bound on subgraph nesting (main graph: depth 0) */
#define CP_ONNX_MAX_NESTING 100      /* protobuf messages inside one another, at most */

typedef struct cp_onnx_graph cp_onnx_graph;
typedef struct cp_onnx_model_priv cp_onnx_model_priv;

typedef struct {
  int max_graph_depth; /* subgraph nesting at most; 0: CP_ONNX_MAX_GRAPH_DEPTH */
  bool require_sorted; /* refuse nodes out of topological order (onnx's checker) instead of sorting */
} cp_onnx_read_params;

void cp_onnx_read_params_init(cp_onnx_read_params *p);

typedef struct {
  size_t len;
  const uint8_t *data;
} cp_onnx_bytes;

typedef enum {
  CP_ONNX_STORE_NONE,     /* numel 0: no bytes */
  CP_ONNX_STORE_RAW,      /* raw_data */
  CP_ONNX_STORE_TYPED,    /* float_data, int32_data, int64_data, double_data or uint64_data */
  CP_ONNX_STORE_EXTERNAL  /* a data file beside the model */
} cp_onnx_storage;

typedef struct {
  const char *file;      /* the model file (for messages) */
  const char *name;
  int32_t elem_type;     /* ONNX TensorProto.DataType, 1..23 */
  bool has_dtype;        /* the type is one of ctxpatch's (cp_dtype) */
  cp_dtype dtype;        /* when has_dtype */
  int ndim;
  int64_t shape[CP_MAX_DIMS];
  uint64_t numel, nbytes; /* nbytes: numel x element size (4-bit types: rounded up) */
  cp_onnx_storage storage;
  const void *data;      /* RAW and EXTERNAL: the nbytes little-endian bytes (the unpacked proto or
                            a read-only map of the data file, aligned to the element size); else NULL */
  const char *location;  /* EXTERNAL: the data file, relative to the model's folder */
  uint64_t offset;       /* EXTERNAL: offset of the bytes in it */
  const void *proto;     /* internal (the TensorProto) */
} cp_onnx_tensor;

/* One dimension of a value's shape: value >= 0, or param (symbolic), or neither (value -1,
 * param NULL: unknown). cp_onnx_dim is onnx.h's. */
typedef struct {
  const char *name;
  bool is_tensor;        /* a tensor type (else a sequence, map, optional, ... or no type) */
  int32_t elem_type;     /* tensor element type; 0 when not given */
  int ndim;              /* -1 when no shape is given */
  const cp_onnx_dim *dims; /* [ndim] */
} cp_onnx_value;

/* AttributeProto.AttributeType, ONNX's numbering. */
typedef enum {
  CP_ONNX_ATYPE_UNDEFINED = 0, CP_ONNX_ATYPE_FLOAT = 1, CP_ONNX_ATYPE_INT = 2, CP_ONNX_ATYPE_STRING = 3,
  CP_ONNX_ATYPE_TENSOR = 4, CP_ONNX_ATYPE_GRAPH = 5, CP_ONNX_ATYPE_FLOATS = 6, CP_ONNX_ATYPE_INTS = 7,
  CP_ONNX_ATYPE_STRINGS = 8, CP_ONNX_ATYPE_TENSORS = 9, CP_ONNX_ATYPE_GRAPHS = 10,
  CP_ONNX_ATYPE_SPARSE_TENSOR = 11, CP_ONNX_ATYPE_SPARSE_TENSORS = 12, CP_ONNX_ATYPE_TYPE_PROTO = 13,
  CP_ONNX_ATYPE_TYPE_PROTOS = 14
} cp_onnx_attr_type;

typedef struct {
  const char *name;
  const char *ref_attr_name; /* inside a function body: the attribute it refers to; else NULL */
  cp_onnx_attr_type type;    /* as declared, or inferred from the field set when absent */
  float f;
  int64_t i;
  cp_onnx_bytes s;
  const cp_onnx_tensor *t;   /* TENSOR */
  const cp_onnx_graph *g;    /* GRAPH */
  size_t n;                  /* elements of the list kinds below */
  const float *floats;       /* FLOATS [n] */
  const int64_t *ints;       /* INTS [n] */
  const cp_onnx_bytes *strings; /* STRINGS [n] */
  const cp_onnx_tensor *tensors; /* TENSORS [n] */
  const cp_onnx_graph *graphs;   /* GRAPHS [n] */
} cp_onnx_attribute;

typedef struct {
  const char *name, *op_type, *domain; /* "" when absent; domain "" is the default (ai.onnx) */
  const char *const *inputs;  /* [n_inputs]; "" marks an omitted optional input */
  size_t n_inputs;
  const char *const *outputs; /* [n_outputs]; "" marks an omitted optional output */
  size_t n_outputs;
  const cp_onnx_attribute *attrs; /* [n_attrs] */
  size_t n_attrs;
} cp_onnx_node;

struct cp_onnx_graph {
  const char *name;
  int depth;                 /* 0 for the main graph */
  const cp_onnx_node *nodes; /* [n_nodes], file order */
  size_t n_nodes;
  const size_t *order;       /* [n_nodes] node indexes in a topological order (stable: file order
                                wherever it allows) */
  bool sorted;               /* file order was topological already */
  const cp_onnx_tensor *initializers; /* [n_initializers], file order */
  size_t n_initializers;
  const cp_onnx_value *inputs, *outputs, *value_info;
  size_t n_inputs, n_outputs, n_value_info;
};

typedef struct {
  const char *domain; /* "" for the default */
  int64_t version;
} cp_onnx_opset;

typedef struct {
  const char *key, *value;
} cp_onnx_prop;

typedef struct {
  const char *path;          /* as given to cp_onnx_model_open */
  int64_t ir_version, model_version;
  const char *producer_name, *producer_version, *domain; /* "" when absent */
  const cp_onnx_opset *opsets; /* [n_opsets] */
  size_t n_opsets;
  const cp_onnx_prop *metadata; /* [n_metadata], file order */
  size_t n_metadata;
  const cp_onnx_graph *graph;
  size_t n_functions;        /* model-local functions (read, not described) */
  const char *const *data_files; /* [n_data_files] external data locations, first use first */
  size_t n_data_files;
  cp_onnx_model_priv *priv;
} cp_onnx_model;

/* Reads and checks the model at `path` (params may be NULL: defaults). *out is the caller's
 * (cp_onnx_model_free); NULL on error. */
int cp_onnx_model_open(cp_onnx_model **out, const char *path, const cp_onnx_read_params *params);
/* cp_onnx_model_open on the bytes buf[0, len) of a model file that lies (or is about to lie) at
 * `path`: external data is resolved in path's folder; buf is not kept. */
int cp_onnx_model_open_bytes(cp_onnx_model **out, const char *path, const uint8_t *buf, size_t len,
                             const cp_onnx_read_params *params);
void cp_onnx_model_free(cp_onnx_model *m);

/* The version of `domain` imported ("" and "ai.onnx" are the same), or -1. */
int64_t cp_onnx_model_opset(const cp_onnx_model *m, const char *domain);
/* The value of metadata_props key `key`, or NULL. */
const char *cp_onnx_model_meta(const cp_onnx_model *m, const char *key);
/* The initializer named `name` in g (not its outer scopes), or NULL. */
const cp_onnx_tensor *cp_onnx_graph_initializer(const cp_onnx_graph *g, const char *name);
/* The attribute named `name` of n, or NULL. */
const cp_onnx_attribute *cp_onnx_node_attr(const cp_onnx_node *n, const char *name);

/* The bytes [offset, offset + length) of a data file that tensors use. */
typedef struct {
  uint64_t offset, length;
} cp_onnx_range;

/* The byte ranges of data file m->data_files[k] that the graph's tensors use (every tensor the
 * reader read: initializers and tensor attributes, in every subgraph), sorted, disjoint, with
 * empty ones left out and overlapping or adjacent ones merged: *ranges [*n] borrowed from m;
 * *file_size the file's size; *map its read-only mapping (NULL when empty). */
void cp_onnx_data_ranges(const cp_onnx_range **ranges, size_t *n, uint64_t *file_size, const void **map,
                         const cp_onnx_model *m, size_t k);

/* The elements of t, row-major, as float, from any storage: f32, f16, bf16, f64 and the integer
 * and bool types (converted); other types (float8, 4-bit, complex) are CP_EONNX_DTYPE. */
int cp_onnx_tensor_f32(float *dst /* [t->numel] */, const cp_onnx_tensor *t);
/* The elements of an integer or bool tensor as int64 (shapes, axes, indices). */
int cp_onnx_tensor_i64(int64_t *dst /* [t->numel] */, const cp_onnx_tensor *t);

#endif
