/* Allowlist-only pickle interpreter for PyTorch checkpoints (see formats/pickle.h).
 *
 * Mirrors torch 1.13's weights_only Unpickler: the same allowed globals, the same restricted
 * meaning of REDUCE/BUILD/NEWOBJ/APPEND, plus the opcodes newer torch and pickle protocols 3-5
 * emit for plain data (FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE, BINUNICODE8, BINFLOAT,
 * BIN[BYTES]*, LONG4). Nothing is ever imported, resolved or called.
 */
#include "formats/pickle.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"

/* ---- allowlist ------------------------------------------------------------------------ */

typedef struct {
  const char *module, *name;
  pk_global g;
} pk_allowed;

#define G(mod, nm, kind, dt)          \
  {                                   \
    mod, nm, { kind, dt, mod "." nm } \
  }
#define TENSOR_CLASS(mod, nm) G(mod, nm "Tensor", PKG_OTHER, -1)
#define STORAGE_CLASS(mod, nm, dt) G(mod, nm "Storage", PKG_STORAGE_CLASS, dt)
#define DENSE_TENSORS(mod)                                                                \
  TENSOR_CLASS(mod, "BFloat16"), TENSOR_CLASS(mod, "Bool"), TENSOR_CLASS(mod, "Byte"),    \
      TENSOR_CLASS(mod, "Char"), TENSOR_CLASS(mod, "Double"), TENSOR_CLASS(mod, "Float"), \
      TENSOR_CLASS(mod, "Half"), TENSOR_CLASS(mod, "Int"), TENSOR_CLASS(mod, "Long"),     \
      TENSOR_CLASS(mod, "Short")
#define SPARSE_TENSORS(mod)                                                               \
  TENSOR_CLASS(mod, "BFloat16"), TENSOR_CLASS(mod, "Byte"), TENSOR_CLASS(mod, "Char"),    \
      TENSOR_CLASS(mod, "Double"), TENSOR_CLASS(mod, "Float"), TENSOR_CLASS(mod, "Half"), \
      TENSOR_CLASS(mod, "Int"), TENSOR_CLASS(mod, "Long"), TENSOR_CLASS(mod, "Short")
#define STORAGES(mod)                                                            \
  STORAGE_CLASS(mod, "BFloat16", CP_BF16), STORAGE_CLASS(mod, "Bool", CP_BOOL),  \
      STORAGE_CLASS(mod, "Byte", CP_U8), STORAGE_CLASS(mod, "Char", CP_I8),      \
      STORAGE_CLASS(mod, "Double", CP_F64), STORAGE_CLASS(mod, "Float", CP_F32), \
      STORAGE_CLASS(mod, "Half", CP_F16), STORAGE_CLASS(mod, "Int", CP_I32),     \
      STORAGE_CLASS(mod, "Long", CP_I64), STORAGE_CLASS(mod, "Short", CP_I16),   \
      STORAGE_CLASS(mod, "ComplexDouble", -1), STORAGE_CLASS(mod, "ComplexFloat", -1)

#define PK_DTYPE_NONE (-2) /* torch.storage.TypedStorage: a class without a fixed dtype */

/* torch 1.13 _get_allowed_globals() (it admits no builtins), plus _rebuild_parameter_with_state,
 * which newer torch writes for Parameters carrying Python attributes and also allows under
 * weights_only. Module and name are compared separately, so dotted-name tricks never match. */
static const pk_allowed allowed[] = {
    G("collections", "OrderedDict", PKG_ORDERED_DICT, -1),
    G("torch.nn.parameter", "Parameter", PKG_PARAMETER, -1),
    G("torch.serialization", "_get_layout", PKG_OTHER, -1),
    G("torch", "Size", PKG_SIZE, -1),
    G("torch", "Tensor", PKG_OTHER, -1),
    G("torch", "complex32", PKG_OTHER, -1),
    G("torch", "complex64", PKG_OTHER, -1),
    G("torch", "complex128", PKG_OTHER, -1),
    G("torch", "float16", PKG_OTHER, -1),
    G("torch", "float32", PKG_OTHER, -1),
    G("torch", "float64", PKG_OTHER, -1),
    G("torch", "int8", PKG_OTHER, -1),
    G("torch", "int16", PKG_OTHER, -1),
    G("torch", "int32", PKG_OTHER, -1),
    G("torch", "int64", PKG_OTHER, -1),
    DENSE_TENSORS("torch"),
    DENSE_TENSORS("torch.cuda"),
    SPARSE_TENSORS("torch.sparse"),
    SPARSE_TENSORS("torch.cuda.sparse"),
    STORAGES("torch"),
    STORAGES("torch.cuda"),
    STORAGE_CLASS("torch", "QInt32", -1),
    STORAGE_CLASS("torch", "QInt8", -1),
    STORAGE_CLASS("torch", "QUInt2x4", -1),
    STORAGE_CLASS("torch", "QUInt4x2", -1),
    STORAGE_CLASS("torch", "QUInt8", -1),
    G("torch.storage", "UntypedStorage", PKG_STORAGE_CLASS, CP_U8),
    G("torch.storage", "TypedStorage", PKG_STORAGE_CLASS, PK_DTYPE_NONE),
    G("torch._utils", "_rebuild_tensor", PKG_REBUILD_TENSOR, -1),
    G("torch._utils", "_rebuild_tensor_v2", PKG_REBUILD_TENSOR_V2, -1),
    G("torch._utils", "_rebuild_parameter", PKG_REBUILD_PARAMETER, -1),
    G("torch._utils", "_rebuild_parameter_with_state", PKG_REBUILD_PARAMETER_WITH_STATE, -1),
    G("torch._utils", "_rebuild_sparse_tensor", PKG_OTHER, -1),
    G("torch._utils", "_rebuild_sparse_csr_tensor", PKG_OTHER, -1),
    G("torch._utils", "_rebuild_meta_tensor_no_storage", PKG_OTHER, -1),
};

