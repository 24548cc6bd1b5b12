/* Floor: export. One streaming writer of HF safetensors folders (shards, index, auxiliary
 * files, digests for the manifest), used by `convert` and by the bake; and `convert` itself. */
#include "ctxpatch/export/convert.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/formats/safetensors.h"
#include "ctxpatch/export/gguf_export.h"
#include "ctxpatch/import/gguf_model.h"
#include "export/gguf/gguf_names.h"

#define MANIFEST_NAME "SHA256SUMS"
#define DEFAULT_CHUNK ((uint64_t)16 << 20)

void cp_convert_params_init(cp_convert_params *params) {
  memset(params, 0, sizeof *params);
  params->chunk_size = DEFAULT_CHUNK;
}

void cp_folder_result_free(cp_folder_result *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_files; i++) free(r->files[i].name);
  free(r->files);
  free(r->mark_at);
  memset(r, 0, sizeof *r);
}

/* Records the digest of a file just written, so the manifest needs no second read. */
int cp_folder_result_add(cp_folder_result *r, const char *name, const char hex[65]) {
  int rc = CP_ARRAY_RESERVE(r->files, r->cap_files, r->n_files + 1, name);
  if (rc < 0) return rc;
  char *copy = strdup(name);
  CP_CHECK_ALLOC(copy, name);
  r->files[r->n_files].name = copy;
  memcpy(r->files[r->n_files++].hex, hex, 65);
  return 0;
}

static int copy_file(char out_hex[65], const char *src, const char *dst) {
  return cp_copy_file_atomic(out_hex, dst, src, (size_t)1 << 30);
}

/* Writes rows [0, rows) of `data` (row_bytes each) in HF order: row s is data row
 * cp_gguf_row_to_gguf(order, s). */
static int write_rows(cp_st_writer *w, const unsigned char *data, uint64_t rows, size_t row_bytes,
                      const cp_gguf_rows *order) {
  int rc = 0;
  for (uint64_t s = 0; s < rows && rc == 0; s++)
    rc = cp_st_writer_write(w, data + cp_gguf_row_to_gguf(order, s) * row_bytes, row_bytes);
  return rc;
}

/* Rows of tensor t: its first dimension (1 for scalars). */
static uint64_t rows_of(const cp_tensor *t) { return t->ndim > 0 && t->shape[0] > 0 ? (uint64_t)t->shape[0] : 1; }

/* Writes matrix `data` [rows, cols] (elements of es bytes) transposed, one output row at a time. */
static int write_transposed(cp_st_writer *w, const unsigned char *data, uint64_t rows, uint64_t cols, size_t es,
                            unsigned char *row_buf /* [rows * es] */) {
  int rc = 0;
  for (uint64_t c = 0; c < cols && rc == 0; c++) {
    for (uint64_t r = 0; r < rows; r++) memcpy(row_buf + r * es, data + (r * cols + c) * es, es);
    rc = cp_st_writer_write(w, row_buf, (size_t)(rows * es));
  }
  return rc;
}

/* A tensor the hook replaces (hook NULL: none), a GGUF matrix HF stores transposed (`transpose`,
 * GPT-2's Conv1D) or a GGUF Gemma norm holding 1 + w (`minus_one`: float32, cp_gguf_hf_names): its
 * stored bytes read whole, transformed, written (rows put back in HF order when `order` is given:
 * a GGUF tensor in llama.cpp's row order). */
