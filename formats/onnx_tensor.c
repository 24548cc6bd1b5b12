/* Tensors of the ONNX reader (include/ctxpatch/formats/onnx_graph.h): a TensorProto's type,
 * shape and bytes checked against each other (raw_data, the typed fields as onnx.proto packs
 * them, or external data), and its elements handed out as float or int64. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "formats/onnx_graph_priv.h"

#define ELEM_MAX 23 /* FLOAT4E2M1, the newest type known here */

/* Per ONNX data type: bits per element (0: no fixed size) and ctxpatch's dtype (-1: none). */
static const struct {
  const char *name;
  int bits;
  int dtype;
} elem_types[ELEM_MAX + 1] = {
    [1] = {"FLOAT", 32, CP_F32},      [2] = {"UINT8", 8, CP_U8},       [3] = {"INT8", 8, CP_I8},
    [4] = {"UINT16", 16, -1},         [5] = {"INT16", 16, CP_I16},     [6] = {"INT32", 32, CP_I32},
    [7] = {"INT64", 64, CP_I64},      [8] = {"STRING", 0, -1},         [9] = {"BOOL", 8, CP_BOOL},
    [10] = {"FLOAT16", 16, CP_F16},   [11] = {"DOUBLE", 64, CP_F64},   [12] = {"UINT32", 32, -1},
    [13] = {"UINT64", 64, -1},        [14] = {"COMPLEX64", 64, -1},    [15] = {"COMPLEX128", 128, -1},
    [16] = {"BFLOAT16", 16, CP_BF16}, [17] = {"FLOAT8E4M3FN", 8, CP_F8_E4M3}, [18] = {"FLOAT8E4M3FNUZ", 8, -1},
    [19] = {"FLOAT8E5M2", 8, CP_F8_E5M2}, [20] = {"FLOAT8E5M2FNUZ", 8, -1}, [21] = {"UINT4", 4, -1},
    [22] = {"INT4", 4, -1},           [23] = {"FLOAT4E2M1", 4, -1},
};

/* The typed field onnx.proto stores elements of type `e` in, and how many entries numel takes. */
typedef enum { F_FLOAT, F_INT32, F_INT64, F_DOUBLE, F_UINT64 } typed_field;
static const char *const field_names[] = {"float_data", "int32_data", "int64_data", "double_data", "uint64_data"};

static typed_field field_of(int32_t e, uint64_t numel, uint64_t *count) {
  *count = numel;
  switch (e) {
  case 1: return F_FLOAT;
  case 14: *count = numel * 2; return F_FLOAT; /* numel checked below 2^62 */
  case 7: return F_INT64;
  case 11: return F_DOUBLE;
  case 15: *count = numel * 2; return F_DOUBLE;
  case 12: case 13: return F_UINT64;
  case 21: case 22: case 23: *count = numel / 2 + numel % 2; return F_INT32; /* two per entry */
  default: return F_INT32;
  }
}

static size_t typed_count(const Onnx__TensorProto *tp, typed_field f) {
  switch (f) {
  case F_FLOAT: return tp->n_float_data;
  case F_INT32: return tp->n_int32_data;
  case F_INT64: return tp->n_int64_data;
  case F_DOUBLE: return tp->n_double_data;
  default: return tp->n_uint64_data;
  }
}