static bool span_eq(const char *p, size_t len, const char *z) {
  return strlen(z) == len && memcmp(p, z, len) == 0;
}

static const pk_global *lookup_global(const char *mod, size_t mod_len, const char *name,
                                      size_t name_len) {
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
    if (span_eq(mod, mod_len, allowed[i].module) && span_eq(name, name_len, allowed[i].name))
      return &allowed[i].g;
  return NULL;
}

/* ---- helpers -------------------------------------------------------------------------- */

/* UTF-8 as Python decodes it with errors="surrogatepass": encoded surrogates are accepted. */
static bool utf8_valid(const uint8_t *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (len - i - 1 < n) return false;
    for (size_t k = 1; k <= n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff))) return false;
    i += n + 1;
  }
  return true;
}

const char *pk_kind_name(const pk_obj *o) {
  static const char *names[] = {"None",  "bool", "int",  "int", "float",  "str",     "bytes",
                                "tuple", "list", "dict", "set", "global", "storage", "tensor"};
  return (unsigned)o->kind < sizeof names / sizeof names[0] ? names[o->kind] : "?";
}

/* ---- the machine ---------------------------------------------------------------------- */

typedef struct {
  const pk_config *cfg;
  const uint8_t *data;
  size_t len, pos, op_off;
  uint8_t op;
  pk_obj **stack;
  size_t sp, stack_cap;
  size_t *marks;
  size_t nmarks;
  pk_obj **memo;
  size_t memo_cap, memo_count;
  uint64_t budget; /* objects created + container insertions */
} pk_vm;

#define FAIL(code, ...)                   \
  do {                                    \
    rc = vm_error(vm, code, __VA_ARGS__); \
    goto done;                            \
  } while (0)

__attribute__((format(printf, 3, 4))) static int vm_error(pk_vm *vm, int code, const char *fmt,
                                                          ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (vm->op_off >= vm->len) /* at end of data: there is no opcode to name */
    return cp_error_set(code, "%s: pickle offset %zu: %s", vm->cfg->what, vm->op_off, msg);
  return cp_error_set(code, "%s: pickle offset %zu: opcode 0x%02x: %s", vm->cfg->what, vm->op_off,
                      vm->op, msg);
}

static int charge(pk_vm *vm, uint64_t n) {
  vm->budget += n;
  if (vm->budget > PK_MAX_OBJECTS)
    return vm_error(vm, CP_EPKL_LIMIT, "more than %u objects and container items", PK_MAX_OBJECTS);
  return 0;
}

static int new_obj(pk_vm *vm, pk_obj **out, pk_kind kind) {
  int rc = charge(vm, 1);
  if (rc < 0) return rc;
  pk_obj *o = cp_arena_alloc(vm->cfg->arena, sizeof *o);
  CP_CHECK_ALLOC(o, vm->cfg->what);
  o->kind = kind;
  *out = o;
  return 0;
}

/* Appends to a list/dict/set/tuple-under-construction; arrays double inside the arena. */
static int seq_push(pk_vm *vm, pk_obj *c, pk_obj *item) {
  int rc = charge(vm, 1);
  if (rc < 0) return rc;
  if (c->u.seq.n == c->u.seq.cap) {
    size_t cap = c->u.seq.cap ? c->u.seq.cap * 2 : 8;
    pk_obj **v = cp_arena_array(vm->cfg->arena, cap, sizeof *v);
    CP_CHECK_ALLOC(v, vm->cfg->what);
    if (c->u.seq.n) memcpy(v, c->u.seq.v, c->u.seq.n * sizeof *v);
    c->u.seq.v = v;
    c->u.seq.cap = cap;
  }
  c->u.seq.v[c->u.seq.n++] = item;
  return 0;
}

