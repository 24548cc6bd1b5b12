/* safetensors writer: deterministic header, streamed tensor bytes, atomic commit.
 * Header layout and ordering rules are in include/ctxpatch/formats/safetensors.h. */
#include <assert.h>
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/formats/safetensors.h"
#include "ctxpatch/base/strbuf.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Small writes are gathered so a caller streaming element by element does not pay a syscall each. */
#define ST_WRITE_BUF CP_ST_WRITE_MAPPED_MIN
/* Tensor data from this size on goes through the atomic writer's staged handle (full 8 MiB buffers
 * written with O_DIRECT: no page-cache copy of the output, no writeback to start and drop; the
 * input is pread into the buffer, not copied by the kernel): less system time on a large file
 * (docs/perf.md, "Checkpoint conversion"). A smaller file would spend more on the two buffers. */
#define ST_STAGED_MIN ((uint64_t)16 << 20)

struct cp_st_writer {
  cp_atomic_file *af;
  char *path;
  size_t n;
  size_t *order;   /* [n] caller index of the k-th tensor in file order */
  uint64_t *ends;  /* [n] data offset where the k-th tensor in file order ends */
  size_t k;        /* first tensor in file order not yet complete */
  uint64_t written, total;
  unsigned char *buf;
  size_t buf_used;
  /* Metadata in header order: keys and values (copied) and the file offset of each value's first
   * byte, so a caller can later overwrite a placeholder it put in a value (cp_st_writer_meta_offset). */
  size_t n_meta;
  char **meta_key, **meta_val;
  uint64_t *meta_at;
};

/* ---------------------------------------------------------------------------------------------
 * Growable text buffer
 * ------------------------------------------------------------------------------------------- */


static void sb_u64(cp_strbuf *b, uint64_t v) {
  char t[24];
  int n = snprintf(t, sizeof t, "%" PRIu64, v);
  cp_strbuf_put(b, t, (size_t)n);
}

/* The first `n` bytes of a JSON string's body as serde_json writes them: escapes '"', '\\' and
 * control characters, keeps UTF-8. */
static void sb_json_body(cp_strbuf *b, const char *s, size_t n) {
  for (const unsigned char *p = (const unsigned char *)s; p < (const unsigned char *)s + n; p++) {
    char esc[8];
    switch (*p) {
    case '"': cp_strbuf_put(b, "\\\"", 2); break;
    case '\\': cp_strbuf_put(b, "\\\\", 2); break;
    case '\b': cp_strbuf_put(b, "\\b", 2); break;
    case '\f': cp_strbuf_put(b, "\\f", 2); break;
    case '\n': cp_strbuf_put(b, "\\n", 2); break;
    case '\r': cp_strbuf_put(b, "\\r", 2); break;
    case '\t': cp_strbuf_put(b, "\\t", 2); break;
    default:
      if (*p < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", *p);
        cp_strbuf_put(b, esc, 6);
      } else {
        cp_strbuf_put(b, (const char *)p, 1);
      }
    }
  }
}

static void sb_json_string(cp_strbuf *b, const char *s) {
  cp_strbuf_put(b, "\"", 1);
  sb_json_body(b, s, strlen(s));
  cp_strbuf_put(b, "\"", 1);
}

/* ---------------------------------------------------------------------------------------------
 * Ordering
 * ------------------------------------------------------------------------------------------- */

/* Position of each dtype in the reference's `Dtype` enum (declared in increasing alignment
 * order; U16/U32/U64 have no cp_dtype). save_file sorts by this rank descending, then by name. */
static int dtype_rank(cp_dtype d) {
  switch (d) {
  case CP_BOOL: return 0;
  case CP_U8: return 1;
  case CP_I8: return 2;
  case CP_F8_E5M2: return 3;
  case CP_F8_E4M3: return 4;
  case CP_I16: return 5;
  case CP_F16: return 7;
  case CP_BF16: return 8;
  case CP_I32: return 9;
  case CP_F32: return 11;
  case CP_F64: return 12;
  case CP_I64: return 13;
  default: return -1;
  }
}

typedef struct {
  const char *name;
  int rank;
  size_t idx;
  uint64_t nbytes;
} slot;

static int cmp_by_name(const void *a, const void *b) {
  return strcmp(((const slot *)a)->name, ((const slot *)b)->name);
}

static int cmp_file_order(const void *a, const void *b) {
  const slot *x = a, *y = b;
  if (x->rank != y->rank) return x->rank > y->rank ? -1 : 1;
  return strcmp(x->name, y->name);
}

