/* ONNX model writer (include/ctxpatch/formats/onnx.h): builds the ModelProto with protobuf-c in
 * an arena, streams large initializers into the external data file as they are added (converted
 * straight into the staged atomic file's buffers: the hash thread reads one while the other
 * fills), and packs the proto straight into an atomic file. */
#include "ctxpatch/formats/onnx.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/arena.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/version.h"
#include "formats/onnx_proto.h"
#include "onnx.pb-c.h"

#define PROTO_MAX ((size_t)INT32_MAX) /* protobuf's 2 GiB message limit */

/* A growable array of message pointers (the repeated fields, set on the proto at commit). */
#define PTR_LIST(T) \
  struct {          \
    T **v;          \
    size_t n, cap;  \
  }

struct cp_onnx_writer {
  cp_arena ar;
  char *path, *data_path, *data_name; /* data_name: the relative location written in the model */
  cp_onnx_params p;
  cp_atomic_file *data; /* staged; opened on the first external tensor */
  uint64_t data_at;     /* bytes appended to it */
  PTR_LIST(Onnx__NodeProto) nodes;
  PTR_LIST(Onnx__TensorProto) inits;
  PTR_LIST(Onnx__ValueInfoProto) inputs;
  PTR_LIST(Onnx__ValueInfoProto) outputs;
  PTR_LIST(Onnx__StringStringEntryProto) meta;
  /* The tensor being streamed. */
  Onnx__TensorProto *cur;
  cp_dtype cur_src, cur_dst; /* elements given as cur_src, stored as cur_dst */
  bool cur_canon;            /* 16-bit floats of a float32 value: NaNs as a float32 round trip leaves them */
  uint64_t cur_numel, cur_done;
  bool cur_external;
  uint64_t inline_bytes; /* raw_data bytes of the inline initializers so far (<= p.inline_max) */
};

void cp_onnx_params_init(cp_onnx_params *p) {
  memset(p, 0, sizeof *p);
  p->external_threshold = CP_ONNX_DEFAULT_EXTERNAL_THRESHOLD;
  p->inline_max = CP_ONNX_DEFAULT_INLINE_MAX;
  p->weight_dtype = CP_F32;
}

static char *ar_strdup(cp_onnx_writer *w, const char *s) {
  size_t n = strlen(s) + 1;
  char *c = cp_arena_alloc(&w->ar, n);
  if (c) memcpy(c, s, n);
  return c;
}

static int push_ptr(void *list_v, size_t *n, size_t *cap, void *item, const char *what) {
  void ***v = list_v;
  int rc = cp_array_reserve(v, cap, *n + 1, sizeof **v, what);
  if (rc < 0) return rc;
  (*v)[(*n)++] = item;
  return 0;
}
#define PUSH(list, item, what) push_ptr(&(list).v, &(list).n, &(list).cap, (item), (what))

int32_t cp_onnx_elem_type(cp_dtype d) {
  switch (d) {
    case CP_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case CP_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
    case CP_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
    case CP_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
    case CP_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case CP_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    case CP_I16: return ONNX__TENSOR_PROTO__DATA_TYPE__INT16;
    case CP_I8: return ONNX__TENSOR_PROTO__DATA_TYPE__INT8;
    case CP_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
    case CP_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
    default: return ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED;
  }
}

int cp_onnx_dtype_from_elem(cp_dtype *out, int32_t elem) {
  for (int d = 0; d < CP_DTYPE_COUNT; d++)
    if (cp_onnx_elem_type((cp_dtype)d) == elem && elem != ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED) {
      *out = (cp_dtype)d;
      return 0;
    }
  return CP_EONNX_DTYPE;
}

