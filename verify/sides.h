/* Internal to verify/: the two sides of a certification (patched and baseline) run as one step,
 * side 1 on a second host thread when asked (verify/sides.c). */
#ifndef CTXPATCH_VERIFY_SIDES_H
#define CTXPATCH_VERIFY_SIDES_H

#include <stdbool.h>

/* One side's work: 0 or a negative cp_err with the message set on the calling thread. It touches
 * only what belongs to `side` (its engine, cache and output slots), never the other side's. */
typedef int (*verify_side_fn)(void *ctx, int side);

/* Runs fn for sides 0 .. sides - 1 (1 or 2): one after the other, or with `two_threads` side 1 on a
 * new thread while side 0 runs here. Either way the result is side 0's failure if any, else side
 * 1's, its message set on the calling thread: the order a sequential run reports. */
int verify_sides_run(int sides, bool two_threads, verify_side_fn fn, void *ctx);

#endif