static int build_external(cp_onnx_model *m, cp_onnx_tensor *t, const Onnx__TensorProto *tp, const char *what) {
  const char *loc = NULL;
  uint64_t off = 0, len = t->nbytes;
  char q[128];
  for (size_t k = 0; k < tp->n_external_data; k++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[k];
    const char *key = e->key ? e->key : "", *val = e->value ? e->value : "";
    if (!strcmp(key, "location")) {
      loc = val;
      continue;
    }
    if (strcmp(key, "offset") && strcmp(key, "length")) continue; /* checksum, basepath: unused */
    char *end = NULL;
    uint64_t v = strtoull(val, &end, 10);
    if (!val[0] || *end || val[0] == '-' || (v == UINT64_MAX))
      return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external %s '%s' is not a decimal number", m->path, what, key,
                          cp_onnx_q(q, val));
    *(key[0] == 'o' ? &off : &len) = v;
  }
  if (!loc) return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external data without a location", m->path, what);
  const cp_onnx_datafile *f = NULL;
  int rc = cp_onnx_external_map(&f, m, loc, what);
  if (rc < 0) return rc;
  size_t esz = (size_t)(elem_types[t->elem_type].bits + 7) / 8;
  if (len != t->nbytes)
    return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external length %" PRIu64 " is not its %" PRIu64 " bytes", m->path,
                        what, len, t->nbytes);
  if (off > f->size || len > f->size - off)
    return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external bytes [%" PRIu64 ", +%" PRIu64 ") run past the end of "
                        "'%s' (%" PRIu64 " bytes)", m->path, what, off, len, cp_onnx_q(q, loc), f->size);
  if (off % esz)
    return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external offset %" PRIu64 " is not a multiple of its %zu-byte "
                        "element", m->path, what, off, esz);
  t->storage = CP_ONNX_STORE_EXTERNAL, t->location = f->location, t->offset = off;
  t->data = f->map ? (const uint8_t *)f->map + off : NULL;
  return cp_onnx_external_use(m, f, off, len);
}

int cp_onnx_tensor_build(cp_onnx_model *m, cp_onnx_tensor *t, const Onnx__TensorProto *tp, const char *what) {
  memset(t, 0, sizeof *t);
  t->file = m->path, t->name = tp->name ? tp->name : "", t->proto = tp;
  int32_t e = tp->has_data_type ? tp->data_type : 0;
  if (e <= 0 || e > ELEM_MAX)
    return cp_error_set(CP_EONNX_TENSOR, "%s: %s: unknown data type %d", m->path, what, (int)e);
  if (!elem_types[e].bits)
    return cp_error_set(CP_EONNX_DTYPE, "%s: %s: %s tensors are not supported", m->path, what, elem_types[e].name);
  t->elem_type = e, t->has_dtype = elem_types[e].dtype >= 0;
  t->dtype = t->has_dtype ? (cp_dtype)elem_types[e].dtype : CP_U8;
  if (tp->n_dims > CP_MAX_DIMS)
    return cp_error_set(CP_EONNX_TENSOR, "%s: %s: %zu dims (at most %d)", m->path, what, tp->n_dims, CP_MAX_DIMS);
  t->ndim = (int)tp->n_dims;
  uint64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    if ((t->shape[d] = tp->dims[d]) < 0)
      return cp_error_set(CP_EONNX_TENSOR, "%s: %s: negative dim %d (%" PRId64 ")", m->path, what, d, tp->dims[d]);
    if (!cp_mul_u64(&numel, numel, (uint64_t)tp->dims[d]) || numel > ((uint64_t)1 << 62))
      return cp_error_set(CP_EOVERFLOW, "%s: %s: dim product overflows at dim %d", m->path, what, d);
  }
  t->numel = numel;
  t->nbytes = elem_types[e].bits == 4 ? numel / 2 + numel % 2 : numel * (uint64_t)(elem_types[e].bits / 8);
  if (t->nbytes / 8 > ((uint64_t)1 << 59))
    return cp_error_set(CP_EOVERFLOW, "%s: %s: byte size overflows", m->path, what);
  uint64_t count;
  typed_field f = field_of(e, numel, &count);
  size_t n_typed = tp->n_float_data + tp->n_int32_data + tp->n_int64_data + tp->n_double_data + tp->n_uint64_data;
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    int rc = build_external(m, t, tp, what); /* the location first: it is what an attack changes */
    if (rc == 0 && (tp->has_raw_data || n_typed))
      rc = cp_error_set(CP_EONNX_TENSOR, "%s: %s: external data and bytes in the model both", m->path, what);
    return rc;
  }
  if (tp->has_raw_data && n_typed)
    return cp_error_set(CP_EONNX_TENSOR, "%s: %s: raw_data and a typed field both", m->path, what);
  if (tp->has_raw_data) {
    if (tp->raw_data.len != t->nbytes)
      return cp_error_set(CP_EONNX_TENSOR, "%s: %s: %zu raw_data bytes for a %" PRIu64 "-byte shape", m->path, what,
                          tp->raw_data.len, t->nbytes);
    t->storage = numel ? CP_ONNX_STORE_RAW : CP_ONNX_STORE_NONE, t->data = tp->raw_data.data;
    return 0;
  }
  if (n_typed != typed_count(tp, f))
    return cp_error_set(CP_EONNX_TENSOR, "%s: %s: a %s tensor keeps its elements in %s, not in another typed field",
                        m->path, what, elem_types[e].name, field_names[f]);
  if (typed_count(tp, f) != count)
    return cp_error_set(CP_EONNX_TENSOR, "%s: %s: %zu entries in %s for %" PRIu64 " elements", m->path, what,
                        typed_count(tp, f), field_names[f], numel);
  t->storage = numel ? CP_ONNX_STORE_TYPED : CP_ONNX_STORE_NONE;
  return 0;
}

