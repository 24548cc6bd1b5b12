/* Worker pool for the CPU engine: a generation counter wakes the workers, an atomic counter
 * hands out items, and the last worker to finish wakes the caller. */
#include "engine/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

struct cp_pool {
  int size;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t start, done;
  unsigned long gen;   /* bumped for every job */
  int active;          /* workers still running the current job */
  bool stop;
  cp_pool_fn fn;
  void *ctx;
  size_t n_items;
  atomic_size_t next;
  float *scratch; /* [n_threads, CP_POOL_SCRATCH_FLOATS] */
};

typedef struct {
  cp_pool *pool;
  int id;
} worker_arg;

static void work(cp_pool *p, int id) {
  size_t i;
  while ((i = atomic_fetch_add(&p->next, 1)) < p->n_items) p->fn(p->ctx, i, id);
}

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  cp_pool *p = wa->pool;
  int id = wa->id;
  free(wa);
  unsigned long seen = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (p->gen == seen && !p->stop) pthread_cond_wait(&p->start, &p->mu);
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    work(p, id);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

int cp_pool_create(cp_pool **out, int n_threads) {
  *out = NULL;
  if (n_threads < 1) n_threads = 1;
  cp_pool *p = calloc(1, sizeof *p);
  CP_CHECK_ALLOC(p, "engine: thread pool");
  p->threads = calloc((size_t)n_threads, sizeof *p->threads);
  p->scratch = malloc((size_t)n_threads * CP_POOL_SCRATCH_FLOATS * sizeof *p->scratch);
  if (!p->threads || !p->scratch) {
    free(p->threads);
    free(p->scratch);
    free(p);
    return cp_nomem("engine: thread pool");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->start, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->next, 0);
  p->size = 1;
  for (int t = 1; t < n_threads; t++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) break;
    wa->pool = p;
    wa->id = t;
    if (pthread_create(&p->threads[t], NULL, worker_main, wa) != 0) {
      free(wa);
      break; /* run with the threads we have */
    }
    p->size++;
  }
  *out = p;
  return 0;
}

void cp_pool_free(cp_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  for (int t = 1; t < p->size; t++) pthread_join(p->threads[t], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->start);
  pthread_cond_destroy(&p->done);
  free(p->threads);
  free(p->scratch);
  free(p);
}

float *cp_pool_scratch(cp_pool *p, int worker) {
  return p->scratch + (size_t)worker * CP_POOL_SCRATCH_FLOATS;
}

int cp_pool_size(const cp_pool *p) { return p->size; }

void cp_pool_run(cp_pool *p, size_t n_items, cp_pool_fn fn, void *ctx) {
  if (n_items == 0) return;
  if (p->size == 1 || n_items == 1) {
    for (size_t i = 0; i < n_items; i++) fn(ctx, i, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n_items = n_items;
  atomic_store(&p->next, 0);
  p->active = p->size - 1;
  p->gen++;
  pthread_cond_broadcast(&p->start);
  pthread_mutex_unlock(&p->mu);
  work(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