int cp_onnx_writer_open(cp_onnx_writer **out, const char *path, const cp_onnx_params *params) {
  *out = NULL;
  cp_onnx_writer *w = calloc(1, sizeof *w);
  int rc = 0;
  CP_CHECK_ALLOC(w, path);
  if (params) w->p = *params;
  else cp_onnx_params_init(&w->p);
  if (!w->p.external_threshold) w->p.external_threshold = CP_ONNX_DEFAULT_EXTERNAL_THRESHOLD;
  if (!w->p.inline_max) w->p.inline_max = CP_ONNX_DEFAULT_INLINE_MAX;
  if (w->p.weight_dtype != CP_F32 && w->p.weight_dtype != CP_F16 && w->p.weight_dtype != CP_BF16) {
    rc = cp_error_set(CP_EARG, "%s: weight dtype %s is not F32, F16 or BF16", path, cp_dtype_name(w->p.weight_dtype));
    goto done;
  }
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  w->path = ar_strdup(w, path);
  w->data_path = cp_arena_alloc(&w->ar, strlen(path) + 6);
  w->data_name = cp_arena_alloc(&w->ar, strlen(base) + 6);
  CP_CHECK_ALLOC_GOTO(w->path && w->data_path && w->data_name, path);
  sprintf(w->data_path, "%s.data", path);
  sprintf(w->data_name, "%s.data", base);
  *out = w;
  w = NULL;
done:
  cp_onnx_writer_abort(w);
  return rc;
}

void cp_onnx_writer_abort(cp_onnx_writer *w) {
  if (!w) return;
  cp_atomic_abort(w->data);
  free(w->nodes.v), free(w->inits.v), free(w->inputs.v), free(w->outputs.v), free(w->meta.v);
  cp_arena_free(&w->ar);
  free(w);
}

/* ---------------------------------------------------------------- graph inputs and outputs */

static Onnx__ValueInfoProto *value_info(cp_onnx_writer *w, const char *name, cp_dtype elem, int ndim,
                                        const cp_onnx_dim *dims) {
  Onnx__ValueInfoProto *vi = cp_arena_alloc(&w->ar, sizeof *vi);
  Onnx__TypeProto *tp = cp_arena_alloc(&w->ar, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = cp_arena_alloc(&w->ar, sizeof *tt);
  Onnx__TensorShapeProto *sh = cp_arena_alloc(&w->ar, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dv = cp_arena_array(&w->ar, (size_t)ndim + 1, sizeof *dv);
  if (!vi || !tp || !tt || !sh || !dv) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int k = 0; k < ndim; k++) {
    Onnx__TensorShapeProto__Dimension *d = cp_arena_alloc(&w->ar, sizeof *d);
    if (!d) return NULL;
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[k].param) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      if (!(d->dim_param = ar_strdup(w, dims[k].param))) return NULL;
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[k].value;
    }
    dv[k] = d;
  }
  sh->n_dim = (size_t)ndim, sh->dim = dv;
  tt->has_elem_type = 1, tt->elem_type = cp_onnx_elem_type(elem), tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  if (!(vi->name = ar_strdup(w, name))) return NULL;
  vi->type = tp;
  return vi;
}

int cp_onnx_add_input(cp_onnx_writer *w, const char *name, cp_dtype elem, int ndim, const cp_onnx_dim *dims) {
  Onnx__ValueInfoProto *vi = value_info(w, name, elem, ndim, dims);
  CP_CHECK_ALLOC(vi, w->path);
  return PUSH(w->inputs, vi, w->path);
}

int cp_onnx_add_output(cp_onnx_writer *w, const char *name, cp_dtype elem, int ndim, const cp_onnx_dim *dims) {
  Onnx__ValueInfoProto *vi = value_info(w, name, elem, ndim, dims);
  CP_CHECK_ALLOC(vi, w->path);
  return PUSH(w->outputs, vi, w->path);
}

/* ---------------------------------------------------------------- nodes and metadata */

