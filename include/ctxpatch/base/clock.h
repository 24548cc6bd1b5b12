/* Floor: base. The one monotonic clock every timing (printed, never written into an output) and
 * every time budget reads. */
#ifndef CTXPATCH_BASE_CLOCK_H
#define CTXPATCH_BASE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: only differences mean anything. */
double cp_monotonic_seconds(void);

#endif
