/* GGUF v3 writer (include/ctxpatch/formats/gguf_write.h): key/values and tensor infos gathered,
 * the header written with precomputed offsets, tensor bytes streamed in order, atomic commit. */
#include "ctxpatch/formats/gguf_write.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/base/utf8.h"
#include "formats/gguf_quant.h"

typedef struct {
  char *name;
  uint32_t type;
  int ndim;
  int64_t ne[CP_GGUF_MAX_DIMS]; /* ggml order: ne[0] innermost */
  uint64_t nbytes, offset;      /* stored bytes; offset in the data section */
} wtensor;

struct cp_gguf_writer {
  char *path;
  cp_strbuf kv;     /* the serialised key/values, in call order */
  uint64_t n_kv;
  char **keys;      /* [n_kv] for the duplicate check */
  size_t *kv_at;    /* [n_kv + 1]: where each entry starts in `kv` (the last: kv's end) */
  size_t cap_kv_at;
  size_t cap_keys;
  wtensor *t;       /* [n_t] */
  size_t n_t, cap_t;
  cp_atomic_file *af; /* open after begin */
  size_t cur;       /* tensor being written */
  uint64_t cur_done; /* its bytes written so far */
  unsigned char *enc; /* encode buffer for cp_gguf_write_f32 */
  size_t enc_cap;
  cp_sha256 *data_hash;  /* cp_gguf_writer_content_digest: the content digest so far, else NULL */
  char *digest_skip;     /* the prefix of the keys it leaves out */
  size_t digest_kv_at;   /* where its 64-character placeholder sits in `kv` */
  uint64_t digest_at;    /* ... and in the file, once the header is written */
};

static const unsigned char k_zeros[CP_GGUF_DEFAULT_ALIGNMENT];

int cp_gguf_writer_new(cp_gguf_writer **out, const char *path) {
  *out = NULL;
  cp_gguf_writer *w = calloc(1, sizeof *w);
  CP_CHECK_ALLOC(w, path);
  if (!(w->path = strdup(path))) {
    free(w);
    return cp_nomem("%s", path);
  }
  *out = w;
  return 0;
}

