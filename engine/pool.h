/* A fixed pool of worker threads that runs "items 0..n-1 of one job" (internal to verify/).
 * The calling thread works too, as worker 0, so a pool of size 1 starts no thread. */
#ifndef CTXPATCH_VERIFY_POOL_H
#define CTXPATCH_VERIFY_POOL_H

#include <stddef.h>

typedef struct cp_pool cp_pool;
typedef void (*cp_pool_fn)(void *ctx, size_t item, int worker /* 0 .. size-1 */);

/* n_threads >= 1 workers in all (n_threads - 1 new threads). The caller owns *out. */
int cp_pool_create(cp_pool **out, int n_threads);
void cp_pool_free(cp_pool *pool);
int cp_pool_size(const cp_pool *pool);
/* Worker `worker`'s own scratch of CP_POOL_SCRATCH_FLOATS floats (the matrix products widen
 * F16/BF16 weight tiles into it), allocated with the pool: valid until cp_pool_free. */
enum { CP_POOL_SCRATCH_FLOATS = 256 * 512 };
float *cp_pool_scratch(cp_pool *pool, int worker);
/* Runs fn(ctx, i, worker) for every i in [0, n_items), in any order, and returns when all are
 * done. Not reentrant: one job at a time, from one thread. */
void cp_pool_run(cp_pool *pool, size_t n_items, cp_pool_fn fn, void *ctx);

#endif