static Onnx__AttributeProto *attribute(cp_onnx_writer *w, const cp_onnx_attr *a) {
  Onnx__AttributeProto *p = cp_arena_alloc(&w->ar, sizeof *p);
  if (!p) return NULL;
  onnx__attribute_proto__init(p);
  if (!(p->name = ar_strdup(w, a->name))) return NULL;
  p->has_type = 1;
  switch (a->kind) {
    case CP_ONNX_ATTR_INT:
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, p->has_i = 1, p->i = a->i;
      break;
    case CP_ONNX_ATTR_FLOAT:
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, p->has_f = 1, p->f = a->f;
      break;
    case CP_ONNX_ATTR_INTS:
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, p->n_ints = (size_t)a->n;
      if (!(p->ints = cp_arena_array(&w->ar, (size_t)a->n + 1, sizeof *p->ints))) return NULL;
      memcpy(p->ints, a->ints, (size_t)a->n * sizeof *p->ints);
      break;
    case CP_ONNX_ATTR_FLOATS:
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS, p->n_floats = (size_t)a->n;
      if (!(p->floats = cp_arena_array(&w->ar, (size_t)a->n + 1, sizeof *p->floats))) return NULL;
      memcpy(p->floats, a->floats, (size_t)a->n * sizeof *p->floats);
      break;
    case CP_ONNX_ATTR_STRING:
      p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, p->has_s = 1;
      if (!(p->s.data = (uint8_t *)ar_strdup(w, a->s))) return NULL;
      p->s.len = strlen(a->s);
      break;
  }
  return p;
}

static char **str_array(cp_onnx_writer *w, const char *const *s, int n) {
  char **v = cp_arena_array(&w->ar, (size_t)n + 1, sizeof *v);
  for (int k = 0; v && k < n; k++)
    if (!(v[k] = ar_strdup(w, s[k]))) return NULL;
  return v;
}

int cp_onnx_add_node(cp_onnx_writer *w, const char *op, const char *name, const char *const *inputs, int n_in,
                     const char *const *outputs, int n_out, const cp_onnx_attr *attrs, int n_attrs) {
  Onnx__NodeProto *nd = cp_arena_alloc(&w->ar, sizeof *nd);
  CP_CHECK_ALLOC(nd, w->path);
  onnx__node_proto__init(nd);
  nd->op_type = ar_strdup(w, op);
  nd->name = name ? ar_strdup(w, name) : NULL;
  nd->input = str_array(w, inputs, n_in);
  nd->output = str_array(w, outputs, n_out);
  nd->attribute = cp_arena_array(&w->ar, (size_t)n_attrs + 1, sizeof *nd->attribute);
  CP_CHECK_ALLOC(nd->op_type && (nd->name || !name) && nd->input && nd->output && nd->attribute, w->path);
  for (int k = 0; k < n_attrs; k++) CP_CHECK_ALLOC(nd->attribute[k] = attribute(w, &attrs[k]), w->path);
  nd->n_input = (size_t)n_in, nd->n_output = (size_t)n_out, nd->n_attribute = (size_t)n_attrs;
  return PUSH(w->nodes, nd, w->path);
}

static Onnx__StringStringEntryProto *entry(cp_onnx_writer *w, const char *key, const char *value) {
  Onnx__StringStringEntryProto *e = cp_arena_alloc(&w->ar, sizeof *e);
  if (!e) return NULL;
  onnx__string_string_entry_proto__init(e);
  e->key = ar_strdup(w, key);
  e->value = ar_strdup(w, value);
  return e->key && e->value ? e : NULL;
}

int cp_onnx_add_metadata(cp_onnx_writer *w, const char *key, const char *value) {
  Onnx__StringStringEntryProto *e = entry(w, key, value);
  CP_CHECK_ALLOC(e, w->path);
  return PUSH(w->meta, e, w->path);
}

/* ---------------------------------------------------------------- initializers */

/* Zero bytes up to the next multiple of CP_ONNX_DATA_ALIGN of the data file (opened on the first
 * call). */
static int data_align(cp_onnx_writer *w) {
  static const unsigned char zeros[CP_ONNX_DATA_ALIGN];
  int rc = 0;
  if (!w->data && (rc = cp_atomic_open_staged(&w->data, w->data_path)) < 0) return rc;
  size_t pad = (size_t)((CP_ONNX_DATA_ALIGN - w->data_at % CP_ONNX_DATA_ALIGN) % CP_ONNX_DATA_ALIGN);
  w->data_at += pad;
  return cp_atomic_write(w->data, zeros, pad);
}

