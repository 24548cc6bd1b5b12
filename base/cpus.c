/* CPUs this process may use (include/ctxpatch/base/cpus.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "ctxpatch/base/cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

int cp_cpu_count(void) {
  long n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN); /* no mask (or more CPUs than cpu_set_t holds) */
  const char *slurm = getenv("SLURM_CPUS_PER_TASK");
  if (slurm && *slurm) {
    char *end;
    errno = 0;
    long s = strtol(slurm, &end, 10);
    if (!errno && !*end && s > 0 && (n <= 0 || s < n)) n = s;
  }
  return n > 0 ? (n < 65536 ? (int)n : 65536) : 1;
}
