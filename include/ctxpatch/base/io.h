/* Floor: base. Atomic output and file hashing (writing a cJSON document: base/json_strict.h).
 *
 * Writers never leave a partial artifact: a file is written to a temporary name in the
 * target folder, fsync'd, renamed over the target, and the folder is fsync'd. A folder
 * output is built as a hidden temporary sibling and renamed into place the same way.
 * On any error the temporary is removed and nothing else is touched.
 */
#ifndef CTXPATCH_IO_H
#define CTXPATCH_IO_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_atomic_file cp_atomic_file;

/* Opens a temporary file beside `path`. The handle owns the temporary until commit/abort. */
int cp_atomic_open(cp_atomic_file **out, const char *path);
int cp_atomic_write(cp_atomic_file *f, const void *data, size_t len);
/* Current length written so far. */
uint64_t cp_atomic_tell(const cp_atomic_file *f);
/* SHA-256 of the bytes written so far (hashed as they are written, so manifests need no
 * second read of large outputs). */
void cp_atomic_sha256(const cp_atomic_file *f, char out_hex[65]);
/* fsync + rename over `path` + fsync folder; frees the handle (also on error). */
int cp_atomic_commit(cp_atomic_file *f);
/* Removes the temporary and frees the handle; NULL is a no-op. */
void cp_atomic_abort(cp_atomic_file *f);

typedef struct cp_atomic_dir cp_atomic_dir;

/* Creates a hidden temporary folder beside `path`. Fails with CP_EEXIST if `path` exists,
 * unless `replace` is nonzero, in which case commit swaps the old folder out. */
int cp_atomic_dir_open(cp_atomic_dir **out, const char *path, int replace);
/* Path of the temporary folder to write into (borrowed). */
const char *cp_atomic_dir_path(const cp_atomic_dir *d);
/* fsyncs every file in the temporary folder, renames it to the target; frees the handle. */
int cp_atomic_dir_commit(cp_atomic_dir *d);
/* Removes the temporary folder recursively and frees the handle; NULL is a no-op. */
void cp_atomic_dir_abort(cp_atomic_dir *d);

/* Writes data[0..len) to `path` atomically (open, write, commit; nothing left behind on error);
 * `sha256_hex` (may be NULL) gets the digest of the bytes written. */
int cp_write_file_atomic(char sha256_hex[65], const char *path, const void *data, size_t len);
/* Copies the file `src` (refused when over `max_len` bytes) to `dst` the same way. */
int cp_copy_file_atomic(char sha256_hex[65], const char *dst, const char *src, size_t max_len);

/* Reads a whole (small) file into a NUL-terminated heap buffer; refuses files over `max_len`. */
int cp_read_file(char **out, size_t *out_len, const char *path, size_t max_len);

/* SHA-256 of a file as 64 lowercase hex digits plus NUL. */
typedef struct cp_sha256 cp_sha256;
int cp_sha256_new(cp_sha256 **out);
void cp_sha256_update(cp_sha256 *h, const void *data, size_t len);
void cp_sha256_peek(const cp_sha256 *h, char out_hex[65]); /* digest so far; h stays usable */
void cp_sha256_free(cp_sha256 *h);
int cp_sha256_file(char out_hex[65], const char *path);
void cp_sha256_hex(char out_hex[65], const void *data, size_t len);

/* Joins folder and name into a heap string. Returns NULL on allocation failure. */
char *cp_path_join(const char *dir, const char *name);

#endif
