/* What torch's allowlisted globals mean to the pickle interpreter (see formats/pickle.h): the
 * allowlist itself, taken from torch 1.13's weights_only Unpickler, and the data-only meaning of
 * REDUCE/BUILD/NEWOBJ/BINPERSID on it (rebuilding tensor views over storages, Parameters,
 * OrderedDicts, torch.Size). Nothing is ever imported, resolved or called. */
#include <stdbool.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"
#include "formats/pickle_vm.h"

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

/* A tuple of non-negative ints, at most CP_MAX_DIMS of them. */
static int int_tuple(pk_vm *vm, const pk_obj *t, const char *what, int64_t *out, int *n) {
  if (t->kind != PK_TUPLE)
    return pk_vm_error(vm, CP_EPKL_TYPE, "%s is a %s, want a tuple of ints", what, pk_kind_name(t));
  if (t->u.seq.n > CP_MAX_DIMS)
    return pk_vm_error(vm, CP_EUNSUPPORTED, "%s has %zu dimensions, at most %d are supported", what,
                       t->u.seq.n, CP_MAX_DIMS);
  for (size_t i = 0; i < t->u.seq.n; i++) {
    const pk_obj *e = t->u.seq.v[i];
    if (e->kind != PK_INT || e->u.i < 0)
      return pk_vm_error(vm, CP_EPKL_TYPE, "%s[%zu] is not a non-negative int", what, i);
    out[i] = e->u.i;
  }
  *n = (int)t->u.seq.n;
  return 0;
}

