/* The two sides of a certification as one step (verify/sides.h). With a device each engine queues
 * its work on its own stream, so side 1 driven from a second host thread overlaps side 0 on the
 * GPU; every result lands in the side's own slots, so the caller collects them by index and the
 * verdict does not depend on which side finishes first. */
#include "verify/sides.h"

#include <pthread.h>
#include <stdio.h>

#include "ctxpatch/base/error.h"

typedef struct {
  verify_side_fn fn;
  void *ctx;
  int rc;
  char msg[1024]; /* the thread's error message (cp_error_* is per thread) */
} side_job;

static void *side_main(void *arg) {
  side_job *j = arg;
  j->rc = j->fn(j->ctx, 1);
  if (j->rc < 0) snprintf(j->msg, sizeof j->msg, "%s", cp_error_message());
  return NULL;
}

int verify_sides_run(int sides, bool two_threads, verify_side_fn fn, void *ctx) {
  if (sides < 2 || !two_threads) {
    int rc = 0;
    for (int s = 0; s < sides && rc == 0; s++) rc = fn(ctx, s);
    return rc;
  }
  side_job job = {fn, ctx, 0, ""};
  pthread_t th;
  if (pthread_create(&th, NULL, side_main, &job) != 0) /* no thread: run it here */
    return verify_sides_run(sides, false, fn, ctx);
  int rc = fn(ctx, 0);
  char msg0[1024] = "";
  if (rc < 0) snprintf(msg0, sizeof msg0, "%s", cp_error_message());
  pthread_join(th, NULL);
  if (rc < 0) return cp_error_set(rc, "%s", msg0); /* side 0's, as a sequential run reports */
  if (job.rc < 0) return cp_error_set(job.rc, "%s", job.msg);
  return 0;
}
