/* The graph-building layer every ONNX exporter uses (include/ctxpatch/export/onnx_builder.h):
 * names, nodes, cached constants, weights and the engine's layer pieces in opset-17 ops. */
#include "ctxpatch/export/onnx_builder.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/arena.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/model/onnx_names.h"
#include "export/onnx/onnx_transpose.h"

typedef struct {
  char *key;  /* "DTYPE.NDIM:" then each element's exact bits in hex */
  const char *name;
} const_entry;

struct cp_og {
  cp_onnx_writer *w;
  const cp_model *src; /* weights in its checkpoint's mapping are released once written */
  cp_arena ar;
  int rc;
  uint64_t counter;
  const_entry *consts;
  size_t n_consts, cap_consts;
  cp_strbuf key;
};

int cp_og_create(cp_og **out, cp_onnx_writer *w) {
  cp_og *g = calloc(1, sizeof *g);
  CP_CHECK_ALLOC(g, "onnx graph");
  g->w = w;
  *out = g;
  return 0;
}

void cp_og_set_source(cp_og *g, const cp_model *m) { g->src = m; }

void cp_og_free(cp_og *g) {
  if (!g) return;
  free(g->consts);
  cp_strbuf_free(&g->key);
  cp_arena_free(&g->ar);
  free(g);
}

int cp_og_status(const cp_og *g) { return g->rc; }

int cp_og_fail(cp_og *g, int rc) {
  if (g->rc == 0) g->rc = rc;
  return rc;
}

/* Records rc when negative (the first error sticks); true while the builder has no error. */
static bool check(cp_og *g, int rc) {
  if (rc < 0) cp_og_fail(g, rc);
  return g->rc == 0;
}

static const char *keep(cp_og *g, const char *s) {
  size_t n = strlen(s) + 1;
  char *c = cp_arena_alloc(&g->ar, n);
  if (!c) {
    cp_og_fail(g, cp_nomem("onnx graph"));
    return NULL;
  }
  return memcpy(c, s, n);
}

const char *cp_og_name(cp_og *g, const char *hint) {
  if (g->rc) return NULL;
  char buf[256];
  snprintf(buf, sizeof buf, "/%.200s_%llu", hint, (unsigned long long)g->counter++);
  return keep(g, buf);
}

/* ---------------------------------------------------------------- nodes */

static bool inputs_ok(const cp_og *g, const char *const *in, int n) {
  if (g->rc) return false;
  for (int k = 0; k < n; k++)
    if (!in[k]) return false;
  return true;
}

const char *cp_og_node_n(cp_og *g, const char *op, const char *const *in, int n_in, const char **out, int n_out,
                         const cp_onnx_attr *attrs, int n_attrs) {
  assert(n_out >= 1 && n_out <= 8);
  if (!inputs_ok(g, in, n_in)) return NULL;
  for (int k = 0; k < n_out; k++)
    if (!(out[k] = cp_og_name(g, op))) return NULL;
  if (!check(g, cp_onnx_add_node(g->w, op, NULL, in, n_in, out, n_out, attrs, n_attrs))) return NULL;
  return out[0];
}

const char *cp_og_node(cp_og *g, const char *op, const char *const *in, int n_in, const cp_onnx_attr *attrs,
                       int n_attrs) {
  const char *out;
  return cp_og_node_n(g, op, in, n_in, &out, 1, attrs, n_attrs);
}

const char *cp_og_op1(cp_og *g, const char *op, const char *a) { return cp_og_node(g, op, &a, 1, NULL, 0); }

const char *cp_og_op2(cp_og *g, const char *op, const char *a, const char *b) {
  const char *in[] = {a, b};
  return cp_og_node(g, op, in, 2, NULL, 0);
}

const char *cp_og_op3(cp_og *g, const char *op, const char *a, const char *b, const char *c) {
  const char *in[] = {a, b, c};
  return cp_og_node(g, op, in, 3, NULL, 0);
}