/* _rebuild_tensor[_v2](storage, storage_offset, size, stride, ...) */
static int rebuild_tensor(pk_vm *vm, pk_obj **out, pk_obj *const *a, size_t n, bool v2) {
  const char *fn = v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor";
  if (v2 ? (n != 6 && n != 7) : n != 4)
    return pk_vm_error(vm, CP_EPKL_TYPE, "%s takes %s arguments, got %zu", fn, v2 ? "6 or 7" : "4", n);
  if (a[0]->kind != PK_STORAGE)
    return pk_vm_error(vm, CP_EPKL_TYPE, "%s storage argument is a %s", fn, pk_kind_name(a[0]));
  if (a[1]->kind != PK_INT || a[1]->u.i < 0)
    return pk_vm_error(vm, CP_EPKL_TYPE, "%s storage_offset is not a non-negative int", fn);
  if (v2) {
    if (a[4]->kind != PK_BOOL)
      return pk_vm_error(vm, CP_EPKL_TYPE, "%s requires_grad is a %s, want bool", fn,
                         pk_kind_name(a[4]));
    if (a[5]->kind != PK_DICT)
      return pk_vm_error(vm, CP_EPKL_TYPE, "%s backward_hooks is a %s, want a dict", fn,
                         pk_kind_name(a[5]));
    if (n == 7 && a[6]->kind != PK_NONE && a[6]->kind != PK_DICT)
      return pk_vm_error(vm, CP_EPKL_TYPE, "%s metadata is a %s, want None or a dict", fn,
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
    return pk_vm_error(vm, CP_EPKL_TYPE, "size has %d dimensions but stride has %d", t->ndim,
                       nd_stride);
  t->storage = a[0]->u.storage;
  t->offset = (uint64_t)a[1]->u.i;

  /* The view must stay inside its storage: offset + sum((size-1)*stride) < numel. */
  uint64_t numel;
  if (cp_shape_numel(&numel, t->ndim, t->size) < 0)
    return pk_vm_error(vm, CP_EPT_TENSOR_BOUNDS, "tensor element count overflows");
  if (numel > 0) {
    uint64_t last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
      uint64_t span;
      if (!cp_mul_u64(&span, (uint64_t)(t->size[d] - 1), (uint64_t)t->stride[d]) ||
          !cp_add_u64(&last, last, span))
        return pk_vm_error(vm, CP_EPT_TENSOR_BOUNDS, "tensor view extent overflows");
    }
    if (last >= t->storage->numel)
      return pk_vm_error(vm, CP_EPT_TENSOR_BOUNDS,
                         "tensor view reaches element %llu of a storage of %llu elements",
                         (unsigned long long)last, (unsigned long long)t->storage->numel);
  }
  pk_obj *o = NULL;
  rc = pk_vm_new(vm, &o, PK_TENSOR);
  if (rc < 0) return rc;
  o->u.tensor = t;
  *out = o;
  return 0;
}

int pk_do_reduce(pk_vm *vm) {
  pk_obj *args = NULL, *fn = NULL, *res = NULL;
  int rc = pk_vm_pop(vm, &args);
  if (rc < 0) return rc;
  rc = pk_vm_top(vm, &fn);
  if (rc < 0) return rc;
  if (fn->kind != PK_GLOBAL)
    return pk_vm_error(vm, CP_EPKL_TYPE, "REDUCE on a %s, not an allowed callable", pk_kind_name(fn));
  if (args->kind != PK_TUPLE)
    return pk_vm_error(vm, CP_EPKL_TYPE, "REDUCE arguments are a %s, not a tuple", pk_kind_name(args));
  pk_obj *const *a = args->u.seq.v;
  size_t n = args->u.seq.n;
  const pk_global *g = fn->u.g;
  switch (g->kind) {
    case PKG_ORDERED_DICT:
      if (n != 0)
        return pk_vm_error(vm, CP_EPKL_TYPE, "collections.OrderedDict called with %zu arguments", n);
      rc = pk_vm_new(vm, &res, PK_DICT);
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
        return pk_vm_error(vm, CP_EPKL_TYPE, "%s takes %zu arguments, got %zu", g->qualname, want, n);
      if (a[0]->kind != PK_TENSOR || a[1]->kind != PK_BOOL || a[2]->kind != PK_DICT)
        return pk_vm_error(vm, CP_EPKL_TYPE, "%s wants (tensor, bool, dict%s)", g->qualname,
                           want == 4 ? ", state" : "");
      a[0]->u.tensor->is_parameter = 1;
      res = a[0];
      break;
    }
    case PKG_SIZE: {
      int64_t dims[CP_MAX_DIMS];
      int nd;
      if (n != 1) return pk_vm_error(vm, CP_EPKL_TYPE, "torch.Size takes 1 argument, got %zu", n);
      rc = int_tuple(vm, a[0], "torch.Size argument", dims, &nd);
      if (rc < 0) return rc;
      res = a[0]; /* torch.Size is a tuple subclass */
      break;
    }
    case PKG_STORAGE_CLASS:
    case PKG_PARAMETER:
    case PKG_OTHER:
    default:
      return pk_vm_error(vm, CP_EUNSUPPORTED, "calling %s is not supported", g->qualname);
  }
  vm->stack[vm->sp - 1] = res;
  return 0;
}

int pk_do_build(pk_vm *vm) {
  pk_obj *state = NULL, *inst = NULL;
  int rc = pk_vm_pop(vm, &state);
  if (rc < 0) return rc;
  rc = pk_vm_top(vm, &inst);
  if (rc < 0) return rc;
  /* torch allows BUILD on OrderedDict (attributes such as a state dict's _metadata) and on
   * Parameter (__setstate__); neither changes the tensors, so the state is checked and dropped.
   * BUILD on a plain Tensor is the legacy set_(storage, ...) path, which re-points the data. */
  if (inst->kind == PK_DICT && inst->ordered) {
    if (state->kind != PK_DICT && state->kind != PK_NONE)
      return pk_vm_error(vm, CP_EPKL_TYPE, "BUILD state for an OrderedDict is a %s",
                         pk_kind_name(state));
    return 0;
  }
  if (inst->kind == PK_TENSOR && inst->u.tensor->is_parameter) return 0;
  return pk_vm_error(vm, CP_EPKL_TYPE, "BUILD on a %s is not allowed", pk_kind_name(inst));
}