void cp_gguf_writer_abort(cp_gguf_writer *w) {
  if (!w) return;
  cp_atomic_abort(w->af);
  for (size_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
  for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
  free(w->keys);
  free(w->kv_at);
  free(w->digest_skip);
  free(w->t);
  free(w->enc);
  cp_sha256_free(w->data_hash);
  cp_strbuf_free(&w->kv);
  free(w->path);
  free(w);
}

/* ---------------------------------------------------------------- key/values */

static void put_le(cp_strbuf *b, uint64_t v, int n) {
  unsigned char x[8];
  cp_le_put64(x, v);
  cp_strbuf_put(b, (const char *)x, (size_t)n);
}

static void put_string(cp_strbuf *b, const char *s, size_t len) {
  put_le(b, len, 8);
  cp_strbuf_put(b, s, len);
}

static int check_name(const cp_gguf_writer *w, const char *what, const char *name, size_t max) {
  size_t n = strlen(name);
  if (n == 0 || n >= max || cp_utf8_check(name, n, 0) != n)
    return cp_error_set(CP_EARG, "%s: %s '%.200s': empty, not UTF-8 or %zu bytes or longer", w->path, what, name, max);
  return 0;
}

/* Starts key/value `key` of type `type`: checks, records the key, writes it and the type. */
static int kv_begin(cp_gguf_writer *w, const char *key, cp_gguf_vtype type) {
  if (w->af) return cp_error_set(CP_EARG, "%s: key '%s' put after the header was written", w->path, key);
  int rc = check_name(w, "key", key, 65536);
  if (rc) return rc;
  for (size_t i = 0; i < w->n_kv; i++)
    if (!strcmp(w->keys[i], key)) return cp_error_set(CP_EARG, "%s: key '%s' put twice", w->path, key);
  if ((rc = CP_ARRAY_RESERVE(w->keys, w->cap_keys, w->n_kv + 1, w->path)) ||
      (rc = CP_ARRAY_RESERVE(w->kv_at, w->cap_kv_at, w->n_kv + 2, w->path)))
    return rc;
  CP_CHECK_ALLOC(w->keys[w->n_kv] = strdup(key), w->path);
  w->kv_at[w->n_kv] = w->kv.len;
  w->n_kv++;
  put_string(&w->kv, key, strlen(key));
  put_le(&w->kv, (uint64_t)type, 4);
  return 0;
}

static int kv_end(cp_gguf_writer *w) {
  return w->kv.oom ? cp_nomem("%s: building the header", w->path) : 0;
}

/* Bytes of one element of a fixed-size value type; 0 for string and array. */
static int vtype_size(cp_gguf_vtype t) {
  switch (t) {
    case CP_GGUF_U8: case CP_GGUF_I8: case CP_GGUF_BOOL: return 1;
    case CP_GGUF_U16: case CP_GGUF_I16: return 2;
    case CP_GGUF_U32: case CP_GGUF_I32: case CP_GGUF_F32: return 4;
    case CP_GGUF_U64: case CP_GGUF_I64: case CP_GGUF_F64: return 8;
    default: return 0;
  }
}

/* Appends `n` host values of fixed-size type `t` little-endian (bools as 0/1). */
static void put_values(cp_strbuf *b, cp_gguf_vtype t, const void *data, uint64_t n) {
  int size = vtype_size(t);
  const unsigned char *p = data;
  for (uint64_t i = 0; i < n; i++, p += size) {
    uint64_t v = 0;
    if (t == CP_GGUF_BOOL) v = *(const bool *)p ? 1 : 0;
    else if (size == 1) v = *p;
    else if (size == 2) v = *(const uint16_t *)p;
    else if (size == 4) v = *(const uint32_t *)p;
    else v = *(const uint64_t *)p;
    put_le(b, v, size);
  }
}

int cp_gguf_put_scalar(cp_gguf_writer *w, const char *key, cp_gguf_vtype type, const void *v) {
  if (!vtype_size(type)) return cp_error_set(CP_EARG, "%s: key '%s': %s is not a scalar type", w->path, key,
                                             cp_gguf_type_name(type));
  int rc = kv_begin(w, key, type);
  if (rc) return rc;
  put_values(&w->kv, type, v, 1);
  return kv_end(w);
}

int cp_gguf_put_u32(cp_gguf_writer *w, const char *key, uint32_t v) { return cp_gguf_put_scalar(w, key, CP_GGUF_U32, &v); }
int cp_gguf_put_i32(cp_gguf_writer *w, const char *key, int32_t v) { return cp_gguf_put_scalar(w, key, CP_GGUF_I32, &v); }
int cp_gguf_put_u64(cp_gguf_writer *w, const char *key, uint64_t v) { return cp_gguf_put_scalar(w, key, CP_GGUF_U64, &v); }
int cp_gguf_put_f32(cp_gguf_writer *w, const char *key, float v) { return cp_gguf_put_scalar(w, key, CP_GGUF_F32, &v); }
int cp_gguf_put_f64(cp_gguf_writer *w, const char *key, double v) { return cp_gguf_put_scalar(w, key, CP_GGUF_F64, &v); }
int cp_gguf_put_bool(cp_gguf_writer *w, const char *key, bool v) { return cp_gguf_put_scalar(w, key, CP_GGUF_BOOL, &v); }

int cp_gguf_put_str(cp_gguf_writer *w, const char *key, const char *s, size_t len) {
  int rc = kv_begin(w, key, CP_GGUF_STRING);
  if (rc) return rc;
  put_string(&w->kv, s, len);
  return kv_end(w);
}

int cp_gguf_put_arr(cp_gguf_writer *w, const char *key, cp_gguf_vtype elem, const void *data, uint64_t n) {
  if (!vtype_size(elem)) return cp_error_set(CP_EARG, "%s: key '%s': arrays of %s are written with "
                                             "cp_gguf_put_arr_str", w->path, key, cp_gguf_type_name(elem));
  int rc = kv_begin(w, key, CP_GGUF_ARRAY);
  if (rc) return rc;
  put_le(&w->kv, (uint64_t)elem, 4);
  put_le(&w->kv, n, 8);
  put_values(&w->kv, elem, data, n);
  return kv_end(w);
}

int cp_gguf_put_arr_str(cp_gguf_writer *w, const char *key, const char *const *s, const size_t *len, uint64_t n) {
  int rc = kv_begin(w, key, CP_GGUF_ARRAY);
  if (rc) return rc;
  put_le(&w->kv, CP_GGUF_STRING, 4);
  put_le(&w->kv, n, 8);
  for (uint64_t i = 0; i < n; i++) put_string(&w->kv, s[i], len[i]);
  return kv_end(w);
}

bool cp_gguf_writer_has_key(const cp_gguf_writer *w, const char *key) {
  for (size_t i = 0; i < w->n_kv; i++)
    if (!strcmp(w->keys[i], key)) return true;
  return false;
}

/* ---------------------------------------------------------------- tensors */

static bool writable_type(uint32_t type) {
  return type == CP_GGML_F32 || type == CP_GGML_F16 || type == CP_GGML_BF16 || type == CP_GGML_Q8_0;
}

/* cp_gguf_type_nbytes with messages naming `where` (the file and tensor, or nothing). */
static int type_nbytes(uint64_t *out, uint32_t type, uint64_t numel, const char *where) {
  const gguf_type_info *ti = gguf_type(type);
  if (!ti || !writable_type(type))
    return cp_error_set(CP_EARG, "%sggml type %u is not written (F32, F16, BF16, Q8_0)", where, type);
  if (numel % ti->block)
    return cp_error_set(CP_EARG, "%s%llu elements are not whole %s blocks of %u", where, (unsigned long long)numel,
                        ti->name, ti->block);
  if (!cp_mul_u64(out, numel / ti->block, ti->size) || *out > (uint64_t)INT64_MAX)
    return cp_error_set(CP_EOVERFLOW, "%s%llu %s elements overflow 2^63 bytes", where, (unsigned long long)numel,
                        ti->name);
  return 0;
}

int cp_gguf_type_nbytes(uint64_t *out, uint32_t type, uint64_t numel) { return type_nbytes(out, type, numel, ""); }

/* "PATH: tensor 'NAME': " for messages. */
static const char *where(char buf[700], const cp_gguf_writer *w, const char *name) {
  snprintf(buf, 700, "%.400s: tensor '%.200s': ", w->path, name);
  return buf;
}

static uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

int cp_gguf_add_tensor(cp_gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *shape) {
  if (w->af) return cp_error_set(CP_EARG, "%s: tensor '%s' added after the header was written", w->path, name);
  int rc = check_name(w, "tensor name", name, CP_GGUF_MAX_NAME);
  if (rc) return rc;
  for (size_t i = 0; i < w->n_t; i++)
    if (!strcmp(w->t[i].name, name)) return cp_error_set(CP_EARG, "%s: tensor '%s' added twice", w->path, name);
  if (ndim < 1 || ndim > CP_GGUF_MAX_DIMS)
    return cp_error_set(CP_EARG, "%s: tensor '%s': %d dimensions (1..4)", w->path, name, ndim);
  wtensor t = {.type = type, .ndim = ndim};
  uint64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    t.ne[d] = shape[ndim - 1 - d];
    if (t.ne[d] < 0 || !cp_mul_u64(&numel, numel, (uint64_t)t.ne[d]))
      return cp_error_set(CP_EOVERFLOW, "%s: tensor '%s': negative or overflowing shape", w->path, name);
  }
  const gguf_type_info *ti = gguf_type(type);
  if (ti && (uint64_t)t.ne[0] % ti->block)
    return cp_error_set(CP_EARG, "%s: tensor '%s': rows of %lld are not whole %s blocks of %u", w->path, name,
                        (long long)t.ne[0], ti->name, ti->block);
  char at[700];
  if ((rc = type_nbytes(&t.nbytes, type, numel, where(at, w, name)))) return rc;
  if (w->n_t) {
    const wtensor *p = &w->t[w->n_t - 1];
    t.offset = p->offset + pad_to(p->nbytes, CP_GGUF_DEFAULT_ALIGNMENT);
    if (t.offset > (uint64_t)INT64_MAX / 2)
      return cp_error_set(CP_EOVERFLOW, "%s: tensor '%s': data section past 2^62 bytes", w->path, name);
  }
  if ((rc = CP_ARRAY_RESERVE(w->t, w->cap_t, w->n_t + 1, w->path))) return rc;
  CP_CHECK_ALLOC(t.name = strdup(name), w->path);
  w->t[w->n_t++] = t;
  return 0;
}

