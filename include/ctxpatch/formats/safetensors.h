/* Floor: formats. safetensors files: strict zero-copy reader, deterministic streaming writer, shard index.
 *
 * Byte layout (https://github.com/huggingface/safetensors, little-endian):
 *
 *   offset 0       u64 N            header length in bytes (N <= 100,000,000)
 *   offset 8       N bytes          UTF-8 JSON object, optionally padded with trailing spaces:
 *                                     {"__metadata__": {"key": "string value", ...},   (optional)
 *                                      "<tensor name>": {"dtype": "F32",
 *                                                        "shape": [d0, d1, ...],        (<= 8 dims)
 *                                                        "data_offsets": [begin, end]}, ...}
 *   offset 8+N     data             tensor bytes, row-major, little-endian; data_offsets are
 *                                   relative to 8+N. Sorted by begin, the tensors tile the data
 *                                   exactly: the first begins at 0, each begins where the previous
 *                                   ends, the last ends at the end of the file.
 *
 * dtypes: F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL (others are refused).
 *
 * Reader checks (each refusal has its own code, see error.h "safetensors (-100)"): everything the
 * reference (Rust) reader checks, plus: duplicate keys anywhere, extra or missing entry keys,
 * numbers that are not plain non-negative JSON integers (1.0, 1e3, -1, 1e300 are refused),
 * dims above INT64_MAX, lone UTF-16 surrogates and NUL characters in strings, nesting deeper
 * than 64. Messages name the file and the header offset (bytes from the start of the JSON,
 * i.e. file offset - 8) or the tensor.
 *
 * Writer: header is compact JSON with "__metadata__" first (keys sorted bytewise, always
 * containing "format" -- "pt" unless the caller gives another value), then the tensors in the
 * order the reference `safetensors.torch.save_file` uses: by the reference's dtype rank
 * descending (I64, F64, F32, I32, BF16, F16, I16, F8_E4M3, F8_E5M2, I8, U8, BOOL -- mostly
 * element size descending), then by name bytewise. Each entry is
 * {"dtype":..,"shape":[..],"data_offsets":[b,e]}; the header is padded with spaces to a multiple
 * of 8 bytes so every tensor's data is 8-byte aligned in the file. Strings are escaped like
 * serde_json (", \, control characters; non-ASCII written as UTF-8).
 *
 * Shard index (model.safetensors.index.json), as Hugging Face transformers writes it
 * (json.dumps(index, indent=2, sort_keys=True) + "\n", ASCII-escaped):
 *   {"metadata": {"total_size": <sum of tensor bytes>}, "weight_map": {"<name>": "<shard file>"}}
 */
#ifndef CTXPATCH_SAFETENSORS_H
#define CTXPATCH_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

#define CP_ST_MAX_HEADER 100000000u

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */

typedef struct cp_st_file cp_st_file;

/* Maps `path` read-only (MAP_PRIVATE) and validates the whole header against the file size.
 * On success the caller owns *out (cp_st_free). Tensor views point into the mapping. */
int cp_st_open(cp_st_file **out, const char *path);
/* Unmaps the file; every pointer obtained from the handle becomes invalid. NULL is a no-op. */
void cp_st_free(cp_st_file *f);

const char *cp_st_path(const cp_st_file *f);

/* Tensors in file order (ascending data offset; ties between zero-size tensors by name);
 * NULL when i >= count. The view and its name are owned by the handle. `data` points into the
 * mapping (read-only: writing through it faults) and may be unaligned when the header length is
 * not a multiple of 8: read it with memcpy. */
size_t cp_st_count(const cp_st_file *f);
const cp_tensor *cp_st_tensor(const cp_st_file *f, size_t i);
/* O(log n) lookup by name; NULL if absent. */
const cp_tensor *cp_st_find(const cp_st_file *f, const char *name);
/* Index of `name` in file order, or -1 if absent. */
long long cp_st_find_index(const cp_st_file *f, const char *name);

