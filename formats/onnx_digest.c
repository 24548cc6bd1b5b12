/* The graph digest of an ONNX model file (include/ctxpatch/formats/onnx_digest.h): the model's
 * top-level fields cut into spans (formats/onnx_span.h), ctxpatch's own metadata entries left
 * out, then the bytes tensors use in each external data file the reader mapped, in location
 * order; the whole-file form of earlier versions for a stored digest made that way. */
#include "ctxpatch/formats/onnx_digest.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "formats/onnx_graph_priv.h"
#include "formats/onnx_span.h"

#define F_META 14
#define MODEL_MAX ((size_t)INT32_MAX) /* protobuf's own limit, as the reader */

/* Whether top-level field s is a metadata_props entry whose key begins with prefix. */
static bool own_entry(const uint8_t *buf, const cp_pb_span *s, const char *prefix) {
  size_t at, len, n = strlen(prefix);
  return s->field == F_META && s->wire == 2 && cp_pb_string(&at, &len, buf, s, 1) && len >= n &&
         !memcmp(buf + at, prefix, n);
}

static int by_location(const void *a, const void *b) {
  return strcmp((*(const cp_onnx_datafile *const *)a)->location, (*(const cp_onnx_datafile *const *)b)->location);
}

/* The hex SHA-256 of data file f: the bytes its ranges cover, in offset order, or (whole) all of it. */
static int file_hash(char fh[65], const cp_onnx_datafile *f, bool whole) {
  if (whole) {
    cp_sha256_hex(fh, f->map, (size_t)f->size);
    return 0;
  }
  cp_sha256 *h = NULL;
  int rc = cp_sha256_new(&h);
  if (rc < 0) return rc;
  for (size_t k = 0; k < f->n_ranges; k++)
    cp_sha256_update(h, (const uint8_t *)f->map + f->ranges[k].offset, (size_t)f->ranges[k].length);
  cp_sha256_peek(h, fh);
  cp_sha256_free(h);
  return 0;
}

static int digest(char hex[65], const cp_onnx_model *m, const uint8_t *buf, size_t len, bool whole) {
  cp_pb_span *top = NULL;
  size_t n_top = 0, cap = 0;
  const cp_onnx_datafile **files = NULL;
  cp_sha256 *h = NULL;
  int rc = cp_pb_scan(&top, &n_top, &cap, buf, 0, len, m->path);
  if (rc < 0) goto done;
  if ((rc = cp_sha256_new(&h)) < 0) goto done;
  /* Runs of kept fields are hashed as one piece. */
  size_t from = 0;
  for (size_t k = 0; k < n_top; k++)
    if (own_entry(buf, &top[k], CP_ONNX_OWN_META_PREFIX)) {
      cp_sha256_update(h, buf + from, top[k].start - from);
      from = top[k].end;
    }
  cp_sha256_update(h, buf + from, len - from);
  const cp_onnx_model_priv *p = m->priv;
  CP_CHECK_ALLOC_GOTO(files = malloc((p->n_files + 1) * sizeof *files), m->path);
  for (size_t k = 0; k < p->n_files; k++) files[k] = &p->files[k];
  qsort(files, p->n_files, sizeof *files, by_location); /* strcmp: byte order (unsigned char) */
  for (size_t k = 0; k < p->n_files; k++) {
    char fh[65];
    if ((rc = file_hash(fh, files[k], whole)) < 0) goto done;
    cp_sha256_update(h, "", 1);
    cp_sha256_update(h, files[k]->location, strlen(files[k]->location));
    cp_sha256_update(h, "", 1);
    cp_sha256_update(h, fh, 64);
  }
  cp_sha256_peek(h, hex);
done:
  cp_sha256_free(h);
  free(files);
  free(top);
  return rc;
}

int cp_onnx_graph_digest(char hex[65], const cp_onnx_model *m, const uint8_t *buf, size_t len) {
  return digest(hex, m, buf, len, false);
}

/* Whether the whole-file form may be computed: the bytes no tensor uses are at most the alignment
 * padding exporters leave (onnx aligns large tensors to 64 KiB), so that hashing whole files reads
 * little more than the graph uses. */