static int write_transformed(cp_st_writer *w, cp_checkpoint *ck, size_t src, const cp_tensor_hook *hook,
                             const cp_gguf_rows *order, bool transpose, bool minus_one) {
  const cp_tensor *t = cp_checkpoint_tensor(ck, src);
  size_t n = (size_t)t->nbytes;
  unsigned char *in = NULL, *out = hook ? malloc(n ? n : 1) : NULL, *row_buf = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(out || !hook, t->name);
  if (!t->data || !hook) {
    CP_CHECK_ALLOC_GOTO(in = malloc(n ? n : 1), t->name);
    if ((rc = cp_checkpoint_read(ck, src, 0, in, n)) < 0) goto done;
  }
  if (hook && (rc = hook->transform(hook->ctx, t, t->data ? t->data : in, out)) < 0) goto done;
  unsigned char *res = hook ? out : in;
  for (size_t k = 0; minus_one && k < n / sizeof(float); k++) {
    float v;
    memcpy(&v, res + k * sizeof v, sizeof v);
    v -= 1.0f;
    memcpy(res + k * sizeof v, &v, sizeof v);
  }
  if (transpose) { /* 2-D, [rows, cols] as stored (cp_gguf_hf_names_make checked) */
    uint64_t rows = (uint64_t)t->shape[0], cols = (uint64_t)t->shape[1];
    size_t es = rows && cols ? (size_t)(n / (rows * cols)) : 1;
    CP_CHECK_ALLOC_GOTO(row_buf = malloc(rows > 0 ? (size_t)(rows * es) : 1), t->name);
    rc = write_transposed(w, res, rows, cols, es, row_buf);
  } else {
    rc = order ? write_rows(w, res, rows_of(t), n / rows_of(t), order) : cp_st_writer_write(w, res, n);
  }
  cp_checkpoint_release(ck, src, 0, n);
done:
  free(in);
  free(out);
  free(row_buf);
  return rc;
}

/* Copies one tensor's bytes through in chunks, dropping the input pages already copied; a GGUF
 * tensor in llama.cpp's row order (`order`) row by row in HF order. */
static int write_streamed(cp_st_writer *w, cp_checkpoint *ck, size_t src, uint64_t chunk, unsigned char *buf,
                          const cp_gguf_rows *order) {
  const cp_tensor *t = cp_checkpoint_tensor(ck, src);
  int rc = 0;
  if (order) {
    uint64_t rows = rows_of(t), row_bytes = t->nbytes / rows;
    for (uint64_t s = 0; s < rows && rc == 0; s++) {
      uint64_t at = cp_gguf_row_to_gguf(order, s) * row_bytes;
      if (row_bytes > chunk) return cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': rows longer than the copy chunk",
                                                 cp_checkpoint_dir(ck), t->name);
      if ((rc = cp_checkpoint_read(ck, src, at, buf, (size_t)row_bytes)) == 0) rc = cp_st_writer_write(w, buf, (size_t)row_bytes);
    }
    return rc;
  }
  int fd = -1;
  uint64_t file_off = 0;
  if (t->data) cp_checkpoint_source(&fd, &file_off, ck, src);
  for (uint64_t at = 0; at < t->nbytes && rc == 0; at += chunk) {
    size_t len = (size_t)(t->nbytes - at < chunk ? t->nbytes - at : chunk);
    if (t->data && len >= CP_ST_WRITE_MAPPED_MIN) {
      /* the kernel copies, the hash thread hashes from the mapping and then drops its pages */
      rc = cp_st_writer_write_mapped(w, (const char *)t->data + at, len, fd, file_off + at, 1);
    } else if (t->data) {
      rc = cp_st_writer_write(w, (const char *)t->data + at, len);
      cp_checkpoint_release(ck, src, at, len);
    } else if ((rc = cp_checkpoint_read(ck, src, at, buf, len)) == 0) {
      rc = cp_st_writer_write(w, buf, len);
    }
  }
  return rc;
}

/* Tensor i as the folder names it: under its HF name when the input is GGUF (`names`). */
static cp_tensor desc_of(const cp_checkpoint *ck, size_t i, const cp_gguf_hf_names *names) {
  cp_tensor t = *cp_checkpoint_tensor(ck, i);
  if (names->hf && names->hf[i]) t.name = names->hf[i];
  if (names->transpose && names->transpose[i]) { /* 2-D (cp_gguf_hf_names_make) */
    t.shape[0] = cp_checkpoint_tensor(ck, i)->shape[1];
    t.shape[1] = cp_checkpoint_tensor(ck, i)->shape[0];
  }
  return t;
}

