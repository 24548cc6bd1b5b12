/* The pickle machine for PyTorch checkpoints (see formats/pickle.h): stack, marks, memo and the
 * opcode loop. Mirrors torch 1.13's weights_only Unpickler, plus the opcodes newer torch and
 * pickle protocols 3-5 emit for plain data (FRAME, MEMOIZE, STACK_GLOBAL, SHORT_BINUNICODE,
 * BINUNICODE8, BINFLOAT, BIN[BYTES]*, LONG4). What the allowed globals mean, and the allowlist
 * itself, are in formats/pickle_torch.c. Nothing is ever imported, resolved or called.
 */
#include "formats/pickle.h"
#include "formats/pickle_vm.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/utf8.h"

/* ---- helpers -------------------------------------------------------------------------- */

const char *pk_kind_name(const pk_obj *o) {
  static const char *names[] = {"None",  "bool", "int",  "int", "float",  "str",     "bytes",
                                "tuple", "list", "dict", "set", "global", "storage", "tensor"};
  return (unsigned)o->kind < sizeof names / sizeof names[0] ? names[o->kind] : "?";
}

/* ---- the machine ---------------------------------------------------------------------- */

#define FAIL(code, ...)                   \
  do {                                    \
    rc = pk_vm_error(vm, code, __VA_ARGS__); \
    goto done;                            \
  } while (0)

int pk_vm_error(pk_vm *vm, int code, const char *fmt, ...) {
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
    return pk_vm_error(vm, CP_EPKL_LIMIT, "more than %u objects and container items", PK_MAX_OBJECTS);
  return 0;
}