/* Points the tensor at [offset, offset + length) of the data file. */
static int set_external(cp_onnx_writer *w, Onnx__TensorProto *t, uint64_t offset, uint64_t length) {
  char off[24], len[24];
  snprintf(off, sizeof off, "%" PRIu64, offset);
  snprintf(len, sizeof len, "%" PRIu64, length);
  t->external_data = cp_arena_array(&w->ar, 3, sizeof *t->external_data);
  CP_CHECK_ALLOC(t->external_data, w->path);
  CP_CHECK_ALLOC(t->external_data[0] = entry(w, "location", w->data_name), w->path);
  CP_CHECK_ALLOC(t->external_data[1] = entry(w, "offset", off), w->path);
  CP_CHECK_ALLOC(t->external_data[2] = entry(w, "length", len), w->path);
  t->n_external_data = 3;
  t->has_data_location = 1, t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  return 0;
}

/* The Cast node that widens a half-precision stored tensor to the float value `name`. */
static int add_widen(cp_onnx_writer *w, const char *stored, const char *name) {
  cp_onnx_attr to = {.name = "to", .kind = CP_ONNX_ATTR_INT, .i = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT};
  return cp_onnx_add_node(w, "Cast", NULL, &stored, 1, &name, 1, &to, 1);
}

int cp_onnx_tensor_begin(cp_onnx_writer *w, const char *name, cp_dtype dtype, int ndim, const int64_t *dims,
                         bool lowp) {
  return cp_onnx_tensor_begin_from(w, name, dtype, dtype, ndim, dims, lowp);
}

int cp_onnx_tensor_begin_from(cp_onnx_writer *w, const char *name, cp_dtype dtype, cp_dtype src, int ndim,
                              const int64_t *dims, bool lowp) {
  assert(!w->cur && ndim >= 0 && ndim <= CP_MAX_DIMS);
  assert(src == dtype || (dtype == CP_F32 && (src == CP_F16 || src == CP_BF16)));
  cp_dtype dst = lowp && dtype == CP_F32 ? w->p.weight_dtype : dtype;
  uint64_t nbytes, numel;
  if (cp_shape_numel(&numel, ndim, dims) < 0 || cp_shape_nbytes(&nbytes, dst, ndim, dims) < 0 || nbytes > SIZE_MAX)
    return cp_error_set(CP_EOVERFLOW, "%s: initializer '%s': shape too large", w->path, name);
  if (cp_onnx_elem_type(dst) == ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED)
    return cp_error_set(CP_EONNX_DTYPE, "%s: initializer '%s': dtype %s has no ONNX type", w->path, name,
                        cp_dtype_name(dst));
  Onnx__TensorProto *t = cp_arena_alloc(&w->ar, sizeof *t);
  CP_CHECK_ALLOC(t, w->path);
  onnx__tensor_proto__init(t);
  char stored[1024];
  if (dst != dtype && snprintf(stored, sizeof stored, "%s.stored", name) >= (int)sizeof stored)
    return cp_error_set(CP_EARG, "%s: initializer name '%.40s...' is too long", w->path, name);
  CP_CHECK_ALLOC(t->name = ar_strdup(w, dst != dtype ? stored : name), w->path);
  CP_CHECK_ALLOC(t->dims = cp_arena_array(&w->ar, (size_t)ndim + 1, sizeof *t->dims), w->path);
  memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
  t->n_dims = (size_t)ndim;
  t->has_data_type = 1, t->data_type = cp_onnx_elem_type(dst);
  int rc;
  /* Large tensors go external, and so does any tensor that would take the inline bytes past
   * inline_max (so many small tensors cannot push the proto over 2 GiB). */
  w->cur_external = nbytes >= w->p.external_threshold || nbytes > w->p.inline_max - w->inline_bytes;
  if (!w->cur_external) w->inline_bytes += nbytes;
  if (w->cur_external) {
    if ((rc = data_align(w)) < 0 || (rc = set_external(w, t, w->data_at, nbytes)) < 0) return rc;
  } else {
    t->has_raw_data = 1, t->raw_data.len = (size_t)nbytes;
    CP_CHECK_ALLOC(t->raw_data.data = cp_arena_alloc(&w->ar, (size_t)nbytes + 1), w->path);
  }
  if ((rc = PUSH(w->inits, t, w->path)) < 0) return rc;
  if (dst != dtype && (rc = add_widen(w, stored, name)) < 0) return rc;
  w->cur = t, w->cur_src = src, w->cur_dst = dst, w->cur_numel = numel, w->cur_done = 0;
  w->cur_canon = src != dtype;
  return 0;
}