/* __metadata__ entries sorted by key (bytewise). Strings are owned by the handle. */
size_t cp_st_meta_count(const cp_st_file *f);
const char *cp_st_meta_key(const cp_st_file *f, size_t i);
const char *cp_st_meta_value(const cp_st_file *f, size_t i);
/* Value for `key`, or NULL if absent. */
const char *cp_st_meta_get(const cp_st_file *f, const char *key);

/* The read-only mapping of the whole file and its size; the header length N (the data starts at
 * file offset 8 + N). For streaming conversions that drop consumed pages themselves. */
const void *cp_st_map_base(const cp_st_file *f);
/* The descriptor of the file mapped (borrowed; open until cp_st_free), for copy_file_range. */
int cp_st_fd(const cp_st_file *f);
uint64_t cp_st_file_size(const cp_st_file *f);
uint64_t cp_st_header_len(const cp_st_file *f);
/* File offset of tensor i's first byte (8 + N + begin); its length is cp_st_tensor(f, i)->nbytes. */
uint64_t cp_st_tensor_file_offset(const cp_st_file *f, size_t i);
/* Tells the kernel that tensor i's pages are no longer needed (madvise MADV_DONTNEED on the whole
 * pages inside its range); they are re-read from the file if touched again. Keeps the resident
 * set of a streaming conversion bounded. Errors are ignored: this is only advice. */
void cp_st_release(const cp_st_file *f, size_t i);

/* ---------------------------------------------------------------------------------------------
 * Writer (streaming: peak memory is O(number of tensors + header), not O(model size))
 * ------------------------------------------------------------------------------------------- */

typedef struct cp_st_writer cp_st_writer;

/* Opens an atomic writer for `path` and writes the header.
 * `tensors[0..n)`: descriptors; name, dtype, ndim and shape are used (copied), nbytes and data
 *   are ignored (sizes are recomputed with overflow checks).
 * `meta_kv[0..2*n_meta)`: key, value, key, value, ... (copied); NULL when n_meta is 0.
 * Refuses (CP_EARG) duplicate names, a tensor named "__metadata__", duplicate metadata keys,
 * non-UTF-8 strings, bad dtypes or shapes; CP_EOVERFLOW for sizes past 2^63;
 * CP_EST_HEADER_TOO_LARGE for a header over 100,000,000 bytes. On success the caller owns *out
 * and must end it with cp_st_writer_commit or cp_st_writer_abort. */
int cp_st_writer_open(cp_st_writer **out, const char *path, const cp_tensor *tensors, size_t n,
                      const char *const *meta_kv, size_t n_meta);
/* File offset of byte `pos` of metadata value `key` as written (escapes before it counted), so
 * that a placeholder the caller put there can be overwritten in place once its value is known.
 * CP_EARG when there is no such key or pos is past the value. */
int cp_st_writer_meta_offset(uint64_t *out, const cp_st_writer *w, const char *key, size_t pos);
/* Index into the caller's `tensors` array of the tensor whose bytes are expected next, or
 * (size_t)-1 when every byte has been written. Zero-size tensors are skipped. */
size_t cp_st_writer_next_index(const cp_st_writer *w);
/* Index into the caller's array of the k-th tensor in file order (k < n). */
size_t cp_st_writer_order(const cp_st_writer *w, size_t k);
/* Appends `len` bytes of tensor data in file order; chunks may be any size and may span
 * tensors. CP_EARG if that would write more than the tensors hold. */
int cp_st_writer_write(cp_st_writer *w, const void *data, size_t len);
/* Chunks below this many bytes go to cp_st_writer_write_mapped's gathering buffer (copied there,
 * so the caller may drop their pages at once); chunks this large or larger are written as below. */
#define CP_ST_WRITE_MAPPED_MIN ((size_t)1 << 20)
/* cp_st_writer_write of bytes from a read-only mapping of the file `src_fd` (byte `src_off` on;
 * -1: no file, write() from `data`): copied in the kernel and hashed on the hash thread, see
 * cp_atomic_write_mapped (`data` must stay mapped until commit/abort; `drop` as there). */
int cp_st_writer_write_mapped(cp_st_writer *w, const void *data, size_t len, int src_fd, uint64_t src_off, int drop);
/* Flushes buffered bytes and gives the SHA-256 of the file written so far (the whole file
 * once every tensor byte is in), without reading it back. */
