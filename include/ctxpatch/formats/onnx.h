/* Floor: formats. Writing (and reading back, bounded) ONNX models: a ModelProto built node by
 * node and serialised with protobuf-c over the schema of Debian's libonnx-dev (onnx.proto of
 * ONNX 1.12). The protobuf-c types stay inside formats/onnx_*.c: callers see opaque handles.
 *
 * What is written: IR version 8 and the default-domain opset 17, the newest that python3-onnx
 * 1.12 (Debian's checker) knows, so every graph passes its checker, and onnxruntime 1.14 or
 * later runs it.
 *
 * Byte layout of an exported model (ONNX's own; see onnx.proto):
 *   NAME.onnx       ModelProto: ir_version 8, opset_import [{"" 17}], producer "ctxpatch",
 *                   graph {node*, initializer*, input*, output*}, metadata_props (key order as
 *                   added). An initializer smaller than the external threshold holds its bytes
 *                   in raw_data (little-endian); a larger one has data_location EXTERNAL and
 *                   external_data {location: "NAME.onnx.data" (relative), offset, length}.
 *   NAME.onnx.data  the large initializers' bytes back to back, each starting at a multiple of
 *                   4096 (zero padding between), in the order they were added. Absent when no
 *                   initializer is that large.
 * Serialisation is deterministic: the same calls in the same order give the same bytes.
 *
 * Float initializers may be stored as float16 or bfloat16 (round to nearest even): the stored
 * tensor is then named NAME.stored and a Cast node (to float) produces NAME, so the graph
 * computes in float32 whatever the storage (weight-only half precision).
 *
 * Streaming: a tensor's bytes are appended in pieces (cp_onnx_tensor_write) and a large one goes
 * straight to the data file, so no tensor is held twice; only inline (small) tensors are kept in
 * memory until commit. Both files are written atomically (base/io.h): nothing appears on error.
 *
 * Ownership: the writer copies every string and array it is given; the caller keeps its own.
 */
#ifndef CTXPATCH_FORMATS_ONNX_H
#define CTXPATCH_FORMATS_ONNX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

#define CP_ONNX_IR_VERSION 8
#define CP_ONNX_OPSET 17
/* onnx's own convert_model_to_external_data default (size_threshold=1024). */
#define CP_ONNX_DEFAULT_EXTERNAL_THRESHOLD ((uint64_t)1024)
/* Inline initializer bytes at most, so that the model proto (nodes and names besides) stays under
 * protobuf's 2 GiB message limit whatever the tensors' count and threshold. */
#define CP_ONNX_DEFAULT_INLINE_MAX ((uint64_t)1 << 30)
#define CP_ONNX_DATA_ALIGN 4096

typedef struct cp_onnx_writer cp_onnx_writer;

typedef struct {
  uint64_t external_threshold; /* initializers of this many bytes or more go to external data;
                                  0: CP_ONNX_DEFAULT_EXTERNAL_THRESHOLD */
  uint64_t inline_max;         /* inline initializer bytes at most: a smaller tensor that would
                                  pass it goes to external data too; 0: CP_ONNX_DEFAULT_INLINE_MAX */
  cp_dtype weight_dtype;       /* CP_F32 (default), CP_F16 or CP_BF16: storage of float
                                  initializers added with `lowp` */
  const char *graph_name;      /* NULL: "ctxpatch" */
  const char *producer_version; /* NULL: the library version */
} cp_onnx_params;

void cp_onnx_params_init(cp_onnx_params *p);

/* Starts a model to be written at `path` (its data file is path + ".data", beside it). */
int cp_onnx_writer_open(cp_onnx_writer **out, const char *path, const cp_onnx_params *params);
/* Removes whatever was written (temporaries) and frees; NULL is a no-op. */
void cp_onnx_writer_abort(cp_onnx_writer *w);
/* Serialises the model, commits both files and frees the writer (also on error). model_hex and
 * data_hex (each may be NULL) get the SHA-256 of the files; data_hex is "" when no data file was
 * written. */
int cp_onnx_writer_commit(cp_onnx_writer *w, char model_hex[65], char data_hex[65]);

/* One dimension of a graph input or output: a fixed size, or a symbolic name when `param` is set. */
typedef struct {
  int64_t value;
  const char *param;
} cp_onnx_dim;

/* Graph inputs and outputs, in the order added. elem: CP_F32, CP_F16, CP_I64, CP_BOOL, ... */
int cp_onnx_add_input(cp_onnx_writer *w, const char *name, cp_dtype elem, int ndim, const cp_onnx_dim *dims);
int cp_onnx_add_output(cp_onnx_writer *w, const char *name, cp_dtype elem, int ndim, const cp_onnx_dim *dims);