typedef struct {
  const char *key, *value;
} kv;

static int cmp_kv(const void *a, const void *b) { return strcmp(((const kv *)a)->key, ((const kv *)b)->key); }

/* ---------------------------------------------------------------------------------------------
 * Open / write / commit
 * ------------------------------------------------------------------------------------------- */

static void writer_free(cp_st_writer *w) {
  for (size_t i = 0; i < w->n_meta; i++) {
    free(w->meta_key[i]);
    free(w->meta_val[i]);
  }
  free(w->meta_key);
  free(w->meta_val);
  free(w->meta_at);
  free(w->order);
  free(w->ends);
  free(w->buf);
  free(w->path);
  free(w);
}

void cp_st_writer_abort(cp_st_writer *w) {
  if (!w) return;
  cp_atomic_abort(w->af);
  writer_free(w);
}

/* Builds the header text (padded) for tensors in file order `s[0..n)` and metadata `m[0..nm)`;
 * meta_at[i] is where m[i]'s value starts in the file. */
static int build_header(cp_strbuf *h, const char *path, const cp_tensor *tensors, const slot *s, size_t n,
                        const kv *m, size_t nm, uint64_t *meta_at, uint64_t *ends, uint64_t *total) {
  cp_strbuf_str(h, "{\"__metadata__\":{");
  for (size_t i = 0; i < nm; i++) {
    if (i) cp_strbuf_str(h, ",");
    sb_json_string(h, m[i].key);
    cp_strbuf_str(h, ":");
    meta_at[i] = 8 + h->len + 1; /* after the 8-byte length and the opening quote */
    sb_json_string(h, m[i].value);
  }
  cp_strbuf_str(h, "}");
  uint64_t off = 0;
  for (size_t k = 0; k < n; k++) {
    const cp_tensor *t = &tensors[s[k].idx];
    uint64_t end;
    if (!cp_add_u64(&end, off, s[k].nbytes) || end > (uint64_t)INT64_MAX)
      return cp_error_set(CP_EOVERFLOW, "%s: tensor data past 2^63 bytes at '%s'", path, t->name);
    cp_strbuf_str(h, ",");
    sb_json_string(h, t->name);
    cp_strbuf_str(h, ":{\"dtype\":\"");
    cp_strbuf_str(h, cp_dtype_name(t->dtype));
    cp_strbuf_str(h, "\",\"shape\":[");
    for (int d = 0; d < t->ndim; d++) {
      if (d) cp_strbuf_str(h, ",");
      sb_u64(h, (uint64_t)t->shape[d]);
    }
    cp_strbuf_str(h, "],\"data_offsets\":[");
    sb_u64(h, off);
    cp_strbuf_str(h, ",");
    sb_u64(h, end);
    cp_strbuf_str(h, "]}");
    ends[k] = end;
    off = end;
  }
  cp_strbuf_str(h, "}");
  while (!h->oom && h->len % 8) cp_strbuf_str(h, " ");
  if (h->oom) return cp_nomem("%s: building the header", path);
  if (h->len > CP_ST_MAX_HEADER)
    return cp_error_set(CP_EST_HEADER_TOO_LARGE, "%s: header would be %zu bytes, over the 100000000-byte limit", path,
                        h->len);
  *total = off;
  return 0;
}