static int push(pk_vm *vm, pk_obj *o) {
  if (vm->sp == vm->stack_cap) {
    if (vm->stack_cap >= PK_MAX_STACK)
      return vm_error(vm, CP_EPKL_STACK, "stack deeper than %u", PK_MAX_STACK);
    int rc = CP_ARRAY_RESERVE(vm->stack, vm->stack_cap, vm->sp + 1, vm->cfg->what);
    if (rc < 0) return rc;
  }
  vm->stack[vm->sp++] = o;
  return 0;
}

/* Bottom of the current frame: like Python's metastack, nothing below the last MARK. */
static size_t frame_base(const pk_vm *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0; }

static int pop(pk_vm *vm, pk_obj **out) {
  if (vm->sp <= frame_base(vm)) return vm_error(vm, CP_EPKL_STACK, "stack underflow");
  *out = vm->stack[--vm->sp];
  return 0;
}

static int top(pk_vm *vm, pk_obj **out) {
  if (vm->sp <= frame_base(vm)) return vm_error(vm, CP_EPKL_STACK, "stack underflow");
  *out = vm->stack[vm->sp - 1];
  return 0;
}

/* Pops to the last MARK: items are stack[*first .. sp), valid until the next push. */
static int pop_mark(pk_vm *vm, size_t *first, size_t *count) {
  if (!vm->nmarks) return vm_error(vm, CP_EPKL_STACK, "no MARK to pop to");
  size_t m = vm->marks[--vm->nmarks];
  *first = m;
  *count = vm->sp - m;
  vm->sp = m;
  return 0;
}

static int need(pk_vm *vm, size_t n) {
  if (vm->len - vm->pos < n)
    return vm_error(vm, CP_EPKL_TRUNCATED, "needs %zu bytes, %zu remain", n, vm->len - vm->pos);
  return 0;
}

static int memo_put(pk_vm *vm, uint64_t idx) {
  pk_obj *o = NULL;
  int rc = top(vm, &o);
  if (rc < 0) return rc;
  if (idx >= PK_MAX_MEMO)
    return vm_error(vm, CP_EPKL_MEMO, "memo index %llu over the cap %u", (unsigned long long)idx,
                    PK_MAX_MEMO);
  if (idx >= vm->memo_cap) {
    size_t old = vm->memo_cap;
    if ((rc = CP_ARRAY_RESERVE(vm->memo, vm->memo_cap, (size_t)idx + 1, vm->cfg->what)) < 0) return rc;
    memset(vm->memo + old, 0, (vm->memo_cap - old) * sizeof *vm->memo); /* unset slots read as NULL */
  }
  if (!vm->memo[idx]) vm->memo_count++;
  vm->memo[idx] = o;
  return 0;
}

static int memo_get(pk_vm *vm, uint64_t idx) {
  if (idx >= vm->memo_cap || !vm->memo[idx])
    return vm_error(vm, CP_EPKL_MEMO, "memo index %llu was never set", (unsigned long long)idx);
  return push(vm, vm->memo[idx]);
}

static int make_tuple(pk_vm *vm, pk_obj **out, pk_obj *const *items, size_t n) {
  pk_obj *t = NULL;
  int rc = new_obj(vm, &t, PK_TUPLE);
  if (rc < 0) return rc;
  if (n) {
    rc = charge(vm, n);
    if (rc < 0) return rc;
    t->u.seq.v = cp_arena_array(vm->cfg->arena, n, sizeof(pk_obj *));
    CP_CHECK_ALLOC(t->u.seq.v, vm->cfg->what);
    memcpy(t->u.seq.v, items, n * sizeof(pk_obj *));
  }
  t->u.seq.n = t->u.seq.cap = n;
  *out = t;
  return 0;
}

static int push_string(pk_vm *vm, pk_kind kind, uint64_t n) {
  int rc = need(vm, n);
  if (rc < 0) return rc;
  const uint8_t *p = vm->data + vm->pos;
  if (kind == PK_STR && !utf8_valid(p, (size_t)n))
    return vm_error(vm, CP_EPKL_TYPE, "string of %llu bytes is not valid UTF-8",
                    (unsigned long long)n);
  pk_obj *o = NULL;
  rc = new_obj(vm, &o, kind);
  if (rc < 0) return rc;
  o->u.s.p = (const char *)p;
  o->u.s.len = (size_t)n;
  vm->pos += (size_t)n;
  return push(vm, o);
}