static float widen(cp_dtype d, uint16_t h) { return d == CP_F16 ? cp_f16_to_f32(h) : cp_bf16_to_f32(h); }
static uint16_t narrow(cp_dtype d, float f) { return d == CP_F16 ? cp_f32_to_f16(f) : cp_f32_to_bf16(f); }

/* n elements of `sd` at src into `dd` at dst, as a float32 round trip would store them (the
 * writer was given float32 before the model could stay in its 16-bit dtype: the bytes are the
 * same). `canon`: 16-bit to the same 16-bit, where that round trip only rewrites NaNs. */
static void convert(void *dst, cp_dtype dd, const void *src, cp_dtype sd, size_t n, bool canon) {
  const uint16_t *h = src;
  uint16_t *o = dst;
  if (sd == dd && !canon) {
    memcpy(dst, src, n * cp_dtype_size(sd));
  } else if (sd == dd) {
    cp_half_canon(o, h, n, sd == CP_F16);
  } else if (sd == CP_F32) {
    const float *f = src;
    for (size_t k = 0; k < n; k++) o[k] = narrow(dd, f[k]);
  } else if (dd == CP_F32) {
    float *f = dst;
    for (size_t k = 0; k < n; k++) f[k] = widen(sd, h[k]);
  } else {
    for (size_t k = 0; k < n; k++) o[k] = narrow(dd, widen(sd, h[k]));
  }
}

int cp_onnx_tensor_write(cp_onnx_writer *w, const void *elems, uint64_t count) {
  assert(w->cur);
  if (count > w->cur_numel - w->cur_done)
    return cp_error_set(CP_EARG, "%s: initializer '%s': more than its %" PRIu64 " elements written", w->path,
                        w->cur->name, w->cur_numel);
  size_t ssz = cp_dtype_size(w->cur_src), dsz = cp_dtype_size(w->cur_dst);
  const unsigned char *src = elems;
  while (count > 0) {
    size_t room = (size_t)count;
    /* the staged room is a multiple of dsz: the buffers are, and every tensor starts aligned */
    unsigned char *dst = w->cur_external ? cp_atomic_room(w->data, &room) : w->cur->raw_data.data + (size_t)w->cur_done * dsz;
    size_t n = w->cur_external ? room / dsz : room;
    assert(n > 0);
    if ((uint64_t)n > count) n = (size_t)count;
    convert(dst, w->cur_dst, src, w->cur_src, n, w->cur_canon);
    if (w->cur_external) w->data_at += n * dsz;
    int rc = w->cur_external ? cp_atomic_advance(w->data, n * dsz) : 0;
    if (rc < 0) return rc;
    src += n * ssz, count -= n, w->cur_done += n;
  }
  return 0;
}

void *cp_onnx_tensor_room(cp_onnx_writer *w, uint64_t *room, bool *canon) {
  assert(w->cur);
  *room = 0, *canon = w->cur_canon;
  if (!w->cur_external || w->cur_src != w->cur_dst || w->cur_done == w->cur_numel) return NULL;
  size_t bytes, dsz = cp_dtype_size(w->cur_dst);
  unsigned char *at = cp_atomic_room(w->data, &bytes);
  *room = bytes / dsz < w->cur_numel - w->cur_done ? bytes / dsz : w->cur_numel - w->cur_done;
  return at;
}

int cp_onnx_tensor_advance(cp_onnx_writer *w, uint64_t count) {
  assert(w->cur && w->cur_external && w->cur_src == w->cur_dst && count <= w->cur_numel - w->cur_done);
  size_t n = (size_t)count * cp_dtype_size(w->cur_dst);
  w->cur_done += count, w->data_at += n;
  return cp_atomic_advance(w->data, n);
}

