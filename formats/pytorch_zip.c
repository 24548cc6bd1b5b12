/* PyTorch zip checkpoint reader (layout in include/ctxpatch/formats/pytorch.h): runs data.pkl
 * through the allowlist pickle interpreter, resolves its storages to archive records and
 * flattens the state dict into named tensor views. The archive itself is read by
 * formats/zip_archive.c. */
#include "ctxpatch/formats/pytorch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"
#include "formats/pickle.h"
#include "formats/zip_archive.h"

#define PT_MAX_PICKLE ((uint64_t)256 << 20)     /* data.pkl bytes: ~1M tensors' worth */
#define PT_MAX_DEPTH 64                         /* nesting of dicts/lists in the flattened names */
#define PT_MAX_NAME 4096                        /* bytes of one flattened name */
#define PT_MAX_KEY 255                          /* bytes of a storage key */
#define PT_MAX_VISITS ((uint64_t)1 << 21)       /* dict/list items walked while flattening */
#define PT_MAX_NAME_BYTES ((uint64_t)128 << 20) /* all flattened names together */

typedef struct {
  cp_tensor t;
  const pk_tensor *view;
  bool contiguous;
  int64_t file_off; /* -1 when not mapped */
} pt_tensor;

struct cp_pt_file {
  char *path;
  uint8_t *map;
  size_t map_len;
  int fd; /* the file mapped, open while mapped (for copy_file_range) */
  zd_archive zip;
  const pk_storage **storage_of; /* [zip.nent] the first storage loaded from each record */
  char *prefix;
  cp_arena arena; /* pickle objects, storages and flattened names */
  pt_tensor *tensors;
  size_t ntensors, tensors_cap;
  size_t skipped;
  uint64_t name_bytes;
  size_t *hash; /* tensor index + 1, 0 = empty; open addressing */
  size_t hash_cap;
  /* cp_pt_read cache of one inflated record */
  size_t cache_ent;
  uint8_t *cache;
};

/* ---- small helpers -------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

/* ---- legacy detection ----------------------------------------------------------------- */

typedef enum { PT_ZIP_OR_OTHER, PT_LEGACY, PT_BARE_PICKLE } pt_kind;

/* torch's legacy format opens with pickle(0x1950a86a20f9469cfc6c) as LONG1, after PROTO and,
 * from protocol 4, a FRAME; the oldest form is a tar archive. Any other stream that opens with
 * PROTO 2..5 is a bare pickle (pickle.dump, or torch.save output stripped of its zip): both
 * need arbitrary pickle code to load, so both are named and refused before the zip parser
 * calls them "not a zip archive". */
static pt_kind sniff(const uint8_t *p, size_t n) {
  static const uint8_t magic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                  0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  if (n >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5) {
    size_t at = 2;
    if (n >= 11 + sizeof magic && p[2] == 0x95) at = 11;
    if (n >= at + sizeof magic && memcmp(p + at, magic, sizeof magic) == 0) return PT_LEGACY;
    return PT_BARE_PICKLE;
  }
  if (n >= 262 && memcmp(p, "PK\3\4", 4) != 0 && memcmp(p + 257, "ustar", 5) == 0)
    return PT_LEGACY;
  return PT_ZIP_OR_OTHER;
}

/* ---- storages ------------------------------------------------------------------------- */

