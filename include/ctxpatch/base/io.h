/* Floor: base. Atomic output and file hashing (writing a cJSON document: base/json_strict.h).
 *
 * Writers never leave a partial artifact: a file is written to a temporary name in the
 * target folder, fsync'd, renamed over the target, and the folder is fsync'd. A folder
 * output is built as a hidden temporary sibling and renamed into place the same way.
 * On any error the temporary is removed and nothing else is touched.
 *
 * What an output path may be (cp_output_kind, checked by every writer here): absent or a regular
 * file (a folder, for folder outputs) is replaced atomically; a character device (/dev/null, a
 * tty, or a symlink to one such as /dev/stdout) is written through, never replaced; a FIFO,
 * socket, block device, symlink or the wrong kind of file is refused with CP_EFILETYPE.
 * A folder output replacing an old one is swapped in with renameat2(RENAME_EXCHANGE), so the
 * path always holds the old or the new folder.
 *
 * Temporaries are named ".NAME.tmp-PID-HOST-XXXXXX"; opening an output first removes those
 * beside it whose process is gone (same host, kill(PID, 0) fails with ESRCH), so a kill -9
 * leaks at most until the next run writing the same output.
 */
#ifndef CTXPATCH_IO_H
#define CTXPATCH_IO_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Opens an input read-only without blocking (a FIFO never hangs the open), following symlinks,
 * and refuses anything but a regular file (or a folder when `dir_ok`) with CP_EFILETYPE naming
 * the path. Returns the descriptor (close-on-exec, blocking again) or a negative cp_err. */
int cp_open_input(const char *path, int dir_ok);
/* cp_open_input for a regular file, then mapped whole, read-only (MAP_PRIVATE): *map and *size
 * (an empty file maps to NULL, 0). The caller unmaps with cp_unmap_input. */
int cp_map_input(const void **map, uint64_t *size, const char *path);
void cp_unmap_input(const void *map, uint64_t size);
/* cp_map_input that also hands back the descriptor of the file mapped (the caller closes it),
 * for cp_atomic_write_mapped to copy from. */
int cp_map_input_fd(const void **map, uint64_t *size, int *fd, const char *path);
/* cp_open_input for a regular file, as a stdio stream. */
int cp_fopen_input(FILE **out, const char *path);
/* "FIFO", "character device", ... for an st_mode. */
const char *cp_file_type_name(unsigned mode);

typedef enum {
  CP_OUTPUT_NEW,     /* nothing there yet */
  CP_OUTPUT_REPLACE, /* a regular file (a folder for folder outputs): replaced atomically */
  CP_OUTPUT_THROUGH  /* a character device: written through in place */
} cp_output;
/* Classifies the output path (see above); CP_EFILETYPE for what may not be written. */
int cp_output_kind(cp_output *kind, const char *path, int folder);
/* CP_EOVERLAP when `out` is or contains `in`, or lies inside it and is a `folder` or an existing
 * file (real paths, symlinked folders resolved): replacing it would destroy or change the input. */
int cp_output_outside_input(const char *out, const char *in, int folder);

/* The files this process has read as inputs of its work (a graph, its external data files, the
 * other graph of a T5 pair, weights, config, tokenizer, rule, corpus): each reader notes the
 * files it opens, so a model given as one file still protects every file it was read from. Every
 * atomic writer (cp_atomic_open, cp_atomic_dir_open) refuses with CP_EOVERLAP an output that is
 * one of them (the same resolved path, or the same device and inode), or a folder output that
 * holds one; commands also check their outputs right after loading, before any work. Per
 * process (a batch job is its own process) and off until cp_input_track(true) (the ctxpatch
 * program turns it on; a library caller may rewrite what it read); thread-safe. A note that could
 * not be kept (no memory) makes every later check fail with CP_ENOMEM rather than pass unchecked. */
void cp_input_track(bool on);
void cp_input_note(const char *path);
/* The same for the open descriptor `fd` (resolved through /proc/self/fd); `path` for messages. */
void cp_input_note_fd(int fd, const char *path);
/* 0, or CP_EOVERLAP naming `out` and the input it would replace. A character device written
 * through (cp_output_kind) replaces nothing and passes. */
int cp_input_check_output(const char *out, int folder);
/* Forgets every note (tests; a process that starts a new piece of work). */
void cp_input_forget(void);

typedef struct cp_atomic_file cp_atomic_file;

/* Opens a temporary file beside `path`. The handle owns the temporary until commit/abort. */
int cp_atomic_open(cp_atomic_file **out, const char *path);
/* cp_atomic_open for a large output whose bytes this process makes (converted, reordered): every
 * write is copied into one of two aligned 8 MiB buffers, and a full one is queued for the hash
 * thread and written while the other fills. Where the filesystem takes O_DIRECT, full buffers are
 * written with it: no copy into the page cache and no writeback to manage (a buffered write
 * cost about as much CPU as the SHA-256 of the same bytes, 1.1 s for 2.29 GB here); the file's
 * tail, and any write after a cp_atomic_pwrite or cp_atomic_skip, go through the page cache.
 * cp_atomic_write_mapped copies from the mapping too (no copy_file_range); cp_atomic_write_queued
 * copies and gives ticket 0. */
