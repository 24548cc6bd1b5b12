/* One tensor list over every supported weight layout (single or sharded; safetensors or
 * PyTorch zip). Sharded folders are cross-checked against their index. */
#include "ctxpatch/import/checkpoint.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/onnx_import.h"
#include "ctxpatch/formats/pytorch.h"
#include "ctxpatch/formats/safetensors.h"

typedef struct {
  char *name; /* relative to the folder */
  cp_st_file *st;
  cp_pt_file *pt;
  cp_gguf_file *gg;
  cp_onnx_import *ox; /* an ONNX graph's recovered tensors (ctxpatch/import/onnx_import.h) */
} shard;

typedef struct {
  size_t shard;
  size_t local;
  const cp_tensor *view;
} entry;

struct cp_checkpoint {
  cp_format format;
  char *dir;
  char *config_path;
  shard *shards;
  size_t n_shards;
  entry *entries;
  size_t n_entries;
  size_t *by_name; /* entry indices sorted by name */
  char **aux;
  size_t n_aux;
};

/* Files a conversion carries over beside the weights. */
static const char *const aux_names[] = {
    "added_tokens.json",     "config.json",     "generation_config.json", "merges.txt",
    "special_tokens_map.json", "spiece.model",  "tokenizer.json",         "tokenizer.model",
    "tokenizer_config.json", "vocab.json",      "vocab.txt",
};

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

/* 1 for a regular file, 0 for nothing there; a FIFO, device or folder where a file is expected
 * is refused rather than skipped, so it can neither hang a later open nor be silently ignored. */
static int probe_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return 1;
  return cp_error_set(CP_EFILETYPE, "%s: is a %s, expected a regular file", path, cp_file_type_name(st.st_mode));
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Zip archives start with a local file header; everything else is tried as safetensors,
 * except pickles (legacy torch.save, or a bare pickle.dump), which the PyTorch reader refuses
 * with advice on re-saving them. */
static bool looks_like_pytorch(const char *path) {
  unsigned char magic[4] = {0};
  FILE *fp = NULL;
  if (cp_fopen_input(&fp, path) < 0) return false; /* the reader reports it */
  size_t n = fread(magic, 1, 4, fp);
  fclose(fp);
  if (n >= 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4) return true;
  if (n >= 1 && magic[0] == 0x80) return true;
  return ends_with(path, ".bin") || ends_with(path, ".pt") || ends_with(path, ".pth");
}

static int open_shard(shard *s, const char *dir, const char *name, bool pytorch) {
  char *path = cp_path_join(dir, name);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(path, name);
  CP_CHECK_ALLOC_GOTO(s->name = strdup(name), name);
  rc = pytorch ? cp_pt_open(&s->pt, path) : cp_st_open(&s->st, path);
done:
  free(path);
  return rc;
}

static int build_entries(cp_checkpoint *ck);
static int open_lone(cp_checkpoint *ck, const char *path, const char *name, bool onnx, const cp_onnx_model *graph);

static size_t shard_count(const shard *s) {
  if (s->ox) return cp_onnx_import_count(s->ox);
  return s->st ? cp_st_count(s->st) : s->gg ? cp_gguf_count(s->gg) : cp_pt_count(s->pt);
}
static const cp_tensor *shard_tensor(const shard *s, size_t i) {
  if (s->ox) return cp_onnx_import_tensor(s->ox, i);
  return s->st ? cp_st_tensor(s->st, i) : s->gg ? cp_gguf_tensor(s->gg, i) : cp_pt_tensor(s->pt, i);
}

/* GGUF starts with "GGUF"; a .gguf name that does not is left to the GGUF reader to refuse. */
static bool looks_like_gguf(const char *path) {
  unsigned char magic[4] = {0};
  FILE *fp = NULL;
  if (cp_fopen_input(&fp, path) < 0) return false;
  size_t n = fread(magic, 1, 4, fp);
  fclose(fp);
  return (n == 4 && !memcmp(magic, "GGUF", 4)) || ends_with(path, ".gguf");
}