static int persistent_load(void *ctx, const pk_storage **out, const char *key, size_t key_len,
                           cp_dtype dtype, uint64_t numel, size_t op_offset) {
  cp_pt_file *f = ctx;
  char qk[160];
  cp_quote(qk, sizeof qk, key, key_len);
  bool safe = key_len > 0 && key_len <= PT_MAX_KEY && !memchr(key, '/', key_len) &&
              !memchr(key, '\\', key_len) && !memchr(key, 0, key_len) &&
              !(key_len <= 2 && memcmp(key, "..", key_len) == 0);
  if (!safe)
    return cp_error_set(CP_EPT_ENTRY_NAME, "%s: pickle offset %zu: unsafe storage key '%s'",
                        f->path, op_offset, qk);
  size_t pl = strlen(f->prefix);
  char name[PT_MAX_KEY + 512];
  if (pl + 6 + key_len >= sizeof name)
    return cp_error_set(CP_EPT_ENTRY_NAME, "%s: archive prefix too long", f->path);
  memcpy(name, f->prefix, pl);
  memcpy(name + pl, "/data/", 6);
  memcpy(name + pl + 6, key, key_len);
  size_t nl = pl + 6 + key_len;
  int64_t idx = zd_find(&f->zip, name, nl);
  if (idx < 0) {
    name[nl] = 0;
    return cp_error_set(CP_EPT_RECORD, "%s: pickle offset %zu: storage '%s' has no record '%s'",
                        f->path, op_offset, qk, name);
  }
  zd_entry *e = &f->zip.ent[idx];
  if (f->storage_of[idx]) { /* torch keeps the first storage loaded under a key */
    *out = f->storage_of[idx];
    return 0;
  }
  int rc = zd_resolve(&f->zip, (size_t)idx);
  if (rc < 0) return rc;
  uint64_t nbytes;
  if (!cp_mul_u64(&nbytes, numel, cp_dtype_size(dtype)) || nbytes > e->usize)
    return cp_error_set(CP_EPT_STORAGE_SIZE,
                        "%s: pickle offset %zu: storage '%s' of %llu %s elements needs more than "
                        "its %llu-byte record",
                        f->path, op_offset, qk, (unsigned long long)numel, cp_dtype_name(dtype),
                        (unsigned long long)e->usize);
  /* A compressed record inflates to no more than its storage needs (torch writes exactly that),
   * so no reader inflates bytes that no tensor can use; stored records are only mapped. */
  if (!zd_mappable(e) && e->usize > nbytes)
    return cp_error_set(CP_EPT_RECORD,
                        "%s: pickle offset %zu: compressed record '%.*s' inflates to %llu bytes, "
                        "its storage '%s' needs %llu (a zip bomb?)",
                        f->path, op_offset, (int)nl, name, (unsigned long long)e->usize, qk,
                        (unsigned long long)nbytes);
  pk_storage *s = cp_arena_alloc(&f->arena, sizeof *s);
  CP_CHECK_ALLOC(s, f->path);
  s->dtype = dtype;
  s->numel = numel;
  s->record = (size_t)idx;
  f->storage_of[idx] = s;
  *out = s;
  return 0;
}

/* ---- flattening ----------------------------------------------------------------------- */

static int add_tensor(cp_pt_file *f, const char *name, size_t name_len, const pk_tensor *v) {
  /* duplicate check first */
  if (f->ntensors * 2 >= f->hash_cap) {
    size_t cap = f->hash_cap ? f->hash_cap * 2 : 64;
    size_t *h = calloc(cap, sizeof *h);
    CP_CHECK_ALLOC(h, f->path);
    for (size_t i = 0; i < f->ntensors; i++) {
      const char *nm = f->tensors[i].t.name;
      size_t s = (size_t)fnv1a(nm, strlen(nm)) & (cap - 1);
      while (h[s]) s = (s + 1) & (cap - 1);
      h[s] = i + 1;
    }
    free(f->hash);
    f->hash = h;
    f->hash_cap = cap;
  }
  size_t s = (size_t)fnv1a(name, name_len) & (f->hash_cap - 1);
  while (f->hash[s]) {
    const char *nm = f->tensors[f->hash[s] - 1].t.name;
    if (strlen(nm) == name_len && memcmp(nm, name, name_len) == 0) {
      char qn[160];
      return cp_error_set(CP_EPT_STRUCTURE, "%s: tensor name '%s' occurs twice after flattening",
                          f->path, cp_quote(qn, sizeof qn, name, name_len));
    }
    s = (s + 1) & (f->hash_cap - 1);
  }
  int rc = CP_ARRAY_RESERVE(f->tensors, f->tensors_cap, f->ntensors + 1, f->path);
  if (rc < 0) return rc;
  char qn[160];
  cp_quote(qn, sizeof qn, name, name_len);
  f->name_bytes += name_len + 1;
  if (f->name_bytes > PT_MAX_NAME_BYTES)
    return cp_error_set(CP_EPKL_LIMIT, "%s: flattened names exceed %llu bytes", f->path,
                        (unsigned long long)PT_MAX_NAME_BYTES);
  char *nm = cp_arena_alloc(&f->arena, name_len + 1);
  CP_CHECK_ALLOC(nm, f->path);
  memcpy(nm, name, name_len);

  pt_tensor *pt = &f->tensors[f->ntensors];
  memset(pt, 0, sizeof *pt);
  pt->view = v;
  pt->file_off = -1;
  pt->t.name = nm;
  pt->t.dtype = v->storage->dtype;
  pt->t.ndim = v->ndim;
  memcpy(pt->t.shape, v->size, sizeof v->size);
  if (cp_shape_nbytes(&pt->t.nbytes, pt->t.dtype, v->ndim, v->size) < 0)
    return cp_error_set(CP_EPT_TENSOR_BOUNDS, "%s: tensor '%s': element count overflows", f->path,
                        qn);
  uint64_t numel = pt->t.nbytes / cp_dtype_size(pt->t.dtype);
  /* torch's is_contiguous: row-major strides, ignoring dimensions of size 1; an empty tensor
   * has no bytes to place. For numel > 0 every size is >= 1, so `expect` stays <= numel. */
  pt->contiguous = true;
  int64_t expect = 1;
  for (int d = v->ndim - 1; numel > 0 && d >= 0; d--) {
    if (v->size[d] != 1 && v->stride[d] != expect) pt->contiguous = false;
    expect *= v->size[d];
  }
  const zd_entry *e = &f->zip.ent[v->storage->record];
  if ((pt->contiguous || numel == 0) && zd_mappable(e)) {
    uint64_t off = e->data_off;
    if (numel > 0) off += v->offset * cp_dtype_size(pt->t.dtype); /* inside: checked by the VM */
    pt->t.data = f->map + off;
    pt->file_off = (int64_t)off;
    pt->contiguous = true;
  }
  f->ntensors++;
  f->hash[s] = f->ntensors;
  return 0;
}