static bool whole_is_bounded(const cp_onnx_model *m) {
  const cp_onnx_model_priv *p = m->priv;
  for (size_t k = 0; k < p->n_files; k++) {
    const cp_onnx_datafile *f = &p->files[k];
    uint64_t used = 0;
    for (size_t r = 0; r < f->n_ranges; r++) used += f->ranges[r].length;
    if (f->size - used > (uint64_t)(f->n_ranges + 1) * CP_ONNX_DIGEST_PAD_MAX) return false;
  }
  return true;
}

int cp_onnx_file_digest(char hex[65], cp_onnx_model **m, const char *path) {
  char *buf = NULL;
  size_t len = 0;
  *m = NULL;
  int rc = cp_read_file(&buf, &len, path, MODEL_MAX);
  if (rc == 0) rc = cp_onnx_model_open_bytes(m, path, (const uint8_t *)buf, len, NULL);
  if (rc == 0) rc = cp_onnx_graph_digest(hex, *m, (const uint8_t *)buf, len);
  /* A digest stored by an earlier version hashed whole data files: the same value wherever the
   * tensors cover their files; elsewhere that form is computed, within bounds, and reported when
   * it is the stored one. */
  const char *stored = rc == 0 ? cp_onnx_model_meta(*m, CP_ONNX_GRAPH_DIGEST_KEY) : NULL;
  char old[65];
  if (stored && strcmp(stored, hex) && (*m)->priv->n_files && whole_is_bounded(*m) &&
      (rc = digest(old, *m, (const uint8_t *)buf, len, true)) == 0 && !strcmp(stored, old))
    memcpy(hex, old, 65);
  if (rc < 0) cp_onnx_model_free(*m), *m = NULL;
  free(buf);
  return rc;
}

/* Where the value of the (last) top-level metadata entry `key` lies in buf: *at, *vlen. */
static int meta_value(size_t *at, size_t *vlen, const uint8_t *buf, size_t len, const char *key, const char *path) {
  cp_pb_span *top = NULL;
  size_t n_top = 0, cap = 0, klen = strlen(key);
  size_t found = 0;
  int rc = cp_pb_scan(&top, &n_top, &cap, buf, 0, len, path);
  for (size_t k = 0; k < n_top && rc == 0; k++) {
    size_t ka, kn;
    if (top[k].field == F_META && top[k].wire == 2 && cp_pb_string(&ka, &kn, buf, &top[k], 1) && kn == klen &&
        !memcmp(buf + ka, key, klen))
      found += cp_pb_string(at, vlen, buf, &top[k], 2);
  }
  free(top);
  /* One entry: a reader that takes the first of several would see another value. */
  if (rc == 0 && found != 1)
    rc = cp_error_set(CP_EONNX_METADATA, "%s: metadata_props %s: %zu entries with a value (one expected)", path, key,
                      found);
  return rc;
}

int cp_onnx_edit_write_digested(char hex[65], cp_onnx_edit *e, const char *path) {
  static const char zeros[65] = "0000000000000000000000000000000000000000000000000000000000000000";
  uint8_t *b = NULL;
  size_t n = 0, at = 0, vlen = 0;
  cp_onnx_model *m = NULL;
  char d[65];
  int rc = cp_onnx_edit_set_meta(e, CP_ONNX_GRAPH_DIGEST_KEY, zeros);
  if (rc == 0) rc = cp_onnx_edit_serialize(&b, &n, e);
  if (rc == 0) rc = meta_value(&at, &vlen, b, n, CP_ONNX_GRAPH_DIGEST_KEY, path);
  if (rc == 0 && vlen != 64)
    rc = cp_error_set(CP_EONNX_METADATA, "%s: metadata_props %s: %zu bytes, not 64", path, CP_ONNX_GRAPH_DIGEST_KEY,
                      vlen);
  /* The bytes about to be written, read back as a model beside `path` (its data files). */
  if (rc == 0) rc = cp_onnx_model_open_bytes(&m, path, b, n, NULL);
  if (rc == 0) rc = cp_onnx_graph_digest(d, m, b, n);
  if (rc == 0) {
    memcpy(b + at, d, 64);
    rc = cp_write_file_atomic(NULL, path, b, n);
  }
  if (rc == 0 && hex) memcpy(hex, d, 65);
  cp_onnx_model_free(m);
  free(b);
  return rc;
}
