/* Floor: import. A checkpoint as a flat list of named tensors, whatever its on-disk format:
 * a single .safetensors, a sharded safetensors folder (model.safetensors.index.json),
 * a PyTorch zip (.bin/.pt), a sharded PyTorch folder (pytorch_model.bin.index.json), or a
 * single GGUF file (llama.cpp; its metadata replaces config.json, see ctxpatch/import/gguf_model.h).
 * Opening a folder also records config.json and the tokenizer/generation files beside it.
 *
 * Tensors keep their stored dtype. A tensor's `data` is a zero-copy view into a read-only
 * mmap when the bytes are stored contiguously and uncompressed; otherwise it is NULL and
 * cp_checkpoint_read() produces the contiguous bytes. Everything is owned by the handle.
 */
#ifndef CTXPATCH_CHECKPOINT_H
#define CTXPATCH_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "ctxpatch/formats/tensor.h"

typedef enum {
  CP_FORMAT_SAFETENSORS,
  CP_FORMAT_SAFETENSORS_SHARDED,
  CP_FORMAT_PYTORCH_ZIP,
  CP_FORMAT_PYTORCH_ZIP_SHARDED,
  CP_FORMAT_GGUF,
  CP_FORMAT_ONNX, /* a .onnx graph (a T5 export's pair), or an ONNX export folder without other weights
                     (cp_onnx_export_graph): tensors recovered (ctxpatch/import/onnx_import.h) */
} cp_format;

typedef struct cp_checkpoint cp_checkpoint;
typedef struct cp_onnx_import cp_onnx_import;

/* `path`: a weights file or a checkpoint folder. */
int cp_checkpoint_open(cp_checkpoint **out, const char *path);
/* cp_checkpoint_open of the ONNX file (not folder) `path` already read as `graph`
 * (cp_onnx_model_open; NULL: as cp_checkpoint_open), which the recovery reads instead of the file:
 * borrowed, it must outlive *out. */
int cp_checkpoint_open_onnx(cp_checkpoint **out, const char *path, const cp_onnx_model *graph);
void cp_checkpoint_free(cp_checkpoint *ck);

cp_format cp_checkpoint_format(const cp_checkpoint *ck);
const char *cp_format_name(cp_format format); /* "safetensors", "pytorch-zip", ... */

/* The GGUF file of a CP_FORMAT_GGUF checkpoint (metadata, ggml types), else NULL. Borrowed. */
const cp_gguf_file *cp_checkpoint_gguf(const cp_checkpoint *ck);

/* The recovered ONNX graph of a CP_FORMAT_ONNX checkpoint (its config: cp_onnx_import_config),
 * else NULL. Borrowed. */
const cp_onnx_import *cp_checkpoint_onnx(const cp_checkpoint *ck);

/* Folder of the checkpoint (the file's folder for a single file). */
const char *cp_checkpoint_dir(const cp_checkpoint *ck);
/* config.json path, or NULL when there is none. */
const char *cp_checkpoint_config_path(const cp_checkpoint *ck);
/* Weight files that make up the checkpoint, in shard order (relative to the folder). */
size_t cp_checkpoint_file_count(const cp_checkpoint *ck);
const char *cp_checkpoint_file(const cp_checkpoint *ck, size_t i);

size_t cp_checkpoint_count(const cp_checkpoint *ck);
/* Tensor i in checkpoint order (shard order, then file order). */
const cp_tensor *cp_checkpoint_tensor(const cp_checkpoint *ck, size_t i);
const cp_tensor *cp_checkpoint_find(const cp_checkpoint *ck, const char *name);

/* Copies `len` bytes of tensor i's contiguous little-endian bytes from byte `offset`. */
int cp_checkpoint_read(cp_checkpoint *ck, size_t i, uint64_t offset, void *buf, size_t len);

/* Where a mapped tensor's bytes lie: the descriptor of its file (borrowed, open until
 * cp_checkpoint_free) and the byte offset of its first byte. Returns 0, or -1 (*fd = -1) when
 * the tensor is not mapped from a file (safetensors and PyTorch zip views are; GGUF, ONNX and
 * compressed or strided PyTorch tensors are not). For copy_file_range (cp_atomic_write_mapped). */
int cp_checkpoint_source(int *fd, uint64_t *offset, const cp_checkpoint *ck, size_t i);

/* Tensor i's quantised blocks in place when it is a GGUF Q8_0 / Q4_0 / Q4_K tensor (its view
 * shows float32 with data NULL), with their block dtype in *dtype (cp_gguf_tensor_blocks); NULL
 * for every other tensor. Borrowed until cp_checkpoint_free. */
const void *cp_checkpoint_blocks(cp_dtype *dtype, const cp_checkpoint *ck, size_t i);

/* Drops the resident pages of bytes [offset, offset+len) of a mapped tensor (madvise
 * MADV_DONTNEED on whole pages inside the range); they are re-read from the file if touched.
 * Lets a streaming conversion keep its resident set bounded. No-op for unmapped tensors. */
void cp_checkpoint_release(const cp_checkpoint *ck, size_t i, uint64_t offset, uint64_t len);

/* Auxiliary files of a checkpoint folder that conversions carry over (config.json,
 * generation_config.json, tokenizer files), as names relative to the folder, sorted. */
size_t cp_checkpoint_aux_count(const cp_checkpoint *ck);
const char *cp_checkpoint_aux(const cp_checkpoint *ck, size_t i);

/* Finds tensor `name` and checks its shape equals `shape[0..ndim)` when ndim >= 0 (CP_EMODEL_TENSOR
 * naming the tensor when it is missing, or the expected and actual shapes). *index (unless NULL)
 * is its index for cp_checkpoint_read / cp_checkpoint_release. *out is borrowed. */
int cp_checkpoint_lookup(const cp_tensor **out, size_t *index, const cp_checkpoint *ck, const char *name, int ndim,
                         const int64_t *shape);

/* Returns tensor `name` widened to float32 in a new heap buffer (caller frees), checking
 * its shape equals `shape[0..ndim)` when ndim >= 0. Used by the model loaders. */
int cp_checkpoint_load_f32(float **out, cp_checkpoint *ck, const char *name, int ndim,
                           const int64_t *shape);

#endif