/* ---------------------------------------------------------------- header and data */

#define DIGEST_HEX 64
#define HEADER_FIXED 24 /* magic, version, tensor count, key count */

int cp_gguf_writer_content_digest(cp_gguf_writer *w, const char *key, const char *skip_prefix) {
  static const char zeros[DIGEST_HEX + 1] = "0000000000000000000000000000000000000000000000000000000000000000";
  if (w->af || w->data_hash || strncmp(key, skip_prefix, strlen(skip_prefix)))
    return cp_error_set(CP_EARG, "%s: content digest key '%s': after the header, twice, or not under '%s'", w->path, key,
                        skip_prefix);
  int rc = cp_gguf_put_str(w, key, zeros, DIGEST_HEX);
  if (rc) return rc;
  w->digest_kv_at = w->kv.len - DIGEST_HEX; /* the string's bytes end the key/values so far */
  CP_CHECK_ALLOC(w->digest_skip = strdup(skip_prefix), w->path);
  return cp_sha256_new(&w->data_hash);
}

/* The header's part of the content digest (cp_gguf_content_sha256 on the reading side): the entries
 * not under the skipped prefix, then the tensor infos (`infos`, `n` bytes). */
static void digest_header(cp_gguf_writer *w, const char *infos, size_t n) {
  size_t skip = strlen(w->digest_skip);
  w->kv_at[w->n_kv] = w->kv.len;
  for (size_t i = 0; i < w->n_kv; i++)
    if (strncmp(w->keys[i], w->digest_skip, skip))
      cp_sha256_update(w->data_hash, w->kv.s + w->kv_at[i], w->kv_at[i + 1] - w->kv_at[i]);
  cp_sha256_update(w->data_hash, infos, n);
}

