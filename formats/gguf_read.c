/* GGUF reader: mmap, header and tensor-info validation, metadata getters, tensor views and
 * dequantising reads (layout and checks in include/ctxpatch/formats/gguf.h). */
#include "ctxpatch/formats/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/base/utf8.h"
#include "formats/gguf_quant.h"

typedef struct {
  char *key;            /* NUL-terminated copy */
  cp_gguf_vtype type;
  uint64_t off;         /* file offset of the value (arrays: of the first element) */
  cp_gguf_vtype elem;   /* arrays */
  uint64_t n;           /* arrays: element count */
  uint64_t *str_off;    /* string arrays: file offset of each element's length field */
  uint64_t start, end;  /* the whole entry's bytes: key length field to the value's end */
} gguf_kv;

typedef struct {
  cp_tensor t;
  char *name;
  uint32_t type;
  uint64_t offset;      /* relative to the data section */
  uint64_t stored;      /* bytes in the file */
} gguf_tensor;

struct cp_gguf_file {
  char *path;
  const uint8_t *map;
  uint64_t size;
  uint32_t version, alignment;
  uint64_t data_off;
  uint64_t info_off, info_end; /* the tensor infos' bytes */
  gguf_kv *kv;
  size_t n_kv;
  gguf_tensor *t;
  size_t n_t;
  size_t *kv_sorted, *t_sorted; /* indices sorted by key / name */
  uint64_t steps;               /* cp_gguf_value_steps */
};

/* A read position in the mapping; every read is checked against the bytes left. */
typedef struct {
  const cp_gguf_file *f;
  uint64_t pos;
  uint64_t steps; /* skip_value calls */
} cursor;

static const uint8_t k_scalar_size[CP_GGUF_TYPE_COUNT] = {
    [CP_GGUF_U8] = 1, [CP_GGUF_I8] = 1, [CP_GGUF_U16] = 2, [CP_GGUF_I16] = 2, [CP_GGUF_U32] = 4,
    [CP_GGUF_I32] = 4, [CP_GGUF_F32] = 4, [CP_GGUF_BOOL] = 1, [CP_GGUF_U64] = 8, [CP_GGUF_I64] = 8,
    [CP_GGUF_F64] = 8,
};

const char *cp_gguf_type_name(cp_gguf_vtype t) {
  static const char *const names[CP_GGUF_TYPE_COUNT] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                        "bool", "string", "array", "u64", "i64", "f64"};
  return (unsigned)t < CP_GGUF_TYPE_COUNT ? names[t] : "?";
}

const char *cp_gguf_ggml_type_name(uint32_t type) {
  const gguf_type_info *ti = gguf_type(type);
  return ti ? ti->name : "?";
}

static uint64_t left(const cursor *c) { return c->f->size - c->pos; }

/* Checks `n` bytes remain for `what` (printf-style, after the offset). */
static int need(const cursor *c, uint64_t n, const char *what) {
  if (n <= left(c)) return 0;
  return cp_error_set(CP_EGGUF_TRUNCATED, "%s: offset %llu: %s needs %llu bytes, %llu left", c->f->path,
                      (unsigned long long)c->pos, what, (unsigned long long)n, (unsigned long long)left(c));
}

static int rd_u32(uint32_t *out, cursor *c, const char *what) {
  int rc = need(c, 4, what);
  if (rc) return rc;
  *out = cp_le32(c->f->map + c->pos);
  c->pos += 4;
  return 0;
}

static int rd_u64(uint64_t *out, cursor *c, const char *what) {
  int rc = need(c, 8, what);
  if (rc) return rc;
  *out = cp_le64(c->f->map + c->pos);
  c->pos += 8;
  return 0;
}

/* A gguf_string: length then bytes, the bytes bounded by what is left. Sets *s (into the
 * mapping) and *len. */
static int rd_str(const char **s, uint64_t *len, cursor *c, const char *what) {
  uint64_t at = c->pos;
  int rc = rd_u64(len, c, what);
  if (rc) return rc;
  if (*len > left(c)) {
    c->pos = at;
    return cp_error_set(CP_EGGUF_LIMIT, "%s: offset %llu: %s: length %llu is past the %llu bytes left", c->f->path,
                        (unsigned long long)at, what, (unsigned long long)*len, (unsigned long long)left(c) - 8);
  }
  *s = (const char *)c->f->map + c->pos;
  c->pos += *len;
  return 0;
}