/* Streams one shard: the writer fixes the byte order, the checkpoint supplies the bytes. */
static int write_shard(char out_hex[65], uint64_t *mark_at, cp_checkpoint *ck, const char *path,
                       const size_t *members, size_t n, const cp_folder_params *p, uint64_t chunk,
                       unsigned char *buf, const cp_gguf_hf_names *names, int64_t *done_tensors, int64_t total) {
  static const char *const pt[] = {"format", "pt"};
  cp_tensor *descs = calloc(n ? n : 1, sizeof *descs);
  cp_st_writer *w = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(descs, path);
  for (size_t k = 0; k < n; k++) descs[k] = desc_of(ck, members[k], names);
  if ((rc = cp_st_writer_open(&w, path, descs, n, p->meta_kv ? p->meta_kv : pt, p->meta_kv ? p->n_meta : 1)) < 0)
    goto done;
  if (p->mark_key && (rc = cp_st_writer_meta_offset(mark_at, w, p->mark_key, p->mark_pos)) < 0) goto done;
  for (size_t k = 0; k < n; k++) {
    size_t src = members[cp_st_writer_order(w, k)];
    const cp_tensor *t = cp_checkpoint_tensor(ck, src);
    const cp_gguf_rows *order = names->rows && names->rows[src].order != CP_GGUF_ROWS_SAME ? &names->rows[src] : NULL;
    bool hooked = p->hook && p->hook->wants(p->hook->ctx, t);
    bool transpose = names->transpose && names->transpose[src], minus_one = names->plus_one && names->plus_one[src];
    if (hooked || transpose || minus_one)
      rc = write_transformed(w, ck, src, hooked ? p->hook : NULL, order, transpose, minus_one);
    else rc = write_streamed(w, ck, src, chunk, buf, order);
    if (rc < 0) goto done;
    if (p->progress) p->progress(p->progress_ctx, ++*done_tensors, total);
  }
  if ((rc = cp_st_writer_sha256(w, out_hex)) < 0) goto done;
  rc = cp_st_writer_commit(w);
  w = NULL;
done:
  cp_st_writer_abort(w);
  free(descs);
  return rc;
}

int cp_folder_copy_aux(cp_folder_result *r, const char *dir, const cp_checkpoint *ck, const cp_folder_params *p) {
  char *src = NULL, *dst = NULL, hex[65];
  int rc = 0;
  for (size_t k = 0; k < cp_checkpoint_aux_count(ck) && rc == 0; k++) {
    const char *name = cp_checkpoint_aux(ck, k);
    if (p->skip_aux && !strcmp(name, p->skip_aux)) continue;
    free(src);
    free(dst);
    src = cp_path_join(cp_checkpoint_dir(ck), name);
    dst = cp_path_join(dir, name);
    CP_CHECK_ALLOC_GOTO(src && dst, dir);
    if ((rc = copy_file(hex, src, dst)) == 0) rc = cp_folder_result_add(r, name, hex);
  }
done:
  free(src);
  free(dst);
  return rc;
}

/* Shards written by a team of threads: each takes the next shard not yet taken and records its
 * digest and mark at the shard's index, so the manifest (filled in shard order afterwards) and the
 * bytes are the same whatever the number of threads. */
typedef struct {
  pthread_mutex_t mu; /* guards next, failed, done_tensors and the progress callback */
  size_t next;
  int failed;                           /* first error's code (0: none) */
  char message[1024];                   /* and its message, from the thread that hit it */
  cp_checkpoint *ck;
  const char *dir;
  const cp_st_shard_plan *plan;
  const cp_folder_params *p;
  const cp_gguf_hf_names *names;
  const size_t *src;                    /* checkpoint index of each planned tensor */
  size_t n;                             /* planned tensors */
  uint64_t chunk;
  char (*hex)[65];                      /* [n_shards] */
  uint64_t *mark_at;                    /* [n_shards] */
  int64_t done_tensors, total;
} shard_team;

/* Progress through the team's lock (write_shard reports to this instead of the caller). */
static void team_progress(void *ctx, int64_t done, int64_t total) {
  shard_team *t = ctx;
  pthread_mutex_lock(&t->mu);
  (void)done;
  (void)total;
  t->done_tensors++;
  if (t->p->progress) t->p->progress(t->p->progress_ctx, t->done_tensors, t->total);
  pthread_mutex_unlock(&t->mu);
}