/* Appends to the data section: written, and hashed into the data digest when one is kept. */
static int data_write(cp_gguf_writer *w, const void *bytes, size_t len) {
  if (w->data_hash) cp_sha256_update(w->data_hash, bytes, len);
  return cp_atomic_write(w->af, bytes, len);
}

int cp_gguf_writer_begin(cp_gguf_writer *w) {
  if (w->af) return cp_error_set(CP_EARG, "%s: header written twice", w->path);
  int rc = 0;
  if (!cp_gguf_writer_has_key(w, "general.alignment") &&
      (rc = cp_gguf_put_u32(w, "general.alignment", CP_GGUF_DEFAULT_ALIGNMENT)))
    return rc;
  cp_strbuf h = {0};
  put_le(&h, CP_GGUF_MAGIC, 4);
  put_le(&h, 3, 4);
  put_le(&h, w->n_t, 8);
  put_le(&h, w->n_kv, 8);
  cp_strbuf_put(&h, w->kv.s, w->kv.len);
  size_t infos_at = h.len;
  for (size_t i = 0; i < w->n_t; i++) {
    const wtensor *t = &w->t[i];
    put_string(&h, t->name, strlen(t->name));
    put_le(&h, (uint64_t)t->ndim, 4);
    for (int d = 0; d < t->ndim; d++) put_le(&h, (uint64_t)t->ne[d], 8);
    put_le(&h, t->type, 4);
    put_le(&h, t->offset, 8);
  }
  size_t infos_end = h.len;
  cp_strbuf_put(&h, (const char *)k_zeros, (size_t)(pad_to(h.len, CP_GGUF_DEFAULT_ALIGNMENT) - h.len));
  if (h.oom) rc = cp_nomem("%s: building the header", w->path);
  if (rc == 0 && w->data_hash) digest_header(w, h.s + infos_at, infos_end - infos_at);
  if (rc == 0) rc = cp_atomic_open_staged(&w->af, w->path);
  if (rc == 0) rc = cp_atomic_write(w->af, h.s, h.len);
  w->digest_at = HEADER_FIXED + w->digest_kv_at;
  cp_strbuf_free(&h);
  while (rc == 0 && w->cur < w->n_t && w->t[w->cur].nbytes == 0) w->cur++;
  return rc;
}

size_t cp_gguf_writer_next(const cp_gguf_writer *w) { return w->af && w->cur < w->n_t ? w->cur : (size_t)-1; }

/* Appends the current tensor's next bytes (`src_fd` >= 0: from that file's mapping, as
 * cp_gguf_write_mapped), then its padding once complete. */
static int data_append(cp_gguf_writer *w, const void *bytes, size_t len, int src_fd, uint64_t src_off) {
  if (!w->af || w->cur >= w->n_t || len > w->t[w->cur].nbytes - w->cur_done)
    return cp_error_set(CP_EARG, "%s: %zu bytes written past the end of the tensor data%s%s", w->path, len,
                        w->cur < w->n_t ? " of tensor " : "", w->cur < w->n_t ? w->t[w->cur].name : "");
  int rc;
  if (src_fd < 0) {
    rc = data_write(w, bytes, len);
  } else {
    if (w->data_hash) cp_sha256_update(w->data_hash, bytes, len);
    rc = cp_atomic_write_mapped(w->af, bytes, len, src_fd, src_off, 1);
  }
  if (rc) return rc;
  w->cur_done += len;
  while (rc == 0 && w->cur < w->n_t && w->cur_done == w->t[w->cur].nbytes) {
    uint64_t pad = pad_to(w->cur_done, CP_GGUF_DEFAULT_ALIGNMENT) - w->cur_done;
    if (w->cur_done) rc = data_write(w, k_zeros, (size_t)pad);
    w->cur++;
    w->cur_done = 0;
  }
  return rc;
}

