/* safetensors reader: mmap, header validation and the reader API (layout in
 * include/ctxpatch/formats/safetensors.h).
 *
 * The header goes through four gates, in the reference reader's order so both refuse a file for
 * the same reason: UTF-8, first byte '{', strict JSON scan (syntax, duplicate keys, depth), and
 * then the schema walk of formats/safetensors_header.c. Once the entries are known, this file
 * checks that their data tiles the file: no hole, no overlap, nothing past the end or after. */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/json.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/base/utf8.h"
#include "ctxpatch/formats/safetensors.h"
#include "formats/safetensors_header.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A valid header nests 3 deep (object, entry, shape); the margin only decides which code a
 * deeper value gets (schema error up to here, CP_EST_HEADER_JSON beyond). */
#define ST_MAX_DEPTH 64

typedef struct {
  const char *name;
  size_t i; /* index into e */
} name_ix;

struct cp_st_file {
  char *path;
  unsigned char *map;
  int fd; /* the file mapped, open while mapped (for copy_file_range) */
  uint64_t size;
  uint64_t header_len;
  size_t n;
  st_entry *e;       /* [n] in file order */
  name_ix *by_name;  /* [n] sorted by name */
  size_t n_meta;
  char **meta_key;   /* [n_meta] sorted */
  char **meta_val;   /* [n_meta] */
};

/* ---------------------------------------------------------------------------------------------
 * UTF-8
 * ------------------------------------------------------------------------------------------- */