static int push_long(pk_vm *vm, uint64_t n) {
  int rc = need(vm, n);
  if (rc < 0) return rc;
  const uint8_t *p = vm->data + vm->pos;
  pk_obj *o = NULL;
  rc = new_obj(vm, &o, n <= 8 ? PK_INT : PK_BIGINT);
  if (rc < 0) return rc;
  if (n <= 8) {
    uint64_t v = cp_le_bytes(p, (size_t)n);
    if (n && n < 8 && (p[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    memcpy(&o->u.i, &v, sizeof v);
  } else {
    o->u.s.p = (const char *)p;
    o->u.s.len = (size_t)n;
  }
  vm->pos += (size_t)n;
  return push(vm, o);
}

/* A tuple of non-negative ints, at most CP_MAX_DIMS of them. */
static int int_tuple(pk_vm *vm, const pk_obj *t, const char *what, int64_t *out, int *n) {
  if (t->kind != PK_TUPLE)
    return vm_error(vm, CP_EPKL_TYPE, "%s is a %s, want a tuple of ints", what, pk_kind_name(t));
  if (t->u.seq.n > CP_MAX_DIMS)
    return vm_error(vm, CP_EUNSUPPORTED, "%s has %zu dimensions, at most %d are supported", what,
                    t->u.seq.n, CP_MAX_DIMS);
  for (size_t i = 0; i < t->u.seq.n; i++) {
    const pk_obj *e = t->u.seq.v[i];
    if (e->kind != PK_INT || e->u.i < 0)
      return vm_error(vm, CP_EPKL_TYPE, "%s[%zu] is not a non-negative int", what, i);
    out[i] = e->u.i;
  }
  *n = (int)t->u.seq.n;
  return 0;
}

/* _rebuild_tensor[_v2](storage, storage_offset, size, stride, ...) */
static int rebuild_tensor(pk_vm *vm, pk_obj **out, pk_obj *const *a, size_t n, bool v2) {
  const char *fn = v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor";
  if (v2 ? (n != 6 && n != 7) : n != 4)
    return vm_error(vm, CP_EPKL_TYPE, "%s takes %s arguments, got %zu", fn, v2 ? "6 or 7" : "4", n);
  if (a[0]->kind != PK_STORAGE)
    return vm_error(vm, CP_EPKL_TYPE, "%s storage argument is a %s", fn, pk_kind_name(a[0]));
  if (a[1]->kind != PK_INT || a[1]->u.i < 0)
    return vm_error(vm, CP_EPKL_TYPE, "%s storage_offset is not a non-negative int", fn);
  if (v2) {
    if (a[4]->kind != PK_BOOL)
      return vm_error(vm, CP_EPKL_TYPE, "%s requires_grad is a %s, want bool", fn,
                      pk_kind_name(a[4]));
    if (a[5]->kind != PK_DICT)
      return vm_error(vm, CP_EPKL_TYPE, "%s backward_hooks is a %s, want a dict", fn,
                      pk_kind_name(a[5]));
    if (n == 7 && a[6]->kind != PK_NONE && a[6]->kind != PK_DICT)
      return vm_error(vm, CP_EPKL_TYPE, "%s metadata is a %s, want None or a dict", fn,
                      pk_kind_name(a[6]));
  }
  pk_tensor *t = cp_arena_alloc(vm->cfg->arena, sizeof *t);
  CP_CHECK_ALLOC(t, vm->cfg->what);
  int nd_stride;
  int rc = int_tuple(vm, a[2], "size", t->size, &t->ndim);
  if (rc < 0) return rc;
  rc = int_tuple(vm, a[3], "stride", t->stride, &nd_stride);
  if (rc < 0) return rc;
  if (nd_stride != t->ndim)
    return vm_error(vm, CP_EPKL_TYPE, "size has %d dimensions but stride has %d", t->ndim,
                    nd_stride);
  t->storage = a[0]->u.storage;
  t->offset = (uint64_t)a[1]->u.i;

  /* The view must stay inside its storage: offset + sum((size-1)*stride) < numel. */
  uint64_t numel;
  if (cp_shape_numel(&numel, t->ndim, t->size) < 0)
    return vm_error(vm, CP_EPT_TENSOR_BOUNDS, "tensor element count overflows");
  if (numel > 0) {
    uint64_t last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
      uint64_t span;
      if (!cp_mul_u64(&span, (uint64_t)(t->size[d] - 1), (uint64_t)t->stride[d]) ||
          !cp_add_u64(&last, last, span))
        return vm_error(vm, CP_EPT_TENSOR_BOUNDS, "tensor view extent overflows");
    }
    if (last >= t->storage->numel)
      return vm_error(vm, CP_EPT_TENSOR_BOUNDS,
                      "tensor view reaches element %llu of a storage of %llu elements",
                      (unsigned long long)last, (unsigned long long)t->storage->numel);
  }
  pk_obj *o = NULL;
  rc = new_obj(vm, &o, PK_TENSOR);
  if (rc < 0) return rc;
  o->u.tensor = t;
  *out = o;
  return 0;
}

static int do_reduce(pk_vm *vm) {
  pk_obj *args = NULL, *fn = NULL, *res = NULL;
  int rc = pop(vm, &args);
  if (rc < 0) return rc;
  rc = top(vm, &fn);
  if (rc < 0) return rc;
  if (fn->kind != PK_GLOBAL)
    return vm_error(vm, CP_EPKL_TYPE, "REDUCE on a %s, not an allowed callable", pk_kind_name(fn));
  if (args->kind != PK_TUPLE)
    return vm_error(vm, CP_EPKL_TYPE, "REDUCE arguments are a %s, not a tuple", pk_kind_name(args));
  pk_obj *const *a = args->u.seq.v;
  size_t n = args->u.seq.n;
  const pk_global *g = fn->u.g;
  switch (g->kind) {
    case PKG_ORDERED_DICT:
      if (n != 0)
        return vm_error(vm, CP_EPKL_TYPE, "collections.OrderedDict called with %zu arguments", n);
      rc = new_obj(vm, &res, PK_DICT);
      if (rc < 0) return rc;
      res->ordered = 1;
      break;
    case PKG_REBUILD_TENSOR_V2:
    case PKG_REBUILD_TENSOR:
      rc = rebuild_tensor(vm, &res, a, n, g->kind == PKG_REBUILD_TENSOR_V2);
      if (rc < 0) return rc;
      break;
    case PKG_REBUILD_PARAMETER:
    case PKG_REBUILD_PARAMETER_WITH_STATE: {
      size_t want = g->kind == PKG_REBUILD_PARAMETER ? 3 : 4;
      if (n != want)
        return vm_error(vm, CP_EPKL_TYPE, "%s takes %zu arguments, got %zu", g->qualname, want, n);
      if (a[0]->kind != PK_TENSOR || a[1]->kind != PK_BOOL || a[2]->kind != PK_DICT)
        return vm_error(vm, CP_EPKL_TYPE, "%s wants (tensor, bool, dict%s)", g->qualname,
                        want == 4 ? ", state" : "");
      a[0]->u.tensor->is_parameter = 1;
      res = a[0];
      break;
    }
    case PKG_SIZE: {
      int64_t dims[CP_MAX_DIMS];
      int nd;
      if (n != 1) return vm_error(vm, CP_EPKL_TYPE, "torch.Size takes 1 argument, got %zu", n);
      rc = int_tuple(vm, a[0], "torch.Size argument", dims, &nd);
      if (rc < 0) return rc;
      res = a[0]; /* torch.Size is a tuple subclass */
      break;
    }
    case PKG_STORAGE_CLASS:
    case PKG_PARAMETER:
    case PKG_OTHER:
    default:
      return vm_error(vm, CP_EUNSUPPORTED, "calling %s is not supported", g->qualname);
  }
  vm->stack[vm->sp - 1] = res;
  return 0;
}

static int do_build(pk_vm *vm) {
  pk_obj *state = NULL, *inst = NULL;
  int rc = pop(vm, &state);
  if (rc < 0) return rc;
  rc = top(vm, &inst);
  if (rc < 0) return rc;
  /* torch allows BUILD on OrderedDict (attributes such as a state dict's _metadata) and on
   * Parameter (__setstate__); neither changes the tensors, so the state is checked and dropped.
   * BUILD on a plain Tensor is the legacy set_(storage, ...) path, which re-points the data. */
  if (inst->kind == PK_DICT && inst->ordered) {
    if (state->kind != PK_DICT && state->kind != PK_NONE)
      return vm_error(vm, CP_EPKL_TYPE, "BUILD state for an OrderedDict is a %s",
                      pk_kind_name(state));
    return 0;
  }
  if (inst->kind == PK_TENSOR && inst->u.tensor->is_parameter) return 0;
  return vm_error(vm, CP_EPKL_TYPE, "BUILD on a %s is not allowed", pk_kind_name(inst));
}

static int do_newobj(pk_vm *vm) {
  pk_obj *args = NULL, *cls = NULL;
  int rc = pop(vm, &args);
  if (rc < 0) return rc;
  rc = pop(vm, &cls);
  if (rc < 0) return rc;
  if (cls->kind != PK_GLOBAL || cls->u.g->kind != PKG_PARAMETER)
    return vm_error(vm, CP_EPKL_TYPE,
                    "NEWOBJ of a %s; only torch.nn.parameter.Parameter is allowed",
                    cls->kind == PK_GLOBAL ? cls->u.g->qualname : pk_kind_name(cls));
  if (args->kind != PK_TUPLE || args->u.seq.n < 1 || args->u.seq.n > 2 ||
      args->u.seq.v[0]->kind != PK_TENSOR ||
      (args->u.seq.n == 2 && args->u.seq.v[1]->kind != PK_BOOL))
    return vm_error(vm, CP_EPKL_TYPE, "Parameter() wants (tensor[, bool])");
  pk_obj *t = args->u.seq.v[0];
  t->u.tensor->is_parameter = 1;
  return push(vm, t);
}

static int do_persid(pk_vm *vm) {
  pk_obj *pid = NULL;
  int rc = pop(vm, &pid);
  if (rc < 0) return rc;
  if (pid->kind != PK_TUPLE || pid->u.seq.n != 5)
    return vm_error(vm, CP_EPKL_TYPE,
                    "persistent id is a %s, want ('storage', type, key, location, numel)",
                    pk_kind_name(pid));
  pk_obj *const *a = pid->u.seq.v;
  if (a[0]->kind != PK_STR || !span_eq(a[0]->u.s.p, a[0]->u.s.len, "storage"))
    return vm_error(vm, CP_EPKL_TYPE, "persistent id does not start with 'storage'");
  if (a[1]->kind != PK_GLOBAL || a[1]->u.g->kind != PKG_STORAGE_CLASS)
    return vm_error(vm, CP_EPKL_TYPE, "persistent id storage type is a %s",
                    a[1]->kind == PK_GLOBAL ? a[1]->u.g->qualname : pk_kind_name(a[1]));
  if (a[2]->kind != PK_STR)
    return vm_error(vm, CP_EPKL_TYPE, "storage key is a %s", pk_kind_name(a[2]));
  if (a[3]->kind != PK_STR)
    return vm_error(vm, CP_EPKL_TYPE, "storage location is a %s", pk_kind_name(a[3]));
  if (a[4]->kind != PK_INT || a[4]->u.i < 0)
    return vm_error(vm, CP_EPKL_TYPE, "storage numel is not a non-negative int");
  const pk_global *g = a[1]->u.g;
  if (g->dtype == PK_DTYPE_NONE)
    return vm_error(vm, CP_EPKL_TYPE, "storage type %s has no element type", g->qualname);
  if (g->dtype < 0)
    return vm_error(vm, CP_EUNSUPPORTED, "storage type %s is not supported", g->qualname);
  const pk_storage *st = NULL;
  rc = vm->cfg->persistent_load(vm->cfg->ctx, &st, a[2]->u.s.p, a[2]->u.s.len, (cp_dtype)g->dtype,
                                (uint64_t)a[4]->u.i, vm->op_off);
  if (rc < 0) return rc;
  pk_obj *o = NULL;
  rc = new_obj(vm, &o, PK_STORAGE);
  if (rc < 0) return rc;
  o->u.storage = st;
  return push(vm, o);
}

static int do_global(pk_vm *vm, const char *mod, size_t mod_len, const char *name,
                     size_t name_len) {
  const pk_global *g = lookup_global(mod, mod_len, name, name_len);
  if (!g) {
    char qm[160], qn[160];
    return vm_error(vm, CP_EPKL_GLOBAL, "global '%s.%s' is not on the allowlist",
                    cp_quote(qm, sizeof qm, mod, mod_len), cp_quote(qn, sizeof qn, name, name_len));
  }
  pk_obj *o = NULL;
  int rc = new_obj(vm, &o, PK_GLOBAL);
  if (rc < 0) return rc;
  o->u.g = g;
  return push(vm, o);
}

/* Reads a GLOBAL argument line ("text\n") without the newline. */
static int read_line(pk_vm *vm, const char **p, size_t *n) {
  const uint8_t *start = vm->data + vm->pos;
  const uint8_t *nl = memchr(start, '\n', vm->len - vm->pos);
  if (!nl) return vm_error(vm, CP_EPKL_TRUNCATED, "GLOBAL argument has no newline");
  *p = (const char *)start;
  *n = (size_t)(nl - start);
  vm->pos += *n + 1;
  return 0;
}

int pk_load(pk_obj **out, const uint8_t *data, size_t len, const pk_config *cfg) {
  pk_vm vmv = {.cfg = cfg, .data = data, .len = len};
  pk_vm *vm = &vmv;
  int rc = 0;
  *out = NULL;
  vm->marks = malloc(PK_MAX_MARKS * sizeof *vm->marks);
  CP_CHECK_ALLOC_GOTO(vm->marks, cfg->what);

  for (;;) {
    pk_obj *o = NULL, *a = NULL, *b = NULL;
    size_t first = 0, count = 0;
    if (vm->pos >= vm->len) {
      vm->op_off = vm->pos;
      vm->op = 0;
      FAIL(CP_EPKL_NO_STOP, "pickle of %zu bytes ends without STOP", vm->len);
    }
    vm->op_off = vm->pos;
    vm->op = vm->data[vm->pos++];
    switch (vm->op) {
      case 0x80: /* PROTO */
        if ((rc = need(vm, 1)) < 0) goto done;
        if (vm->data[vm->pos] > 5) FAIL(CP_EPKL_PROTOCOL, "protocol %u", vm->data[vm->pos]);
        vm->pos++;
        break;
      case 0x95: /* FRAME: a length prefix for buffering; the contents are ordinary opcodes */
        if ((rc = need(vm, 8)) < 0) goto done;
        if (cp_le64(vm->data + vm->pos) > vm->len - vm->pos - 8)
          FAIL(CP_EPKL_TRUNCATED, "frame of %llu bytes, %zu remain",
               (unsigned long long)cp_le64(vm->data + vm->pos), vm->len - vm->pos - 8);
        vm->pos += 8;
        break;
      case '.': /* STOP */
        if ((rc = pop(vm, &o)) < 0) goto done;
        *out = o;
        rc = 0;
        goto done;
      case 'c': { /* GLOBAL */
        const char *mod = NULL, *name = NULL;
        size_t mod_len = 0, name_len = 0;
        if ((rc = read_line(vm, &mod, &mod_len)) < 0 || (rc = read_line(vm, &name, &name_len)) < 0)
          goto done;
        if ((rc = do_global(vm, mod, mod_len, name, name_len)) < 0) goto done;
        break;
      }
      case 0x93: /* STACK_GLOBAL */
        if ((rc = pop(vm, &b)) < 0 || (rc = pop(vm, &a)) < 0) goto done;
        if (a->kind != PK_STR || b->kind != PK_STR)
          FAIL(CP_EPKL_TYPE, "STACK_GLOBAL on a %s and a %s, want two str", pk_kind_name(a),
               pk_kind_name(b));
        if ((rc = do_global(vm, a->u.s.p, a->u.s.len, b->u.s.p, b->u.s.len)) < 0) goto done;
        break;
      case 'q': /* BINPUT */
        if ((rc = need(vm, 1)) < 0 || (rc = memo_put(vm, vm->data[vm->pos])) < 0) goto done;
        vm->pos += 1;
        break;
      case 'r': /* LONG_BINPUT */
        if ((rc = need(vm, 4)) < 0 || (rc = memo_put(vm, cp_le32(vm->data + vm->pos))) < 0)
          goto done;
        vm->pos += 4;
        break;
      case 0x94: /* MEMOIZE */
        if ((rc = memo_put(vm, vm->memo_count)) < 0) goto done;
        break;
      case 'h': /* BINGET */
        if ((rc = need(vm, 1)) < 0 || (rc = memo_get(vm, vm->data[vm->pos])) < 0) goto done;
        vm->pos += 1;
        break;
      case 'j': /* LONG_BINGET */
        if ((rc = need(vm, 4)) < 0 || (rc = memo_get(vm, cp_le32(vm->data + vm->pos))) < 0)
          goto done;
        vm->pos += 4;
        break;
      case '(': /* MARK */
        if (vm->nmarks >= PK_MAX_MARKS)
          FAIL(CP_EPKL_STACK, "more than %u nested MARKs", PK_MAX_MARKS);
        vm->marks[vm->nmarks++] = vm->sp;
        break;
      case '}':  /* EMPTY_DICT */
      case ']':  /* EMPTY_LIST */
      case 0x8f: /* EMPTY_SET */
        if ((rc = new_obj(vm, &o,
                          vm->op == '}'   ? PK_DICT
                          : vm->op == ']' ? PK_LIST
                                          : PK_SET)) < 0 ||
            (rc = push(vm, o)) < 0)
          goto done;
        break;
      case ')': /* EMPTY_TUPLE */
        if ((rc = make_tuple(vm, &o, NULL, 0)) < 0 || (rc = push(vm, o)) < 0) goto done;
        break;
      case 't': /* TUPLE */
        if ((rc = pop_mark(vm, &first, &count)) < 0) goto done;
        if ((rc = make_tuple(vm, &o, vm->stack + first, count)) < 0 || (rc = push(vm, o)) < 0)
          goto done;
        break;
      case 0x85: /* TUPLE1 */
      case 0x86: /* TUPLE2 */
      case 0x87: /* TUPLE3 */
        count = (size_t)(vm->op - 0x84);
        if (vm->sp - frame_base(vm) < count) FAIL(CP_EPKL_STACK, "stack underflow");
        vm->sp -= count;
        if ((rc = make_tuple(vm, &o, vm->stack + vm->sp, count)) < 0 || (rc = push(vm, o)) < 0)
          goto done;
        break;
      case 's': /* SETITEM */
        if ((rc = pop(vm, &b)) < 0 || (rc = pop(vm, &a)) < 0 || (rc = top(vm, &o)) < 0) goto done;
        if (o->kind != PK_DICT) FAIL(CP_EPKL_SETITEM, "SETITEM on a %s", pk_kind_name(o));
        if ((rc = seq_push(vm, o, a)) < 0 || (rc = seq_push(vm, o, b)) < 0) goto done;
        break;
      case 'u': /* SETITEMS */
        if ((rc = pop_mark(vm, &first, &count)) < 0 || (rc = top(vm, &o)) < 0) goto done;
        if (o->kind != PK_DICT) FAIL(CP_EPKL_SETITEM, "SETITEMS on a %s", pk_kind_name(o));
        if (count % 2) FAIL(CP_EPKL_STACK, "SETITEMS with an odd number (%zu) of items", count);
        for (size_t i = 0; i < count; i++)
          if ((rc = seq_push(vm, o, vm->stack[first + i])) < 0) goto done;
        break;
      case 'a': /* APPEND */
        if ((rc = pop(vm, &a)) < 0 || (rc = top(vm, &o)) < 0) goto done;
        if (o->kind != PK_LIST) FAIL(CP_EPKL_TYPE, "APPEND to a %s", pk_kind_name(o));
        if ((rc = seq_push(vm, o, a)) < 0) goto done;
        break;
      case 'e': /* APPENDS */
        if ((rc = pop_mark(vm, &first, &count)) < 0 || (rc = top(vm, &o)) < 0) goto done;
        if (o->kind != PK_LIST) FAIL(CP_EPKL_TYPE, "APPENDS to a %s", pk_kind_name(o));
        for (size_t i = 0; i < count; i++)
          if ((rc = seq_push(vm, o, vm->stack[first + i])) < 0) goto done;
        break;
      case 'J':   /* BININT */
      case 'K':   /* BININT1 */
      case 'M': { /* BININT2 */
        int n = vm->op == 'J' ? 4 : vm->op == 'K' ? 1 : 2;
        if ((rc = need(vm, (size_t)n)) < 0 || (rc = new_obj(vm, &o, PK_INT)) < 0) goto done;
        uint64_t v = cp_le_bytes(vm->data + vm->pos, (size_t)n);
        o->u.i = n == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        vm->pos += (size_t)n;
        if ((rc = push(vm, o)) < 0) goto done;
        break;
      }
      case 0x8a: /* LONG1 */
        if ((rc = need(vm, 1)) < 0) goto done;
        vm->pos += 1;
        if ((rc = push_long(vm, vm->data[vm->pos - 1])) < 0) goto done;
        break;
      case 0x8b: { /* LONG4 */
        if ((rc = need(vm, 4)) < 0) goto done;
        int32_t n = (int32_t)cp_le32(vm->data + vm->pos);
        if (n < 0) FAIL(CP_EPKL_TYPE, "LONG4 with negative length %d", n);
        vm->pos += 4;
        if ((rc = push_long(vm, (uint64_t)n)) < 0) goto done;
        break;
      }
      case 'G': { /* BINFLOAT, big-endian */
        if ((rc = need(vm, 8)) < 0 || (rc = new_obj(vm, &o, PK_FLOAT)) < 0) goto done;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = (bits << 8) | vm->data[vm->pos + (size_t)i];
        memcpy(&o->u.f, &bits, sizeof bits);
        vm->pos += 8;
        if ((rc = push(vm, o)) < 0) goto done;
        break;
      }
      case 'X': /* BINUNICODE */
      case 'B': /* BINBYTES */
        if ((rc = need(vm, 4)) < 0) goto done;
        vm->pos += 4;
        if ((rc = push_string(vm, vm->op == 'X' ? PK_STR : PK_BYTES,
                              cp_le32(vm->data + vm->pos - 4))) < 0)
          goto done;
        break;
      case 0x8d: /* BINUNICODE8 */
      case 0x8e: /* BINBYTES8 */
        if ((rc = need(vm, 8)) < 0) goto done;
        vm->pos += 8;
        if ((rc = push_string(vm, vm->op == 0x8d ? PK_STR : PK_BYTES,
                              cp_le64(vm->data + vm->pos - 8))) < 0)
          goto done;
        break;
      case 0x8c: /* SHORT_BINUNICODE */
      case 'U':  /* SHORT_BINSTRING: torch.load decodes it as UTF-8 text */
      case 'C':  /* SHORT_BINBYTES */
        if ((rc = need(vm, 1)) < 0) goto done;
        vm->pos += 1;
        if ((rc = push_string(vm, vm->op == 'C' ? PK_BYTES : PK_STR, vm->data[vm->pos - 1])) < 0)
          goto done;
        break;
      case 0x88: /* NEWTRUE */
      case 0x89: /* NEWFALSE */
        if ((rc = new_obj(vm, &o, PK_BOOL)) < 0) goto done;
        o->u.i = vm->op == 0x88;
        if ((rc = push(vm, o)) < 0) goto done;
        break;
      case 'N': /* NONE */
        if ((rc = new_obj(vm, &o, PK_NONE)) < 0 || (rc = push(vm, o)) < 0) goto done;
        break;
      case 'R': /* REDUCE */
        if ((rc = do_reduce(vm)) < 0) goto done;
        break;
      case 'b': /* BUILD */
        if ((rc = do_build(vm)) < 0) goto done;
        break;
      case 0x81: /* NEWOBJ */
        if ((rc = do_newobj(vm)) < 0) goto done;
        break;
      case 'Q': /* BINPERSID */
        if ((rc = do_persid(vm)) < 0) goto done;
        break;
      default:
        FAIL(CP_EPKL_OPCODE, "opcode not supported by the weights-only loader");
    }
  }

done:
  free(vm->stack);
  free(vm->marks);
  free(vm->memo);
  return rc;
}