int pk_vm_new(pk_vm *vm, pk_obj **out, pk_kind kind) {
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

int pk_vm_push(pk_vm *vm, pk_obj *o) {
  if (vm->sp == vm->stack_cap) {
    if (vm->stack_cap >= PK_MAX_STACK)
      return pk_vm_error(vm, CP_EPKL_STACK, "stack deeper than %u", PK_MAX_STACK);
    int rc = CP_ARRAY_RESERVE(vm->stack, vm->stack_cap, vm->sp + 1, vm->cfg->what);
    if (rc < 0) return rc;
  }
  vm->stack[vm->sp++] = o;
  return 0;
}

/* Bottom of the current frame: like Python's metastack, nothing below the last MARK. */
static size_t frame_base(const pk_vm *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0; }

int pk_vm_pop(pk_vm *vm, pk_obj **out) {
  if (vm->sp <= frame_base(vm)) return pk_vm_error(vm, CP_EPKL_STACK, "stack underflow");
  *out = vm->stack[--vm->sp];
  return 0;
}

int pk_vm_top(pk_vm *vm, pk_obj **out) {
  if (vm->sp <= frame_base(vm)) return pk_vm_error(vm, CP_EPKL_STACK, "stack underflow");
  *out = vm->stack[vm->sp - 1];
  return 0;
}

/* Pops to the last MARK: items are stack[*first .. sp), valid until the next push. */
static int pop_mark(pk_vm *vm, size_t *first, size_t *count) {
  if (!vm->nmarks) return pk_vm_error(vm, CP_EPKL_STACK, "no MARK to pop to");
  size_t m = vm->marks[--vm->nmarks];
  *first = m;
  *count = vm->sp - m;
  vm->sp = m;
  return 0;
}

static int need(pk_vm *vm, size_t n) {
  if (vm->len - vm->pos < n)
    return pk_vm_error(vm, CP_EPKL_TRUNCATED, "needs %zu bytes, %zu remain", n, vm->len - vm->pos);
  return 0;
}

static int memo_put(pk_vm *vm, uint64_t idx) {
  pk_obj *o = NULL;
  int rc = pk_vm_top(vm, &o);
  if (rc < 0) return rc;
  if (idx >= PK_MAX_MEMO)
    return pk_vm_error(vm, CP_EPKL_MEMO, "memo index %llu over the cap %u", (unsigned long long)idx,
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
    return pk_vm_error(vm, CP_EPKL_MEMO, "memo index %llu was never set", (unsigned long long)idx);
  return pk_vm_push(vm, vm->memo[idx]);
}

static int make_tuple(pk_vm *vm, pk_obj **out, pk_obj *const *items, size_t n) {
  pk_obj *t = NULL;
  int rc = pk_vm_new(vm, &t, PK_TUPLE);
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
  /* UTF-8 as Python decodes it with errors="surrogatepass": encoded surrogates are accepted. */
  if (kind == PK_STR && cp_utf8_check((const char *)p, (size_t)n, CP_UTF8_SURROGATEPASS) != (size_t)n)
    return pk_vm_error(vm, CP_EPKL_TYPE, "string of %llu bytes is not valid UTF-8",
                       (unsigned long long)n);
  pk_obj *o = NULL;
  rc = pk_vm_new(vm, &o, kind);
  if (rc < 0) return rc;
  o->u.s.p = (const char *)p;
  o->u.s.len = (size_t)n;
  vm->pos += (size_t)n;
  return pk_vm_push(vm, o);
}

static int push_long(pk_vm *vm, uint64_t n) {
  int rc = need(vm, n);
  if (rc < 0) return rc;
  const uint8_t *p = vm->data + vm->pos;
  pk_obj *o = NULL;
  rc = pk_vm_new(vm, &o, n <= 8 ? PK_INT : PK_BIGINT);
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
  return pk_vm_push(vm, o);
}

/* Reads a GLOBAL argument line ("text\n") without the newline. */
static int read_line(pk_vm *vm, const char **p, size_t *n) {
  const uint8_t *start = vm->data + vm->pos;
  const uint8_t *nl = memchr(start, '\n', vm->len - vm->pos);
  if (!nl) return pk_vm_error(vm, CP_EPKL_TRUNCATED, "GLOBAL argument has no newline");
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
        if ((rc = pk_vm_pop(vm, &o)) < 0) goto done;
        *out = o;
        rc = 0;
        goto done;
      case 'c': { /* GLOBAL */
        const char *mod = NULL, *name = NULL;
        size_t mod_len = 0, name_len = 0;
        if ((rc = read_line(vm, &mod, &mod_len)) < 0 || (rc = read_line(vm, &name, &name_len)) < 0)
          goto done;
        if ((rc = pk_do_global(vm, mod, mod_len, name, name_len)) < 0) goto done;
        break;
      }
      case 0x93: /* STACK_GLOBAL */
        if ((rc = pk_vm_pop(vm, &b)) < 0 || (rc = pk_vm_pop(vm, &a)) < 0) goto done;
        if (a->kind != PK_STR || b->kind != PK_STR)
          FAIL(CP_EPKL_TYPE, "STACK_GLOBAL on a %s and a %s, want two str", pk_kind_name(a),
               pk_kind_name(b));
        if ((rc = pk_do_global(vm, a->u.s.p, a->u.s.len, b->u.s.p, b->u.s.len)) < 0) goto done;
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
        if ((rc = pk_vm_new(vm, &o,
                            vm->op == '}'   ? PK_DICT
                            : vm->op == ']' ? PK_LIST
                                            : PK_SET)) < 0 ||
            (rc = pk_vm_push(vm, o)) < 0)
          goto done;
        break;
      case ')': /* EMPTY_TUPLE */
        if ((rc = make_tuple(vm, &o, NULL, 0)) < 0 || (rc = pk_vm_push(vm, o)) < 0) goto done;
        break;
      case 't': /* TUPLE */
        if ((rc = pop_mark(vm, &first, &count)) < 0) goto done;
        if ((rc = make_tuple(vm, &o, vm->stack + first, count)) < 0 || (rc = pk_vm_push(vm, o)) < 0)
          goto done;
        break;
      case 0x85: /* TUPLE1 */
      case 0x86: /* TUPLE2 */
      case 0x87: /* TUPLE3 */
        count = (size_t)(vm->op - 0x84);
        if (vm->sp - frame_base(vm) < count) FAIL(CP_EPKL_STACK, "stack underflow");
        vm->sp -= count;
        if ((rc = make_tuple(vm, &o, vm->stack + vm->sp, count)) < 0 || (rc = pk_vm_push(vm, o)) < 0)
          goto done;
        break;
      case 's': /* SETITEM */
        if ((rc = pk_vm_pop(vm, &b)) < 0 || (rc = pk_vm_pop(vm, &a)) < 0 || (rc = pk_vm_top(vm, &o)) < 0) goto done;
        if (o->kind != PK_DICT) FAIL(CP_EPKL_SETITEM, "SETITEM on a %s", pk_kind_name(o));
        if ((rc = seq_push(vm, o, a)) < 0 || (rc = seq_push(vm, o, b)) < 0) goto done;
        break;
      case 'u': /* SETITEMS */
        if ((rc = pop_mark(vm, &first, &count)) < 0 || (rc = pk_vm_top(vm, &o)) < 0) goto done;
        if (o->kind != PK_DICT) FAIL(CP_EPKL_SETITEM, "SETITEMS on a %s", pk_kind_name(o));
        if (count % 2) FAIL(CP_EPKL_STACK, "SETITEMS with an odd number (%zu) of items", count);
        for (size_t i = 0; i < count; i++)
          if ((rc = seq_push(vm, o, vm->stack[first + i])) < 0) goto done;
        break;
      case 'a': /* APPEND */
        if ((rc = pk_vm_pop(vm, &a)) < 0 || (rc = pk_vm_top(vm, &o)) < 0) goto done;
        if (o->kind != PK_LIST) FAIL(CP_EPKL_TYPE, "APPEND to a %s", pk_kind_name(o));
        if ((rc = seq_push(vm, o, a)) < 0) goto done;
        break;
      case 'e': /* APPENDS */
        if ((rc = pop_mark(vm, &first, &count)) < 0 || (rc = pk_vm_top(vm, &o)) < 0) goto done;
        if (o->kind != PK_LIST) FAIL(CP_EPKL_TYPE, "APPENDS to a %s", pk_kind_name(o));
        for (size_t i = 0; i < count; i++)
          if ((rc = seq_push(vm, o, vm->stack[first + i])) < 0) goto done;
        break;
      case 'J':   /* BININT */
      case 'K':   /* BININT1 */
      case 'M': { /* BININT2 */
        int n = vm->op == 'J' ? 4 : vm->op == 'K' ? 1 : 2;
        if ((rc = need(vm, (size_t)n)) < 0 || (rc = pk_vm_new(vm, &o, PK_INT)) < 0) goto done;
        uint64_t v = cp_le_bytes(vm->data + vm->pos, (size_t)n);
        o->u.i = n == 4 ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
        vm->pos += (size_t)n;
        if ((rc = pk_vm_push(vm, o)) < 0) goto done;
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
        if ((rc = need(vm, 8)) < 0 || (rc = pk_vm_new(vm, &o, PK_FLOAT)) < 0) goto done;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = (bits << 8) | vm->data[vm->pos + (size_t)i];
        memcpy(&o->u.f, &bits, sizeof bits);
        vm->pos += 8;
        if ((rc = pk_vm_push(vm, o)) < 0) goto done;
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
        if ((rc = pk_vm_new(vm, &o, PK_BOOL)) < 0) goto done;
        o->u.i = vm->op == 0x88;
        if ((rc = pk_vm_push(vm, o)) < 0) goto done;
        break;
      case 'N': /* NONE */
        if ((rc = pk_vm_new(vm, &o, PK_NONE)) < 0 || (rc = pk_vm_push(vm, o)) < 0) goto done;
        break;
      case 'R': /* REDUCE */
        if ((rc = pk_do_reduce(vm)) < 0) goto done;
        break;
      case 'b': /* BUILD */
        if ((rc = pk_do_build(vm)) < 0) goto done;
        break;
      case 0x81: /* NEWOBJ */
        if ((rc = pk_do_newobj(vm)) < 0) goto done;
        break;
      case 'Q': /* BINPERSID */
        if ((rc = pk_do_persid(vm)) < 0) goto done;
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
