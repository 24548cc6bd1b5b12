/* A SHA-256 fed on its own thread (base/hash_pipe.h): the atomic writer queues the bytes it writes
 * here, so hashing runs on one core while the writing thread moves bytes on the other. */
#define _GNU_SOURCE
#include "base/hash_pipe.h"

#include "ctxpatch/base/error.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Jobs queued at most: with 16 MiB chunks the hash lags the writer by 128 MiB at most, which
 * bounds the resident pages of a mapped input that are written but not yet hashed and dropped. */
#define QCAP 8

typedef struct {
  const void *data;
  size_t len;
  void *owned; /* freed once hashed */
  int drop;    /* madvise(MADV_DONTNEED) the whole pages of [data, data+len) once hashed */
} job;

struct cp_hash_pipe {
  cp_sha256 *hash; /* borrowed */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* signalled on every push, completion and stop */
  job q[QCAP];
  uint64_t pushed, done; /* job q[k % QCAP] is job number k */
  bool started, stop;
  pthread_t thread;
};

void cp_drop_pages(const void *data, size_t len) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = ((uintptr_t)data + page - 1) & ~(page - 1), stop = ((uintptr_t)data + len) & ~(page - 1);
  if (stop > start) (void)madvise((void *)start, stop - start, MADV_DONTNEED);
}

static void run_job(cp_sha256 *hash, const job *j) {
  cp_sha256_update(hash, j->data, j->len);
  if (j->drop) cp_drop_pages(j->data, j->len);
  free(j->owned);
}

static void *worker(void *arg) {
  cp_hash_pipe *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->done == p->pushed && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
    if (p->done == p->pushed) break; /* stopped and empty */
    job j = p->q[p->done % QCAP];
    pthread_mutex_unlock(&p->mu); /* the queue slot stays ours until `done` moves past it */
    run_job(p->hash, &j);
    pthread_mutex_lock(&p->mu);
    p->done++;
    pthread_cond_broadcast(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int cp_hash_pipe_new(cp_hash_pipe **out, cp_sha256 *hash) {
  *out = NULL;
  cp_hash_pipe *p = calloc(1, sizeof *p);
  if (!p) return cp_error_set(CP_ENOMEM, "out of memory starting the hash thread");
  p->hash = hash;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  *out = p;
  return 0;
}

uint64_t cp_hash_pipe_push(cp_hash_pipe *p, const void *data, size_t len, void *owned, int drop) {
  job j = {data, len, owned, drop};
  pthread_mutex_lock(&p->mu);
  if (!p->started && pthread_create(&p->thread, NULL, worker, p) == 0) p->started = true;
  if (!p->started) { /* no thread to be had: hash here, in order (the queue is empty) */
    pthread_mutex_unlock(&p->mu);
    run_job(p->hash, &j);
    pthread_mutex_lock(&p->mu);
    uint64_t k = ++p->pushed;
    p->done = p->pushed;
    pthread_mutex_unlock(&p->mu);
    return k;
  }
  while (p->pushed - p->done >= QCAP) pthread_cond_wait(&p->cv, &p->mu);
  p->q[p->pushed % QCAP] = j;
  uint64_t k = ++p->pushed;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return k;
}

int cp_hash_pipe_idle(cp_hash_pipe *p) {
  pthread_mutex_lock(&p->mu);
  int idle = p->done == p->pushed;
  pthread_mutex_unlock(&p->mu);
  return idle;
}

void cp_hash_pipe_wait(cp_hash_pipe *p, uint64_t k) {
  pthread_mutex_lock(&p->mu);
  while (p->done < k) pthread_cond_wait(&p->cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void cp_hash_pipe_drain(cp_hash_pipe *p) {
  pthread_mutex_lock(&p->mu);
  uint64_t k = p->pushed;
  pthread_mutex_unlock(&p->mu);
  cp_hash_pipe_wait(p, k);
}

void cp_hash_pipe_free(cp_hash_pipe *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (p->started) pthread_join(p->thread, NULL); /* hashes what is queued: owned buffers get freed */
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
