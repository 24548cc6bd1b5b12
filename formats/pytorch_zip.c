/* PyTorch zip checkpoint reader (layout in include/ctxpatch/formats/pytorch.h).
 *
 * libzip validates the archive and inflates compressed entries; the central directory is also
 * parsed here, bounded, because libzip 1.7 does not expose where an entry's data starts, and
 * every entry used is cross-checked against zip_stat before its bytes are trusted.
 */
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
#include <zip.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"
#include "formats/pickle.h"

#define PT_MAX_PICKLE ((uint64_t)256 << 20)     /* data.pkl bytes: ~1M tensors' worth */
#define PT_MAX_DEPTH 64                         /* nesting of dicts/lists in the flattened names */
#define PT_MAX_NAME 4096                        /* bytes of one flattened name */
#define PT_MAX_KEY 255                          /* bytes of a storage key */
#define PT_MAX_VISITS ((uint64_t)1 << 21)       /* dict/list items walked while flattening */
#define PT_MAX_NAME_BYTES ((uint64_t)128 << 20) /* all flattened names together */

typedef struct {
  const char *name; /* into the map, not NUL-terminated */
  size_t name_len;
  uint64_t csize, usize, local_off;
  uint16_t method, flags;
  /* filled when first used */
  bool resolved;
  uint64_t data_off;
  const pk_storage *storage;
} pt_zentry;

typedef struct {
  const char *name;
  size_t len, idx;
} pt_name;

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
  zip_t *za;
  pt_zentry *ent; /* central directory order == libzip index */
  size_t nent;
  pt_name *by_name; /* entries sorted by name */
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

static int cmp_name(const char *a, size_t al, const char *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  if (c) return c;
  return al < bl ? -1 : al > bl;
}

