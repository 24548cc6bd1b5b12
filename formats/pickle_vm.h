/* Private to formats/pickle*.c: the pickle machine's state and the few operations the torch
 * semantics (formats/pickle_torch.c) need, so the generic interpreter (formats/pickle.c) and the
 * allowlist of what torch's globals may mean stay in separate files. */
#ifndef CTXPATCH_FORMATS_PICKLE_VM_H
#define CTXPATCH_FORMATS_PICKLE_VM_H

#include <stddef.h>
#include <stdint.h>

#include "formats/pickle.h"

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

/* Sets "<what>: pickle offset N: opcode 0xNN: <message>" and returns `code`. */
int pk_vm_error(pk_vm *vm, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A new zeroed object of `kind` in the arena, counted against PK_MAX_OBJECTS. */
int pk_vm_new(pk_vm *vm, pk_obj **out, pk_kind kind);
int pk_vm_push(pk_vm *vm, pk_obj *o);
/* Pop and peek stop at the last MARK (CP_EPKL_STACK below it). */
int pk_vm_pop(pk_vm *vm, pk_obj **out);
int pk_vm_top(pk_vm *vm, pk_obj **out);

/* ---- torch semantics (formats/pickle_torch.c) ------------------------------------------ */

/* GLOBAL / STACK_GLOBAL: pushes the allowlisted global module.name, or refuses it. */
int pk_do_global(pk_vm *vm, const char *mod, size_t mod_len, const char *name, size_t name_len);
/* REDUCE, BUILD, NEWOBJ, BINPERSID: the data-only meaning of the allowlisted callables. */
int pk_do_reduce(pk_vm *vm);
int pk_do_build(pk_vm *vm);
int pk_do_newobj(pk_vm *vm);
int pk_do_persid(pk_vm *vm);

#endif