typedef struct {
  const pk_obj *obj;
  size_t i;
  size_t name_len; /* length of the name this container's keys extend */
  bool dot;        /* whether a '.' goes before the next key */
} pt_frame;

static int flatten(cp_pt_file *f, const pk_obj *root) {
  if (root->kind != PK_DICT)
    return cp_error_set(CP_EPT_STRUCTURE, "%s: data.pkl holds a %s, not a dict of tensors", f->path,
                        root->kind == PK_TENSOR ? "bare tensor"
                        : root->kind == PK_LIST ? "list"
                                                : "non-dict object");
  pt_frame frames[PT_MAX_DEPTH];
  char name[PT_MAX_NAME + 1];
  size_t depth = 0;
  uint64_t visits = 0;
  frames[depth++] = (pt_frame){root, 0, 0, false};
  while (depth) {
    pt_frame *fr = &frames[depth - 1];
    const pk_obj *c = fr->obj;
    if (fr->i >= c->u.seq.n) {
      depth--;
      continue;
    }
    /* Shared containers (memo references) can make the walk exponential in the pickle size. */
    if (++visits > PT_MAX_VISITS)
      return cp_error_set(CP_EPKL_LIMIT,
                          "%s: flattening visits more than %llu entries (shared containers?)",
                          f->path, (unsigned long long)PT_MAX_VISITS);
    char seg[32];
    const char *kp;
    size_t kl;
    const pk_obj *val;
    if (c->kind == PK_DICT) {
      const pk_obj *k = c->u.seq.v[fr->i];
      val = c->u.seq.v[fr->i + 1];
      fr->i += 2;
      if (k->kind == PK_STR) {
        kp = k->u.s.p;
        kl = k->u.s.len;
        if (memchr(kp, 0, kl))
          return cp_error_set(CP_EPT_STRUCTURE, "%s: dict key contains a NUL byte", f->path);
      } else if (k->kind == PK_INT) {
        kl = (size_t)snprintf(seg, sizeof seg, "%lld", (long long)k->u.i);
        kp = seg;
      } else if (k->kind == PK_BOOL || k->kind == PK_NONE) {
        kp = k->kind == PK_NONE ? "None" : k->u.i ? "True" : "False";
        kl = strlen(kp);
      } else {
        return cp_error_set(CP_EPT_STRUCTURE, "%s: dict key of type %s (want str or int)", f->path,
                            pk_kind_name(k));
      }
    } else {
      kl = (size_t)snprintf(seg, sizeof seg, "%zu", fr->i);
      kp = seg;
      val = c->u.seq.v[fr->i];
      fr->i += 1;
    }
    size_t len = fr->name_len;
    if (len + 1 + kl > PT_MAX_NAME)
      return cp_error_set(CP_EPT_STRUCTURE, "%s: flattened tensor name longer than %d bytes",
                          f->path, PT_MAX_NAME);
    if (fr->dot) name[len++] = '.';
    memcpy(name + len, kp, kl);
    len += kl;
    switch (val->kind) {
      case PK_DICT:
      case PK_LIST:
      case PK_TUPLE:
        if (depth == PT_MAX_DEPTH)
          return cp_error_set(CP_EPT_STRUCTURE, "%s: containers nested deeper than %d (or a cycle)",
                              f->path, PT_MAX_DEPTH);
        frames[depth++] = (pt_frame){val, 0, len, true};
        break;
      case PK_TENSOR: {
        int rc = add_tensor(f, name, len, val->u.tensor);
        if (rc < 0) return rc;
        break;
      }
      default:
        f->skipped++;
    }
  }
  return 0;
}