/* A key or tensor name: non-empty, no NUL, valid UTF-8, under `max` bytes; copied. */
static int rd_name(char **out, cursor *c, const char *what, uint64_t max) {
  uint64_t at = c->pos, len;
  const char *s = NULL;
  int rc = rd_str(&s, &len, c, what);
  if (rc) return rc;
  if (len == 0 || len >= max || memchr(s, 0, (size_t)len) || cp_utf8_check(s, (size_t)len, CP_UTF8_STRICT) != len) {
    char q[CP_QUOTE_MASKED_CAP];
    return cp_error_set(len >= max ? CP_EGGUF_LIMIT : CP_EGGUF_NAME,
                        "%s: offset %llu: %s '%s' is %s", c->f->path, (unsigned long long)at, what,
                        cp_quote_masked(q, s, (size_t)len),
                        len == 0 ? "empty" : len >= max ? "too long" : memchr(s, 0, (size_t)len) ? "holding a NUL byte"
                                                                                 : "not valid UTF-8");
  }
  CP_CHECK_ALLOC(*out = strndup(s, (size_t)len), c->f->path);
  return 0;
}

/* Skips one value of type `t` (checking it), `depth` arrays deep. For the top-level value of a
 * key, `kv` records where arrays start. `key` names the entry in messages. */
static int skip_value(cursor *c, cp_gguf_vtype t, int depth, const char *key, gguf_kv *kv) {
  char what[160];
  c->steps++;
  snprintf(what, sizeof what, "value of '%.100s'", key);
  if ((unsigned)t >= CP_GGUF_TYPE_COUNT)
    return cp_error_set(CP_EGGUF_TYPE, "%s: offset %llu: key '%s': unknown value type %u", c->f->path,
                        (unsigned long long)c->pos - 4, key, (unsigned)t);
  if (t == CP_GGUF_STRING) {
    const char *s;
    uint64_t len;
    return rd_str(&s, &len, c, what);
  }
  if (t != CP_GGUF_ARRAY) {
    int rc = need(c, k_scalar_size[t], what);
    if (rc) return rc;
    if (t == CP_GGUF_BOOL && c->f->map[c->pos] > 1)
      return cp_error_set(CP_EGGUF_TYPE, "%s: offset %llu: key '%s': bool value %u is neither 0 nor 1", c->f->path,
                          (unsigned long long)c->pos, key, c->f->map[c->pos]);
    c->pos += k_scalar_size[t];
    return 0;
  }
  if (depth >= CP_GGUF_MAX_NESTING)
    return cp_error_set(CP_EGGUF_LIMIT, "%s: offset %llu: key '%s': arrays nested deeper than %d", c->f->path,
                        (unsigned long long)c->pos, key, CP_GGUF_MAX_NESTING);
  uint32_t elem;
  uint64_t n, at;
  snprintf(what, sizeof what, "array element type of '%.100s'", key);
  int rc = rd_u32(&elem, c, what);
  if (rc) return rc;
  if (elem >= CP_GGUF_TYPE_COUNT)
    return cp_error_set(CP_EGGUF_TYPE, "%s: offset %llu: key '%s': unknown array element type %u", c->f->path,
                        (unsigned long long)c->pos - 4, key, elem);
  snprintf(what, sizeof what, "array count of '%.100s'", key);
  at = c->pos;
  if ((rc = rd_u64(&n, c, what))) return rc;
  /* Smallest encoding of one element: a scalar's size, a string's or array's length fields. */
  uint64_t min = elem == CP_GGUF_STRING ? 8 : elem == CP_GGUF_ARRAY ? 12 : k_scalar_size[elem], total;
  if (!cp_mul_u64(&total, n, min) || total > left(c))
    return cp_error_set(CP_EGGUF_LIMIT, "%s: offset %llu: key '%s': %llu elements of %s cannot fit in the %llu bytes left",
                        c->f->path, (unsigned long long)at, key, (unsigned long long)n,
                        cp_gguf_type_name((cp_gguf_vtype)elem), (unsigned long long)left(c));
  if (kv) {
    kv->elem = (cp_gguf_vtype)elem;
    kv->n = n;
    kv->off = c->pos;
    if (elem == CP_GGUF_STRING) CP_CHECK_ALLOC(kv->str_off = malloc((size_t)(n ? n : 1) * sizeof *kv->str_off), c->f->path);
  }
  /* Scalars and strings in bulk, without a step (or a message) per element; the element that
   * fails goes through skip_value for the same refusal as one at a time. */
  uint64_t i = 0;
  if (elem == CP_GGUF_BOOL) {
    const uint8_t *b = c->f->map + c->pos;
    while (i < n && b[i] <= 1) i++;
    c->pos += i;
  } else if (elem == CP_GGUF_STRING) {
    for (; i < n; i++) {
      uint64_t len;
      if (left(c) < 8 || (len = cp_le64(c->f->map + c->pos)) > left(c) - 8) break;
      if (kv) kv->str_off[i] = c->pos;
      c->pos += 8 + len;
    }
  } else if (elem != CP_GGUF_ARRAY) {
    c->pos += total;
    return 0;
  }
  char sub[200];
  for (; i < n; i++) {
    snprintf(sub, sizeof sub, "%.100s[%llu]", key, (unsigned long long)i);
    if (kv && kv->str_off) kv->str_off[i] = c->pos;
    if ((rc = skip_value(c, (cp_gguf_vtype)elem, depth + 1, sub, NULL))) return rc;
  }
  return 0;
}