/* Element k of t as a double (integers up to 2^53 exact) or, for integer types, as int64. */
static double elem_f(const cp_onnx_tensor *t, uint64_t k) {
  const Onnx__TensorProto *tp = t->proto;
  const uint8_t *p = t->data;
  if (t->storage == CP_ONNX_STORE_TYPED) {
    switch (t->elem_type) {
    case 1: return tp->float_data[k];
    case 7: return (double)tp->int64_data[k];
    case 11: return tp->double_data[k];
    case 10: return cp_f16_to_f32((uint16_t)tp->int32_data[k]);
    case 16: return cp_bf16_to_f32((uint16_t)tp->int32_data[k]);
    case 2: return (uint8_t)tp->int32_data[k];
    case 3: return (int8_t)tp->int32_data[k];
    case 5: return (int16_t)tp->int32_data[k];
    case 9: return tp->int32_data[k] != 0;
    default: return tp->int32_data[k]; /* INT32 */
    }
  }
  switch (t->elem_type) {
  case 1: {
    uint32_t u = cp_le32(p + 4 * k);
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case 11: {
    uint64_t u = cp_le64(p + 8 * k);
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
  case 10: return cp_f16_to_f32(cp_le16(p + 2 * k));
  case 16: return cp_bf16_to_f32(cp_le16(p + 2 * k));
  case 7: return (double)(int64_t)cp_le64(p + 8 * k);
  case 6: return (int32_t)cp_le32(p + 4 * k);
  case 5: return (int16_t)cp_le16(p + 2 * k);
  case 3: return (int8_t)p[k];
  case 9: return p[k] != 0;
  default: return p[k]; /* UINT8 */
  }
}

static int check_readable(const cp_onnx_tensor *t, bool ints_only) {
  bool ok = t->has_dtype && t->dtype != CP_F8_E4M3 && t->dtype != CP_F8_E5M2;
  if (ints_only) ok = ok && !cp_dtype_is_float(t->dtype);
  char q[128];
  if (!ok)
    return cp_error_set(CP_EONNX_DTYPE, "%s: tensor '%s': %s elements cannot be read as %s", t->file,
                        cp_onnx_q(q, t->name), elem_types[t->elem_type].name, ints_only ? "integers" : "floats");
  return 0;
}

int cp_onnx_tensor_f32(float *dst, const cp_onnx_tensor *t) {
  int rc = check_readable(t, false);
  if (rc < 0) return rc;
  if (t->storage == CP_ONNX_STORE_TYPED && t->elem_type == 1) {
    memcpy(dst, ((const Onnx__TensorProto *)t->proto)->float_data, (size_t)t->numel * sizeof *dst);
    return 0;
  }
  for (uint64_t k = 0; k < t->numel; k++) dst[k] = (float)elem_f(t, k);
  return 0;
}

int cp_onnx_tensor_i64(int64_t *dst, const cp_onnx_tensor *t) {
  int rc = check_readable(t, true);
  if (rc < 0) return rc;
  const Onnx__TensorProto *tp = t->proto;
  for (uint64_t k = 0; k < t->numel; k++) {
    if (t->elem_type != 7) dst[k] = (int64_t)elem_f(t, k);
    else dst[k] = t->storage == CP_ONNX_STORE_TYPED ? tp->int64_data[k] : (int64_t)cp_le64((const uint8_t *)t->data + 8 * k);
  }
  return 0;
}
