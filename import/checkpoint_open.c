/* Opening a checkpoint (include/ctxpatch/import/checkpoint.h): which files hold the weights
 * (single or sharded; safetensors, PyTorch zip, GGUF, an ONNX graph) and each format's ops table
 * (import/checkpoint_int.h). Sharded folders are cross-checked against their index. */
#include "import/checkpoint_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/onnx_import.h"
#include "ctxpatch/formats/pytorch.h"
#include "ctxpatch/formats/safetensors.h"

/* Files a conversion carries over beside the weights. */
static const char *const aux_names[] = {
    "added_tokens.json",
    "config.json",
    "generation_config.json",
    "merges.txt",
    "special_tokens_map.json",
    "spiece.model",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "vocab.json",
    "vocab.txt",
};

/* ------------------------------------------------------------ one ops table per format */

static size_t st_count(const void *f) { return cp_st_count(f); }
static const cp_tensor *st_tensor(const void *f, size_t i) { return cp_st_tensor(f, i); }
static int st_fd(uint64_t *offset, const void *f, size_t i, const cp_tensor *view) {
  (void)i;
  if (cp_st_fd(f) < 0) return -1;
  *offset = (uint64_t)((const unsigned char *)view->data - (const unsigned char *)cp_st_map_base(f));
  return cp_st_fd(f);
}
static void st_close(void *f) { cp_st_free(f); }
static const cp_ckpt_ops k_safetensors = {st_count, st_tensor, NULL, st_fd, NULL, st_close};

static size_t pt_count(const void *f) { return cp_pt_count(f); }
static const cp_tensor *pt_tensor(const void *f, size_t i) { return cp_pt_tensor(f, i); }
static int pt_read(void *f, size_t i, uint64_t offset, void *buf, size_t len) {
  return cp_pt_read(f, i, offset, buf, len);
}
static int pt_fd(uint64_t *offset, const void *f, size_t i, const cp_tensor *view) {
  (void)view;
  if (cp_pt_fd(f) < 0 || cp_pt_tensor_file_offset(f, i) < 0) return -1;
  *offset = (uint64_t)cp_pt_tensor_file_offset(f, i);
  return cp_pt_fd(f);
}
static void pt_close(void *f) { cp_pt_free(f); }
static const cp_ckpt_ops k_pytorch = {pt_count, pt_tensor, pt_read, pt_fd, NULL, pt_close};

static size_t gguf_count(const void *f) { return cp_gguf_count(f); }
static const cp_tensor *gguf_tensor(const void *f, size_t i) { return cp_gguf_tensor(f, i); }
static int gguf_read(void *f, size_t i, uint64_t offset, void *buf, size_t len) {
  return cp_gguf_read(f, i, offset, buf, len); /* dequantised on read */
}
static const void *gguf_blocks(cp_dtype *dtype, const void *f, size_t i) { return cp_gguf_tensor_blocks(dtype, f, i); }
static void gguf_close(void *f) { cp_gguf_free(f); }
static const cp_ckpt_ops k_gguf = {gguf_count, gguf_tensor, gguf_read, NULL, gguf_blocks, gguf_close};

static size_t onnx_count(const void *f) { return cp_onnx_import_count(f); }
static const cp_tensor *onnx_tensor(const void *f, size_t i) { return cp_onnx_import_tensor(f, i); }
static void onnx_close(void *f) { cp_onnx_import_free(f); }
static const cp_ckpt_ops k_onnx = {onnx_count, onnx_tensor, NULL, NULL, NULL, onnx_close};

/* Each opener sets the shard's ops only once the file is open, so a failed open closes nothing. */
static int open_safetensors(cp_ckpt_shard *s, const char *path) {
  cp_st_file *f = NULL;
  int rc = cp_st_open(&f, path);
  if (rc == 0) *s = (cp_ckpt_shard){s->name, &k_safetensors, f};
  return rc;
}
static int open_pytorch(cp_ckpt_shard *s, const char *path) {
  cp_pt_file *f = NULL;
  int rc = cp_pt_open(&f, path);
  if (rc == 0) *s = (cp_ckpt_shard){s->name, &k_pytorch, f};
  return rc;
}
static int open_gguf(cp_ckpt_shard *s, const char *path) {
  cp_gguf_file *f = NULL;
  int rc = cp_gguf_open(&f, path);
  if (rc == 0) *s = (cp_ckpt_shard){s->name, &k_gguf, f};
  return rc;
}
/* `graph`: the ONNX file already read (borrowed), or NULL. */
static int open_onnx(cp_ckpt_shard *s, const char *path, const cp_onnx_model *graph) {
  cp_onnx_import *f = NULL;
  int rc = cp_onnx_import_open_graph(&f, path, graph);
  if (rc == 0) *s = (cp_ckpt_shard){s->name, &k_onnx, f};
  return rc;
}

