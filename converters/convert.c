#include "ctxpatch/converters/convert.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/converters/checkpoint.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/safetensors.h"

#define MANIFEST_NAME "SHA256SUMS"

void cp_convert_params_init(cp_convert_params *params) {
  memset(params, 0, sizeof *params);
  params->chunk_size = 16u << 20;
}

/* Digests of the files this conversion wrote, so the manifest needs no second read. */
typedef struct {
  char **names;
  char (*hex)[65];
  size_t n, cap;
} digest_list;

static int digest_add(digest_list *d, const char *name, const char hex[65]) {
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    char **names = realloc(d->names, cap * sizeof *names);
    if (names) d->names = names;
    char(*hx)[65] = realloc(d->hex, cap * sizeof *hx);
    if (hx) d->hex = hx;
    if (!names || !hx) return cp_error_set(CP_ENOMEM, "%s: out of memory", name);
    d->cap = cap;
  }
  if (!(d->names[d->n] = strdup(name))) return cp_error_set(CP_ENOMEM, "%s: out of memory", name);
  memcpy(d->hex[d->n++], hex, 65);
  return 0;
}

static void digest_free(digest_list *d) {
  for (size_t i = 0; i < d->n; i++) free(d->names[i]);
  free(d->names);
  free(d->hex);
}

static int copy_file(char out_hex[65], const char *src, const char *dst) {
  return cp_copy_file_atomic(out_hex, dst, src, (size_t)1 << 30);
}

/* Streams one shard: the writer fixes the byte order, the checkpoint supplies the bytes. */
static int write_shard(char out_hex[65], cp_checkpoint *ck, const char *path, const size_t *members, size_t n,
                       const cp_convert_params *params, unsigned char *buf) {
  cp_tensor *descs = calloc(n ? n : 1, sizeof *descs);
  cp_st_writer *w = NULL;
  int rc = 0;
  static const char *const meta[] = {"format", "pt"};
  if (!descs) {
    rc = cp_error_set(CP_ENOMEM, "%s: out of memory", path);
    goto done;
  }
  for (size_t k = 0; k < n; k++) descs[k] = *cp_checkpoint_tensor(ck, members[k]);
  if ((rc = cp_st_writer_open(&w, path, descs, n, meta, 1)) < 0) goto done;
  for (size_t k = 0; k < n; k++) {
    size_t src = members[cp_st_writer_order(w, k)];
    const cp_tensor *t = cp_checkpoint_tensor(ck, src);
    for (uint64_t at = 0; at < t->nbytes; at += params->chunk_size) {
      size_t len = (size_t)(t->nbytes - at < params->chunk_size ? t->nbytes - at : params->chunk_size);
      if (t->data) {
        rc = cp_st_writer_write(w, (const char *)t->data + at, len);
        cp_checkpoint_release(ck, src, at, len);
      } else if ((rc = cp_checkpoint_read(ck, src, at, buf, len)) == 0) {
        rc = cp_st_writer_write(w, buf, len);
      }
      if (rc < 0) goto done;
    }
  }
  if ((rc = cp_st_writer_sha256(w, out_hex)) < 0) goto done;
  rc = cp_st_writer_commit(w);
  w = NULL;
done:
  cp_st_writer_abort(w);
  free(descs);
  return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int cp_write_sha256_manifest(const char *dir, const char *const *known_names, const char (*known_hex)[65],
                             size_t n_known) {
  DIR *d = opendir(dir);
  if (!d) return cp_error_set(CP_EIO, "%s: cannot list folder: %s", dir, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  cp_atomic_file *f = NULL;
  char *path = NULL, *manifest = NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, MANIFEST_NAME)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      char **grown = realloc(names, cap * sizeof *names);
      if (!grown) {
        rc = cp_error_set(CP_ENOMEM, "%s: out of memory", dir);
        goto done;
      }
      names = grown;
    }
    if (!(names[n] = strdup(e->d_name))) {
      rc = cp_error_set(CP_ENOMEM, "%s: out of memory", dir);
      goto done;
    }
    n++;
  }
  qsort(names, n, sizeof *names, cmp_str);
  if (!(manifest = cp_path_join(dir, MANIFEST_NAME))) {
    rc = cp_error_set(CP_ENOMEM, "%s: out of memory", dir);
    goto done;
  }
  if ((rc = cp_atomic_open(&f, manifest)) < 0) goto done;
  for (size_t k = 0; k < n; k++) {
    char hex[65], line[4200];
    size_t j = 0;
    while (j < n_known && strcmp(known_names[j], names[k]) != 0) j++;
    if (j < n_known) {
      memcpy(hex, known_hex[j], 65);
    } else {
      free(path);
      if (!(path = cp_path_join(dir, names[k]))) {
        rc = cp_error_set(CP_ENOMEM, "%s: out of memory", dir);
        goto done;
      }
      if ((rc = cp_sha256_file(hex, path)) < 0) goto done;
    }
    int len = snprintf(line, sizeof line, "%s  %s\n", hex, names[k]);
    if ((rc = cp_atomic_write(f, line, (size_t)len)) < 0) goto done;
  }
  rc = cp_atomic_commit(f);
  f = NULL;
