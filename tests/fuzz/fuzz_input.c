/* See fuzz_input.h. */
#include "fuzz_input.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

static void remove_dir(void) {
  char path[PATH_MAX];
  static const char *names[] = {"tokenizer.json", "tokenizer.model", "model.safetensors", "input.bin",
                                "model.safetensors.index.json", "config.json", "rule.json"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

const char *fuzz_input_file(const char *name, const uint8_t *data, size_t size) {
  static char path[PATH_MAX];
  if (!dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/ctxpatch-fuzz-XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(dir)) return NULL;
    atexit(remove_dir);
  }
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return NULL;
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += (size_t)n;
  }
  close(fd);
  return done == size ? path : NULL;
}