int cp_atomic_open_staged(cp_atomic_file **out, const char *path);
/* Staged handles: the free part of the buffer being filled (at least 1 byte, *room of them), for
 * a producer that writes its bytes in place; cp_atomic_advance(f, n) then appends its first n
 * (n <= *room). A pointer from cp_atomic_room is valid until the next call on the handle. */
unsigned char *cp_atomic_room(cp_atomic_file *f, size_t *room);
int cp_atomic_advance(cp_atomic_file *f, size_t n);
/* Appends data[0..len); the bytes are hashed (on a second thread when large) before it returns. */
int cp_atomic_write(cp_atomic_file *f, const void *data, size_t len);
/* Appends bytes that stay readable and unchanged until the handle is committed, aborted or asked
 * for its digest (a read-only mapping of an input): they are hashed on the hash thread while this
 * thread goes on, from `data`. When `src_fd` >= 0 it is the file mapped at `data`, the same bytes
 * from byte `src_off`, and the kernel copies them (copy_file_range; write() from `data` where the
 * kernel refuses the pair of files: EXDEV, ENOSYS, EINVAL, ...). `drop`: once hashed, the whole
 * pages of the range are madvise(MADV_DONTNEED)'d, so a streamed input's resident set stays flat. */
int cp_atomic_write_mapped(cp_atomic_file *f, const void *data, size_t len, int src_fd, uint64_t src_off, int drop);
/* Appends data[0..len) and queues it for the hash thread without waiting for it: this thread goes
 * on (fills the next buffer) while the hash reads this one. The bytes must stay readable and
 * unchanged until cp_atomic_wait(f, *ticket) returns (or the handle is committed, aborted or asked
 * for its digest). Writes of any kind may be mixed: the bytes are hashed in the order written. */
int cp_atomic_write_queued(cp_atomic_file *f, const void *data, size_t len, uint64_t *ticket);
/* Waits until the bytes of cp_atomic_write_queued's `ticket` are hashed (0: returns at once). */
void cp_atomic_wait(cp_atomic_file *f, uint64_t ticket);
/* Writes data[0..len) over bytes already written at `offset` (a placeholder stamped once the
 * bytes after it are known); CP_EARG past what was written; a no-op through a character device
 * (the bytes are gone). The running digest no longer matches the file: cp_atomic_sha256 gives ""
 * from then on. */
int cp_atomic_pwrite(cp_atomic_file *f, uint64_t offset, const void *data, size_t len);
/* Appends len zero bytes as a hole (ftruncate: no disk, nothing written); CP_EARG through a
 * character device. The running digest no longer matches the file: cp_atomic_sha256 gives "". */
int cp_atomic_skip(cp_atomic_file *f, uint64_t len);
/* Current length written so far. */
uint64_t cp_atomic_tell(const cp_atomic_file *f);
/* SHA-256 of the bytes written so far (hashed as they are written, so manifests need no
 * second read of large outputs); "" after a cp_atomic_pwrite or cp_atomic_skip (or when writing
 * a staged handle's buffered bytes failed: commit then fails with that error). */
void cp_atomic_sha256(cp_atomic_file *f, char out_hex[65]);
/* fsync (once, here; writeback was started while writing and older pages dropped from the page
 * cache) + rename over `path` + fsync folder; frees the handle (also on error). */
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
/* Removes the temporaries of `path` left by dead processes on this host (see above); returns how
 * many were removed. Writers call it themselves; exposed for tests and tools. */
int cp_sweep_stale_temporaries(const char *path);
/* This host's name as temporaries carry it: at most 32 bytes of [A-Za-z0-9_.] ("_" when empty). */
void cp_host_tag(char out[33]);
/* 1 when the folder entry `entry` is a temporary of the output named `base` (".BASE.tmp-PID-HOST-X"),
 * with its owner's pid and host tag; 0 otherwise. */
int cp_temporary_owner(long *pid, char host[33], const char *entry, const char *base);
/* rm -rf of `path` without following symlinks; 0, or -1 when something could not be removed. */
int cp_remove_tree(const char *path);
/* Whether an atomic output at `path` (file or folder) can be named: its temporary beside it
 * (".NAME.tmp-PID-HOST-XXXXXX") must fit NAME_MAX bytes, so a long name is refused before any
 * work rather than when the output is written. CP_EARG naming the path and the longest name. */
int cp_atomic_name_check(const char *path);

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
/* 1 when `path` ends with `suffix` (".onnx", ".index.json"), else 0. */
int cp_path_has_suffix(const char *path, const char *suffix);
/* 1 when `path` is a regular file (symlinks followed), 0 when absent or anything else: for
 * choosing among candidate files, not for opening one (cp_open_input refuses with a reason). */
int cp_path_is_file(const char *path);

#endif
