/* The tensor list of an opened checkpoint (include/ctxpatch/import/checkpoint.h): every shard's
 * tensors by index and by name, reads, descriptors and quantised blocks through each shard's ops
 * (import/checkpoint_int.h). Which files make a checkpoint is the opener's (checkpoint_open.c). */
#include "import/checkpoint_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

const char *cp_format_name(cp_format format) {
  switch (format) {
  case CP_FORMAT_SAFETENSORS: return "safetensors";
  case CP_FORMAT_SAFETENSORS_SHARDED: return "safetensors-sharded";
  case CP_FORMAT_PYTORCH_ZIP: return "pytorch-zip";
  case CP_FORMAT_PYTORCH_ZIP_SHARDED: return "pytorch-zip-sharded";
  case CP_FORMAT_GGUF: return "gguf";
  case CP_FORMAT_ONNX: return "onnx";
  }
  return "?";
}

typedef struct {
  const char *name;
  size_t index;
} named_index;

static int cmp_by_name(const void *a, const void *b) {
  const named_index *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->index > y->index) - (x->index < y->index);
}

long cp_ckpt_find_entry(const cp_checkpoint *ck, const char *name) {
  size_t lo = 0, hi = ck->n_entries;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(ck->entries[ck->by_name[mid]].view->name, name);
    if (c == 0) return (long)ck->by_name[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

int cp_ckpt_build_entries(cp_checkpoint *ck) {
  size_t total = 0;
  for (size_t s = 0; s < ck->n_shards; s++) total += ck->shards[s].ops->count(ck->shards[s].file);
  CP_CHECK_ALLOC(ck->entries = calloc(total ? total : 1, sizeof *ck->entries), ck->dir);
  CP_CHECK_ALLOC(ck->by_name = calloc(total ? total : 1, sizeof *ck->by_name), ck->dir);
  for (size_t s = 0; s < ck->n_shards; s++)
    for (size_t i = 0; i < ck->shards[s].ops->count(ck->shards[s].file); i++)
      ck->entries[ck->n_entries++] = (cp_ckpt_entry){s, i, ck->shards[s].ops->tensor(ck->shards[s].file, i)};
  named_index *sorted = malloc((total ? total : 1) * sizeof *sorted);
  CP_CHECK_ALLOC(sorted, ck->dir);
  for (size_t i = 0; i < total; i++) sorted[i] = (named_index){ck->entries[i].view->name, i};
  qsort(sorted, total, sizeof *sorted, cmp_by_name);
  for (size_t i = 0; i < total; i++) ck->by_name[i] = sorted[i].index;
  free(sorted);
  for (size_t i = 1; i < total; i++) {
    const cp_ckpt_entry *a = &ck->entries[ck->by_name[i - 1]], *b = &ck->entries[ck->by_name[i]];
    if (strcmp(a->view->name, b->view->name) == 0)
      return cp_error_set(CP_ECKPT_DUPLICATE, "%s: tensor '%s' appears in both %s and %s", ck->dir,
                          a->view->name, ck->shards[a->shard].name, ck->shards[b->shard].name);
  }
  return 0;
}

void cp_checkpoint_free(cp_checkpoint *ck) {
  if (!ck) return;
  for (size_t s = 0; s < ck->n_shards; s++) {
    if (ck->shards[s].ops) ck->shards[s].ops->close(ck->shards[s].file);
    free(ck->shards[s].name);
  }
  for (size_t k = 0; k < ck->n_aux; k++) free(ck->aux[k]);
  free(ck->aux);
  free(ck->shards);
  free(ck->entries);
  free(ck->by_name);
  free(ck->config_path);
  free(ck->dir);
  free(ck);
}

cp_format cp_checkpoint_format(const cp_checkpoint *ck) { return ck->format; }
const cp_gguf_file *cp_checkpoint_gguf(const cp_checkpoint *ck) {
  return ck->format == CP_FORMAT_GGUF ? ck->shards[0].file : NULL;
}
const cp_onnx_import *cp_checkpoint_onnx(const cp_checkpoint *ck) {
  return ck->format == CP_FORMAT_ONNX ? ck->shards[0].file : NULL;
}
const char *cp_checkpoint_dir(const cp_checkpoint *ck) { return ck->dir; }
const char *cp_checkpoint_config_path(const cp_checkpoint *ck) { return ck->config_path; }
size_t cp_checkpoint_file_count(const cp_checkpoint *ck) { return ck->n_shards; }
const char *cp_checkpoint_file(const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_shards);
  return ck->shards[i].name;
}
size_t cp_checkpoint_count(const cp_checkpoint *ck) { return ck->n_entries; }
const cp_tensor *cp_checkpoint_tensor(const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_entries);
  return ck->entries[i].view;
}
const cp_tensor *cp_checkpoint_find(const cp_checkpoint *ck, const char *name) {
  long e = cp_ckpt_find_entry(ck, name);
  return e < 0 ? NULL : ck->entries[e].view;
}
size_t cp_checkpoint_aux_count(const cp_checkpoint *ck) { return ck->n_aux; }
const char *cp_checkpoint_aux(const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_aux);
  return ck->aux[i];
}

