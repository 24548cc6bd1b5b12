/* base/spawn.c: a helper run without a shell, its stdout bounded, its stderr's last line kept, its
 * exit status passed on, killed at its time limit (the runtime check's subprocess). Uses /bin/sh
 * only as the child program under test. */
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/spawn.h"
#include "test.h"

int main(void) {
  cp_spawn_result r;

  /* Output and status come back; arguments are passed as they are, no shell expands them. */
  const char *echo[] = {"printf", "%s|", "a b", "$HOME", NULL};
  CHECK_RC(0, cp_spawn_capture(&r, echo, 1024, 10, "printf"));
  CHECK(r.status == 0 && r.out && !strcmp(r.out, "a b|$HOME|"));
  free(r.out);

  /* A failing child: its status and the last non-empty line of stderr. */
  const char *fail[] = {"/bin/sh", "-c", "echo first >&2; echo 'the reason' >&2; echo >&2; exit 3", NULL};
  CHECK_RC(0, cp_spawn_capture(&r, fail, 1024, 10, "sh"));
  CHECK(r.status == 3 && !strcmp(r.err_line, "the reason"));
  free(r.out);

  /* More stdout than the bound: stopped, killed, CP_EOVERFLOW. */
  const char *flood[] = {"/bin/sh", "-c", "while :; do echo xxxxxxxxxxxxxxxx; done", NULL};
  CHECK_RC(CP_EOVERFLOW, cp_spawn_capture(&r, flood, 4096, 60, "flood"));
  CHECK(strstr(cp_error_message(), "flood: output past 4096 bytes") != NULL);
  free(r.out);

  /* A child that never answers: killed at the limit (0.2 s against its 5 s sleep), CP_EIO. */
  const char *hang[] = {"/bin/sh", "-c", "sleep 5", NULL};
  CHECK_RC(CP_EIO, cp_spawn_capture(&r, hang, 4096, 0.2, "hang"));
  CHECK(strstr(cp_error_message(), "hang: no answer after 0.2 s") != NULL && r.status == 128 + 9);
  free(r.out);

  /* A child that closes its pipes and lives on is still bounded by the limit. */
  const char *detach[] = {"/bin/sh", "-c", "exec >/dev/null 2>&1; sleep 5", NULL};
  CHECK_RC(CP_EIO, cp_spawn_capture(&r, detach, 4096, 0.2, "detach"));
  free(r.out);

  /* No such program: CP_ENOTFOUND naming it. */
  const char *none[] = {"ctxpatch-no-such-program", NULL};
  CHECK_RC(CP_ENOTFOUND, cp_spawn_capture(&r, none, 4096, 10, "none"));
  CHECK(strstr(cp_error_message(), "ctxpatch-no-such-program") != NULL);
  free(r.out);
  return test_finish();
}
