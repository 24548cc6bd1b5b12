/* Private (floor: formats): an allowlist-only interpreter for the pickles inside PyTorch zip checkpoints.
 *
 * It builds plain data (dicts, lists, tuples, scalars, strings) and the few torch objects that
 * torch.load(weights_only=True) may construct (storages and tensors). It never resolves or
 * calls anything: GLOBAL/STACK_GLOBAL names are matched against a fixed table taken from
 * torch 1.13's torch/_weights_only_unpickler.py (_get_allowed_globals), and REDUCE/NEWOBJ/BUILD
 * only perform the data-only meaning of the handful of entries listed in pickle.c.
 *
 * Every object and container array lives in one arena (base/arena.h) owned by the caller, so an
 * error at any point leaks nothing: free the arena. Strings point into the pickle bytes (not
 * NUL-terminated) and are valid only while those bytes are.
 *
 * Bounds (exceeding one is an error with its own code, never a crash):
 *   PK_MAX_OBJECTS  objects created plus container insertions  -> CP_EPKL_LIMIT
 *   PK_MAX_STACK    value stack entries                         -> CP_EPKL_STACK
 *   PK_MAX_MARKS    open MARKs                                  -> CP_EPKL_STACK
 *   PK_MAX_MEMO     memo index                                  -> CP_EPKL_MEMO
 * The interpreter is a loop over opcodes; it never recurses.
 */
#ifndef CTXPATCH_FORMATS_PICKLE_H
#define CTXPATCH_FORMATS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/arena.h"
#include "ctxpatch/formats/tensor.h"

#define PK_MAX_OBJECTS (1u << 23)
#define PK_MAX_STACK (1u << 21)
#define PK_MAX_MARKS 1024u
#define PK_MAX_MEMO (1u << 22)
/* The limit to give the arena (cp_arena.limit): past it an allocation is CP_ENOMEM. */
#define PK_MAX_ARENA ((uint64_t)2 << 30)

/* ---- objects -------------------------------------------------------------------------- */

typedef enum {
  PK_NONE,
  PK_BOOL,
  PK_INT,    /* fits in int64 */
  PK_BIGINT, /* LONG1/LONG4 wider than 8 bytes: kept only as an opaque leaf */
  PK_FLOAT,
  PK_STR, /* valid UTF-8 (surrogates allowed, as Python's surrogatepass) */
  PK_BYTES,
  PK_TUPLE,
  PK_LIST,
  PK_DICT, /* items are key, value, key, value, ... in insertion order */
  PK_SET,
  PK_GLOBAL,
  PK_STORAGE,
  PK_TENSOR,
} pk_kind;

/* What an allowlisted global means to this interpreter. */
typedef enum {
  PKG_ORDERED_DICT,
  PKG_REBUILD_TENSOR_V2,
  PKG_REBUILD_TENSOR,
  PKG_REBUILD_PARAMETER,
  PKG_REBUILD_PARAMETER_WITH_STATE,
  PKG_PARAMETER,
  PKG_SIZE,
  PKG_STORAGE_CLASS, /* dtype in pk_global.dtype; -1 when it has no cp_dtype (complex, quantized) */
  PKG_OTHER,         /* allowed by torch but has no data-only meaning here (dtypes, layouts, ...) */
} pk_global_kind;

typedef struct {
  pk_global_kind kind;
  int dtype;            /* PKG_STORAGE_CLASS: a cp_dtype, or -1 */
  const char *qualname; /* "torch.FloatStorage", static */
} pk_global;

typedef struct {
  cp_dtype dtype;
  uint64_t numel; /* elements of dtype */
  size_t record;  /* the caller's record handle */
} pk_storage;

typedef struct {
  const pk_storage *storage;
  uint64_t offset; /* in elements */
  int ndim;
  int64_t size[CP_MAX_DIMS];
  int64_t stride[CP_MAX_DIMS]; /* in elements, >= 0 */
  int is_parameter;
} pk_tensor;

typedef struct pk_obj pk_obj;
struct pk_obj {
  pk_kind kind;
  int ordered; /* PK_DICT made by collections.OrderedDict() */
  union {
    int64_t i; /* PK_BOOL, PK_INT */
    double f;
    struct {
      const char *p;
      size_t len;
    } s; /* PK_STR, PK_BYTES, PK_BIGINT (raw little-endian bytes) */
    struct {
      pk_obj **v;
      size_t n, cap;
    } seq; /* PK_TUPLE, PK_LIST, PK_DICT (n counts slots: 2 per dict item), PK_SET */
    const pk_global *g;
    const pk_storage *storage;
    pk_tensor *tensor;
  } u;
};

/* "dict", "tensor", ... for messages. */
const char *pk_kind_name(const pk_obj *o);

/* ---- loading -------------------------------------------------------------------------- */

/* Resolves a persistent id ('storage', <storage class>, key, location, numel). The callback
 * checks the record exists and is large enough, dedupes by key (torch keeps the first storage
 * loaded under a key), and returns a storage that outlives the load. `op_offset` is the
 * BINPERSID opcode's offset, for messages. Returns 0 or a cp_err with the message set. */
typedef int (*pk_persistent_fn)(void *ctx, const pk_storage **out, const char *key, size_t key_len,
                                cp_dtype dtype, uint64_t numel, size_t op_offset);

typedef struct {
  const char *what; /* "model.bin: archive/data.pkl", the prefix of every message */
  pk_persistent_fn persistent_load;
  void *ctx;
  cp_arena *arena; /* receives every object; the caller frees it (limit: PK_MAX_ARENA) */
} pk_config;

/* Runs the pickle in data[0..len) and returns the object STOP pops. Errors name cfg->what and
 * the opcode offset. */
int pk_load(pk_obj **out, const uint8_t *data, size_t len, const pk_config *cfg);

#endif
