/* Floor: base (private). A SHA-256 fed in order on its own thread (one per output file), so the
 * atomic writer hashes on one core while it moves bytes on another (base/atomic_file.c).
 * Jobs are hashed in the order pushed; at most 8 wait at a time (push blocks beyond that). */
#ifndef CTXPATCH_HASH_PIPE_H
#define CTXPATCH_HASH_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/io.h"

typedef struct cp_hash_pipe cp_hash_pipe;

/* `hash` is borrowed and must outlive the pipe. The thread starts on the first push. */
int cp_hash_pipe_new(cp_hash_pipe **out, cp_sha256 *hash);
/* Queues data[0..len) to be hashed; the bytes must stay readable and unchanged until the job is
 * done (cp_hash_pipe_wait on the returned number). `owned` (may be NULL) is freed once hashed;
 * `drop`: the whole pages inside the range are madvise(MADV_DONTNEED)'d once hashed (a read-only
 * mapping of an input). Hashes in place when no thread can be started. Returns the job's number. */
uint64_t cp_hash_pipe_push(cp_hash_pipe *p, const void *data, size_t len, void *owned, int drop);
/* Nonzero when every job pushed is done. */
int cp_hash_pipe_idle(cp_hash_pipe *p);
/* Waits until job `k` (and all before it) is hashed. */
void cp_hash_pipe_wait(cp_hash_pipe *p, uint64_t k);
/* Waits until every job pushed so far is hashed. */
void cp_hash_pipe_drain(cp_hash_pipe *p);
/* madvise(MADV_DONTNEED) on the whole pages inside data[0..len) of a read-only mapping: they are
 * read again from the file if touched. */
void cp_drop_pages(const void *data, size_t len);
/* Finishes the queued jobs, stops the thread and frees the pipe; NULL is a no-op. */
void cp_hash_pipe_free(cp_hash_pipe *p);

#endif