/* A name or offset with its entry's index, for sorting without a global qsort context. */
typedef struct {
  const char *name;
  uint64_t off;
  size_t i;
} sort_rec;

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const sort_rec *)a)->name, ((const sort_rec *)b)->name);
}
static int cmp_off(const void *a, const void *b) {
  const sort_rec *x = a, *y = b;
  return (x->off > y->off) - (x->off < y->off);
}

/* Sorts the indices of n names (keys or tensor names) and refuses the first duplicate. */
static int index_unique(size_t **out, cp_gguf_file *f, size_t n, bool keys) {
  sort_rec *r = malloc((n ? n : 1) * sizeof *r);
  CP_CHECK_ALLOC(r, f->path);
  for (size_t i = 0; i < n; i++) r[i] = (sort_rec){keys ? f->kv[i].key : f->t[i].name, 0, i};
  qsort(r, n, sizeof *r, cmp_name);
  int rc = 0;
  for (size_t i = 1; i < n && rc == 0; i++)
    if (!strcmp(r[i - 1].name, r[i].name))
      rc = cp_error_set(CP_EGGUF_DUPLICATE, "%s: %s '%s' appears twice", f->path, keys ? "key" : "tensor", r[i].name);
  if (rc == 0 && !(*out = malloc((n ? n : 1) * sizeof **out))) rc = cp_nomem("%s", f->path);
  for (size_t i = 0; rc == 0 && i < n; i++) (*out)[i] = r[i].i;
  free(r);
  return rc;
}

static int read_kvs(cp_gguf_file *f, cursor *c, uint64_t n_kv) {
  /* Smallest key/value: 8-byte key length, 1 key byte, 4-byte type, 1-byte value. */
  if (n_kv > left(c) / 14)
    return cp_error_set(CP_EGGUF_LIMIT, "%s: offset 16: n_kv %llu cannot fit in the %llu bytes left", f->path,
                        (unsigned long long)n_kv, (unsigned long long)left(c));
  CP_CHECK_ALLOC(f->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *f->kv), f->path);
  char what[160];
  for (uint64_t i = 0; i < n_kv; i++) {
    gguf_kv *kv = &f->kv[i];
    snprintf(what, sizeof what, "key %llu", (unsigned long long)i);
    kv->start = c->pos;
    int rc = rd_name(&kv->key, c, what, UINT64_MAX);
    if (rc) return rc;
    f->n_kv = i + 1;
    uint32_t type;
    snprintf(what, sizeof what, "value type of '%.100s'", kv->key);
    if ((rc = rd_u32(&type, c, what))) return rc;
    kv->type = (cp_gguf_vtype)type;
    kv->off = c->pos;
    if ((rc = skip_value(c, kv->type, 0, kv->key, kv))) return rc;
    kv->end = c->pos;
  }
  return index_unique(&f->kv_sorted, f, f->n_kv, true);
}