int cp_st_writer_open(cp_st_writer **out, const char *path, const cp_tensor *tensors, size_t n,
                      const char *const *meta_kv, size_t n_meta) {
  *out = NULL;
  int rc = 0;
  slot *s = NULL;
  kv *m = NULL;
  cp_strbuf h = {0};
  cp_st_writer *w = calloc(1, sizeof *w);
  CP_CHECK_ALLOC(w, path);
  CP_CHECK_ALLOC_GOTO(w->path = strdup(path), path);
  CP_CHECK_ALLOC_GOTO(m = calloc(n_meta + 1, sizeof *m), path);
  CP_CHECK_ALLOC_GOTO(w->buf = malloc(ST_WRITE_BUF), path);
  if (n) {
    CP_CHECK_ALLOC_GOTO(s = calloc(n, sizeof *s), path);
    CP_CHECK_ALLOC_GOTO(w->order = calloc(n, sizeof *w->order), path);
    CP_CHECK_ALLOC_GOTO(w->ends = calloc(n, sizeof *w->ends), path);
  }
  w->n = n;

  for (size_t i = 0; i < n; i++) {
    const cp_tensor *t = &tensors[i];
    if (!t->name || !cp_st_utf8_valid(t->name, strlen(t->name), NULL)) {
      rc = cp_error_set(CP_EARG, "%s: tensor %zu: name is missing or not UTF-8", path, i);
      goto done;
    }
    if (strcmp(t->name, "__metadata__") == 0) {
      rc = cp_error_set(CP_EARG, "%s: tensor %zu: the name '__metadata__' is reserved", path, i);
      goto done;
    }
    s[i] = (slot){t->name, dtype_rank(t->dtype), i, 0};
    if (s[i].rank < 0 || t->ndim < 0 || t->ndim > CP_MAX_DIMS) {
      rc = cp_error_set(CP_EARG, "%s: tensor '%s': bad dtype or number of dimensions", path, t->name);
      goto done;
    }
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] < 0) {
        rc = cp_error_set(CP_EARG, "%s: tensor '%s': negative dimension", path, t->name);
        goto done;
      }
    }
    if (cp_shape_nbytes(&s[i].nbytes, t->dtype, t->ndim, t->shape) < 0) {
      rc = cp_error_set(CP_EOVERFLOW, "%s: tensor '%s': size overflows 2^63 bytes", path, t->name);
      goto done;
    }
  }
  if (n) qsort(s, n, sizeof *s, cmp_by_name);
  for (size_t i = 0; i + 1 < n; i++) {
    if (strcmp(s[i].name, s[i + 1].name) == 0) {
      rc = cp_error_set(CP_EARG, "%s: duplicate tensor name '%s'", path, s[i].name);
      goto done;
    }
  }
  if (n) qsort(s, n, sizeof *s, cmp_file_order);
  for (size_t k = 0; k < n; k++) w->order[k] = s[k].idx;

  bool have_format = false;
  for (size_t i = 0; i < n_meta; i++) {
    const char *k = meta_kv[2 * i], *v = meta_kv[2 * i + 1];
    if (!k || !v || !cp_st_utf8_valid(k, strlen(k), NULL) || !cp_st_utf8_valid(v, strlen(v), NULL)) {
      rc = cp_error_set(CP_EARG, "%s: metadata entry %zu is missing or not UTF-8", path, i);
      goto done;
    }
    m[i] = (kv){k, v};
    if (strcmp(k, "format") == 0) have_format = true;
  }
  size_t nm = n_meta;
  if (!have_format) m[nm++] = (kv){"format", "pt"};
  qsort(m, nm, sizeof *m, cmp_kv);
  for (size_t i = 0; i + 1 < nm; i++) {
    if (strcmp(m[i].key, m[i + 1].key) == 0) {
      rc = cp_error_set(CP_EARG, "%s: duplicate metadata key '%s'", path, m[i].key);
      goto done;
    }
  }

  w->meta_key = calloc(nm, sizeof *w->meta_key);
  w->meta_val = calloc(nm, sizeof *w->meta_val);
  w->meta_at = calloc(nm, sizeof *w->meta_at);
  CP_CHECK_ALLOC_GOTO(w->meta_key && w->meta_val && w->meta_at, path);
  for (; w->n_meta < nm; w->n_meta++) {
    w->meta_key[w->n_meta] = strdup(m[w->n_meta].key);
    w->meta_val[w->n_meta] = strdup(m[w->n_meta].value);
    CP_CHECK_ALLOC_GOTO(w->meta_key[w->n_meta] && w->meta_val[w->n_meta], path);
  }
  if ((rc = build_header(&h, path, tensors, s, n, m, nm, w->meta_at, w->ends, &w->total)) < 0) goto done;
  if ((rc = w->total >= ST_STAGED_MIN ? cp_atomic_open_staged(&w->af, path) : cp_atomic_open(&w->af, path)) < 0)
    goto done;
  unsigned char len8[8];
  cp_le_put64(len8, (uint64_t)h.len);
  if ((rc = cp_atomic_write(w->af, len8, 8)) < 0 || (rc = cp_atomic_write(w->af, h.s, h.len)) < 0) goto done;
  while (w->k < n && w->ends[w->k] == 0) w->k++;
done:
  free(s);
  free(m);
  free(h.s);
  if (rc < 0) {
    if (w) cp_st_writer_abort(w);
    return rc;
  }
  *out = w;
  return 0;
}