/* Writes shards until none is left or one failed; 0 or the first negative code it met. */
static int team_run(shard_team *t) {
  size_t n = t->n;
  size_t *members = calloc(n ? n : 1, sizeof *members);
  unsigned char *buf = malloc((size_t)t->chunk);
  char *path = NULL;
  int rc = 0;
  int64_t ignored = 0;
  cp_folder_params p = *t->p;
  p.progress = team_progress;
  p.progress_ctx = t;
  CP_CHECK_ALLOC_GOTO(members && buf, t->dir);
  for (;;) {
    pthread_mutex_lock(&t->mu);
    size_t s = t->failed ? t->plan->n_shards : t->next++;
    pthread_mutex_unlock(&t->mu);
    if (s >= t->plan->n_shards) break;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (t->plan->shard_of[i] == s) members[m++] = t->src[i];
    free(path);
    CP_CHECK_ALLOC_GOTO(path = cp_path_join(t->dir, t->plan->shard_names[s]), t->dir);
    if ((rc = write_shard(t->hex[s], &t->mark_at[s], t->ck, path, members, m, &p, t->chunk, buf, t->names, &ignored,
                          t->total)) < 0)
      goto done;
  }
done:
  if (rc < 0) {
    pthread_mutex_lock(&t->mu);
    if (!t->failed) {
      t->failed = rc;
      snprintf(t->message, sizeof t->message, "%s", cp_error_message());
    }
    pthread_mutex_unlock(&t->mu);
  }
  free(members);
  free(buf);
  free(path);
  return rc;
}

static void *team_worker(void *arg) {
  team_run(arg);
  return NULL;
}

/* Threads for the shards: the caller's number, else one per online core; never more than the
 * shards, and 1 when a tensor's bytes come through a reader that is not thread-safe (compressed
 * or strided PyTorch records, GGUF dequantisation: they are read into a cache) or the hook is not. */
static unsigned team_size(const cp_checkpoint *ck, const cp_folder_params *p, size_t n_shards) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned k = p->threads ? p->threads : cores > 0 ? (unsigned)cores : 1;
  if (k > n_shards) k = (unsigned)n_shards;
  if (p->hook && !p->hook->thread_safe) return 1;
  for (size_t i = 0; k > 1 && i < cp_checkpoint_count(ck); i++)
    if (!cp_checkpoint_tensor(ck, i)->data) return 1;
  return k ? k : 1;
}

/* Writes every shard of the plan with `k` threads (this one among them). */
static int write_shards(cp_folder_result *out, shard_team *t, unsigned k) {
  pthread_t *tid = calloc(k, sizeof *tid);
  unsigned started = 0;
  CP_CHECK_ALLOC(tid, t->dir);
  while (started + 1 < k && pthread_create(&tid[started], NULL, team_worker, t) == 0) started++;
  team_run(t); /* this thread is one of the team (the only one when no thread could start) */
  for (unsigned i = 0; i < started; i++) pthread_join(tid[i], NULL);
  free(tid);
  if (t->failed) return cp_error_set(t->failed, "%s", t->message);
  for (size_t s = 0; s < t->plan->n_shards; s++) {
    int rc = cp_folder_result_add(out, t->plan->shard_names[s], t->hex[s]);
    if (rc < 0) return rc;
  }
  return 0;
}