int pk_do_newobj(pk_vm *vm) {
  pk_obj *args = NULL, *cls = NULL;
  int rc = pk_vm_pop(vm, &args);
  if (rc < 0) return rc;
  rc = pk_vm_pop(vm, &cls);
  if (rc < 0) return rc;
  if (cls->kind != PK_GLOBAL || cls->u.g->kind != PKG_PARAMETER)
    return pk_vm_error(vm, CP_EPKL_TYPE,
                       "NEWOBJ of a %s; only torch.nn.parameter.Parameter is allowed",
                       cls->kind == PK_GLOBAL ? cls->u.g->qualname : pk_kind_name(cls));
  if (args->kind != PK_TUPLE || args->u.seq.n < 1 || args->u.seq.n > 2 ||
      args->u.seq.v[0]->kind != PK_TENSOR ||
      (args->u.seq.n == 2 && args->u.seq.v[1]->kind != PK_BOOL))
    return pk_vm_error(vm, CP_EPKL_TYPE, "Parameter() wants (tensor[, bool])");
  pk_obj *t = args->u.seq.v[0];
  t->u.tensor->is_parameter = 1;
  return pk_vm_push(vm, t);
}

int pk_do_persid(pk_vm *vm) {
  pk_obj *pid = NULL;
  int rc = pk_vm_pop(vm, &pid);
  if (rc < 0) return rc;
  if (pid->kind != PK_TUPLE || pid->u.seq.n != 5)
    return pk_vm_error(vm, CP_EPKL_TYPE,
                       "persistent id is a %s, want ('storage', type, key, location, numel)",
                       pk_kind_name(pid));
  pk_obj *const *a = pid->u.seq.v;
  if (a[0]->kind != PK_STR || !span_eq(a[0]->u.s.p, a[0]->u.s.len, "storage"))
    return pk_vm_error(vm, CP_EPKL_TYPE, "persistent id does not start with 'storage'");
  if (a[1]->kind != PK_GLOBAL || a[1]->u.g->kind != PKG_STORAGE_CLASS)
    return pk_vm_error(vm, CP_EPKL_TYPE, "persistent id storage type is a %s",
                       a[1]->kind == PK_GLOBAL ? a[1]->u.g->qualname : pk_kind_name(a[1]));
  if (a[2]->kind != PK_STR)
    return pk_vm_error(vm, CP_EPKL_TYPE, "storage key is a %s", pk_kind_name(a[2]));
  if (a[3]->kind != PK_STR)
    return pk_vm_error(vm, CP_EPKL_TYPE, "storage location is a %s", pk_kind_name(a[3]));
  if (a[4]->kind != PK_INT || a[4]->u.i < 0)
    return pk_vm_error(vm, CP_EPKL_TYPE, "storage numel is not a non-negative int");
  const pk_global *g = a[1]->u.g;
  if (g->dtype == PK_DTYPE_NONE)
    return pk_vm_error(vm, CP_EPKL_TYPE, "storage type %s has no element type", g->qualname);
  if (g->dtype < 0)
    return pk_vm_error(vm, CP_EUNSUPPORTED, "storage type %s is not supported", g->qualname);
  const pk_storage *st = NULL;
  rc = vm->cfg->persistent_load(vm->cfg->ctx, &st, a[2]->u.s.p, a[2]->u.s.len, (cp_dtype)g->dtype,
                                (uint64_t)a[4]->u.i, vm->op_off);
  if (rc < 0) return rc;
  pk_obj *o = NULL;
  rc = pk_vm_new(vm, &o, PK_STORAGE);
  if (rc < 0) return rc;
  o->u.storage = st;
  return pk_vm_push(vm, o);
}

int pk_do_global(pk_vm *vm, const char *mod, size_t mod_len, const char *name,
                        size_t name_len) {
  const pk_global *g = lookup_global(mod, mod_len, name, name_len);
  if (!g) {
    char qm[160], qn[160];
    return pk_vm_error(vm, CP_EPKL_GLOBAL, "global '%s.%s' is not on the allowlist",
                       cp_quote(qm, sizeof qm, mod, mod_len), cp_quote(qn, sizeof qn, name, name_len));
  }
  pk_obj *o = NULL;
  int rc = pk_vm_new(vm, &o, PK_GLOBAL);
  if (rc < 0) return rc;
  o->u.g = g;
  return pk_vm_push(vm, o);
}