int cp_st_utf8_valid(const char *str, size_t len, size_t *bad) {
  size_t off = cp_utf8_check(str, len, CP_UTF8_STRICT);
  if (off == len) return 1;
  if (bad) *bad = off;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Open
 * ------------------------------------------------------------------------------------------- */

static int cmp_offsets(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

static void index_names(cp_st_file *f) {
  for (size_t i = 0; i < f->n; i++) f->by_name[i] = (name_ix){f->e[i].name, i};
  if (f->n) qsort(f->by_name, f->n, sizeof *f->by_name, cmp_names);
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

void cp_st_free(cp_st_file *f) {
  if (!f) return;
  cp_unmap_input(f->map, f->size);
  if (f->fd >= 0) close(f->fd);
  for (size_t i = 0; i < f->n; i++) free(f->e[i].name);
  free(f->e);
  free(f->by_name);
  for (size_t i = 0; i < f->n_meta; i++) {
    free(f->meta_key[i]);
    free(f->meta_val[i]);
  }
  free(f->meta_key);
  free(f->meta_val);
  free(f->path);
  free(f);
}

/* Sorts metadata by key (keeping key/value pairs together) and checks the keys are distinct. */
static int sort_metadata(cp_st_file *f) {
  size_t m = f->n_meta;
  if (m == 0) return 0;
  char ***pairs = malloc(m * sizeof *pairs);
  char **k = malloc(m * sizeof *k), **v = malloc(m * sizeof *v);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(pairs, f->path);
  CP_CHECK_ALLOC_GOTO(k, f->path);
  CP_CHECK_ALLOC_GOTO(v, f->path);
  /* pairs[i] points at meta_key[i]; its value sits at the same index of meta_val. */
  for (size_t i = 0; i < m; i++) pairs[i] = &f->meta_key[i];
  qsort(pairs, m, sizeof *pairs, cmp_meta);
  for (size_t i = 0; i < m; i++) {
    size_t j = (size_t)(pairs[i] - f->meta_key);
    k[i] = f->meta_key[j];
    v[i] = f->meta_val[j];
  }
  for (size_t i = 0; i + 1 < m; i++) {
    if (strcmp(k[i], k[i + 1]) == 0) {
      char sb[CP_QUOTE_MASKED_CAP];
      rc = cp_error_set(CP_EST_METADATA, "%s: __metadata__ repeats key '%s'", f->path, cp_quote_masked(sb, k[i], strlen(k[i])));
      break;
    }
  }
  memcpy(f->meta_key, k, m * sizeof *k);
  memcpy(f->meta_val, v, m * sizeof *v);
done:
  free(pairs);
  free(k);
  free(v);
  return rc;
}

static int validate(cp_st_file *f, const char *hdr, size_t hlen) {
  cp_json_check chk;
  memset(&chk, 0, sizeof chk);
  size_t bad = 0;
  char sb[CP_QUOTE_MASKED_CAP];
  if (!cp_st_utf8_valid(hdr, hlen, &bad))
    return cp_error_set(CP_EST_HEADER_UTF8, "%s: header offset %zu: invalid UTF-8 byte 0x%02x", f->path, bad,
                        (unsigned char)hdr[bad]);
  if (hlen == 0 || hdr[0] != '{')
    return cp_error_set(CP_EST_HEADER_NOT_OBJECT, "%s: header offset 0: header starts with %s, not '{'", f->path,
                        hlen == 0 ? "nothing (length 0)" : cp_quote_masked(sb, hdr, hlen < 8 ? hlen : 8));
  switch (cp_json_scan(&chk, hdr, hlen, ST_MAX_DEPTH)) {
  case CP_JSON_OK:
    break;
  case CP_JSON_UTF8:
    return cp_error_set(CP_EST_HEADER_UTF8, "%s: header offset %zu: invalid UTF-8", f->path, chk.offset);
  case CP_JSON_DUPLICATE: {
    int code = st_duplicate_code(hdr, chk.offset < hlen ? chk.offset : hlen);
    const char *what = code == CP_EST_DUPLICATE_NAME ? "duplicate tensor name"
                       : code == CP_EST_METADATA    ? "duplicate __metadata__ key"
                                                    : "duplicate key in a tensor entry";
    chk.key[sizeof chk.key - 1] = '\0';
    return cp_error_set(code, "%s: header offset %zu: %s '%s'", f->path, chk.offset, what,
                        cp_quote_masked(sb, chk.key, strlen(chk.key)));
  }
  case CP_JSON_DEPTH:
    return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: JSON nested deeper than %d", f->path,
                        chk.offset, ST_MAX_DEPTH);
  default:
    return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: invalid JSON", f->path, chk.offset);
  }

  st_header h;
  int rc = st_header_parse(&h, f->path, hdr, hlen);
  /* Hand everything parsed so far to f so cp_st_free releases it on any path. */
  f->e = h.e;
  f->n = h.n;
  f->meta_key = h.meta_key;
  f->meta_val = h.meta_val;
  f->n_meta = h.n_meta;
  if (rc < 0) return rc;
  if ((rc = sort_metadata(f)) < 0) return rc;

  size_t n = f->n;
  if (n) CP_CHECK_ALLOC(f->by_name = malloc(n * sizeof *f->by_name), f->path);
  /* Names again after unescaping: "a" and "\u0061" are the same tensor. */
  index_names(f);
  for (size_t i = 0; i + 1 < n; i++) {
    const st_entry *a = &f->e[f->by_name[i].i], *b = &f->e[f->by_name[i + 1].i];
    if (strcmp(a->name, b->name) == 0)
      return cp_error_set(CP_EST_DUPLICATE_NAME, "%s: header offset %zu: duplicate tensor name '%s'", f->path,
                          a->key_off > b->key_off ? a->key_off : b->key_off, cp_quote_masked(sb, a->name, strlen(a->name)));
  }

  if (n) qsort(f->e, n, sizeof *f->e, cmp_offsets);
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    const st_entry *e = &f->e[i];
    char nb[CP_QUOTE_MASKED_CAP];
    if (e->begin > pos) {
      char pb[CP_QUOTE_MASKED_CAP];
      if (i == 0)
        return cp_error_set(CP_EST_HOLE, "%s: tensor '%s' (header offset %zu): data begins at %llu, not 0", f->path,
                            cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off, (unsigned long long)e->begin);
      return cp_error_set(CP_EST_HOLE, "%s: tensor '%s' (header offset %zu): data begins at %llu, leaving %llu unused bytes after '%s'",
                          f->path, cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off, (unsigned long long)e->begin,
                          (unsigned long long)(e->begin - pos), cp_quote_masked(pb, f->e[i - 1].name, strlen(f->e[i - 1].name)));
    }
    if (e->begin < pos) {
      char pb[CP_QUOTE_MASKED_CAP];
      return cp_error_set(CP_EST_OVERLAP, "%s: tensor '%s' (header offset %zu): data [%llu, %llu) overlaps '%s' which ends at %llu",
                          f->path, cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off, (unsigned long long)e->begin,
                          (unsigned long long)e->end, cp_quote_masked(pb, f->e[i - 1].name, strlen(f->e[i - 1].name)),
                          (unsigned long long)pos);
    }
    pos = e->end;
  }
  uint64_t data_start = 8 + f->header_len, data_len = f->size - data_start;
  if (pos > data_len) {
    char nb[CP_QUOTE_MASKED_CAP];
    const st_entry *e = &f->e[n - 1];
    return cp_error_set(CP_EST_TRUNCATED, "%s: tensor '%s' (header offset %zu): data ends at file offset %llu, past the end of the %llu-byte file",
                        f->path, cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off,
                        (unsigned long long)(data_start + pos < data_start ? UINT64_MAX : data_start + pos),
                        (unsigned long long)f->size);
  }
  if (pos < data_len)
    return cp_error_set(CP_EST_TRAILING, "%s: file offset %llu: %llu bytes after the last tensor", f->path,
                        (unsigned long long)(data_start + pos), (unsigned long long)(data_len - pos));

  /* Indices moved with the sort: rebuild the name order on the final positions. */
  for (size_t i = 0; i < n; i++) {
    f->e[i].t.name = f->e[i].name;
    f->e[i].t.data = f->map + data_start + f->e[i].begin;
  }
  index_names(f);
  return 0;
}

int cp_st_open(cp_st_file **out, const char *path) {
  *out = NULL;
  int rc = 0;
  cp_st_file *f = calloc(1, sizeof *f);
  CP_CHECK_ALLOC(f, path);
  f->fd = -1;
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);
  const void *m = NULL;
  if ((rc = cp_map_input_fd(&m, &f->size, &f->fd, path)) < 0) goto done;
  cp_input_note_fd(f->fd, path);
  f->map = (unsigned char *)m;
  if (f->size < 8) {
    rc = cp_error_set(CP_EST_TOO_SMALL, "%s: file offset 0: file is %llu bytes, shorter than the 8-byte header length",
                      path, (unsigned long long)f->size);
    goto done;
  }
  uint64_t hl = cp_le64(f->map);
  if (hl > CP_ST_MAX_HEADER) {
    rc = cp_error_set(CP_EST_HEADER_TOO_LARGE, "%s: file offset 0: header length %llu is over the 100000000-byte limit",
                      path, (unsigned long long)hl);
    goto done;
  }
  if (hl > f->size - 8) {
    rc = cp_error_set(CP_EST_HEADER_PAST_EOF, "%s: file offset 0: header length %llu runs past the end of the %llu-byte file",
                      path, (unsigned long long)hl, (unsigned long long)f->size);
    goto done;
  }
  f->header_len = hl;
  rc = validate(f, (const char *)f->map + 8, (size_t)hl);
done:
  if (rc < 0) {
    cp_st_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------------------------- */

const char *cp_st_path(const cp_st_file *f) { return f->path; }
size_t cp_st_count(const cp_st_file *f) { return f->n; }

const cp_tensor *cp_st_tensor(const cp_st_file *f, size_t i) { return i < f->n ? &f->e[i].t : NULL; }

long long cp_st_find_index(const cp_st_file *f, const char *name) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->by_name[mid].name, name);
    if (c == 0) return (long long)f->by_name[mid].i;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

const cp_tensor *cp_st_find(const cp_st_file *f, const char *name) {
  long long i = cp_st_find_index(f, name);
  return i < 0 ? NULL : &f->e[i].t;
}

size_t cp_st_meta_count(const cp_st_file *f) { return f->n_meta; }
const char *cp_st_meta_key(const cp_st_file *f, size_t i) { return i < f->n_meta ? f->meta_key[i] : NULL; }
const char *cp_st_meta_value(const cp_st_file *f, size_t i) { return i < f->n_meta ? f->meta_val[i] : NULL; }

const char *cp_st_meta_get(const cp_st_file *f, const char *key) {
  size_t lo = 0, hi = f->n_meta;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->meta_key[mid], key);
    if (c == 0) return f->meta_val[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

const void *cp_st_map_base(const cp_st_file *f) { return f->map; }
int cp_st_fd(const cp_st_file *f) { return f->fd; }
uint64_t cp_st_file_size(const cp_st_file *f) { return f->size; }
uint64_t cp_st_header_len(const cp_st_file *f) { return f->header_len; }

uint64_t cp_st_tensor_file_offset(const cp_st_file *f, size_t i) {
  return i < f->n ? 8 + f->header_len + f->e[i].begin : 0;
}

void cp_st_release(const cp_st_file *f, size_t i) {
  if (i >= f->n || f->e[i].t.nbytes == 0) return;
  /* Pages of a read-only private file mapping are never dirty, so dropping the boundary pages a
   * neighbour shares is safe: they are simply read again from the file if touched. */
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)f->e[i].t.data & ~(page - 1);
  uintptr_t b = (uintptr_t)f->e[i].t.data + (uintptr_t)f->e[i].t.nbytes;
  b = (b + page - 1) & ~(page - 1);
  uintptr_t lo = (uintptr_t)f->map, hi = ((uintptr_t)f->map + (uintptr_t)f->size + page - 1) & ~(page - 1);
  if (a < lo) a = lo;
  if (b > hi) b = hi;
  if (b > a) (void)madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
}