static int cmp_pt_name(const void *x, const void *y) {
  const pt_name *a = x, *b = y;
  int c = cmp_name(a->name, a->len, b->name, b->len);
  if (c) return c;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Entry index named name[0..len), or -1. */
static int64_t find_entry(const cp_pt_file *f, const char *name, size_t len) {
  size_t lo = 0, hi = f->nent;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const pt_name *e = &f->by_name[mid];
    int c = cmp_name(e->name, e->len, name, len);
    if (c == 0) return (int64_t)e->idx;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

/* ---- legacy detection ----------------------------------------------------------------- */

/* torch's legacy format opens with pickle(0x1950a86a20f9469cfc6c) as LONG1, after PROTO and,
 * from protocol 4, a FRAME; the oldest form is a tar archive. */
static bool is_legacy(const uint8_t *p, size_t n) {
  static const uint8_t magic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                  0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  if (n >= 2 + sizeof magic && p[0] == 0x80 && p[1] <= 5) {
    size_t at = 2;
    if (n >= 11 + sizeof magic && p[2] == 0x95) at = 11;
    if (memcmp(p + at, magic, sizeof magic) == 0) return true;
  }
  return n >= 262 && memcmp(p, "PK\3\4", 4) != 0 && memcmp(p + 257, "ustar", 5) == 0;
}

/* ---- central directory ---------------------------------------------------------------- */

static int parse_central_dir(cp_pt_file *f) {
  const uint8_t *m = f->map;
  size_t n = f->map_len;
  if (n < 22) return cp_error_set(CP_EPT_ZIP, "%s: not a zip archive (%zu bytes)", f->path, n);
  size_t eocd = SIZE_MAX;
  size_t lowest = n - 22 > 65535 ? n - 22 - 65535 : 0;
  for (size_t p = n - 22 + 1; p-- > lowest;) {
    if (cp_le32(m + p) == 0x06054b50 && p + 22 + cp_le16(m + p + 20) <= n) {
      eocd = p;
      break;
    }
  }
  if (eocd == SIZE_MAX)
    return cp_error_set(CP_EPT_ZIP, "%s: not a zip archive (no end of central directory record)",
                        f->path);
  uint64_t count = cp_le16(m + eocd + 10), cd_size = cp_le32(m + eocd + 12),
           cd_off = cp_le32(m + eocd + 16);
  uint64_t limit = eocd;
  if (cp_le16(m + eocd + 4) != 0 || cp_le16(m + eocd + 6) != 0 || cp_le16(m + eocd + 8) != count)
    return cp_error_set(CP_EPT_ZIP, "%s: offset %zu: multi-disk archives are not supported",
                        f->path, eocd);
  if (eocd >= 20 && cp_le32(m + eocd - 20) == 0x07064b50) {
    uint64_t z = cp_le64(m + eocd - 20 + 8);
    if (z > eocd - 20 || eocd - 20 - z < 56 || cp_le32(m + z) != 0x06064b50)
      return cp_error_set(CP_EPT_ZIP, "%s: offset %zu: bad zip64 end of central directory locator",
                          f->path, eocd - 20);
    count = cp_le64(m + z + 32);
    cd_size = cp_le64(m + z + 40);
    cd_off = cp_le64(m + z + 48);
    limit = z;
  }
  if (cd_off > limit || cd_size > limit - cd_off)
    return cp_error_set(CP_EPT_ZIP,
                        "%s: central directory (offset %llu, %llu bytes) past its end record",
                        f->path, (unsigned long long)cd_off, (unsigned long long)cd_size);
  if (count > cd_size / 46)
    return cp_error_set(CP_EPT_ZIP, "%s: %llu entries do not fit in a %llu-byte central directory",
                        f->path, (unsigned long long)count, (unsigned long long)cd_size);
  f->ent = calloc(count ? (size_t)count : 1, sizeof *f->ent);
  f->by_name = calloc(count ? (size_t)count : 1, sizeof *f->by_name);
  CP_CHECK_ALLOC(f->ent, f->path);
  CP_CHECK_ALLOC(f->by_name, f->path);
  f->nent = (size_t)count;
  uint64_t q = cd_off, end = cd_off + cd_size;
  for (size_t i = 0; i < f->nent; i++) {
    if (end - q < 46 || cp_le32(m + q) != 0x02014b50)
      return cp_error_set(CP_EPT_ZIP, "%s: offset %llu: central directory entry %zu is malformed",
                          f->path, (unsigned long long)q, i);
    pt_zentry *e = &f->ent[i];
    uint64_t nl = cp_le16(m + q + 28), xl = cp_le16(m + q + 30), cl = cp_le16(m + q + 32);
    if (end - q - 46 < nl + xl + cl)
      return cp_error_set(CP_EPT_ZIP, "%s: offset %llu: central directory entry %zu overruns",
                          f->path, (unsigned long long)q, i);
    e->flags = cp_le16(m + q + 8);
    e->method = cp_le16(m + q + 10);
    e->csize = cp_le32(m + q + 20);
    e->usize = cp_le32(m + q + 24);
    e->local_off = cp_le32(m + q + 42);
    e->name = (const char *)m + q + 46;
    e->name_len = (size_t)nl;
    /* zip64 extra field (id 1): the saturated fields, in this order, 8 bytes each. */
    const uint8_t *x = m + q + 46 + nl, *xe = x + xl;
    while (xe - x >= 4) {
      uint64_t id = cp_le16(x), sz = cp_le16(x + 2);
      if ((uint64_t)(xe - x - 4) < sz) break;
      if (id == 1) {
        const uint8_t *z = x + 4, *ze = z + sz;
        uint64_t *fields[3] = {&e->usize, &e->csize, &e->local_off};
        for (int k = 0; k < 3; k++) {
          if (*fields[k] != 0xffffffffu) continue;
          if (ze - z < 8)
            return cp_error_set(CP_EPT_ZIP, "%s: central directory entry %zu: short zip64 field",
                                f->path, i);
          *fields[k] = cp_le64(z);
          z += 8;
        }
      }
      x += 4 + sz;
    }
    f->by_name[i] = (pt_name){e->name, e->name_len, i};
    q += 46 + nl + xl + cl;
  }
  qsort(f->by_name, f->nent, sizeof *f->by_name, cmp_pt_name);
  for (size_t i = 1; i < f->nent; i++) {
    const pt_name *a = &f->by_name[i - 1], *b = &f->by_name[i];
    if (cmp_name(a->name, a->len, b->name, b->len) == 0) {
      char q1[160];
      return cp_error_set(CP_EPT_ENTRY_NAME, "%s: zip entry name '%s' appears more than once",
                          f->path, cp_quote(q1, sizeof q1, a->name, a->len));
    }
  }
  return 0;
}

/* Cross-checks entry i against libzip and finds its data in the file. */
static int resolve_entry(cp_pt_file *f, size_t i) {
  pt_zentry *e = &f->ent[i];
  if (e->resolved) return 0;
  char qn[160];
  cp_quote(qn, sizeof qn, e->name, e->name_len);
  zip_stat_t st;
  zip_stat_init(&st);
  const zip_uint64_t need =
      ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  if (zip_stat_index(f->za, i, ZIP_FL_ENC_RAW, &st) != 0 || (st.valid & need) != need ||
      strlen(st.name) != e->name_len || memcmp(st.name, e->name, e->name_len) != 0 ||
      st.size != e->usize || st.comp_size != e->csize || st.comp_method != e->method)
    return cp_error_set(CP_EPT_ZIP, "%s: entry %zu '%s': central directory disagrees with libzip",
                        f->path, i, qn);
  uint64_t lo = e->local_off;
  if (lo > f->map_len || f->map_len - lo < 30 || cp_le32(f->map + lo) != 0x04034b50)
    return cp_error_set(CP_EPT_ZIP, "%s: offset %llu: no local header for entry '%s'", f->path,
                        (unsigned long long)lo, qn);
  uint64_t nl = cp_le16(f->map + lo + 26), xl = cp_le16(f->map + lo + 28);
  uint64_t data = lo + 30 + nl + xl;
  if (data > f->map_len || nl != e->name_len || memcmp(f->map + lo + 30, e->name, nl) != 0)
    return cp_error_set(
        CP_EPT_ZIP,
        "%s: offset %llu: local header of entry '%s' disagrees with the central directory", f->path,
        (unsigned long long)lo, qn);
  if (f->map_len - data < e->csize)
    return cp_error_set(CP_EPT_ZIP,
                        "%s: offset %llu: entry '%s' data (%llu bytes) runs past end of file",
                        f->path, (unsigned long long)data, qn, (unsigned long long)e->csize);
  if (e->method == ZIP_CM_STORE && e->csize != e->usize)
    return cp_error_set(CP_EPT_ZIP, "%s: entry '%s' is stored but its sizes differ", f->path, qn);
  e->data_off = data;
  e->resolved = true;
  return 0;
}

static bool is_mappable(const pt_zentry *e) { return e->method == ZIP_CM_STORE && !(e->flags & 1); }

/* Inflates entry i (already resolved) into buf[0..usize). */
static int read_entry(cp_pt_file *f, size_t i, uint8_t *buf) {
  pt_zentry *e = &f->ent[i];
  char qn[160];
  cp_quote(qn, sizeof qn, e->name, e->name_len);
  if (e->flags & 1) return cp_error_set(CP_EPT_RECORD, "%s: entry '%s' is encrypted", f->path, qn);
  zip_file_t *zf = zip_fopen_index(f->za, i, 0);
  if (!zf)
    return cp_error_set(CP_EPT_RECORD, "%s: entry '%s': %s", f->path, qn, zip_strerror(f->za));
  int rc = 0;
  uint64_t got = 0;
  while (got < e->usize) {
    zip_int64_t r = zip_fread(zf, buf + got, e->usize - got);
    if (r <= 0) {
      rc = cp_error_set(CP_EPT_RECORD, "%s: entry '%s': read %llu of %llu bytes: %s", f->path, qn,
                        (unsigned long long)got, (unsigned long long)e->usize,
                        r < 0 ? zip_file_strerror(zf) : "unexpected end");
      goto done;
    }
    got += (uint64_t)r;
  }
  /* One more read reaches end of data, where libzip checks the CRC. */
  uint8_t extra;
  zip_int64_t r = zip_fread(zf, &extra, 1);
  if (r != 0)
    rc = cp_error_set(CP_EPT_RECORD, "%s: entry '%s': %s", f->path, qn,
                      r < 0 ? zip_file_strerror(zf) : "more data than its size");
done:
  zip_fclose(zf);
  return rc;
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
  int64_t idx = find_entry(f, name, nl);
  if (idx < 0) {
    name[nl] = 0;
    return cp_error_set(CP_EPT_RECORD, "%s: pickle offset %zu: storage '%s' has no record '%s'",
                        f->path, op_offset, qk, name);
  }
  pt_zentry *e = &f->ent[idx];
  if (e->storage) { /* torch keeps the first storage loaded under a key */
    *out = e->storage;
    return 0;
  }
  int rc = resolve_entry(f, (size_t)idx);
  if (rc < 0) return rc;
  uint64_t nbytes;
  if (!cp_mul_u64(&nbytes, numel, cp_dtype_size(dtype)) || nbytes > e->usize)
    return cp_error_set(CP_EPT_STORAGE_SIZE,
                        "%s: pickle offset %zu: storage '%s' of %llu %s elements needs more than "
                        "its %llu-byte record",
                        f->path, op_offset, qk, (unsigned long long)numel, cp_dtype_name(dtype),
                        (unsigned long long)e->usize);
  pk_storage *s = cp_arena_alloc(&f->arena, sizeof *s);
  CP_CHECK_ALLOC(s, f->path);
  s->dtype = dtype;
  s->numel = numel;
  s->record = (size_t)idx;
  e->storage = s;
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
  const pt_zentry *e = &f->ent[v->storage->record];
  if ((pt->contiguous || numel == 0) && is_mappable(e)) {
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
  for (size_t i = 0; i < f->nent; i++) {
    const pt_zentry *e = &f->ent[i];
    if (e->name_len <= sl || memcmp(e->name + e->name_len - sl, suffix, sl) != 0) continue;
    if (memchr(e->name, '/', e->name_len - sl)) continue; /* not <prefix>/data.pkl */
    matches++;
    found = i;
  }
  if (matches == 0)
    return cp_error_set(CP_EPT_NO_PICKLE, "%s: no <prefix>/data.pkl entry among %zu zip entries",
                        f->path, f->nent);
  if (matches > 1)
    return cp_error_set(CP_EPT_NO_PICKLE, "%s: %zu entries match <prefix>/data.pkl", f->path,
                        matches);
  const pt_zentry *e = &f->ent[found];
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
  int64_t idx = find_entry(f, name, pl + 10);
  if (idx < 0) return 0; /* torch < 2.0 does not write it; those are little-endian */
  int rc = resolve_entry(f, (size_t)idx);
  if (rc < 0) return rc;
  const pt_zentry *e = &f->ent[idx];
  uint8_t buf[16];
  if (e->usize > sizeof buf)
    return cp_error_set(CP_EPT_BYTEORDER, "%s: byteorder entry has %llu bytes", f->path,
                        (unsigned long long)e->usize);
  if (is_mappable(e))
    memcpy(buf, f->map + e->data_off, (size_t)e->usize);
  else if ((rc = read_entry(f, (size_t)idx, buf)) < 0)
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
  zip_source_t *src = NULL;
  cp_pt_file *f = calloc(1, sizeof *f);
  *out = NULL;
  CP_CHECK_ALLOC(f, path);
  f->cache_ent = SIZE_MAX;
  f->arena.limit = PK_MAX_ARENA;
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);

  fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = cp_error_set(CP_EIO, "%s: cannot open: %s", path, strerror(errno));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    rc = cp_error_set(CP_EIO, "%s: not a regular file", path);
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
  close(fd);
  fd = -1;

  if (is_legacy(f->map, f->map_len)) {
    rc =
        cp_error_set(CP_EPT_LEGACY,
                     "%s: legacy (pre-1.6, non-zip) PyTorch checkpoint; its loader needs arbitrary "
                     "pickle code. Re-save it in a trusted environment with "
                     "torch.save(torch.load(f), f, _use_new_zipfile_serialization=True)",
                     path);
    goto done;
  }

  /* Own parse first: it names duplicate entries and bad offsets; libzip then validates again. */
  if ((rc = parse_central_dir(f)) < 0) goto done;

  zip_error_t zerr;
  zip_error_init(&zerr);
  src = zip_source_buffer_create(f->map, f->map_len, 0, &zerr);
  if (src) f->za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
  if (!f->za) {
    rc = cp_error_set(zip_error_code_zip(&zerr) == ZIP_ER_MEMORY ? CP_ENOMEM : CP_EPT_ZIP,
                      "%s: not a readable zip archive: %s", path, zip_error_strerror(&zerr));
    zip_error_fini(&zerr);
    zip_source_free(src); /* NULL-safe; owned by the archive only once opened */
    goto done;
  }
  zip_error_fini(&zerr);

  zip_int64_t zn = zip_get_num_entries(f->za, 0);
  if (zn < 0 || (uint64_t)zn != f->nent) {
    rc = cp_error_set(CP_EPT_ZIP, "%s: central directory has %zu entries, libzip counts %lld", path,
                      f->nent, (long long)zn);
    goto done;
  }

  size_t pi = 0;
  if ((rc = find_pickle(f, &pi)) < 0 || (rc = check_byteorder(f)) < 0 ||
      (rc = resolve_entry(f, pi)) < 0)
    goto done;
  const pt_zentry *pe = &f->ent[pi];
  if (pe->usize > PT_MAX_PICKLE) {
    rc = cp_error_set(CP_EPKL_LIMIT, "%s: %s/data.pkl has %llu bytes, over the %llu-byte cap", path,
                      f->prefix, (unsigned long long)pe->usize, (unsigned long long)PT_MAX_PICKLE);
    goto done;
  }
  const uint8_t *pkl;
  if (is_mappable(pe)) {
    pkl = f->map + pe->data_off;
  } else {
    CP_CHECK_ALLOC_GOTO(pkl_buf = malloc(pe->usize ? (size_t)pe->usize : 1), path);
    if ((rc = read_entry(f, pi, pkl_buf)) < 0) goto done;
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
  if (f->za) zip_discard(f->za);
  if (f->map) munmap(f->map, f->map_len);
  cp_arena_free(&f->arena);
  free(f->ent);
  free(f->by_name);
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
  const pt_zentry *e = &f->ent[ei];
  const uint8_t *base;
  if (is_mappable(e)) {
    base = f->map + e->data_off;
  } else {
    if (f->cache_ent != ei) {
      free(f->cache);
      f->cache = NULL;
      f->cache_ent = SIZE_MAX;
      if (e->usize > SIZE_MAX || !(f->cache = malloc(e->usize ? (size_t)e->usize : 1)))
        return cp_error_set(CP_ENOMEM, "%s: cannot buffer a %llu-byte record", f->path,
                            (unsigned long long)e->usize);
      int rc = read_entry(f, ei, f->cache);
      if (rc < 0) {
        free(f->cache);
        f->cache = NULL;
        return rc;
      }
      f->cache_ent = ei;
    }
    base = f->cache;
  }
  const size_t es = cp_dtype_size(pt->t.dtype);
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