/* 1 for a regular file, 0 for nothing there; a FIFO, device or folder where a file is expected
 * is refused rather than skipped, so it can neither hang a later open nor be silently ignored. */
static int probe_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISREG(st.st_mode)) return 1;
  return cp_error_set(CP_EFILETYPE, "%s: is a %s, expected a regular file", path, cp_file_type_name(st.st_mode));
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
  return cp_path_has_suffix(path, ".bin") || cp_path_has_suffix(path, ".pt") || cp_path_has_suffix(path, ".pth");
}

static int open_shard(cp_ckpt_shard *s, const char *dir, const char *name, bool pytorch) {
  char *path = cp_path_join(dir, name);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(path, name);
  CP_CHECK_ALLOC_GOTO(s->name = strdup(name), name);
  rc = pytorch ? open_pytorch(s, path) : open_safetensors(s, path);
done:
  free(path);
  return rc;
}

static int open_lone(cp_checkpoint *ck, const char *path, const char *name, bool onnx, const cp_onnx_model *graph);

/* GGUF starts with "GGUF"; a .gguf name that does not is left to the GGUF reader to refuse. */
static bool looks_like_gguf(const char *path) {
  unsigned char magic[4] = {0};
  FILE *fp = NULL;
  if (cp_fopen_input(&fp, path) < 0) return false;
  size_t n = fread(magic, 1, 4, fp);
  fclose(fp);
  return (n == 4 && !memcmp(magic, "GGUF", 4)) || cp_path_has_suffix(path, ".gguf");
}

/* A single GGUF file, or an ONNX graph whose tensors are recovered by name (onnx_import.h). */
/* `graph`: the ONNX file already read (borrowed), or NULL. */
static int open_lone(cp_checkpoint *ck, const char *path, const char *name, bool onnx, const cp_onnx_model *graph) {
  CP_CHECK_ALLOC(ck->shards = calloc(1, sizeof *ck->shards), name);
  ck->n_shards = 1;
  CP_CHECK_ALLOC(ck->shards[0].name = strdup(name), name);
  int rc = onnx ? open_onnx(&ck->shards[0], path, graph) : open_gguf(&ck->shards[0], path);
  return rc < 0 ? rc : cp_ckpt_build_entries(ck);
}

/* Every weight_map entry must name a tensor in that shard, and every tensor must be listed. */
static int check_index(cp_checkpoint *ck, const cp_st_index *idx, const char *index_name) {
  for (size_t i = 0; i < cp_st_index_count(idx); i++) {
    const char *name = cp_st_index_name(idx, i);
    long e = cp_ckpt_find_entry(ck, name);
    if (e < 0)
      return cp_error_set(CP_ECKPT_INDEX, "%s: weight_map entry '%s': no such tensor in %s", index_name, name,
                          cp_st_index_file(idx, i));
    if (cp_st_index_file_of(idx, i) != ck->entries[e].shard)
      return cp_error_set(CP_ECKPT_INDEX, "%s: weight_map entry '%s' names %s but the tensor is in %s", index_name,
                          name, cp_st_index_file(idx, i), ck->shards[ck->entries[e].shard].name);
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
  if ((rc = cp_ckpt_build_entries(ck)) < 0) goto done;
  rc = check_index(ck, idx, index_path);
done:
  cp_st_index_free(idx);
  return rc;
}

static int open_single(cp_checkpoint *ck, const char *name, bool pytorch) {
  CP_CHECK_ALLOC(ck->shards = calloc(1, sizeof *ck->shards), name);
  ck->n_shards = 1;
  int rc = open_shard(&ck->shards[0], ck->dir, name, pytorch);
  return rc < 0 ? rc : cp_ckpt_build_entries(ck);
}

/* A folder without the standard names: accept exactly one weight file. */
static int find_lone_weight_file(char **out, bool *pytorch, const char *dir) {
  *out = NULL;
  DIR *d = opendir(dir);
  if (!d) return cp_error_set(CP_EIO, "%s: cannot list folder: %s", dir, strerror(errno));
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    bool st = cp_path_has_suffix(e->d_name, ".safetensors");
    bool pt = cp_path_has_suffix(e->d_name, ".bin") || cp_path_has_suffix(e->d_name, ".pt") ||
              cp_path_has_suffix(e->d_name, ".pth");
    if (!st && !pt) continue;
    if (*out) {
      rc = cp_error_set(CP_ECKPT_AMBIGUOUS, "%s: several weight files (%s, %s) and no index", dir, *out, e->d_name);
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
    if (!strcmp(aux_names[k], "config.json")) CP_CHECK_ALLOC_GOTO(ck->config_path = strdup(path), ck->dir);
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
  } else if (cp_path_has_suffix(name, ".onnx") || graph) {
    ck->format = CP_FORMAT_ONNX;
    rc = open_lone(ck, path, name, true, graph);
  } else if (cp_path_has_suffix(name, ".index.json")) {
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