/* general.alignment: a u32 power of two up to CP_GGUF_MAX_ALIGNMENT (default 32). */
static int read_alignment(cp_gguf_file *f) {
  f->alignment = CP_GGUF_DEFAULT_ALIGNMENT;
  int64_t k = cp_gguf_find_key(f, "general.alignment");
  if (k < 0) return 0;
  const gguf_kv *kv = &f->kv[k];
  if (kv->type != CP_GGUF_U32)
    return cp_error_set(CP_EGGUF_ALIGNMENT, "%s: offset %llu: key 'general.alignment' is %s, expected u32", f->path,
                        (unsigned long long)kv->off, cp_gguf_type_name(kv->type));
  uint32_t a = cp_le32(f->map + kv->off);
  if (a == 0 || (a & (a - 1)) || a > CP_GGUF_MAX_ALIGNMENT)
    return cp_error_set(CP_EGGUF_ALIGNMENT, "%s: offset %llu: general.alignment %u is not a power of two up to %u",
                        f->path, (unsigned long long)kv->off, a, CP_GGUF_MAX_ALIGNMENT);
  f->alignment = a;
  return 0;
}

/* One tensor info: name, dims, type, offset; shape and sizes checked. */
static int read_tensor_info(cp_gguf_file *f, cursor *c, uint64_t i) {
  gguf_tensor *t = &f->t[i];
  char what[160];
  snprintf(what, sizeof what, "tensor %llu name", (unsigned long long)i);
  int rc = rd_name(&t->name, c, what, CP_GGUF_MAX_NAME);
  if (rc) return rc;
  f->n_t = i + 1;
  uint32_t n_dims, type;
  uint64_t at = c->pos;
  snprintf(what, sizeof what, "n_dims of tensor '%s'", t->name);
  if ((rc = rd_u32(&n_dims, c, what))) return rc;
  if (n_dims > CP_GGUF_MAX_DIMS)
    return cp_error_set(CP_EGGUF_TENSOR, "%s: offset %llu: tensor '%s' has %u dimensions, at most %d", f->path,
                        (unsigned long long)at, t->name, n_dims, CP_GGUF_MAX_DIMS);
  uint64_t ne[CP_GGUF_MAX_DIMS], numel = 1;
  for (uint32_t d = 0; d < n_dims; d++) {
    at = c->pos;
    snprintf(what, sizeof what, "ne[%u] of tensor '%s'", d, t->name);
    if ((rc = rd_u64(&ne[d], c, what))) return rc;
    if (ne[d] > (uint64_t)INT64_MAX)
      return cp_error_set(CP_EGGUF_TENSOR, "%s: offset %llu: tensor '%s': ne[%u] is negative", f->path,
                          (unsigned long long)at, t->name, d);
    if (!cp_mul_u64(&numel, numel, ne[d]) || numel > (uint64_t)INT64_MAX)
      return cp_error_set(CP_EGGUF_TENSOR, "%s: offset %llu: tensor '%s': element count overflows", f->path,
                          (unsigned long long)at, t->name);
  }
  at = c->pos;
  snprintf(what, sizeof what, "type of tensor '%s'", t->name);
  if ((rc = rd_u32(&type, c, what))) return rc;
  const gguf_type_info *ti = gguf_type(type);
  if (!ti)
    return cp_error_set(CP_EGGUF_TENSOR, "%s: offset %llu: tensor '%s': unknown ggml type %u", f->path,
                        (unsigned long long)at, t->name, type);
  uint64_t row = n_dims ? ne[0] : 1;
  if (row % ti->block)
    return cp_error_set(CP_EGGUF_TENSOR, "%s: offset %llu: tensor '%s': ne[0] = %llu is not a multiple of %s's block of %u",
                        f->path, (unsigned long long)at, t->name, (unsigned long long)row, ti->name, ti->block);
  t->type = type;
  snprintf(what, sizeof what, "offset of tensor '%s'", t->name);
  if ((rc = rd_u64(&t->offset, c, what))) return rc;
  /* Stored bytes, and the bytes of the view (float32 for the block types). */
  uint64_t view;
  if (!cp_mul_u64(&t->stored, numel / ti->block, ti->size) || t->stored > (uint64_t)INT64_MAX ||
      !cp_mul_u64(&view, numel, ti->dtype >= 0 ? ti->size : 4) || view > (uint64_t)INT64_MAX)
    return cp_error_set(CP_EGGUF_TENSOR, "%s: offset %llu: tensor '%s': byte size overflows", f->path,
                        (unsigned long long)at, t->name);
  t->t.dtype = ti->dtype >= 0 ? (cp_dtype)ti->dtype : CP_F32;
  t->t.ndim = (int)n_dims;
  for (uint32_t d = 0; d < n_dims; d++) t->t.shape[d] = (int64_t)ne[n_dims - 1 - d];
  t->t.nbytes = view;
  return 0;
}