/* A single GGUF file, or an ONNX graph whose tensors are recovered by name (onnx_import.h). */
/* `graph`: the ONNX file already read (borrowed), or NULL. */
static int open_lone(cp_checkpoint *ck, const char *path, const char *name, bool onnx, const cp_onnx_model *graph) {
  CP_CHECK_ALLOC(ck->shards = calloc(1, sizeof *ck->shards), name);
  ck->n_shards = 1;
  CP_CHECK_ALLOC(ck->shards[0].name = strdup(name), name);
  int rc = onnx ? cp_onnx_import_open_graph(&ck->shards[0].ox, path, graph) : cp_gguf_open(&ck->shards[0].gg, path);
  return rc < 0 ? rc : build_entries(ck);
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

static long find_entry(const cp_checkpoint *ck, const char *name) {
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

static int build_entries(cp_checkpoint *ck) {
  size_t total = 0;
  for (size_t s = 0; s < ck->n_shards; s++) total += shard_count(&ck->shards[s]);
  CP_CHECK_ALLOC(ck->entries = calloc(total ? total : 1, sizeof *ck->entries), ck->dir);
  CP_CHECK_ALLOC(ck->by_name = calloc(total ? total : 1, sizeof *ck->by_name), ck->dir);
  for (size_t s = 0; s < ck->n_shards; s++)
    for (size_t i = 0; i < shard_count(&ck->shards[s]); i++)
      ck->entries[ck->n_entries++] = (entry){s, i, shard_tensor(&ck->shards[s], i)};
  named_index *sorted = malloc((total ? total : 1) * sizeof *sorted);
  CP_CHECK_ALLOC(sorted, ck->dir);
  for (size_t i = 0; i < total; i++) sorted[i] = (named_index){ck->entries[i].view->name, i};
  qsort(sorted, total, sizeof *sorted, cmp_by_name);
  for (size_t i = 0; i < total; i++) ck->by_name[i] = sorted[i].index;
  free(sorted);
  for (size_t i = 1; i < total; i++) {
    const entry *a = &ck->entries[ck->by_name[i - 1]], *b = &ck->entries[ck->by_name[i]];
    if (strcmp(a->view->name, b->view->name) == 0)
      return cp_error_set(CP_ECKPT_DUPLICATE, "%s: tensor '%s' appears in both %s and %s", ck->dir,
                          a->view->name, ck->shards[a->shard].name, ck->shards[b->shard].name);
  }
  return 0;
}

/* Every weight_map entry must name a tensor in that shard, and every tensor must be listed. */
static int check_index(cp_checkpoint *ck, const cp_st_index *idx, const char *index_name) {
  for (size_t i = 0; i < cp_st_index_count(idx); i++) {
    const char *name = cp_st_index_name(idx, i);
    long e = find_entry(ck, name);
    if (e < 0)
      return cp_error_set(CP_ECKPT_INDEX, "%s: weight_map entry '%s': no such tensor in %s", index_name, name,
                          cp_st_index_file(idx, i));
    if (cp_st_index_file_of(idx, i) != ck->entries[e].shard)
      return cp_error_set(CP_ECKPT_INDEX, "%s: weight_map entry '%s' names %s but the tensor is in %s",
                          index_name, name, cp_st_index_file(idx, i), ck->shards[ck->entries[e].shard].name);
  }
  if (cp_st_index_count(idx) != ck->n_entries)
    return cp_error_set(CP_ECKPT_INDEX, "%s: weight_map lists %zu tensors but the shards hold %zu", index_name,
                        cp_st_index_count(idx), ck->n_entries);
  return 0;
}

static int open_sharded(cp_checkpoint *ck, const char *index_path, bool pytorch) {
  cp_st_index *idx = NULL;
  int rc = cp_st_index_read(&idx, index_path);
  if (rc < 0) goto done;
  size_t n = cp_st_index_file_count(idx);
  if (n == 0) {
    rc = cp_error_set(CP_ECKPT_EMPTY, "%s: weight_map is empty", index_path);
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(ck->shards = calloc(n, sizeof *ck->shards), index_path);
  for (size_t j = 0; j < n; j++) {
    ck->n_shards = j + 1;
    if ((rc = open_shard(&ck->shards[j], ck->dir, cp_st_index_file_name(idx, j), pytorch)) < 0) goto done;
  }
  if ((rc = build_entries(ck)) < 0) goto done;
  rc = check_index(ck, idx, index_path);
done:
  cp_st_index_free(idx);
  return rc;
}

static int open_single(cp_checkpoint *ck, const char *name, bool pytorch) {
  CP_CHECK_ALLOC(ck->shards = calloc(1, sizeof *ck->shards), name);
  ck->n_shards = 1;
  int rc = open_shard(&ck->shards[0], ck->dir, name, pytorch);
  return rc < 0 ? rc : build_entries(ck);
}

/* A folder without the standard names: accept exactly one weight file. */
static int find_lone_weight_file(char **out, bool *pytorch, const char *dir) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return cp_error_set(CP_EIO, "%s: cannot list folder: %s", dir, strerror(errno));
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    bool st = ends_with(e->d_name, ".safetensors");
    bool pt = ends_with(e->d_name, ".bin") || ends_with(e->d_name, ".pt") || ends_with(e->d_name, ".pth");
    if (!st && !pt) continue;
    if (*out) {
      rc = cp_error_set(CP_ECKPT_AMBIGUOUS, "%s: several weight files (%s, %s) and no index", dir, *out,
                        e->d_name);
      break;
    }
    CP_CHECK_ALLOC_GOTO(*out = strdup(e->d_name), dir);
    *pytorch = pt;
  }
done:
  closedir(d);
  if (rc == 0 && !*out)
    rc = cp_error_set(CP_ECKPT_EMPTY, "%s: no weights (model.safetensors, pytorch_model.bin or an index)", dir);
  if (rc < 0) {
    free(*out);
    *out = NULL;
  }
  return rc;
}

static int open_folder(cp_checkpoint *ck) {
  /* Same preference as transformers: safetensors before PyTorch, index before single file. */
  static const struct {
    const char *name;
    bool index, pytorch;
    cp_format format;
  } layouts[] = {
      {"model.safetensors.index.json", true, false, CP_FORMAT_SAFETENSORS_SHARDED},
      {"model.safetensors", false, false, CP_FORMAT_SAFETENSORS},
      {"pytorch_model.bin.index.json", true, true, CP_FORMAT_PYTORCH_ZIP_SHARDED},
      {"pytorch_model.bin", false, true, CP_FORMAT_PYTORCH_ZIP},
  };
  for (size_t k = 0; k < sizeof layouts / sizeof *layouts; k++) {
    char *path = cp_path_join(ck->dir, layouts[k].name);
    CP_CHECK_ALLOC(path, ck->dir);
    int found = probe_file(path), rc = found < 0 ? found : 0;
    if (found > 0) {
      ck->format = layouts[k].format;
      rc = layouts[k].index ? open_sharded(ck, path, layouts[k].pytorch)
                            : open_single(ck, layouts[k].name, layouts[k].pytorch);
    }
    free(path);
    if (found) return rc;
  }
  char *name = NULL;
  bool pytorch = false;
  int rc = find_lone_weight_file(&name, &pytorch, ck->dir);
  if (rc == CP_ECKPT_EMPTY) { /* no weights: an ONNX export folder (or its onnx/) is read as its graph */
    char *graph = cp_onnx_export_graph(ck->dir);
    if (!graph) return rc;
    ck->format = CP_FORMAT_ONNX;
    const char *rel = graph + strlen(ck->dir);
    while (*rel == '/') rel++;
    rc = open_lone(ck, graph, rel, true, NULL);
    free(graph);
    return rc;
  }
  if (rc < 0) return rc;
  ck->format = pytorch ? CP_FORMAT_PYTORCH_ZIP : CP_FORMAT_SAFETENSORS;
  rc = open_single(ck, name, pytorch);
  free(name);
  return rc;
}

static int collect_aux(cp_checkpoint *ck) {
  size_t n = sizeof aux_names / sizeof *aux_names;
  CP_CHECK_ALLOC(ck->aux = calloc(n, sizeof *ck->aux), ck->dir);
  int rc = 0;
  char *path = NULL;
  for (size_t k = 0; k < n; k++) {
    free(path);
    CP_CHECK_ALLOC_GOTO(path = cp_path_join(ck->dir, aux_names[k]), ck->dir);
    int found = probe_file(path);
    if (found < 0) {
      rc = found;
      goto done;
    }
    if (!found) continue;
    if (!strcmp(aux_names[k], "config.json"))
      CP_CHECK_ALLOC_GOTO(ck->config_path = strdup(path), ck->dir);
    CP_CHECK_ALLOC_GOTO(ck->aux[ck->n_aux] = strdup(aux_names[k]), ck->dir);
    ck->n_aux++;
  }
done:
  free(path);
  return rc;
}

int cp_checkpoint_open(cp_checkpoint **out, const char *path) { return cp_checkpoint_open_onnx(out, path, NULL); }

int cp_checkpoint_open_onnx(cp_checkpoint **out, const char *path, const cp_onnx_model *graph) {
  *out = NULL;
  struct stat st;
  if (stat(path, &st) != 0)
    return cp_error_set(errno == ENOENT ? CP_ENOTFOUND : CP_EIO, "%s: %s", path, strerror(errno));
  if (graph && !S_ISREG(st.st_mode)) return cp_error_set(CP_EARG, "%s: not the file of the graph given", path);
  cp_checkpoint *ck = calloc(1, sizeof *ck);
  CP_CHECK_ALLOC(ck, path);
  int rc = 0;
  char *copy = NULL;
  if (S_ISDIR(st.st_mode)) {
    CP_CHECK_ALLOC_GOTO(ck->dir = strdup(path), path);
    if ((rc = open_folder(ck)) < 0) goto done;
    rc = collect_aux(ck);
    goto done;
  }
  /* A single file: its folder is the checkpoint's folder; no auxiliary files are implied. */
  CP_CHECK_ALLOC_GOTO(copy = strdup(path), path);
  char *slash = strrchr(copy, '/');
  const char *name = slash ? slash + 1 : copy;
  ck->dir = slash ? strndup(copy, (size_t)(slash - copy) ? (size_t)(slash - copy) : 1) : strdup(".");
  CP_CHECK_ALLOC_GOTO(ck->dir, path);
  if (!graph && looks_like_gguf(path)) {
    ck->format = CP_FORMAT_GGUF;
    rc = open_lone(ck, path, name, false, NULL);
  } else if (ends_with(name, ".onnx") || graph) {
    ck->format = CP_FORMAT_ONNX;
    rc = open_lone(ck, path, name, true, graph);
  } else if (ends_with(name, ".index.json")) {
    bool pytorch = strstr(name, ".safetensors.") == NULL;
    ck->format = pytorch ? CP_FORMAT_PYTORCH_ZIP_SHARDED : CP_FORMAT_SAFETENSORS_SHARDED;
    rc = open_sharded(ck, path, pytorch);
  } else {
    bool pytorch = looks_like_pytorch(path);
    ck->format = pytorch ? CP_FORMAT_PYTORCH_ZIP : CP_FORMAT_SAFETENSORS;
    rc = open_single(ck, name, pytorch);
  }
done:
  free(copy);
  if (rc < 0) {
    cp_checkpoint_free(ck);
    return rc;
  }
  *out = ck;
  return 0;
}

void cp_checkpoint_free(cp_checkpoint *ck) {
  if (!ck) return;
  for (size_t s = 0; s < ck->n_shards; s++) {
    cp_st_free(ck->shards[s].st);
    cp_pt_free(ck->shards[s].pt);
    cp_gguf_free(ck->shards[s].gg);
    cp_onnx_import_free(ck->shards[s].ox);
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
  return ck->format == CP_FORMAT_GGUF ? ck->shards[0].gg : NULL;
}
const cp_onnx_import *cp_checkpoint_onnx(const cp_checkpoint *ck) {
  return ck->format == CP_FORMAT_ONNX ? ck->shards[0].ox : NULL;
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
  long e = find_entry(ck, name);
  return e < 0 ? NULL : ck->entries[e].view;
}
size_t cp_checkpoint_aux_count(const cp_checkpoint *ck) { return ck->n_aux; }
const char *cp_checkpoint_aux(const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_aux);
  return ck->aux[i];
}

int cp_checkpoint_read(cp_checkpoint *ck, size_t i, uint64_t offset, void *buf, size_t len) {
  assert(i < ck->n_entries);
  const entry *e = &ck->entries[i];
  uint64_t end;
  if (!cp_add_u64(&end, offset, len) || end > e->view->nbytes)
    return cp_error_set(CP_EARG, "%s: read of bytes [%llu, +%zu) past tensor '%s' (%llu bytes)", ck->dir,
                        (unsigned long long)offset, len, e->view->name, (unsigned long long)e->view->nbytes);
  if (e->view->data) {
    memcpy(buf, (const char *)e->view->data + offset, len);
    return 0;
  }
  const shard *s = &ck->shards[e->shard];
  if (s->gg) return cp_gguf_read(s->gg, e->local, offset, buf, len); /* dequantised on read */
  assert(s->pt); /* safetensors views are always mapped */
  return cp_pt_read(s->pt, e->local, offset, buf, len);
}

int cp_checkpoint_source(int *fd, uint64_t *offset, const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_entries);
  const entry *e = &ck->entries[i];
  const shard *s = &ck->shards[e->shard];
  *fd = -1;
  *offset = 0;
  if (!e->view->data) return -1;
  if (s->st && cp_st_fd(s->st) >= 0) {
    *offset = (uint64_t)((const unsigned char *)e->view->data - (const unsigned char *)cp_st_map_base(s->st));
    *fd = cp_st_fd(s->st);
  } else if (s->pt && cp_pt_fd(s->pt) >= 0 && cp_pt_tensor_file_offset(s->pt, e->local) >= 0) {
    *offset = (uint64_t)cp_pt_tensor_file_offset(s->pt, e->local);
    *fd = cp_pt_fd(s->pt);
  }
  return *fd >= 0 ? 0 : -1;
}

const void *cp_checkpoint_blocks(cp_dtype *dtype, const cp_checkpoint *ck, size_t i) {
  assert(i < ck->n_entries);
  const entry *e = &ck->entries[i];
  const shard *s = &ck->shards[e->shard];
  return s->gg && !e->view->data ? cp_gguf_tensor_blocks(dtype, s->gg, e->local) : NULL;
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
  long e = find_entry(ck, name);
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
  if (!buf) return cp_error_set(CP_ENOMEM, "%s: out of memory for tensor '%s'", ck->dir, name);
  if (t->data) {
    rc = cp_convert_to_f32(buf, t->data, t->dtype, numel);
  } else {
    /* unmapped (strided or compressed) tensors: read in chunks and widen */
    size_t esz = cp_dtype_size(t->dtype), chunk = (1u << 20) / esz;
    unsigned char *tmp = malloc(chunk * esz);
    if (!tmp) rc = cp_error_set(CP_ENOMEM, "%s: out of memory", ck->dir);
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
