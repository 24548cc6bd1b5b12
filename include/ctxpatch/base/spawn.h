/* Floor: base. Running a helper program (the runtime-check node script, docs/certificate.md) as a
 * child process without a shell: posix_spawnp of argv, stdin from /dev/null, stdout captured up to
 * a bound, the last line of stderr kept for the error message, killed after a timeout.
 *
 * Nothing is written to the terminal and no signal disposition of the caller changes. The child
 * inherits the environment. */
#ifndef CTXPATCH_BASE_SPAWN_H
#define CTXPATCH_BASE_SPAWN_H

#include <stddef.h>

typedef struct {
  char *out; /* stdout, NUL-terminated (owned; free()) */
  size_t out_len;
  int status;         /* exit status (0..255), or 128 + signal when killed */
  char err_line[512]; /* last non-empty line of stderr ("" when none) */
} cp_spawn_result;

/* Runs argv[0] (looked up on PATH) with argv (NULL-terminated) and waits for it. Returns 0 when the
 * child ran to its end, whatever its status (read res->status); CP_ENOTFOUND when argv[0] cannot be
 * started; CP_EOVERFLOW (the child killed) when stdout passes `max_out` bytes; CP_EIO (the child
 * killed) after `timeout_s` seconds. `what` names the run in messages. The caller frees res->out,
 * also after an error. */
int cp_spawn_capture(cp_spawn_result *res, const char *const argv[], size_t max_out, double timeout_s,
                     const char *what);

#endif