/* Offsets: aligned, inside the data section, not overlapping. */
static int check_offsets(cp_gguf_file *f) {
  uint64_t data_size = f->size - f->data_off;
  sort_rec *order = malloc((f->n_t ? f->n_t : 1) * sizeof *order);
  CP_CHECK_ALLOC(order, f->path);
  int rc = 0;
  for (size_t i = 0; i < f->n_t; i++) {
    gguf_tensor *t = &f->t[i];
    order[i] = (sort_rec){t->name, t->offset, i};
    if (t->offset % f->alignment) {
      rc = cp_error_set(CP_EGGUF_OFFSET, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u", f->path,
                        t->name, (unsigned long long)t->offset, f->alignment);
      goto done;
    }
    if (t->offset > data_size || t->stored > data_size - t->offset) {
      rc = cp_error_set(CP_EGGUF_OFFSET, "%s: tensor '%s': bytes [%llu, +%llu) run past the %llu-byte data section at "
                        "offset %llu", f->path, t->name, (unsigned long long)t->offset, (unsigned long long)t->stored,
                        (unsigned long long)data_size, (unsigned long long)f->data_off);
      goto done;
    }
    if (gguf_type(t->type)->dtype >= 0) t->t.data = f->map + f->data_off + t->offset;
    t->t.name = t->name;
  }
  qsort(order, f->n_t, sizeof *order, cmp_off);
  /* Each non-empty tensor must start at or after the furthest end of those before it (empty
   * tensors in between do not hide an overlap). */
  const gguf_tensor *a = NULL;
  for (size_t k = 0; k < f->n_t; k++) {
    const gguf_tensor *b = &f->t[order[k].i];
    if (!b->stored) continue;
    if (a && a->offset + a->stored > b->offset) {
      rc = cp_error_set(CP_EGGUF_OFFSET, "%s: tensors '%s' and '%s' overlap in the data section", f->path, a->name,
                        b->name);
      goto done;
    }
    if (!a || b->offset + b->stored > a->offset + a->stored) a = b;
  }
done:
  free(order);
  return rc;
}

static int parse(cp_gguf_file *f) {
  cursor c = {f, 0, 0};
  uint32_t magic;
  uint64_t n_t, n_kv;
  int rc = rd_u32(&magic, &c, "magic");
  if (rc) return rc;
  if (magic != CP_GGUF_MAGIC)
    return cp_error_set(CP_EGGUF_MAGIC, "%s: offset 0: magic is 0x%08x, not \"GGUF\"", f->path, magic);
  if ((rc = rd_u32(&f->version, &c, "version"))) return rc;
  if (f->version != 2 && f->version != 3)
    return cp_error_set(CP_EGGUF_VERSION, "%s: offset 4: version %u%s; versions 2 and 3 are read", f->path,
                        f->version, (f->version & 0xffff) == 0 ? " (a big-endian file)" : "");
  if ((rc = rd_u64(&n_t, &c, "n_tensors")) || (rc = rd_u64(&n_kv, &c, "n_kv"))) return rc;
  rc = read_kvs(f, &c, n_kv);
  f->steps = c.steps;
  if (rc || (rc = read_alignment(f))) return rc;
  /* Smallest tensor info: 8-byte name length, 1 name byte, n_dims, type, offset. */
  if (n_t > left(&c) / 25)
    return cp_error_set(CP_EGGUF_LIMIT, "%s: offset 8: n_tensors %llu cannot fit in the %llu bytes left", f->path,
                        (unsigned long long)n_t, (unsigned long long)left(&c));
  CP_CHECK_ALLOC(f->t = calloc((size_t)(n_t ? n_t : 1), sizeof *f->t), f->path);
  f->info_off = c.pos;
  for (uint64_t i = 0; i < n_t; i++)
    if ((rc = read_tensor_info(f, &c, i))) return rc;
  f->info_end = c.pos;
  if ((rc = index_unique(&f->t_sorted, f, f->n_t, false))) return rc;
  uint64_t pad = (f->alignment - c.pos % f->alignment) % f->alignment;
  if (f->n_t && (rc = need(&c, pad, "padding before the data section"))) return rc;
  f->data_off = c.pos + (pad <= left(&c) ? pad : left(&c));
  return check_offsets(f);
}

int cp_gguf_open(cp_gguf_file **out, const char *path) {
  *out = NULL;
  int rc = 0;
  cp_gguf_file *f = calloc(1, sizeof *f);
  CP_CHECK_ALLOC(f, path);
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);
  const void *map = NULL;
  if ((rc = cp_map_input(&map, &f->size, path)) == 0) {
    cp_input_note(path);
    f->map = map;
    rc = parse(f);
  }