cp_onnx_attr cp_og_attr_i(const char *name, int64_t v) {
  return (cp_onnx_attr){.name = name, .kind = CP_ONNX_ATTR_INT, .i = v};
}

cp_onnx_attr cp_og_attr_f(const char *name, float v) {
  return (cp_onnx_attr){.name = name, .kind = CP_ONNX_ATTR_FLOAT, .f = v};
}

cp_onnx_attr cp_og_attr_ints(const char *name, const int64_t *v, int n) {
  return (cp_onnx_attr){.name = name, .kind = CP_ONNX_ATTR_INTS, .ints = v, .n = n};
}

/* ---------------------------------------------------------------- constants and weights */

/* The constant of this exact type and value, stored once; ndim 0 (scalar) or 1. */
static const char *constant(cp_og *g, cp_dtype dt, const void *v, int n, int ndim) {
  if (g->rc) return NULL;
  cp_strbuf_reset(&g->key);
  cp_strbuf_printf(&g->key, "%d.%d:", (int)dt, ndim);
  for (int k = 0; k < n; k++) {
    uint64_t bits = 0;
    memcpy(&bits, (const char *)v + (size_t)k * cp_dtype_size(dt), cp_dtype_size(dt));
    cp_strbuf_printf(&g->key, "%llx,", (unsigned long long)bits);
  }
  if (g->key.oom) return cp_og_fail(g, cp_nomem("onnx graph")), NULL;
  for (size_t k = 0; k < g->n_consts; k++)
    if (!strcmp(g->consts[k].key, g->key.s)) return g->consts[k].name;
  char name[32];
  snprintf(name, sizeof name, "const/%zu", g->n_consts);
  int64_t dims[1] = {n};
  const char *kept = keep(g, name), *key = keep(g, g->key.s);
  if (!kept || !key || !check(g, CP_ARRAY_RESERVE(g->consts, g->cap_consts, g->n_consts + 1, "onnx graph")) ||
      !check(g, cp_onnx_add_tensor(g->w, kept, dt, ndim, dims, v, false)))
    return NULL;
  g->consts[g->n_consts++] = (const_entry){(char *)key, kept};
  return kept;
}

const char *cp_og_i64(cp_og *g, int64_t v) { return constant(g, CP_I64, &v, 1, 0); }
const char *cp_og_i64s(cp_og *g, const int64_t *v, int n) { return constant(g, CP_I64, v, n, 1); }
const char *cp_og_f32(cp_og *g, float v) { return constant(g, CP_F32, &v, 1, 0); }
const char *cp_og_f32s(cp_og *g, const float *v, int n) { return constant(g, CP_F32, v, n, 1); }
const char *cp_og_f64s(cp_og *g, const double *v, int n) { return constant(g, CP_F64, v, n, 1); }

/* A block-format weight (a GGUF quant kept as stored) widened to float32 whole: what the
 * float32 loader would have held, for this one tensor only. */
static int widen_blocks(float **out, const void *data, cp_dtype dt, uint64_t numel, const char *name) {
  size_t bytes;
  *out = NULL;
  if (numel > SIZE_MAX / sizeof **out || !cp_size_mul(&bytes, (size_t)numel, sizeof **out) ||
      !(*out = malloc(bytes ? bytes : 1)))
    return cp_nomem("onnx graph: weight '%s'", name);
  return cp_convert_to_f32(*out, data, dt, numel);
}

const char *cp_og_weight_as(cp_og *g, const char *name, const void *data, cp_dtype dt, int ndim, const int64_t *dims,
                            bool lowp) {
  if (g->rc) return NULL;
  assert(name[0] != '/');
  const char *kept = keep(g, name);
  float *wide = NULL;
  uint64_t numel = 0;
  int rc = cp_shape_numel(&numel, ndim, dims);
  if (!kept) return NULL;
  if (rc < 0) rc = cp_error_set(CP_EOVERFLOW, "onnx graph: weight '%s': shape too large", name);
  if (rc == 0 && cp_dtype_is_block(dt)) rc = widen_blocks(&wide, data, dt, numel, name);
  const void *elems = wide ? (const void *)wide : data;
  cp_dtype given = wide ? CP_F32 : dt;
  if (rc == 0) rc = cp_onnx_tensor_begin_from(g->w, kept, CP_F32, given, ndim, dims, lowp);
  if (rc == 0) rc = cp_onnx_tensor_write(g->w, elems, numel);
  if (rc == 0) rc = cp_onnx_tensor_end(g->w);
  if (rc == 0 && g->src) cp_model_release(g->src, data, cp_dtype_span(dt, numel));
  free(wide);
  return check(g, rc) ? kept : NULL;
}