int cp_st_writer_sha256(cp_st_writer *w, char out_hex[65]);
/* Checks every byte was written, then fsyncs and renames into place. Frees w (also on error;
 * on error nothing is left at `path`). */
int cp_st_writer_commit(cp_st_writer *w);
/* Discards the temporary file and frees w. NULL is a no-op. */
void cp_st_writer_abort(cp_st_writer *w);

/* Convenience: writes tensors whose bytes are in memory (`data` must be non-NULL unless the
 * tensor is empty; `nbytes` is ignored and recomputed). */
int cp_st_write_file(const char *path, const cp_tensor *tensors, size_t n, const char *const *meta_kv,
                     size_t n_meta);

/* ---------------------------------------------------------------------------------------------
 * Sharding and the shard index
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  size_t n_tensors;
  size_t *shard_of;      /* [n_tensors]: shard number (0-based) of each input tensor */
  size_t n_shards;
  char **shard_names;    /* [n_shards]: "model-00001-of-00003.safetensors"; "model.safetensors"
                            when there is only one shard (transformers then writes no index) */
  uint64_t *shard_bytes; /* [n_shards]: sum of tensor bytes in each shard */
  uint64_t total_size;   /* sum of all tensor bytes (the index's metadata.total_size) */
} cp_st_shard_plan;

/* Greedy plan like transformers' shard_checkpoint: walks `tensors` in the given order and starts
 * a new shard when adding the next tensor would push a non-empty shard past `max_shard_bytes`
 * (so a tensor larger than the limit sits alone in its shard). Sizes come from dtype and shape.
 * The caller owns *out (cp_st_shard_plan_free). CP_EARG if max_shard_bytes is 0. */
int cp_st_plan_shards(cp_st_shard_plan **out, const cp_tensor *tensors, size_t n,
                      uint64_t max_shard_bytes);
void cp_st_shard_plan_free(cp_st_shard_plan *plan);

/* Writes model.safetensors.index.json atomically: names[i] -> files[i], sorted by name.
 * CP_EARG for duplicate names, non-UTF-8 strings or unsafe file names. */
int cp_st_index_write(const char *path, uint64_t total_size, const char *const *names,
                      const char *const *files, size_t n);
/* Same, from a plan and the tensor descriptors it was made from. */
int cp_st_index_write_plan(const char *path, const cp_st_shard_plan *plan, const cp_tensor *tensors);

typedef struct cp_st_index cp_st_index;

/* Reads an index strictly (any problem -> CP_EST_INDEX naming the file and the offset or key):
 * the top level is an object with a "weight_map" object of string values (other top-level keys
 * are ignored); "metadata", when present, is an object whose "total_size", when present, is a
 * non-negative integer. Shard file names must be plain names in the index's folder: not empty,
 * no '/', '\\', "..", NUL, not absolute. The caller owns *out (cp_st_index_free). */
int cp_st_index_read(cp_st_index **out, const char *path);
void cp_st_index_free(cp_st_index *idx);
/* weight_map entries in file order; strings owned by the index. */
size_t cp_st_index_count(const cp_st_index *idx);
const char *cp_st_index_name(const cp_st_index *idx, size_t i);
const char *cp_st_index_file(const cp_st_index *idx, size_t i);
/* Shard number of entry i, into the list below. */
size_t cp_st_index_file_of(const cp_st_index *idx, size_t i);
/* Distinct shard files in order of first appearance in weight_map. */
size_t cp_st_index_file_count(const cp_st_index *idx);
const char *cp_st_index_file_name(const cp_st_index *idx, size_t j);
/* metadata.total_size, or -1 when absent. */
int64_t cp_st_index_total_size(const cp_st_index *idx);

/* Internal, shared by formats/safetensors_*.c: 1 if s[0..len) is valid UTF-8 as Rust's
 * str::from_utf8 defines it (no overlongs, surrogates or code points past U+10FFFF), else 0 with
 * the offset of the first bad byte in *bad (when bad is not NULL). */
int cp_st_utf8_valid(const char *s, size_t len, size_t *bad);

#endif
