/* A helper program run without a shell, its output bounded and its time limited
 * (include/ctxpatch/base/spawn.h). */
#define _GNU_SOURCE /* pipe2 */
#include "ctxpatch/base/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/clock.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/strbuf.h"

extern char **environ;

/* Keeps the last non-empty line of what stderr sent so far (err holds at most the last 4 KiB). */
static void last_line(char *dst, size_t cap, const char *err, size_t len) {
  while (len && (err[len - 1] == '\n' || err[len - 1] == '\r')) len--;
  size_t start = len;
  while (start && err[start - 1] != '\n') start--;
  size_t n = len - start < cap - 1 ? len - start : cap - 1;
  memcpy(dst, err + start, n);
  dst[n] = '\0';
}

/* Reads what is ready on fd into b (stdout, bounded by max) or the stderr tail; *open = 0 at EOF. */
static int drain(int fd, cp_strbuf *b, size_t max, int *open, bool tail) {
  char buf[65536];
  ssize_t got = read(fd, buf, sizeof buf);
  if (got < 0) return errno == EINTR || errno == EAGAIN ? 0 : -1;
  if (got == 0) {
    *open = 0;
    return 0;
  }
  if (tail && b->len + (size_t)got > 4096) cp_strbuf_reset(b); /* only the end matters */
  if (!tail && b->len + (size_t)got > max) return 1;
  cp_strbuf_put(b, buf, (size_t)got);
  return 0;
}

/* Waits for the child, killing it first when asked; its status as spawn.h states it. */
static int reap(pid_t pid, bool kill_it) {
  int st = 0;
  if (kill_it) kill(pid, SIGKILL);
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
}

int cp_spawn_capture(cp_spawn_result *res, const char *const argv[], size_t max_out, double timeout_s,
                     const char *what) {
  memset(res, 0, sizeof *res);
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, rc = 0;
  cp_strbuf out = {0}, err = {0};
  posix_spawn_file_actions_t fa;
  bool fa_made = false;
  pid_t pid = -1;
  if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
    rc = cp_error_set(CP_EIO, "%s: pipe: %s", what, strerror(errno));
    goto done;
  }
  if (posix_spawn_file_actions_init(&fa) != 0) {
    rc = cp_nomem("%s", what);
    goto done;
  }
  fa_made = true;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, po[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
  int e = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  close(po[1]), close(pe[1]);
  po[1] = pe[1] = -1;
  if (e != 0) {
    pid = -1;
    rc = cp_error_set(CP_ENOTFOUND, "%s: cannot start '%s': %s", what, argv[0], strerror(e));
    goto done;
  }
  int open_out = 1, open_err = 1;
  double deadline = cp_monotonic_seconds() + timeout_s;
  while (open_out || open_err) {
    double left = deadline - cp_monotonic_seconds();
    if (left <= 0) {
      res->status = reap(pid, true);
      pid = -1;
      rc = cp_error_set(CP_EIO, "%s: no answer after %g s: stopped", what, timeout_s);
      goto done;
    }
    struct pollfd fds[2] = {{open_out ? po[0] : -1, POLLIN, 0}, {open_err ? pe[0] : -1, POLLIN, 0}};
    int n = poll(fds, 2, left > 1000 ? 1000000 : (int)(left * 1000) + 1);
    if (n < 0 && errno != EINTR) {
      rc = cp_error_set(CP_EIO, "%s: poll: %s", what, strerror(errno));
      goto done;
    }
    int d = 0;
    if (n > 0 && fds[0].revents) d = drain(po[0], &out, max_out, &open_out, false);
    if (d == 0 && n > 0 && fds[1].revents) d = drain(pe[0], &err, 0, &open_err, true);
    if (d != 0) {
      res->status = reap(pid, true);
      pid = -1;
      rc = d > 0 ? cp_error_set(CP_EOVERFLOW, "%s: output past %zu bytes: stopped", what, max_out)
                 : cp_error_set(CP_EIO, "%s: read: %s", what, strerror(errno));
      goto done;
    }
  }
  /* Both pipes closed: the child is ending; it still may not outlive the deadline. */
  for (int st; pid > 0;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) {
      res->status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255;
      pid = -1;
    } else if (w < 0 && errno != EINTR) {
      rc = cp_error_set(CP_EIO, "%s: waitpid: %s", what, strerror(errno));
      pid = -1;
      goto done;
    } else if (cp_monotonic_seconds() > deadline) {
      res->status = reap(pid, true);
      pid = -1;
      rc = cp_error_set(CP_EIO, "%s: no exit after %g s: stopped", what, timeout_s);
      goto done;
    } else {
      usleep(2000);
    }
  }
  if (out.oom || err.oom) {
    rc = cp_nomem("%s", what);
    goto done;
  }
  if (err.len) last_line(res->err_line, sizeof res->err_line, err.s, err.len);
  if (!out.s) cp_strbuf_put(&out, "", 0);
  CP_CHECK_ALLOC_GOTO(out.s, what);
  res->out = out.s, res->out_len = out.len;
  out.s = NULL;
done:
  if (pid > 0) res->status = reap(pid, true);
  if (fa_made) posix_spawn_file_actions_destroy(&fa);
  for (int i = 0; i < 2; i++) {
    if (po[i] >= 0) close(po[i]);
    if (pe[i] >= 0) close(pe[i]);
  }
  cp_strbuf_free(&out);
  cp_strbuf_free(&err);
  return rc;
}