int cp_checkpoint_read(cp_checkpoint *ck, size_t i, uint64_t offset, void *buf, size_t len) {
  assert(i < ck->n_entries);
  const cp_ckpt_entry *e = &ck->entries[i];
  uint64_t end;
  if (!cp_add_u64(&end, offset, len) || end > e->view->nbytes)
    return cp_error_set(CP_EARG, "%s: read of bytes [%llu, +%zu) past tensor '%s' (%llu bytes)", ck->dir,
                        (unsigned long long)offset, len, e->view->name, (unsigned long long)e->view->nbytes);
  if (e->view->data) {
    memcpy(buf, (const char *)e->view->data + offset, len);
    return 0;
  }
  const cp_ckpt_shard *s = &ck->shards[e->shard];
  assert(s->ops->read); /* formats without a read map every view */
  return s->ops->read(s->file, e->local, offset, buf, len);
}

int cp_checkpoint_source(int *fd, uint64_t *offset, const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_entries);
  const cp_ckpt_entry *e = &ck->entries[i];
  const cp_ckpt_shard *s = &ck->shards[e->shard];
  *offset = 0;
  *fd = e->view->data && s->ops->fd ? s->ops->fd(offset, s->file, e->local, e->view) : -1;
  if (*fd < 0) *offset = 0;
  return *fd >= 0 ? 0 : -1;
}

const void *cp_checkpoint_blocks(cp_dtype *dtype, const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_entries);
  const cp_ckpt_entry *e = &ck->entries[i];
  const cp_ckpt_shard *s = &ck->shards[e->shard];
  return s->ops->blocks && !e->view->data ? s->ops->blocks(dtype, s->file, e->local) : NULL;
}

void cp_checkpoint_release(const cp_checkpoint *ck, size_t i, uint64_t offset, uint64_t len) {
  const cp_tensor *t = cp_checkpoint_tensor(ck, i);
  if (!t->data || len == 0) return;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)t->data + offset, stop = start + len;
  start = (start + page - 1) & ~(page - 1); /* only whole pages inside the range */
  stop &= ~(page - 1);
  if (stop > start) madvise((void *)start, stop - start, MADV_DONTNEED);
}

int cp_checkpoint_lookup(const cp_tensor **out, size_t *index, const cp_checkpoint *ck, const char *name, int ndim,
                         const int64_t *shape) {
  *out = NULL;
  long e = cp_ckpt_find_entry(ck, name);
  if (e < 0) return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' is missing", ck->dir, name);
  const cp_tensor *t = ck->entries[e].view;
  if (ndim >= 0) {
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
      char want[160] = "", got[160] = "";
      for (int d = 0; d < ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? "," : "", (long long)shape[d]);
      for (int d = 0; d < t->ndim; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? "," : "", (long long)t->shape[d]);
      return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' has shape [%s], expected [%s]", ck->dir, name, got,
                          want);
    }
  }
  *out = t;
  if (index) *index = (size_t)e;
  return 0;
}

int cp_checkpoint_load_f32(float **out, cp_checkpoint *ck, const char *name, int ndim, const int64_t *shape) {
  *out = NULL;
  const cp_tensor *t;
  size_t e;
  int rc = cp_checkpoint_lookup(&t, &e, ck, name, ndim, shape);
  if (rc) return rc;
  if (!cp_dtype_is_float(t->dtype) || t->dtype == CP_F8_E4M3 || t->dtype == CP_F8_E5M2)
    return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' has dtype %s; expected F32, F16, BF16 or F64", ck->dir,
                        name, cp_dtype_name(t->dtype));
  uint64_t numel = t->nbytes / cp_dtype_size(t->dtype);
  uint64_t bytes;
  if (!cp_mul_u64(&bytes, numel, sizeof(float)) || bytes > SIZE_MAX)
    return cp_error_set(CP_EOVERFLOW, "%s: tensor '%s' too large", ck->dir, name);
  float *buf = malloc(bytes ? (size_t)bytes : 1);
  if (!buf) return cp_nomem("%s: tensor '%s'", ck->dir, name);
  if (t->data) {
    rc = cp_convert_to_f32(buf, t->data, t->dtype, numel);
  } else {
    /* unmapped (strided or compressed) tensors: read in chunks and widen */
    size_t esz = cp_dtype_size(t->dtype), chunk = (1u << 20) / esz;
    unsigned char *tmp = malloc(chunk * esz);
    if (!tmp) rc = cp_nomem("%s", ck->dir);
    for (uint64_t at = 0; rc == 0 && at < numel; at += chunk) {
      size_t n = (size_t)(numel - at < chunk ? numel - at : chunk);
      if ((rc = cp_checkpoint_read(ck, (size_t)e, at * esz, tmp, n * esz)) == 0)
        rc = cp_convert_to_f32(buf + at, tmp, t->dtype, n);
    }
    free(tmp);
  }
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}
