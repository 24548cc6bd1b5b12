/* Floor: formats. GGUF v3 writer (the byte layout is at the top of ctxpatch/formats/gguf.h).
 *
 * Use: cp_gguf_writer_new; key/values (cp_gguf_put_*) and tensor infos (cp_gguf_add_tensor) in
 * the order they are to appear; cp_gguf_writer_begin writes the whole header with every tensor's
 * offset computed in advance; then each tensor's bytes in the order the tensors were added
 * (cp_gguf_write_data for stored bytes, cp_gguf_write_f32 to have float32 rows encoded in the
 * tensor's type), so a model streams through and is never held twice; cp_gguf_writer_commit.
 *
 * Layout choices (deterministic: the same calls give the same bytes): version 3; keys in call
 * order, then `general.alignment` (u32 32) unless the caller put it; the tensor data section and
 * every tensor padded with zero bytes to the alignment, as ggml's gguf writer pads them (the last
 * tensor too). The file is written through base/io.h's atomic file: it appears whole at commit or
 * not at all (abort, or any error, leaves nothing).
 *
 * Encodings: F32 as is; F16 and BF16 rounded to nearest even (cp_f32_to_f16 / cp_f32_to_bf16,
 * ggml's fp32 -> fp16 / bf16 conversions); Q8_0 as ggml's quantize_row_q8_0_ref: per block of 32,
 * d = max|x| / 127, q = roundf(x / d) (0 when d is 0), d stored as f16.
 *
 * Checks: keys and tensor names non-empty, NUL-free and UTF-8 (names under CP_GGUF_MAX_NAME
 * bytes), no duplicate keys or names, 1..4 dimensions, ne[0] a multiple of the type's block,
 * sizes overflow-checked; writes past a tensor's end or a commit before every byte is written are
 * refused with CP_EARG naming the file and tensor.
 *
 * Ownership: the writer owns copies of everything given to it; commit and abort free it.
 */
#ifndef CTXPATCH_GGUF_WRITE_H
#define CTXPATCH_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/gguf.h"

typedef struct cp_gguf_writer cp_gguf_writer;

/* A writer for `path` (nothing is created before cp_gguf_writer_begin). */
int cp_gguf_writer_new(cp_gguf_writer **out, const char *path);
/* Frees the writer and removes its temporary file; NULL is a no-op. */
void cp_gguf_writer_abort(cp_gguf_writer *w);

/* Scalar key/values. */
int cp_gguf_put_u32(cp_gguf_writer *w, const char *key, uint32_t v);
int cp_gguf_put_i32(cp_gguf_writer *w, const char *key, int32_t v);
int cp_gguf_put_u64(cp_gguf_writer *w, const char *key, uint64_t v);
int cp_gguf_put_f32(cp_gguf_writer *w, const char *key, float v);
int cp_gguf_put_f64(cp_gguf_writer *w, const char *key, double v);
int cp_gguf_put_bool(cp_gguf_writer *w, const char *key, bool v);
/* A string of `len` bytes (may hold any byte but must be UTF-8 to be read back by ggml). */
int cp_gguf_put_str(cp_gguf_writer *w, const char *key, const char *s, size_t len);
/* A scalar of any non-string, non-array type from host memory (`v` points at a value of `type`). */
int cp_gguf_put_scalar(cp_gguf_writer *w, const char *key, cp_gguf_vtype type, const void *v);
/* An array of `n` numeric or bool elements of type `elem`, given as a host array of that type. */
int cp_gguf_put_arr(cp_gguf_writer *w, const char *key, cp_gguf_vtype elem, const void *data, uint64_t n);
/* An array of `n` strings: s[i] of len[i] bytes. */
int cp_gguf_put_arr_str(cp_gguf_writer *w, const char *key, const char *const *s, const size_t *len, uint64_t n);
/* Whether key `key` was put. */
bool cp_gguf_writer_has_key(const cp_gguf_writer *w, const char *key);

/* Before cp_gguf_writer_begin: a string key `key` (under `skip_prefix`) whose value becomes the
 * file's content digest, cp_gguf_content_sha256(file, skip_prefix) of gguf.h, stamped in place at
 * commit. One per writer. Commit then re-reads the file for its own digest (the stamp changed it). */
int cp_gguf_writer_content_digest(cp_gguf_writer *w, const char *key, const char *skip_prefix);

/* A tensor info: `shape` is row-major as in cp_tensor ([rows, cols]; ggml's ne is it reversed).
 * `type` is CP_GGML_F32, F16, BF16 or Q8_0. */
int cp_gguf_add_tensor(cp_gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *shape);

/* Opens the temporary file and writes the header and padding. No key or tensor may follow. */
int cp_gguf_writer_begin(cp_gguf_writer *w);
/* Index of the tensor whose bytes are expected next (in add order), or (size_t)-1 when done. */
size_t cp_gguf_writer_next(const cp_gguf_writer *w);
/* Stored bytes of the current tensor (len up to what it still lacks); a tensor's padding is
 * written once its last byte is. */
int cp_gguf_write_data(cp_gguf_writer *w, const void *bytes, size_t len);
/* The same for bytes of a read-only mapping of `src_fd` (from byte `src_off`) that stay mapped
 * until commit or abort: the kernel copies them and the hash thread hashes them from the mapping
 * while this thread goes on, then drops their pages (cp_atomic_write_mapped). */
int cp_gguf_write_mapped(cp_gguf_writer *w, const void *bytes, size_t len, int src_fd, uint64_t src_off);
/* float32 values of the current tensor encoded in its type; for Q8_0, n a multiple of 32 (whole
 * blocks; rows are whole blocks). */
int cp_gguf_write_f32(cp_gguf_writer *w, const float *x /* [n] */, size_t n);
/* Checks every byte was written, fsyncs and renames over the path; frees the writer (also on
 * error). `sha256_hex` (may be NULL) gets the file's digest. */
int cp_gguf_writer_commit(cp_gguf_writer *w, char sha256_hex[65]);

/* Bytes of `numel` elements of ggml type `type` (CP_EARG when numel is not a whole number of
 * blocks or the type is not one this writer encodes; CP_EOVERFLOW). */
int cp_gguf_type_nbytes(uint64_t *out, uint32_t type, uint64_t numel);
/* Encodes n float32 values (n a multiple of the type's block) as ggml type `type` into dst. */
void cp_gguf_encode_f32(void *dst, const float *src /* [n] */, size_t n, uint32_t type);

#endif