int cp_st_writer_meta_offset(uint64_t *out, const cp_st_writer *w, const char *key, size_t pos) {
  for (size_t i = 0; i < w->n_meta; i++) {
    if (strcmp(w->meta_key[i], key) != 0) continue;
    if (pos > strlen(w->meta_val[i])) break;
    cp_strbuf b = {0}; /* the escaped prefix: escapes before `pos` shift it */
    sb_json_body(&b, w->meta_val[i], pos);
    int oom = b.oom;
    *out = w->meta_at[i] + b.len;
    free(b.s);
    if (oom) return cp_nomem("%s", w->path);
    return 0;
  }
  return cp_error_set(CP_EARG, "%s: no metadata value '%s' holding byte %zu", w->path, key, pos);
}

size_t cp_st_writer_next_index(const cp_st_writer *w) { return w->k < w->n ? w->order[w->k] : (size_t)-1; }

size_t cp_st_writer_order(const cp_st_writer *w, size_t k) { return k < w->n ? w->order[k] : (size_t)-1; }

static int flush(cp_st_writer *w) {
  int rc = w->buf_used ? cp_atomic_write(w->af, w->buf, w->buf_used) : 0;
  w->buf_used = 0;
  return rc;
}

int cp_st_writer_write(cp_st_writer *w, const void *data, size_t len) {
  if (len > w->total - w->written)
    return cp_error_set(CP_EARG, "%s: %zu bytes written past the end of the tensor data (%" PRIu64 " of %" PRIu64
                        " already written)", w->path, len, w->written, w->total);
  int rc;
  if (len >= ST_WRITE_BUF) {
    if ((rc = flush(w)) < 0 || (rc = cp_atomic_write(w->af, data, len)) < 0) return rc;
  } else {
    if (w->buf_used + len > ST_WRITE_BUF && (rc = flush(w)) < 0) return rc;
    memcpy(w->buf + w->buf_used, data, len);
    w->buf_used += len;
  }
  w->written += len;
  while (w->k < w->n && w->ends[w->k] <= w->written) w->k++;
  return 0;
}

int cp_st_writer_write_mapped(cp_st_writer *w, const void *data, size_t len, int src_fd, uint64_t src_off, int drop) {
  if (len > w->total - w->written)
    return cp_error_set(CP_EARG, "%s: %zu bytes written past the end of the tensor data (%" PRIu64 " of %" PRIu64
                        " already written)", w->path, len, w->written, w->total);
  int rc;
  if (len < ST_WRITE_BUF) return cp_st_writer_write(w, data, len); /* small: gathered with its neighbours */
  if ((rc = flush(w)) < 0 || (rc = cp_atomic_write_mapped(w->af, data, len, src_fd, src_off, drop)) < 0) return rc;
  w->written += len;
  while (w->k < w->n && w->ends[w->k] <= w->written) w->k++;
  return 0;
}

int cp_st_writer_sha256(cp_st_writer *w, char out_hex[65]) {
  int rc = flush(w);
  if (rc == 0) cp_atomic_sha256(w->af, out_hex);
  return rc;
}

int cp_st_writer_commit(cp_st_writer *w) {
  int rc = 0;
  if (w->written != w->total) {
    rc = cp_error_set(CP_EARG, "%s: only %" PRIu64 " of %" PRIu64 " tensor data bytes were written", w->path,
                      w->written, w->total);
    goto fail;
  }
  if ((rc = flush(w)) < 0) goto fail;
  rc = cp_atomic_commit(w->af); /* frees the atomic handle on success and on error */
  w->af = NULL;
  writer_free(w);
  return rc;
fail:
  cp_st_writer_abort(w);
  return rc;
}

int cp_st_write_file(const char *path, const cp_tensor *tensors, size_t n, const char *const *meta_kv,
                     size_t n_meta) {
  cp_st_writer *w = NULL;
  int rc = cp_st_writer_open(&w, path, tensors, n, meta_kv, n_meta);
  if (rc < 0) return rc;
  for (size_t k = 0; k < n; k++) {
    const cp_tensor *t = &tensors[cp_st_writer_order(w, k)];
    uint64_t nb = 0;
    cp_shape_nbytes(&nb, t->dtype, t->ndim, t->shape); /* checked by open */
    if (nb == 0) continue;
    if (!t->data) {
      cp_st_writer_abort(w);
      return cp_error_set(CP_EARG, "%s: tensor '%s' has no data", path, t->name);
    }
    if ((rc = cp_st_writer_write(w, t->data, (size_t)nb)) < 0) {
      cp_st_writer_abort(w);
      return rc;
    }
  }
  return cp_st_writer_commit(w);
}