int cp_folder_write(cp_folder_result *out, const char *dir, cp_checkpoint *ck, const cp_folder_params *p) {
  memset(out, 0, sizeof *out);
  size_t n = cp_checkpoint_count(ck);
  cp_st_shard_plan *plan = NULL;
  cp_tensor *descs = calloc(n ? n : 1, sizeof *descs);
  size_t *src = calloc(n ? n : 1, sizeof *src), kept = 0;
  char *path = NULL;
  char (*hex)[65] = NULL;
  cp_gguf_hf_names names = {0};
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(descs && src, dir);
  /* A GGUF input is written as an HF folder: HF names, rows back in HF order; a tensor with no
   * HF name is config there (cp_gguf_hf_names_make refused any other), not a tensor. */
  if (cp_checkpoint_gguf(ck) && (rc = cp_gguf_hf_names_make(&names, ck))) goto done;
  for (size_t i = 0; i < n; i++) {
    if (cp_checkpoint_gguf(ck) && !names.hf[i]) continue;
    src[kept] = i;
    descs[kept++] = desc_of(ck, i, &names);
  }
  n = kept;
  if ((rc = cp_st_plan_shards(&plan, descs, n, p->shard_size ? p->shard_size : UINT64_MAX)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(out->mark_at = calloc(plan->n_shards ? plan->n_shards : 1, sizeof *out->mark_at), dir);
  CP_CHECK_ALLOC_GOTO(hex = calloc(plan->n_shards ? plan->n_shards : 1, sizeof *hex), dir);
  shard_team team = {.ck = ck, .dir = dir, .plan = plan, .p = p, .names = &names, .src = src, .n = n,
                     .chunk = p->chunk_size ? p->chunk_size : DEFAULT_CHUNK, .hex = hex, .mark_at = out->mark_at,
                     .total = (int64_t)n};
  pthread_mutex_init(&team.mu, NULL);
  rc = write_shards(out, &team, team_size(ck, p, plan->n_shards));
  pthread_mutex_destroy(&team.mu);
  if (rc < 0) goto done;
  if (plan->n_shards > 1) {
    CP_CHECK_ALLOC_GOTO(path = cp_path_join(dir, "model.safetensors.index.json"), dir);
    if ((rc = cp_st_index_write_plan(path, plan, descs)) < 0) goto done;
  }
  if ((rc = cp_folder_copy_aux(out, dir, ck, p)) < 0) goto done;
  out->stats = (cp_convert_stats){n, plan->total_size, plan->n_shards, cp_checkpoint_aux_count(ck)};
done:
  cp_gguf_hf_names_free(&names);
  cp_st_shard_plan_free(plan);
  free(src);
  free(descs);
  free(hex);
  free(path);
  return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Appends the regular files of dir/sub (sub "" for dir itself; hidden names skipped) as "sub/name",
 * and for sub "" the files one folder down too (an ONNX export's onnx/). */
static int list_into(char ***names, size_t *n, size_t *cap, const char *dir, const char *sub) {
  char *path = sub[0] ? cp_path_join(dir, sub) : strdup(dir);
  CP_CHECK_ALLOC(path, dir);
  DIR *d = opendir(path);
  int rc = 0;
  if (!d) {
    rc = cp_error_set(CP_EIO, "%s: cannot list folder: %s", path, strerror(errno));
    free(path);
    return rc;
  }
  struct dirent *e;
  while ((e = readdir(d)) && rc == 0) {
    if (e->d_name[0] == '.' || (!sub[0] && !strcmp(e->d_name, MANIFEST_NAME))) continue;
    struct stat st;
    char *full = cp_path_join(path, e->d_name), *rel = sub[0] ? cp_path_join(sub, e->d_name) : strdup(e->d_name);
    CP_CHECK_ALLOC_GOTO(full && rel, dir);
    if (lstat(full, &st) == 0 && S_ISDIR(st.st_mode) && !sub[0]) rc = list_into(names, n, cap, dir, rel);
    else if ((rc = cp_array_reserve(names, cap, *n + 1, sizeof **names, dir)) == 0) (*names)[(*n)++] = rel, rel = NULL;
  done:
    free(full);
    free(rel);
  }
  closedir(d);
  free(path);
  return rc;
}

/* The regular files of `dir` (and of its subfolders) but the manifest, sorted by relative path
 * (caller frees names and the array). */
static int list_files(char ***out, size_t *n_out, const char *dir) {
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = list_into(&names, &n, &cap, dir, "");
  qsort(names, n, sizeof *names, cmp_str);
  *out = names;
  *n_out = n;
  return rc;
}

int cp_write_sha256_manifest(const char *dir, const cp_file_digest *known, size_t n_known) {
  char **names = NULL;
  size_t n = 0;
  cp_atomic_file *f = NULL;
  char *path = NULL, *manifest = NULL;
  int rc = list_files(&names, &n, dir);
  if (rc < 0) goto done;
  CP_CHECK_ALLOC_GOTO(manifest = cp_path_join(dir, MANIFEST_NAME), dir);
  if ((rc = cp_atomic_open(&f, manifest)) < 0) goto done;
  for (size_t k = 0; k < n; k++) {
    char hex[65], line[4200];
    size_t j = 0;
    while (j < n_known && strcmp(known[j].name, names[k]) != 0) j++;
    if (j < n_known) {
      memcpy(hex, known[j].hex, 65);
    } else {
      free(path);
      CP_CHECK_ALLOC_GOTO(path = cp_path_join(dir, names[k]), dir);
      if ((rc = cp_sha256_file(hex, path)) < 0) goto done;
    }
    int len = snprintf(line, sizeof line, "%s  %s\n", hex, names[k]);
    if ((rc = cp_atomic_write(f, line, (size_t)len)) < 0) goto done;
  }
  rc = cp_atomic_commit(f);
  f = NULL;
done:
  cp_atomic_abort(f);
  for (size_t k = 0; k < n; k++) free(names[k]);
  free(names);
  free(path);
  free(manifest);
  return rc;
}

static bool has_config(const char *dir) {
  char *path = cp_path_join(dir, "config.json");
  struct stat st;
  bool yes = path && stat(path, &st) == 0;
  free(path);
  return yes;
}

/* A GGUF input's metadata (or an ONNX graph's recovered config) as the folder's config.json (the
 * config cp_checkpoint_config reads). */
static int write_gguf_config(const char *dir, const cp_checkpoint *ck, const char *in) {
  cp_hf_config *cfg = NULL;
  char *path = cp_path_join(dir, "config.json");
  int rc = path ? cp_checkpoint_config(&cfg, ck, in) : cp_nomem("%s", dir);
  if (rc == 0) rc = cp_write_file_atomic(NULL, path, cfg->text, cfg->text_len);
  cp_hf_config_free(cfg);
  free(path);
  return rc;
}

int cp_convert_to_safetensors(cp_convert_stats *stats, const char *in, const char *out,
                              const cp_convert_params *params) {
  cp_convert_params defaults;
  if (!params) {
    cp_convert_params_init(&defaults);
    params = &defaults;
  }
  cp_checkpoint *ck = NULL;
  cp_atomic_dir *dir = NULL;
  cp_folder_result written = {0};
  int rc = cp_checkpoint_open(&ck, in);
  if (rc < 0) goto done;
  if (cp_checkpoint_count(ck) == 0) {
    rc = cp_error_set(CP_ECKPT_EMPTY, "%s: checkpoint holds no tensors", in);
    goto done;
  }
  if ((rc = cp_atomic_dir_open(&dir, out, params->replace)) < 0) goto done;
  const char *tmp = cp_atomic_dir_path(dir);
  cp_folder_params fp = {.shard_size = params->shard_size, .chunk_size = params->chunk_size,
                         .threads = params->threads, .progress = params->progress, .progress_ctx = params->progress_ctx};
  if ((rc = cp_folder_write(&written, tmp, ck, &fp)) < 0) goto done;
  /* GGUF metadata, or an ONNX graph's recovered config when no config.json came along */
  if ((cp_checkpoint_gguf(ck) || (cp_checkpoint_onnx(ck) && !has_config(tmp))) &&
      (rc = write_gguf_config(tmp, ck, in)) < 0)
    goto done;
  if (!params->no_manifest && (rc = cp_write_sha256_manifest(tmp, written.files, written.n_files)) < 0) goto done;
  if (stats) *stats = written.stats;
  rc = cp_atomic_dir_commit(dir);
  dir = NULL;
done:
  cp_atomic_dir_abort(dir);
  cp_checkpoint_free(ck);
  cp_folder_result_free(&written);
  return rc;
}
