/* Checkpoint conversion to (sharded) safetensors, streaming tensor by tensor.
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

typedef struct {
  uint64_t shard_size; /* max bytes of tensor data per shard; 0 = one file */
  bool replace;        /* replace an existing output folder */
  uint64_t chunk_size; /* copy granularity in bytes (default 16 MiB) */
} cp_convert_params;

void cp_convert_params_init(cp_convert_params *params);

typedef struct {
  uint64_t tensors;
  uint64_t tensor_bytes;
  uint64_t shards;
  uint64_t aux_files;
} cp_convert_stats;

/* Converts the checkpoint at `in` (file or folder) into the folder `out`.
 * `stats` may be NULL. */
int cp_convert_to_safetensors(cp_convert_stats *stats, const char *in, const char *out,
                              const cp_convert_params *params);

/* Writes `dir`/SHA256SUMS over every regular file in `dir` (not recursing), sorted by name.
 * Digests already known (known_names[i] -> known_hex[i]) are used as given; the other files
 * are hashed from disk. */
int cp_write_sha256_manifest(const char *dir, const char *const *known_names, const char (*known_hex)[65],
                             size_t n_known);

#endif
