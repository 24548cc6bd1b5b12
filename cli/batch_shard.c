/* ctxpatch batch --shard: which slice of the jobs this process takes (docs/batch.md, "Sharding
 * over machines"): I/N given, or read from the scheduler. A Slurm array's task ids need not start
 * at 0 (--array=1-8) nor be more than one (a resubmit with --array=3): the shard is the task's
 * position in the array, (ID - MIN) / STEP of (MAX - MIN) / STEP + 1. A Kubernetes Indexed Job
 * sets only the index (JOB_COMPLETION_INDEX); the count is the Job's `completions`, given. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch.h"

#define SHARD_MAX 1000000ull

/* A decimal integer in [0, 10^9] with nothing around it. */
static bool number(unsigned long long *out, const char *s) {
  if (!s || !*s || strspn(s, "0123456789") != strlen(s) || strlen(s) > 10) return false;
  *out = strtoull(s, NULL, 10);
  return *out <= 1000000000ull;
}

/* The variable's value as a number, or a message naming it. */
static bool env_number(unsigned long long *out, const char *name, bool required, unsigned long long dflt, char *why,
                       size_t cap, const char *shard) {
  const char *v = getenv(name);
  if (!v && !required) {
    *out = dflt;
    return true;
  }
  if (!v)
    snprintf(why, cap, "--shard %s: %s is not set (not run as a %s task)", shard, name,
             !strcmp(shard, "slurm") ? "Slurm job array" : "Kubernetes Indexed Job");
  else if (!number(out, v)) snprintf(why, cap, "--shard %s: %s='%.40s' is not a non-negative integer", shard, name, v);
  else return true;
  return false;
}

static bool from_slurm(unsigned long long *i, unsigned long long *n, char *why, size_t cap) {
  unsigned long long id, lo, hi, step, count;
  if (!env_number(&id, "SLURM_ARRAY_TASK_ID", true, 0, why, cap, "slurm") ||
      !env_number(&lo, "SLURM_ARRAY_TASK_MIN", true, 0, why, cap, "slurm") ||
      !env_number(&hi, "SLURM_ARRAY_TASK_MAX", true, 0, why, cap, "slurm") ||
      !env_number(&step, "SLURM_ARRAY_TASK_STEP", false, 1, why, cap, "slurm") ||
      !env_number(&count, "SLURM_ARRAY_TASK_COUNT", false, 0, why, cap, "slurm"))
    return false;
  if (step == 0) step = 1;
  if (lo > id || id > hi || (id - lo) % step) {
    snprintf(why, cap, "--shard slurm: task id %llu is not in the array %llu-%llu:%llu", id, lo, hi, step);
    return false;
  }
  *n = (hi - lo) / step + 1;
  *i = (id - lo) / step;
  if (count && count != *n) { /* --array=1,4,6: the task's position in the list is not in the environment */
    snprintf(why, cap,
             "--shard slurm: an array of %llu tasks with ids %llu-%llu:%llu is a list, not a range: "
             "submit a range (--array=A-B) or give --shard I/N",
             count, lo, hi, step);
    return false;
  }
  if (*n > SHARD_MAX) {
    snprintf(why, cap, "--shard slurm: %llu tasks (at most %llu)", *n, SHARD_MAX);
    return false;
  }
  return true;
}

bool batch_shard_parse(unsigned long long *i, unsigned long long *n, const char *v, unsigned long long count, char *why,
                       size_t cap) {
  if (count && strcmp(v, "k8s") != 0) {
    snprintf(why, cap, "--shard-count is for --shard k8s (Slurm's array gives its own size)");
    return false;
  }
  if (!strcmp(v, "slurm")) return from_slurm(i, n, why, cap);
  if (!strcmp(v, "k8s")) {
    if (!count) {
      snprintf(why, cap, "--shard k8s needs --shard-count N (the Job's completions)");
      return false;
    }
    if (!env_number(i, "JOB_COMPLETION_INDEX", true, 0, why, cap, "k8s")) return false;
    *n = count;
    if (*i < *n) return true;
    snprintf(why, cap, "--shard k8s: JOB_COMPLETION_INDEX %llu is not below --shard-count %llu", *i, *n);
    return false;
  }
  const char *slash = strchr(v, '/');
  char head[16];
  if (slash && (size_t)(slash - v) < sizeof head) {
    snprintf(head, sizeof head, "%.*s", (int)(slash - v), v);
    if (number(i, head) && number(n, slash + 1) && *n >= 1 && *n <= SHARD_MAX && *i < *n) return true;
  }
  snprintf(why, cap, "--shard expects I/N with 0 <= I < N <= %llu, slurm or k8s; got '%.40s'", SHARD_MAX, v);
  return false;
}
