/* Floor: base. The monotonic clock (ctxpatch/base/clock.h). */
#include <time.h>

#include "ctxpatch/base/clock.h"

double cp_monotonic_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