const char *cp_og_weight(cp_og *g, const char *name, const float *data, int ndim, const int64_t *dims, bool lowp) {
  return cp_og_weight_as(g, name, data, CP_F32, ndim, dims, lowp);
}

const char *cp_og_weight_t_as(cp_og *g, const char *name, const void *w, cp_dtype dt, int rows, int cols, bool lowp) {
  if (g->rc) return NULL;
  assert(name[0] != '/' && rows > 0 && cols > 0);
  const char *kept = keep(g, name);
  int64_t dims[2] = {cols, rows};
  float *wide = NULL;
  int rc = 0;
  if (!kept) return NULL;
  uint64_t numel = (uint64_t)rows * (uint64_t)cols; /* two ints: no overflow */
  if (cp_dtype_is_block(dt) && (rc = widen_blocks(&wide, w, dt, numel, name)) < 0) goto done;
  const void *src = wide ? (const void *)wide : w;
  cp_dtype given = wide ? CP_F32 : dt;
  if ((rc = cp_onnx_tensor_begin_from(g->w, kept, CP_F32, given, 2, dims, lowp)) < 0) goto done;
  if ((rc = cp_og_write_transposed(g->w, src, given, rows, cols, name)) < 0) goto done;
  if ((rc = cp_onnx_tensor_end(g->w)) == 0 && g->src)
    cp_model_release(g->src, w, (uint64_t)rows * cp_dtype_span(dt, (uint64_t)cols));
done:
  free(wide);
  return check(g, rc) ? kept : NULL;
}

const char *cp_og_weight_t(cp_og *g, const char *name, const float *w, int rows, int cols, bool lowp) {
  return cp_og_weight_t_as(g, name, w, CP_F32, rows, cols, lowp);
}

/* ---------------------------------------------------------------- graph inputs and outputs */

const char *cp_og_input(cp_og *g, const char *name, cp_dtype elem, int ndim, const cp_onnx_dim *dims) {
  if (g->rc) return NULL;
  const char *kept = keep(g, name);
  if (!kept || !check(g, cp_onnx_add_input(g->w, kept, elem, ndim, dims))) return NULL;
  return kept;
}

int cp_og_output(cp_og *g, const char *name, const char *value, cp_dtype elem, int ndim, const cp_onnx_dim *dims) {
  if (!inputs_ok(g, &value, 1)) return g->rc ? g->rc : CP_EARG;
  if (strcmp(name, value) != 0 && !check(g, cp_onnx_add_node(g->w, "Identity", NULL, &value, 1, &name, 1, NULL, 0)))
    return g->rc;
  check(g, cp_onnx_add_output(g->w, name, elem, ndim, dims));
  return g->rc;
}

/* ---------------------------------------------------------------- layer pieces */

/* "PREFIX.SUFFIX" in a stack buffer. */
static const char *subname(char *buf, size_t cap, const char *prefix, const char *suffix) {
  snprintf(buf, cap, "%s.%s", prefix, suffix);
  return buf;
}

const char *cp_og_linear(cp_og *g, const char *x, const cp_linear *L, const char *prefix) {
  char name[512];
  const char *w =
      cp_og_weight_t_as(g, subname(name, sizeof name, prefix, "weight"), L->w, L->dtype, L->n_out, L->n_in, true);
  const char *y = cp_og_op2(g, "MatMul", x, w);
  if (!L->b) return y;
  int64_t n = L->n_out;
  const char *b = cp_og_weight(g, subname(name, sizeof name, prefix, "bias"), L->b, 1, &n, false);
  return cp_og_op2(g, "Add", y, b);
}