done:
  cp_atomic_abort(f);
  closedir(d);
  for (size_t k = 0; k < n; k++) free(names[k]);
  free(names);
  free(path);
  free(manifest);
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
  cp_st_shard_plan *plan = NULL;
  cp_tensor *descs = NULL;
  size_t *members = NULL;
  unsigned char *buf = NULL;
  char *path = NULL;
  digest_list digests = {0};
  char hex[65];
  int rc = cp_checkpoint_open(&ck, in);
  if (rc < 0) goto done;
  size_t n = cp_checkpoint_count(ck);
  if (n == 0) {
    rc = cp_error_set(CP_ECKPT_EMPTY, "%s: checkpoint holds no tensors", in);
    goto done;
  }
  descs = calloc(n, sizeof *descs);
  members = calloc(n, sizeof *members);
  buf = malloc((size_t)params->chunk_size);
  if (!descs || !members || !buf) {
    rc = cp_error_set(CP_ENOMEM, "%s: out of memory", in);
    goto done;
  }
  for (size_t i = 0; i < n; i++) descs[i] = *cp_checkpoint_tensor(ck, i);
  uint64_t limit = params->shard_size ? params->shard_size : UINT64_MAX;
  if ((rc = cp_st_plan_shards(&plan, descs, n, limit)) < 0) goto done;
  if ((rc = cp_atomic_dir_open(&dir, out, params->replace)) < 0) goto done;
  const char *tmp = cp_atomic_dir_path(dir);

  for (size_t s = 0; s < plan->n_shards; s++) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (plan->shard_of[i] == s) members[m++] = i;
    free(path);
    if (!(path = cp_path_join(tmp, plan->shard_names[s]))) {
      rc = cp_error_set(CP_ENOMEM, "%s: out of memory", out);
      goto done;
    }
    if ((rc = write_shard(hex, ck, path, members, m, params, buf)) < 0 ||
        (rc = digest_add(&digests, plan->shard_names[s], hex)) < 0)
      goto done;
  }
  if (plan->n_shards > 1) {
    free(path);
    if (!(path = cp_path_join(tmp, "model.safetensors.index.json"))) {
      rc = cp_error_set(CP_ENOMEM, "%s: out of memory", out);
      goto done;
    }
    if ((rc = cp_st_index_write_plan(path, plan, descs)) < 0) goto done;
  }
  for (size_t k = 0; k < cp_checkpoint_aux_count(ck); k++) {
    const char *name = cp_checkpoint_aux(ck, k);
    char *src = cp_path_join(cp_checkpoint_dir(ck), name);
    free(path);
    path = cp_path_join(tmp, name);
    if (!src || !path) {
      free(src);
      rc = cp_error_set(CP_ENOMEM, "%s: out of memory", out);
      goto done;
    }
    rc = copy_file(hex, src, path);
    free(src);
    if (rc < 0 || (rc = digest_add(&digests, name, hex)) < 0) goto done;
  }
  if ((rc = cp_write_sha256_manifest(tmp, (const char *const *)digests.names, (const char(*)[65])digests.hex,
                                     digests.n)) < 0)
    goto done;
  if (stats) {
    stats->tensors = n;
    stats->tensor_bytes = plan->total_size;
    stats->shards = plan->n_shards;
    stats->aux_files = cp_checkpoint_aux_count(ck);
  }
  rc = cp_atomic_dir_commit(dir);
  dir = NULL;
done:
  cp_atomic_dir_abort(dir);
  cp_st_shard_plan_free(plan);
  cp_checkpoint_free(ck);
  free(descs);
  free(members);
  free(buf);
  free(path);
  digest_free(&digests);
  return rc;
}