done:
  if (rc < 0) {
    cp_gguf_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

void cp_gguf_free(cp_gguf_file *f) {
  if (!f) return;
  cp_unmap_input(f->map, f->size);
  for (size_t i = 0; i < f->n_kv; i++) {
    free(f->kv[i].key);
    free(f->kv[i].str_off);
  }
  for (size_t i = 0; i < f->n_t; i++) free(f->t[i].name);
  free(f->kv);
  free(f->t);
  free(f->kv_sorted);
  free(f->t_sorted);
  free(f->path);
  free(f);
}

/* ---------------------------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------------------------- */

const char *cp_gguf_path(const cp_gguf_file *f) { return f->path; }
uint32_t cp_gguf_version(const cp_gguf_file *f) { return f->version; }
uint32_t cp_gguf_alignment(const cp_gguf_file *f) { return f->alignment; }
uint64_t cp_gguf_data_offset(const cp_gguf_file *f) { return f->data_off; }
uint64_t cp_gguf_value_steps(const cp_gguf_file *f) { return f->steps; }
size_t cp_gguf_kv_count(const cp_gguf_file *f) { return f->n_kv; }
const char *cp_gguf_kv_key(const cp_gguf_file *f, size_t i) { return i < f->n_kv ? f->kv[i].key : NULL; }
cp_gguf_vtype cp_gguf_kv_type(const cp_gguf_file *f, size_t i) { return f->kv[i].type; }
size_t cp_gguf_count(const cp_gguf_file *f) { return f->n_t; }
const cp_tensor *cp_gguf_tensor(const cp_gguf_file *f, size_t i) { return i < f->n_t ? &f->t[i].t : NULL; }
uint32_t cp_gguf_tensor_ggml_type(const cp_gguf_file *f, size_t i) { return f->t[i].type; }
uint64_t cp_gguf_tensor_file_offset(const cp_gguf_file *f, size_t i) { return f->data_off + f->t[i].offset; }
uint64_t cp_gguf_tensor_stored_bytes(const cp_gguf_file *f, size_t i) { return f->t[i].stored; }

/* Binary search over indices sorted by name; -1 when absent. */
static int64_t find_sorted(const cp_gguf_file *f, const size_t *sorted, size_t n, const char *name, bool keys) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(keys ? f->kv[sorted[mid]].key : f->t[sorted[mid]].name, name);
    if (c == 0) return (int64_t)sorted[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

int64_t cp_gguf_find_key(const cp_gguf_file *f, const char *key) {
  return f->kv_sorted ? find_sorted(f, f->kv_sorted, f->n_kv, key, true) : -1;
}
int64_t cp_gguf_find(const cp_gguf_file *f, const char *name) {
  return f->t_sorted ? find_sorted(f, f->t_sorted, f->n_t, name, false) : -1;
}

static bool is_int_type(cp_gguf_vtype t) {
  return t <= CP_GGUF_I32 || t == CP_GGUF_BOOL || t == CP_GGUF_U64 || t == CP_GGUF_I64;
}

/* A scalar of an integer type at `p`; false for a u64 past INT64_MAX. */
static bool scalar_int(int64_t *out, const uint8_t *p, cp_gguf_vtype t) {
  switch (t) {
    case CP_GGUF_U8: case CP_GGUF_BOOL: *out = p[0]; return true;
    case CP_GGUF_I8: *out = (int8_t)p[0]; return true;
    case CP_GGUF_U16: *out = cp_le16(p); return true;
    case CP_GGUF_I16: *out = (int16_t)cp_le16(p); return true;
    case CP_GGUF_U32: *out = cp_le32(p); return true;
    case CP_GGUF_I32: *out = (int32_t)cp_le32(p); return true;
    case CP_GGUF_I64: *out = (int64_t)cp_le64(p); return true;
    default: *out = (int64_t)cp_le64(p); return cp_le64(p) <= (uint64_t)INT64_MAX; /* u64 */
  }
}

static bool scalar_f64(double *out, const uint8_t *p, cp_gguf_vtype t) {
  if (t == CP_GGUF_F32) {
    uint32_t u = cp_le32(p);
    float v;
    memcpy(&v, &u, 4);
    *out = v;
    return true;
  }
  if (t == CP_GGUF_F64) {
    uint64_t u = cp_le64(p);
    memcpy(out, &u, 8);
    return true;
  }
  int64_t i;
  if (!is_int_type(t) || !scalar_int(&i, p, t)) return false;
  *out = (double)i;
  return true;
}

/* The entry of `key`, or an error naming it. */
static int lookup(const gguf_kv **out, const cp_gguf_file *f, const char *key) {
  int64_t k = cp_gguf_find_key(f, key);
  if (k < 0) return cp_error_set(CP_ENOTFOUND, "%s: key '%s' is missing", f->path, key);
  *out = &f->kv[k];
  return 0;
}

static int wrong_type(const cp_gguf_file *f, const gguf_kv *kv, const char *want) {
  return cp_error_set(CP_EGGUF_KEY, "%s: offset %llu: key '%s' is %s, expected %s", f->path,
                      (unsigned long long)kv->off, kv->key, cp_gguf_type_name(kv->type), want);
}

int cp_gguf_get_int(int64_t *out, const cp_gguf_file *f, const char *key) {
  const gguf_kv *kv = NULL;
  int rc = lookup(&kv, f, key);
  if (rc) return rc;
  if (!is_int_type(kv->type) || !scalar_int(out, f->map + kv->off, kv->type))
    return wrong_type(f, kv, "an integer up to 2^63-1");
  return 0;
}

int cp_gguf_get_f64(double *out, const cp_gguf_file *f, const char *key) {
  const gguf_kv *kv = NULL;
  int rc = lookup(&kv, f, key);
  if (rc) return rc;
  if (kv->type == CP_GGUF_STRING || kv->type == CP_GGUF_ARRAY || !scalar_f64(out, f->map + kv->off, kv->type))
    return wrong_type(f, kv, "a number");
  return 0;
}

int cp_gguf_get_bool(bool *out, const cp_gguf_file *f, const char *key) {
  const gguf_kv *kv = NULL;
  int rc = lookup(&kv, f, key);
  if (rc) return rc;
  if (kv->type != CP_GGUF_BOOL) return wrong_type(f, kv, "bool");
  *out = f->map[kv->off] != 0;
  return 0;
}

int cp_gguf_get_str(const char **out, size_t *len, const cp_gguf_file *f, const char *key) {
  const gguf_kv *kv = NULL;
  int rc = lookup(&kv, f, key);
  if (rc) return rc;
  if (kv->type != CP_GGUF_STRING) return wrong_type(f, kv, "string");
  *len = (size_t)cp_le64(f->map + kv->off);
  *out = (const char *)f->map + kv->off + 8;
  return 0;
}

int cp_gguf_get_arr(cp_gguf_vtype *elem, uint64_t *n, const cp_gguf_file *f, const char *key) {
  const gguf_kv *kv = NULL;
  int rc = lookup(&kv, f, key);
  if (rc) return rc;
  if (kv->type != CP_GGUF_ARRAY) return wrong_type(f, kv, "array");
  *elem = kv->elem;
  *n = kv->n;
  return 0;
}

/* Element i of array `key` when its elements are `want` (0: any number). */
static int arr_elem(const gguf_kv **out, const cp_gguf_file *f, const char *key, uint64_t i, bool string) {
  int rc = lookup(out, f, key);
  if (rc) return rc;
  const gguf_kv *kv = *out;
  bool ok = kv->type == CP_GGUF_ARRAY &&
            (string ? kv->elem == CP_GGUF_STRING : kv->elem != CP_GGUF_STRING && kv->elem != CP_GGUF_ARRAY);
  if (!ok) return wrong_type(f, kv, string ? "array of strings" : "array of numbers");
  if (i >= kv->n)
    return cp_error_set(CP_EGGUF_KEY, "%s: key '%s': element %llu is past the %llu elements", f->path, key,
                        (unsigned long long)i, (unsigned long long)kv->n);
  return 0;
}

int cp_gguf_arr_str(const char **out, size_t *len, const cp_gguf_file *f, const char *key, uint64_t i) {
  const gguf_kv *kv = NULL;
  int rc = arr_elem(&kv, f, key, i, true);
  if (rc) return rc;
  *len = (size_t)cp_le64(f->map + kv->str_off[i]);
  *out = (const char *)f->map + kv->str_off[i] + 8;
  return 0;
}

int cp_gguf_arr_f64(double *out, const cp_gguf_file *f, const char *key, uint64_t i) {
  const gguf_kv *kv = NULL;
  int rc = arr_elem(&kv, f, key, i, false);
  if (rc) return rc;
  if (!scalar_f64(out, f->map + kv->off + i * k_scalar_size[kv->elem], kv->elem))
    return cp_error_set(CP_EGGUF_KEY, "%s: key '%s': element %llu is not a number up to 2^63-1", f->path, key,
                        (unsigned long long)i);
  return 0;
}

int cp_gguf_arr_int(int64_t *out, const cp_gguf_file *f, const char *key, uint64_t i) {
  const gguf_kv *kv = NULL;
  int rc = arr_elem(&kv, f, key, i, false);
  if (rc) return rc;
  if (!is_int_type(kv->elem) || !scalar_int(out, f->map + kv->off + i * k_scalar_size[kv->elem], kv->elem))
    return cp_error_set(CP_EGGUF_KEY, "%s: key '%s': element %llu is not an integer up to 2^63-1", f->path, key,
                        (unsigned long long)i);
  return 0;
}

_Static_assert(CP_Q4_0 - CP_DTYPE_BLOCK_BASE == CP_GGML_Q4_0 && CP_Q8_0 - CP_DTYPE_BLOCK_BASE == CP_GGML_Q8_0 &&
                   CP_Q4_K - CP_DTYPE_BLOCK_BASE == CP_GGML_Q4_K,
               "block cp_dtype ids are ggml ids + CP_DTYPE_BLOCK_BASE");

const void *cp_gguf_tensor_blocks(cp_dtype *dtype, const cp_gguf_file *f, size_t i) {
  const gguf_tensor *t = &f->t[i];
  if (!gguf_type(t->type)->dequant) return NULL;
  *dtype = (cp_dtype)(CP_DTYPE_BLOCK_BASE + (int)t->type);
  return f->map + f->data_off + t->offset;
}

int cp_gguf_read(const cp_gguf_file *f, size_t i, uint64_t offset, void *buf, size_t len) {
  const gguf_tensor *t = &f->t[i];
  uint64_t end;
  if (!cp_add_u64(&end, offset, len) || end > t->t.nbytes)
    return cp_error_set(CP_EARG, "%s: read of bytes [%llu, +%zu) past tensor '%s' (%llu bytes)", f->path,
                        (unsigned long long)offset, len, t->name, (unsigned long long)t->t.nbytes);
  if (t->t.data) {
    memcpy(buf, (const uint8_t *)t->t.data + offset, len);
    return 0;
  }
  const gguf_type_info *ti = gguf_type(t->type);
  if (!ti->dequant)
    return cp_error_set(CP_EGGUF_QUANT, "%s: tensor '%s' is %s; only F32, F16, BF16, Q8_0, Q4_0 and Q4_K are read",
                        f->path, t->name, ti->name);
  /* Decode block by block, copying the part of each block's floats inside [offset, end). */
  const uint8_t *base = f->map + f->data_off + t->offset;
  uint64_t block_bytes = (uint64_t)ti->block * 4;
  float tmp[256];
  uint8_t *dst = buf;
  for (uint64_t b = offset / block_bytes; len > 0; b++) {
    gguf_dequant_blocks(tmp, base + b * ti->size, t->type, 1);
    uint64_t from = offset - b * block_bytes, n = block_bytes - from < len ? block_bytes - from : len;
    memcpy(dst, (const uint8_t *)tmp + from, (size_t)n);
    dst += n, offset += n, len -= (size_t)n;
  }
  return 0;
}

/* The content digest (gguf.h): the bytes a runtime computes with, in file order, from the mapping. */
void cp_gguf_content_sha256(const cp_gguf_file *f, const char *skip_prefix, char out_hex[65]) {
  cp_sha256 *h = NULL;
  out_hex[0] = '\0';
  if (cp_sha256_new(&h) < 0) return;
  size_t skip = skip_prefix ? strlen(skip_prefix) : 0;
  for (size_t i = 0; i < f->n_kv; i++)
    if (!skip || strncmp(f->kv[i].key, skip_prefix, skip))
      cp_sha256_update(h, f->map + f->kv[i].start, (size_t)(f->kv[i].end - f->kv[i].start));
  cp_sha256_update(h, f->map + f->info_off, (size_t)(f->info_end - f->info_off));
  cp_sha256_update(h, f->map + f->data_off, (size_t)(f->size - f->data_off));
  cp_sha256_peek(h, out_hex);
  cp_sha256_free(h);
}