/* x / sqrt(mean(x^2) + eps) over the last axis (layer_ops.c norm_item with mean 0). */
static const char *rms_scaled(cp_og *g, const char *x, float eps) {
  int64_t axis = -1;
  cp_onnx_attr at[] = {cp_og_attr_ints("axes", &axis, 1), cp_og_attr_i("keepdims", 1)};
  const char *sq = cp_og_op2(g, "Pow", x, cp_og_f32(g, 2.0f));
  const char *ms = cp_og_node(g, "ReduceMean", &sq, 1, at, 2);
  const char *den = cp_og_op1(g, "Sqrt", cp_og_op2(g, "Add", ms, cp_og_f32(g, eps)));
  return cp_og_op2(g, "Div", x, den);
}

const char *cp_og_norm(cp_og *g, const char *x, const cp_norm_weights *nw, cp_norm_kind kind, float eps, int n,
                       const char *prefix) {
  char name[512];
  int64_t dim = n;
  const char *w = cp_og_weight(g, subname(name, sizeof name, prefix, "weight"), nw->w, 1, &dim, false);
  if (kind == CP_NORM_LAYER) {
    const char *b = nw->b ? cp_og_weight(g, subname(name, sizeof name, prefix, "bias"), nw->b, 1, &dim, false) : NULL;
    const char *in[] = {x, w, b};
    cp_onnx_attr at[] = {cp_og_attr_i("axis", -1), cp_og_attr_f("epsilon", eps)};
    return cp_og_node(g, "LayerNormalization", in, b ? 3 : 2, at, 2);
  }
  const char *y = rms_scaled(g, x, eps);
  if (nw->b) y = cp_og_op2(g, "Add", cp_og_op2(g, "Mul", y, w),
                           cp_og_weight(g, subname(name, sizeof name, prefix, "bias"), nw->b, 1, &dim, false));
  else y = cp_og_op2(g, "Mul", y, w);
  return y;
}

const char *cp_og_norm_plus_one(cp_og *g, const char *x, const cp_norm_weights *nw, float eps, int n,
                                const char *prefix) {
  if (g->rc) return NULL;
  char name[512];
  int64_t dim = n;
  float *hf = malloc((size_t)n * sizeof *hf);
  if (!hf) return cp_og_fail(g, cp_nomem("onnx graph: norm '%s'", prefix)), NULL;
  for (int i = 0; i < n; i++) hf[i] = nw->w[i] - 1.0f;
  const char *w = cp_og_weight(g, subname(name, sizeof name, prefix, "weight"), hf, 1, &dim, false);
  free(hf);
  return cp_og_op2(g, "Mul", rms_scaled(g, x, eps), cp_og_op2(g, "Add", w, cp_og_f32(g, 1.0f)));
}

const char *cp_og_act(cp_og *g, const char *x, cp_act act) {
  switch (act) {
    case CP_ACT_RELU: return cp_og_op1(g, "Relu", x);
    case CP_ACT_SILU: return cp_og_op2(g, "Mul", x, cp_og_op1(g, "Sigmoid", x));
    case CP_ACT_GELU: {
      /* 0.5 x (1 + erf(x / sqrt 2)) */
      const char *e = cp_og_op1(g, "Erf", cp_og_op2(g, "Mul", x, cp_og_f32(g, 0.70710678118654752f)));
      const char *hx = cp_og_op2(g, "Mul", x, cp_og_f32(g, 0.5f));
      return cp_og_op2(g, "Mul", hx, cp_og_op2(g, "Add", e, cp_og_f32(g, 1.0f)));
    }
    case CP_ACT_GELU_TANH: {
      /* 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))) */
      const char *x3 = cp_og_op2(g, "Mul", cp_og_op2(g, "Mul", x, x), x);
      const char *in = cp_og_op2(g, "Add", x, cp_og_op2(g, "Mul", x3, cp_og_f32(g, 0.044715f)));
      const char *t = cp_og_op1(g, "Tanh", cp_og_op2(g, "Mul", in, cp_og_f32(g, 0.7978845608028654f)));
      const char *hx = cp_og_op2(g, "Mul", x, cp_og_f32(g, 0.5f));
      return cp_og_op2(g, "Mul", hx, cp_og_op2(g, "Add", t, cp_og_f32(g, 1.0f)));
    }
  }
  return NULL;
}