int cp_gguf_write_data(cp_gguf_writer *w, const void *bytes, size_t len) { return data_append(w, bytes, len, -1, 0); }

int cp_gguf_write_mapped(cp_gguf_writer *w, const void *bytes, size_t len, int src_fd, uint64_t src_off) {
  assert(src_fd >= 0);
  return data_append(w, bytes, len, src_fd, src_off);
}

/* ggml's quantize_row_q8_0_ref for one block of 32: f16 d = max|x| / 127, then roundf(x / d). */
static void q8_0_block(unsigned char *y /* [34] */, const float *x /* [32] */) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  uint16_t h = cp_f32_to_f16(d);
  y[0] = (unsigned char)(h & 0xff);
  y[1] = (unsigned char)(h >> 8);
  for (int j = 0; j < 32; j++) y[2 + j] = (unsigned char)(int8_t)roundf(x[j] * id);
}

void cp_gguf_encode_f32(void *dst, const float *src, size_t n, uint32_t type) {
  unsigned char *o = dst;
  switch (type) {
    case CP_GGML_F32:
      for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        for (int k = 0; k < 4; k++) o[4 * i + k] = (unsigned char)(u >> (8 * k));
      }
      return;
    case CP_GGML_F16:
    case CP_GGML_BF16:
      for (size_t i = 0; i < n; i++) {
        uint16_t h = type == CP_GGML_F16 ? cp_f32_to_f16(src[i]) : cp_f32_to_bf16(src[i]);
        o[2 * i] = (unsigned char)(h & 0xff);
        o[2 * i + 1] = (unsigned char)(h >> 8);
      }
      return;
    case CP_GGML_Q8_0:
      for (size_t b = 0; b < n / 32; b++) q8_0_block(o + 34 * b, src + 32 * b);
      return;
    default: return; /* callers check the type (cp_gguf_type_nbytes) */
  }
}

int cp_gguf_write_f32(cp_gguf_writer *w, const float *x, size_t n) {
  if (!w->af || w->cur >= w->n_t)
    return cp_error_set(CP_EARG, "%s: %zu values written past the end of the tensor data", w->path, n);
  const wtensor *t = &w->t[w->cur];
  uint64_t nb;
  char at[700];
  int rc = type_nbytes(&nb, t->type, n, where(at, w, t->name));
  if (rc) return rc;
  if (nb > SIZE_MAX) return cp_error_set(CP_EOVERFLOW, "%s: tensor '%s': chunk too large", w->path, t->name);
  if (nb > w->enc_cap) {
    free(w->enc);
    w->enc_cap = 0;
    CP_CHECK_ALLOC(w->enc = malloc((size_t)nb), w->path);
    w->enc_cap = (size_t)nb;
  }
  cp_gguf_encode_f32(w->enc, x, n, t->type);
  return cp_gguf_write_data(w, w->enc, (size_t)nb);
}

int cp_gguf_writer_commit(cp_gguf_writer *w, char sha256_hex[65]) {
  int rc = 0;
  if (!w->af) rc = cp_error_set(CP_EARG, "%s: committed before the header was written", w->path);
  else if (w->cur < w->n_t)
    rc = cp_error_set(CP_EARG, "%s: tensor '%s': only %llu of %llu bytes were written", w->path, w->t[w->cur].name,
                      (unsigned long long)w->cur_done, (unsigned long long)w->t[w->cur].nbytes);
  if (rc == 0 && w->data_hash) { /* the placeholder becomes the data section's digest */
    char hex[DIGEST_HEX + 1];
    cp_sha256_peek(w->data_hash, hex);
    rc = cp_atomic_pwrite(w->af, w->digest_at, hex, DIGEST_HEX);
  }
  bool reread = w->data_hash != NULL;
  if (rc == 0) {
    if (sha256_hex && !reread) cp_atomic_sha256(w->af, sha256_hex);
    rc = cp_atomic_commit(w->af); /* frees the handle on success and on error */
    w->af = NULL;
  }
  if (rc == 0 && sha256_hex && reread) rc = cp_sha256_file(sha256_hex, w->path); /* the stamp changed the bytes */
  cp_gguf_writer_abort(w);
  return rc;
}