/* ---- open ----------------------------------------------------------------------------- */

static int find_pickle(cp_pt_file *f, size_t *out) {
  size_t found = SIZE_MAX, matches = 0;
  static const char suffix[] = "/data.pkl";
  const size_t sl = sizeof suffix - 1;
  for (size_t i = 0; i < f->zip.nent; i++) {
    const zd_entry *e = &f->zip.ent[i];
    if (e->name_len <= sl || memcmp(e->name + e->name_len - sl, suffix, sl) != 0) continue;
    if (memchr(e->name, '/', e->name_len - sl)) continue; /* not <prefix>/data.pkl */
    matches++;
    found = i;
  }
  if (matches == 0)
    return cp_error_set(CP_EPT_NO_PICKLE, "%s: no <prefix>/data.pkl entry among %zu zip entries",
                        f->path, f->zip.nent);
  if (matches > 1)
    return cp_error_set(CP_EPT_NO_PICKLE, "%s: %zu entries match <prefix>/data.pkl", f->path,
                        matches);
  const zd_entry *e = &f->zip.ent[found];
  size_t pl = e->name_len - sl;
  char qn[160];
  cp_quote(qn, sizeof qn, e->name, e->name_len);
  if ((pl <= 2 && memcmp(e->name, "..", pl) == 0) || memchr(e->name, '\\', pl) ||
      memchr(e->name, 0, pl))
    return cp_error_set(CP_EPT_ENTRY_NAME, "%s: unsafe archive prefix in '%s'", f->path, qn);
  f->prefix = malloc(pl + 1);
  CP_CHECK_ALLOC(f->prefix, f->path);
  memcpy(f->prefix, e->name, pl);
  f->prefix[pl] = 0;
  *out = found;
  return 0;
}

static int check_byteorder(cp_pt_file *f) {
  size_t pl = strlen(f->prefix);
  char name[600];
  if (pl + 11 > sizeof name) return 0;
  memcpy(name, f->prefix, pl);
  memcpy(name + pl, "/byteorder", 10);
  int64_t idx = zd_find(&f->zip, name, pl + 10);
  if (idx < 0) return 0; /* torch < 2.0 does not write it; those are little-endian */
  int rc = zd_resolve(&f->zip, (size_t)idx);
  if (rc < 0) return rc;
  const zd_entry *e = &f->zip.ent[idx];
  uint8_t buf[16];
  if (e->usize > sizeof buf)
    return cp_error_set(CP_EPT_BYTEORDER, "%s: byteorder entry has %llu bytes", f->path,
                        (unsigned long long)e->usize);
  if (zd_mappable(e))
    memcpy(buf, f->map + e->data_off, (size_t)e->usize);
  else if ((rc = zd_read(&f->zip, (size_t)idx, buf)) < 0)
    return rc;
  if (e->usize == 6 && memcmp(buf, "little", 6) == 0) return 0;
  char qv[80];
  cp_quote(qv, sizeof qv, (const char *)buf, (size_t)e->usize);
  if (e->usize == 3 && memcmp(buf, "big", 3) == 0)
    return cp_error_set(CP_EPT_BYTEORDER,
                        "%s: %s/byteorder is 'big': big-endian checkpoints are not supported",
                        f->path, f->prefix);
  return cp_error_set(CP_EPT_BYTEORDER, "%s: %s/byteorder is '%s', want 'little'", f->path,
                      f->prefix, qv);
}