const char *cp_og_ffn(cp_og *g, const cp_model *m, const cp_layer *ly, const char *h, cp_stack_kind stack, int layer) {
  char name[CP_TENSOR_NAME_MAX];
  const char *up = cp_og_linear(g, h, &ly->up, cp_onnx_name(name, m->family, CP_ROLE_UP, stack, layer, ""));
  if (m->gated_ffn) {
    const char *gate = cp_og_linear(g, h, &ly->gate, cp_onnx_name(name, m->family, CP_ROLE_GATE, stack, layer, ""));
    up = cp_og_op2(g, "Mul", cp_og_act(g, gate, m->act), up);
  } else {
    up = cp_og_act(g, up, m->act);
  }
  return cp_og_linear(g, up, &ly->down, cp_onnx_name(name, m->family, CP_ROLE_DOWN, stack, layer, ""));
}

const char *cp_og_lm_head(cp_og *g, const cp_model *m, const char *h, const char *head_w, const char *ids) {
  if (m->lm_head_scale != 1.0f) h = cp_og_op2(g, "Mul", h, cp_og_f32(g, m->lm_head_scale));
  int64_t flat[2] = {-1, m->d_model}, v = m->vocab;
  const char *in[] = {cp_og_op2(g, "Reshape", h, cp_og_i64s(g, flat, 2)), head_w};
  cp_onnx_attr tb = cp_og_attr_i("transB", 1);
  const char *y = cp_og_node(g, "Gemm", in, 2, &tb, 1); /* [B*S, V] */
  const char *shape = cp_og_concat(g, cp_og_op1(g, "Shape", ids), cp_og_i64s(g, &v, 1), 0);
  return cp_og_op2(g, "Reshape", y, shape);
}

/* ---------------------------------------------------------------- shape pieces */

const char *cp_og_cast(cp_og *g, const char *x, int to) {
  cp_onnx_attr a = cp_og_attr_i("to", to);
  return cp_og_node(g, "Cast", &x, 1, &a, 1);
}

const char *cp_og_unsqueeze(cp_og *g, const char *x, const int64_t *axes, int n) {
  return cp_og_op2(g, "Unsqueeze", x, cp_og_i64s(g, axes, n));
}

const char *cp_og_transpose(cp_og *g, const char *x, const int64_t *perm, int n) {
  cp_onnx_attr a = cp_og_attr_ints("perm", perm, n);
  return cp_og_node(g, "Transpose", &x, 1, &a, 1);
}

const char *cp_og_concat(cp_og *g, const char *a, const char *b, int64_t axis) {
  const char *in[] = {a, b};
  cp_onnx_attr ax = cp_og_attr_i("axis", axis);
  return cp_og_node(g, "Concat", in, 2, &ax, 1);
}

const char *cp_og_split_heads(cp_og *g, const char *x, int heads, int dh) {
  static const int64_t perm[] = {0, 2, 1, 3};
  int64_t shape[4] = {0, 0, heads, dh};
  return cp_og_transpose(g, cp_og_op2(g, "Reshape", x, cp_og_i64s(g, shape, 4)), perm, 4);
}

const char *cp_og_merge_heads(cp_og *g, const char *x, int heads, int dh) {
  static const int64_t perm[] = {0, 2, 1, 3};
  int64_t shape[3] = {0, 0, (int64_t)heads * dh};
  return cp_og_op2(g, "Reshape", cp_og_transpose(g, x, perm, 4), cp_og_i64s(g, shape, 3));
}
