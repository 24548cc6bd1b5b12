/* Floor: export. Writing a checkpoint as an HF safetensors folder, streaming tensor by tensor
 * (cp_folder_write, shared by `convert` and the bake), and the SHA256SUMS manifest.
 *
 * Output is an HF-layout folder: model.safetensors, or model-0000k-of-0000N.safetensors plus
 * model.safetensors.index.json when sharded; the input folder's config and tokenizer files
 * copied unchanged; and SHA256SUMS (sha256sum format, sorted by path) over every other file,
 * so `sha256sum -c SHA256SUMS` checks the folder. The folder appears atomically: it is built
 * as a hidden sibling and renamed into place; on error nothing is left.
 *
 * Peak memory does not depend on the model size: tensor bytes are copied in fixed-size chunks
 * and the input pages already copied are dropped from the resident set.
 */
#ifndef CTXPATCH_CONVERT_H
#define CTXPATCH_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/import/checkpoint.h"

typedef struct {
  uint64_t shard_size; /* max bytes of tensor data per shard; 0 = one file */
  bool replace;        /* replace an existing output folder */
  uint64_t chunk_size; /* copy granularity in bytes (default 16 MiB) */
  unsigned threads;    /* shards written (and hashed) at once; 0: one per online core */
  bool no_manifest;    /* write no SHA256SUMS (scratch output: `check` reports it as unverifiable) */
  /* Called after each tensor with the tensors written and their total (may be NULL). */
  void (*progress)(void *ctx, int64_t done, int64_t total);
  void *progress_ctx;
} cp_convert_params;

void cp_convert_params_init(cp_convert_params *params);

typedef struct {
  uint64_t tensors;
  uint64_t tensor_bytes;
  uint64_t shards;
  uint64_t aux_files;
} cp_convert_stats;

/* Replaces some tensors' bytes while a folder is written (the bake rescales q rows and slopes). */
typedef struct {
  /* Whether tensor `t` is replaced; only those are materialised whole (the others stream). */
  bool (*wants)(void *ctx, const cp_tensor *t);
  /* Writes t's new bytes into out_bytes [t->nbytes] (same dtype and shape) from its stored bytes
   * in_bytes [t->nbytes]. */
  int (*transform)(void *ctx, const cp_tensor *t, const void *in_bytes, void *out_bytes);
  void *ctx;
  bool thread_safe; /* wants/transform may run on several threads at once (shards in parallel) */
} cp_tensor_hook;

typedef struct {
  uint64_t shard_size;          /* as cp_convert_params */
  uint64_t chunk_size;          /* copy granularity; 0: 16 MiB */
  unsigned threads;             /* shards written at once; 0: one per online core (see cp_folder_write) */
  const char *const *meta_kv;   /* every shard's __metadata__ pairs (borrowed); "format": "pt" if absent */
  size_t n_meta;
  const char *mark_key;         /* record where byte mark_pos of this metadata value lands (or NULL) */
  size_t mark_pos;
  const char *skip_aux;         /* an auxiliary file not copied (the caller writes its own), or NULL */
  const cp_tensor_hook *hook;   /* NULL: every tensor's bytes pass through */
  void (*progress)(void *ctx, int64_t done, int64_t total); /* as cp_convert_params (may be NULL) */
  void *progress_ctx;
} cp_folder_params;

/* A file of the folder and its SHA-256, known without reading it back. */
typedef struct {
  char *name;
  char hex[65];
} cp_file_digest;

typedef struct {
  cp_convert_stats stats;
  cp_file_digest *files;        /* [n_files] files written: the shards first, then index and aux */
  size_t n_files, cap_files;
  uint64_t *mark_at;            /* [stats.shards] file offset of the mark in each shard (mark_key) */
} cp_folder_result;

/* Writes `ck` into the existing folder `dir`: the shards, model.safetensors.index.json when there
 * is more than one, and the auxiliary files. Writes no manifest: *out's digests feed one. The caller
 * frees *out with cp_folder_result_free (also after an error). */
int cp_folder_write(cp_folder_result *out, const char *dir, cp_checkpoint *ck, const cp_folder_params *params);
void cp_folder_result_free(cp_folder_result *r);
/* Copies every auxiliary file of ck's folder (config, tokenizer, ...; all but params->skip_aux)
 * unchanged into `dir`, adding their digests to *r. */
int cp_folder_copy_aux(cp_folder_result *r, const char *dir, const cp_checkpoint *ck, const cp_folder_params *params);
/* Adds a file written into the folder (name relative to it, e.g. "onnx/model.onnx") and its
 * SHA-256 to *r, for the manifest. */
int cp_folder_result_add(cp_folder_result *r, const char *name, const char hex[65]);

/* Converts the checkpoint at `in` (file or folder) into the folder `out`.
 * `stats` may be NULL. */
int cp_convert_to_safetensors(cp_convert_stats *stats, const char *in, const char *out,
                              const cp_convert_params *params);

/* Writes `dir`/SHA256SUMS over every regular file in `dir` and in its subfolders (one level:
 * "onnx/model.onnx"), sorted by relative path.
 * Digests already known (known[0..n_known)) are used as given; the other files are hashed from disk. */
int cp_write_sha256_manifest(const char *dir, const cp_file_digest *known, size_t n_known);

#endif