int cp_pt_open(cp_pt_file **out, const char *path) {
  int rc = 0, fd = -1;
  uint8_t *pkl_buf = NULL;
  cp_pt_file *f = calloc(1, sizeof *f);
  *out = NULL;
  CP_CHECK_ALLOC(f, path);
  f->fd = -1;
  f->cache_ent = SIZE_MAX;
  f->arena.limit = PK_MAX_ARENA;
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);

  if ((fd = cp_open_input(path, 0)) < 0) {
    rc = fd;
    fd = -1;
    goto done;
  }
  cp_input_note_fd(fd, path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = cp_error_set(CP_EIO, "%s: fstat: %s", path, strerror(errno));
    goto done;
  }
  if (st.st_size < 4) {
    rc = cp_error_set(CP_EPT_ZIP, "%s: %lld bytes is not a zip archive", path,
                      (long long)st.st_size);
    goto done;
  }
  f->map_len = (size_t)st.st_size;
  f->map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f->map == MAP_FAILED) {
    f->map = NULL;
    rc = cp_error_set(CP_EIO, "%s: mmap: %s", path, strerror(errno));
    goto done;
  }
  f->fd = fd; /* kept open while mapped: cp_pt_fd */
  fd = -1;

  pt_kind kind = sniff(f->map, f->map_len);
  if (kind != PT_ZIP_OR_OTHER) {
    char what[96];
    if (kind == PT_LEGACY)
      snprintf(what, sizeof what, "legacy (pre-1.6, non-zip) PyTorch checkpoint");
    else
      snprintf(what, sizeof what, "bare pickle (protocol %u, e.g. pickle.dump output)",
               (unsigned)f->map[1]);
    rc = cp_error_set(
        CP_EPT_LEGACY,
        "%s: offset 0: %s, not a zip archive; loading it needs arbitrary pickle code. Re-save it "
        "in a trusted environment with torch.save(obj, f, _use_new_zipfile_serialization=True) "
        "(the zip format, the default since torch 1.6) or "
        "safetensors.torch.save_file(state_dict, f)",
        path, what);
    goto done;
  }

  if ((rc = zd_open(&f->zip, f->path, f->map, f->map_len)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(f->storage_of = calloc(f->zip.nent ? f->zip.nent : 1, sizeof *f->storage_of), path);

  size_t pi = 0;
  if ((rc = find_pickle(f, &pi)) < 0 || (rc = check_byteorder(f)) < 0 ||
      (rc = zd_resolve(&f->zip, pi)) < 0)
    goto done;
  const zd_entry *pe = &f->zip.ent[pi];
  if (pe->usize > PT_MAX_PICKLE) {
    rc = cp_error_set(CP_EPKL_LIMIT, "%s: %s/data.pkl has %llu bytes, over the %llu-byte cap", path,
                      f->prefix, (unsigned long long)pe->usize, (unsigned long long)PT_MAX_PICKLE);
    goto done;
  }
  const uint8_t *pkl;
  if (zd_mappable(pe)) {
    pkl = f->map + pe->data_off;
  } else {
    CP_CHECK_ALLOC_GOTO(pkl_buf = malloc(pe->usize ? (size_t)pe->usize : 1), path);
    if ((rc = zd_read(&f->zip, pi, pkl_buf)) < 0) goto done;
    pkl = pkl_buf;
  }

  char what[4200];
  snprintf(what, sizeof what, "%s: %s/data.pkl", path, f->prefix);
  pk_config cfg = {.what = what, .persistent_load = persistent_load, .ctx = f, .arena = &f->arena};
  pk_obj *root;
  if ((rc = pk_load(&root, pkl, (size_t)pe->usize, &cfg)) < 0) goto done;
  if ((rc = flatten(f, root)) < 0) goto done;

done:
  if (fd >= 0) close(fd);
  free(pkl_buf);
  if (rc < 0) {
    cp_pt_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

void cp_pt_free(cp_pt_file *f) {
  if (!f) return;
  zd_close(&f->zip);
  if (f->map) munmap(f->map, f->map_len);
  if (f->fd >= 0) close(f->fd);
  cp_arena_free(&f->arena);
  free(f->storage_of);
  free(f->tensors);
  free(f->hash);
  free(f->cache);
  free(f->prefix);
  free(f->path);
  free(f);
}

size_t cp_pt_count(const cp_pt_file *f) { return f->ntensors; }

const cp_tensor *cp_pt_tensor(const cp_pt_file *f, size_t i) {
  return i < f->ntensors ? &f->tensors[i].t : NULL;
}

int64_t cp_pt_find(const cp_pt_file *f, const char *name) {
  if (!f->hash_cap) return -1;
  size_t n = strlen(name);
  size_t s = (size_t)fnv1a(name, n) & (f->hash_cap - 1);
  while (f->hash[s]) {
    if (strcmp(f->tensors[f->hash[s] - 1].t.name, name) == 0) return (int64_t)f->hash[s] - 1;
    s = (s + 1) & (f->hash_cap - 1);
  }
  return -1;
}

size_t cp_pt_skipped_count(const cp_pt_file *f) { return f->skipped; }

const char *cp_pt_prefix(const cp_pt_file *f) { return f->prefix; }

int cp_pt_fd(const cp_pt_file *f) { return f->fd; }

int64_t cp_pt_tensor_file_offset(const cp_pt_file *f, size_t i) {
  return i < f->ntensors ? f->tensors[i].file_off : -1;
}

int cp_pt_read(cp_pt_file *f, size_t i, uint64_t offset, void *buf, size_t len) {
  if (i >= f->ntensors)
    return cp_error_set(CP_EARG, "%s: tensor index %zu out of range (%zu tensors)", f->path, i,
                        f->ntensors);
  const pt_tensor *pt = &f->tensors[i];
  if (offset > pt->t.nbytes || len > pt->t.nbytes - offset)
    return cp_error_set(CP_EARG, "%s: tensor '%s': read of %zu bytes at %llu past its %llu bytes",
                        f->path, pt->t.name, len, (unsigned long long)offset,
                        (unsigned long long)pt->t.nbytes);
  if (len == 0) return 0;
  if (pt->t.data) {
    memcpy(buf, (const uint8_t *)pt->t.data + offset, len);
    return 0;
  }
  const pk_tensor *v = pt->view;
  size_t ei = v->storage->record;
  const zd_entry *e = &f->zip.ent[ei];
  const size_t es = cp_dtype_size(pt->t.dtype);
  const uint8_t *base;
  if (zd_mappable(e)) {
    base = f->map + e->data_off;
  } else if (pt->contiguous) {
    /* Streamed through a bounded buffer: nothing beyond the bytes asked for is held. */
    return zd_read_at(&f->zip, ei, v->offset * es + offset, buf, len);
  } else {
    /* A strided view gathers from anywhere in its record: buffer the record, whose size is
     * bounded by its storage (persistent_load) and the DEFLATE ratio (zd_resolve). */
    if (f->cache_ent != ei) {
      free(f->cache);
      f->cache = NULL;
      f->cache_ent = SIZE_MAX;
      if (e->usize > SIZE_MAX || !(f->cache = malloc(e->usize ? (size_t)e->usize : 1)))
        return cp_nomem("%s: buffering a %llu-byte record", f->path, (unsigned long long)e->usize);
      int rc = zd_read(&f->zip, ei, f->cache);
      if (rc < 0) {
        free(f->cache);
        f->cache = NULL;
        return rc;
      }
      f->cache_ent = ei;
    }
    base = f->cache;
  }
  if (pt->contiguous) {
    memcpy(buf, base + v->offset * es + offset, len);
    return 0;
  }
  /* Gather a strided view: walk the row-major index with an odometer. */
  uint64_t elem = offset / es;
  size_t b = (size_t)(offset % es);
  int64_t idx[CP_MAX_DIMS];
  uint64_t pos = v->offset;
  for (int d = v->ndim - 1; d >= 0; d--) {
    idx[d] = (int64_t)(elem % (uint64_t)v->size[d]);
    elem /= (uint64_t)v->size[d];
    pos += (uint64_t)idx[d] * (uint64_t)v->stride[d];
  }
  uint8_t *dst = buf;
  size_t left = len;
  for (;;) {
    size_t n = es - b < left ? es - b : left;
    memcpy(dst, base + pos * es + b, n);
    dst += n;
    left -= n;
    b = 0;
    if (!left) break;
    int d = v->ndim - 1;
    idx[d]++;
    pos += (uint64_t)v->stride[d];
    while (idx[d] == v->size[d] && d > 0) {
      pos -= (uint64_t)v->stride[d] * (uint64_t)v->size[d];
      idx[d] = 0;
      d--;
      idx[d]++;
      pos += (uint64_t)v->stride[d];
    }
  }
  return 0;
}
