/* Floor: formats. GGUF files (ggml / llama.cpp model files, versions 2 and 3): bounded reader.
 *
 * Byte layout (little-endian; https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
 * ------------------------------------------------------------------------------------
 *   offset 0   u32 magic          "GGUF" (0x46554747)
 *   offset 4   u32 version        2 or 3 (1 used u32 counts and is refused; a byte-swapped
 *                                 version means a big-endian file, refused)
 *   offset 8   u64 n_tensors
 *   offset 16  u64 n_kv
 *   offset 24  n_kv key/values:   gguf_string key; u32 value_type; value
 *              n_tensors infos:   gguf_string name; u32 n_dims; u64 ne[n_dims] (ne[0] is the
 *                                 innermost, contiguous dimension); u32 ggml_type; u64 offset
 *                                 (relative to the data section)
 *              padding to `alignment` (general.alignment, u32, default 32)
 *              data section:      tensor bytes, each at its offset (a multiple of alignment)
 *
 *   gguf_string: u64 length, then that many bytes (no terminating NUL)
 *   value_type:  0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (1 byte), 8 string,
 *                9 array (u32 element type; u64 count; count elements), 10 u64, 11 i64, 12 f64
 *
 * ggml types: blocks of `block` elements stored in `size` bytes along ne[0] (F32 1/4, F16 1/2,
 * BF16 1/2, Q8_0 32/34 = f16 d + 32 x i8, Q4_0 32/18 = f16 d + 16 bytes of nibbles,
 * Q4_K 256/144 = f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles, ...).
 *
 * Checks (ggml's gguf.cpp and the lessons of CVE-2024-25664..25668 and later overflows): every
 * count and string length against the bytes left in the file; keys and tensor names non-empty,
 * without NUL and valid UTF-8, tensor names under 64 bytes (GGML_MAX_NAME); duplicate keys and
 * tensor names refused; n_dims <= 4, every ne >= 0, the element count and byte size checked for
 * overflow and ne[0] a multiple of the type's block; unknown value and ggml types refused;
 * arrays nested at most CP_GGUF_MAX_NESTING deep; bool values 0 or 1; general.alignment a u32,
 * a power of two, at most CP_GGUF_MAX_ALIGNMENT; tensor offsets multiples of the alignment,
 * inside the data section, not overlapping. Messages name the file and the byte offset of the
 * offending field (or the key / tensor).
 *
 * Tensor views (cp_tensor) are row-major: shape is ne reversed ([ne[n-1], ..., ne[0]]).
 * F32, F16, BF16, F64, I8, I16, I32, I64 tensors are zero-copy views into a read-only mmap.
 * Q8_0, Q4_0 and Q4_K tensors are shown as F32 with `data` NULL: cp_gguf_read() dequantises
 * them as ggml does. Other quantised types open (inspect lists them by name) but reading them
 * is refused with CP_EGGUF_QUANT naming the type.
 *
 * Ownership: the cp_gguf_file owns everything it returns, valid until cp_gguf_free().
 */
#ifndef CTXPATCH_GGUF_H
#define CTXPATCH_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

#define CP_GGUF_MAGIC 0x46554747u /* "GGUF" */
#define CP_GGUF_DEFAULT_ALIGNMENT 32u
#define CP_GGUF_MAX_ALIGNMENT 65536u
#define CP_GGUF_MAX_DIMS 4
#define CP_GGUF_MAX_NAME 64 /* tensor names are shorter (GGML_MAX_NAME) */
#define CP_GGUF_MAX_NESTING 4

typedef enum {
  CP_GGUF_U8 = 0, CP_GGUF_I8 = 1, CP_GGUF_U16 = 2, CP_GGUF_I16 = 3, CP_GGUF_U32 = 4, CP_GGUF_I32 = 5,
  CP_GGUF_F32 = 6, CP_GGUF_BOOL = 7, CP_GGUF_STRING = 8, CP_GGUF_ARRAY = 9, CP_GGUF_U64 = 10,
  CP_GGUF_I64 = 11, CP_GGUF_F64 = 12, CP_GGUF_TYPE_COUNT
} cp_gguf_vtype;

/* The ggml tensor types this reader knows (ids as in ggml.h). */
enum {
  CP_GGML_F32 = 0, CP_GGML_F16 = 1, CP_GGML_Q4_0 = 2, CP_GGML_Q8_0 = 8, CP_GGML_Q4_K = 12,
  CP_GGML_BF16 = 30,
};

typedef struct cp_gguf_file cp_gguf_file;

/* Maps `path` and validates the header and every tensor info. Errors: CP_EGGUF_* (error.h),
 * CP_EIO, CP_ENOMEM, CP_EFILETYPE. The caller owns *out (cp_gguf_free). */
int cp_gguf_open(cp_gguf_file **out, const char *path);
/* NULL is a no-op. */
void cp_gguf_free(cp_gguf_file *f);