typedef enum { CP_ONNX_ATTR_INT, CP_ONNX_ATTR_FLOAT, CP_ONNX_ATTR_INTS, CP_ONNX_ATTR_FLOATS, CP_ONNX_ATTR_STRING } cp_onnx_attr_kind;

typedef struct {
  const char *name;
  cp_onnx_attr_kind kind;
  int64_t i;
  float f;
  const int64_t *ints; /* [n] */
  const float *floats; /* [n] */
  int n;
  const char *s;
} cp_onnx_attr;

/* Appends a node of the default domain (nodes must be added in topological order). */
int cp_onnx_add_node(cp_onnx_writer *w, const char *op, const char *name, const char *const *inputs, int n_in,
                     const char *const *outputs, int n_out, const cp_onnx_attr *attrs, int n_attrs);

/* A metadata_props entry (ModelProto), in the order added. */
int cp_onnx_add_metadata(cp_onnx_writer *w, const char *key, const char *value);

/* Streams one initializer: begin, then write its elements in row-major order in any number of
 * pieces, then end (which checks the count). `lowp`: a float tensor stored in the writer's
 * weight_dtype. Float tensors are given as float (converted on the way), others as raw
 * little-endian elements of `dtype`. Only one tensor is open at a time. */
int cp_onnx_tensor_begin(cp_onnx_writer *w, const char *name, cp_dtype dtype, int ndim, const int64_t *dims,
                         bool lowp);
/* The same for a float32 value (`dtype` CP_F32) whose elements are given as `src` (F32, F16 or
 * BF16: a model kept in its checkpoint's dtype): stored exactly as if each had been widened to
 * float32 and given to cp_onnx_tensor_begin, with no float32 copy made. */
int cp_onnx_tensor_begin_from(cp_onnx_writer *w, const char *name, cp_dtype dtype, cp_dtype src, int ndim,
                              const int64_t *dims, bool lowp);
int cp_onnx_tensor_write(cp_onnx_writer *w, const void *elems, uint64_t count);
/* For a caller that puts the elements in place itself (a transpose, say): where the open
 * tensor's next elements go in the data file's staging buffer, with *room set to how many fit
 * (at least 1, at most those left), then cp_onnx_tensor_advance(w, n <= *room) once n are there.
 * Only for an external tensor stored in the dtype its elements are given in; NULL otherwise
 * (cp_onnx_tensor_write then). *canon: 16-bit elements of a float32 value, whose NaNs the caller
 * must store as cp_half_canon does. The pointer is valid until the next call on w. */
void *cp_onnx_tensor_room(cp_onnx_writer *w, uint64_t *room, bool *canon);
int cp_onnx_tensor_advance(cp_onnx_writer *w, uint64_t count);
int cp_onnx_tensor_end(cp_onnx_writer *w);
/* begin + write + end of a whole tensor. */
int cp_onnx_add_tensor(cp_onnx_writer *w, const char *name, cp_dtype dtype, int ndim, const int64_t *dims,
                       const void *elems, bool lowp);

/* ---- reading back (inspect): a summary made by the full hardened reader (onnx_graph.h) ---- */

typedef struct {
  char *name;
  cp_dtype dtype;
  int ndim;
  int64_t shape[CP_MAX_DIMS];
  bool external;      /* bytes in the data file */
  uint64_t offset;    /* external: offset in it; else 0 */
  uint64_t nbytes;
} cp_onnx_tensor_info;

typedef struct {
  int64_t ir_version, opset;
  char *producer_name, *producer_version;
  size_t n_nodes;
  cp_onnx_tensor_info *tensors; /* [n_tensors], initializers in file order */
  size_t n_tensors;
  char **meta_keys, **meta_values; /* [n_meta] */
  size_t n_meta;
  char **inputs, **outputs;        /* graph input / output names */
  size_t n_inputs, n_outputs;
  char *data_location;             /* the first external data file named (relative), or NULL */
} cp_onnx_info;

/* Reads the model file at `path` (at most 2 GiB) with cp_onnx_model_open (every refusal listed in
 * onnx_graph.h applies) and summarises its main graph; an initializer whose type has no cp_dtype
 * (UINT16, UINT32, UINT64, complex, FNUZ float8, 4-bit) is refused with CP_EONNX_DTYPE.
 * Caller frees *out with cp_onnx_info_free. */
int cp_onnx_read_info(cp_onnx_info *out, const char *path);
void cp_onnx_info_free(cp_onnx_info *info);
/* The value of metadata key `key`, or NULL (borrowed from info). */
const char *cp_onnx_info_meta(const cp_onnx_info *info, const char *key);

#endif