int cp_onnx_tensor_end(cp_onnx_writer *w) {
  assert(w->cur);
  Onnx__TensorProto *t = w->cur;
  w->cur = NULL;
  if (w->cur_done != w->cur_numel)
    return cp_error_set(CP_EARG, "%s: initializer '%s': %" PRIu64 " of its %" PRIu64 " elements written", w->path,
                        t->name, w->cur_done, w->cur_numel);
  return 0;
}

int cp_onnx_add_tensor(cp_onnx_writer *w, const char *name, cp_dtype dtype, int ndim, const int64_t *dims,
                       const void *elems, bool lowp) {
  int rc = cp_onnx_tensor_begin(w, name, dtype, ndim, dims, lowp);
  if (rc == 0) rc = cp_onnx_tensor_write(w, elems, w->cur_numel);
  if (rc == 0) rc = cp_onnx_tensor_end(w);
  else w->cur = NULL;
  return rc;
}

/* ---------------------------------------------------------------- serialisation */

typedef struct {
  ProtobufCBuffer base;
  cp_atomic_file *f;
  int rc;
} file_buffer;

static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  file_buffer *fb = (file_buffer *)b;
  if (fb->rc == 0) fb->rc = cp_atomic_write(fb->f, data, len);
}

/* The ModelProto over the lists gathered so far (pointing into them: pack before they change). */
static void assemble(cp_onnx_writer *w, Onnx__ModelProto *m, Onnx__GraphProto *g, Onnx__OperatorSetIdProto *op,
                     Onnx__OperatorSetIdProto **ops) {
  onnx__model_proto__init(m);
  onnx__graph_proto__init(g);
  onnx__operator_set_id_proto__init(op);
  op->domain = "", op->has_version = 1, op->version = CP_ONNX_OPSET;
  ops[0] = op;
  g->name = (char *)(w->p.graph_name ? w->p.graph_name : "ctxpatch");
  g->n_node = w->nodes.n, g->node = w->nodes.v;
  g->n_initializer = w->inits.n, g->initializer = w->inits.v;
  g->n_input = w->inputs.n, g->input = w->inputs.v;
  g->n_output = w->outputs.n, g->output = w->outputs.v;
  m->has_ir_version = 1, m->ir_version = CP_ONNX_IR_VERSION;
  m->n_opset_import = 1, m->opset_import = ops;
  m->producer_name = "ctxpatch";
  m->producer_version = (char *)(w->p.producer_version ? w->p.producer_version : cp_version());
  m->graph = g;
  m->n_metadata_props = w->meta.n, m->metadata_props = w->meta.v;
}

int cp_onnx_writer_commit(cp_onnx_writer *w, char model_hex[65], char data_hex[65]) {
  assert(!w->cur);
  Onnx__ModelProto m;
  Onnx__GraphProto g;
  Onnx__OperatorSetIdProto op, *ops[1];
  cp_atomic_file *f = NULL;
  int rc = 0;
  assemble(w, &m, &g, &op, ops);
  size_t size = protobuf_c_message_get_packed_size(&m.base);
  if (size > PROTO_MAX) {
    rc = cp_error_set(CP_EOVERFLOW, "%s: model proto of %zu bytes is over protobuf's 2 GiB limit (lower "
                      "--external-threshold)", w->path, size);
    goto done;
  }
  if (data_hex) data_hex[0] = 0;
  if (w->data) {
    if (data_hex) cp_atomic_sha256(w->data, data_hex);
    rc = cp_atomic_commit(w->data);
    w->data = NULL;
    if (rc < 0) goto done;
  }
  if ((rc = cp_atomic_open(&f, w->path)) < 0) goto done;
  file_buffer fb = {{file_append}, f, 0};
  size_t packed = protobuf_c_message_pack_to_buffer(&m.base, &fb.base);
  if ((rc = fb.rc) < 0) goto done;
  assert(packed == size);
  (void)packed;
  if (model_hex) cp_atomic_sha256(f, model_hex);
  rc = cp_atomic_commit(f);
  f = NULL;
done:
  cp_atomic_abort(f);
  cp_onnx_writer_abort(w);
  return rc;
}