const char *cp_gguf_path(const cp_gguf_file *f);
uint32_t cp_gguf_version(const cp_gguf_file *f);
uint32_t cp_gguf_alignment(const cp_gguf_file *f);
/* File offset of the data section. */
uint64_t cp_gguf_data_offset(const cp_gguf_file *f);
/* Metadata values the parser stepped through one at a time when opening (each key's value, each
 * element of a nested array): a work count for tests; scalar and string array elements are
 * checked in bulk, so a 400 MB bool array costs one step, not 400 million. */
uint64_t cp_gguf_value_steps(const cp_gguf_file *f);

/* ---- metadata ---- */
size_t cp_gguf_kv_count(const cp_gguf_file *f);
const char *cp_gguf_kv_key(const cp_gguf_file *f, size_t i);    /* NUL-terminated, borrowed */
cp_gguf_vtype cp_gguf_kv_type(const cp_gguf_file *f, size_t i);
/* Index of `key`, or -1. */
int64_t cp_gguf_find_key(const cp_gguf_file *f, const char *key);
const char *cp_gguf_type_name(cp_gguf_vtype t); /* "u32", "string", "array", ... */

/* Typed getters of key `key`. Missing key: CP_ENOTFOUND; another type: CP_EGGUF_KEY (both with a
 * message naming the file and key). get_int accepts every integer type (and bool) and refuses a
 * u64 above INT64_MAX; get_f64 accepts f32, f64 and integers. */
int cp_gguf_get_int(int64_t *out, const cp_gguf_file *f, const char *key);
int cp_gguf_get_f64(double *out, const cp_gguf_file *f, const char *key);
int cp_gguf_get_bool(bool *out, const cp_gguf_file *f, const char *key);
/* The string's bytes (not NUL-terminated; may hold NUL) and length, borrowed. */
int cp_gguf_get_str(const char **out, size_t *len, const cp_gguf_file *f, const char *key);
/* An array: its element type and count. */
int cp_gguf_get_arr(cp_gguf_vtype *elem, uint64_t *n, const cp_gguf_file *f, const char *key);
/* Element i of array `key` (i < count; the element type must match: string, or any integer /
 * float type for the numeric ones). */
int cp_gguf_arr_str(const char **out, size_t *len, const cp_gguf_file *f, const char *key, uint64_t i);
int cp_gguf_arr_f64(double *out, const cp_gguf_file *f, const char *key, uint64_t i);
int cp_gguf_arr_int(int64_t *out, const cp_gguf_file *f, const char *key, uint64_t i);

/* ---- tensors, in file order ---- */
size_t cp_gguf_count(const cp_gguf_file *f);
const cp_tensor *cp_gguf_tensor(const cp_gguf_file *f, size_t i);
/* Index of tensor `name`, or -1. */
int64_t cp_gguf_find(const cp_gguf_file *f, const char *name);
/* Tensor i's ggml type id and its name ("F32", "Q4_K", "IQ2_XXS", ...; "?" when unknown). */
uint32_t cp_gguf_tensor_ggml_type(const cp_gguf_file *f, size_t i);
const char *cp_gguf_ggml_type_name(uint32_t type);
/* File offset of tensor i's stored bytes and their length. */
uint64_t cp_gguf_tensor_file_offset(const cp_gguf_file *f, size_t i);
uint64_t cp_gguf_tensor_stored_bytes(const cp_gguf_file *f, size_t i);
/* Tensor i's stored blocks in place in the mapping when it is Q8_0, Q4_0 or Q4_K (*dtype CP_Q8_0,
 * CP_Q4_0, CP_Q4_K; rows of ne[0] elements are whole blocks, cp_dtype_span bytes each); NULL
 * for every other type. Borrowed, valid until cp_gguf_free. */
const void *cp_gguf_tensor_blocks(cp_dtype *dtype, const cp_gguf_file *f, size_t i);
/* Copies bytes [offset, offset+len) of tensor i's row-major little-endian view (the dequantised
 * float32 values for Q8_0/Q4_0/Q4_K). CP_EARG past the view; CP_EGGUF_QUANT for a type that
 * cannot be dequantised. */
int cp_gguf_read(const cp_gguf_file *f, size_t i, uint64_t offset, void *buf, size_t len);

/* SHA-256 (lowercase hex) of what a runtime computes with: every key/value entry whose key does not
 * start with `skip_prefix` (NULL: none skipped), whole and in file order, then the tensor infos,
 * then the data section to the end of the file (tensor bytes and the padding between them). The
 * fixed header fields and the padding before the data are left out. A patched GGUF stores it under
 * ctxpatch.tensor_data_sha256 with skip_prefix "ctxpatch." (cp_gguf_writer_digest_data), so an
 * edited weight, shape, type or hyperparameter key changes it. "" when out of memory. */
void cp_gguf_content_sha256(const cp_gguf_file *f, const char *skip_prefix, char out_hex[65]);

#endif
