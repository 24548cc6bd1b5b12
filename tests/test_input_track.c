/* The inputs a process noted (base/paths.c, cp_input_note / cp_input_check_output; issue 33
 * item 2): an output that is a noted file (its path, a symlinked folder's path, a hard link) or a
 * folder output holding one is refused with CP_EOVERLAP, as are the atomic writers' outputs; a
 * new file beside it, a character device and a file inside this process's own temporary pass;
 * nothing is noted while tracking is off, and cp_input_forget clears the notes. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/io.h"
#include "test.h"

static char tmpdir[] = "/tmp/ctxpatch-test-input-track-XXXXXX";

static const char *tpath(const char *name) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
  return buf[k];
}

int main(void) {
  if (!mkdtemp(tmpdir)) return 1;
  CHECK(mkdir(tpath("g"), 0755) == 0);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("g/w.data"), "abc", 3));
  CHECK(symlink("g", tpath("alias")) == 0);
  CHECK(link(tpath("g/w.data"), tpath("hard")) == 0);

  /* Off: nothing is noted. */
  cp_input_note(tpath("g/w.data"));
  CHECK_RC(0, cp_input_check_output(tpath("g/w.data"), 0));

  cp_input_track(true);
  int fd = open(tpath("g/w.data"), O_RDONLY);
  cp_input_note_fd(fd, tpath("g/w.data"));
  close(fd);
  CHECK_RC(CP_EOVERLAP, cp_input_check_output(tpath("g/w.data"), 0));
  CHECK_RC(CP_EOVERLAP, cp_input_check_output(tpath("alias/w.data"), 0));
  CHECK_RC(CP_EOVERLAP, cp_input_check_output(tpath("hard"), 0));
  CHECK_RC(CP_EOVERLAP, cp_input_check_output(tpath("g"), 1));
  CHECK_RC(CP_EOVERLAP, cp_input_check_output(tmpdir, 1));
  CHECK_RC(0, cp_input_check_output(tpath("g/new.bin"), 0));
  CHECK_RC(0, cp_input_check_output(tpath("g/sub"), 1));
  CHECK_RC(0, cp_input_check_output("/dev/null", 0));
  /* The writers refuse it and leave it whole. */
  CHECK_RC(CP_EOVERLAP, cp_write_file_atomic(NULL, tpath("alias/w.data"), "xyz", 3));
  cp_atomic_dir *d = NULL;
  CHECK_RC(CP_EOVERLAP, cp_atomic_dir_open(&d, tpath("g"), 1));
  char *text = NULL;
  size_t len = 0;
  CHECK_RC(0, cp_read_file(&text, &len, tpath("g/w.data"), 16));
  CHECK(text && len == 3 && !memcmp(text, "abc", 3));
  free(text);

  /* A file read back from this process's own temporary is its work in progress, not an input. */
  char own[600];
  snprintf(own, sizeof own, ".out.tmp-%ld-host-AbCdEf", (long)getpid());
  CHECK(mkdir(tpath(own), 0755) == 0);
  char inside[700];
  snprintf(inside, sizeof inside, "%s/%s/config.json", tmpdir, own);
  CHECK_RC(0, cp_write_file_atomic(NULL, inside, "{}", 2));
  cp_input_note(inside);
  CHECK_RC(0, cp_write_file_atomic(NULL, inside, "{ }", 3));

  cp_input_forget();
  CHECK_RC(0, cp_input_check_output(tpath("g/w.data"), 0));

  /* A noted input since removed (patch's own-export check reads a regenerated export in a
   * temporary folder, then removes it) frees its inode, which the next file created often gets:
   * that new file is no input (seen in CI: config.json refused as "model.onnx.data"). */
  CHECK(mkdir(tpath("gone"), 0755) == 0);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("gone/x.data"), "abc", 3));
  struct stat was;
  CHECK(stat(tpath("gone/x.data"), &was) == 0);
  cp_input_note(tpath("gone/x.data"));
  unlink(tpath("gone/x.data"));
  rmdir(tpath("gone"));
  int reused = 0;
  for (int i = 0; i < 64 && !reused; i++) {
    char name[32];
    snprintf(name, sizeof name, "new%d", i);
    int nfd = open(tpath(name), O_CREAT | O_WRONLY, 0644);
    struct stat now;
    if (nfd >= 0 && fstat(nfd, &now) == 0 && now.st_dev == was.st_dev && now.st_ino == was.st_ino) {
      reused = 1;
      CHECK_RC(0, cp_input_check_output(tpath(name), 0));
    }
    if (nfd >= 0) close(nfd);
  }
  if (!reused) printf("note: no new file reused the removed input's inode here; the reuse case was not exercised\n");
  for (int i = 0; i < 64; i++) {
    char name[32];
    snprintf(name, sizeof name, "new%d", i);
    unlink(tpath(name));
  }
  cp_input_forget();

  unlink(inside);
  rmdir(tpath(own));
  unlink(tpath("hard"));
  unlink(tpath("alias"));
  unlink(tpath("g/w.data"));
  rmdir(tpath("g"));
  rmdir(tmpdir);
  return test_finish();
}
