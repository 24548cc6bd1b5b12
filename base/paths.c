/* Which paths ctxpatch may read and write (see include/ctxpatch/base/io.h): inputs must be regular
 * files (or folders where one is expected) and are opened without blocking on a FIFO; outputs may
 * replace only regular files and folders, write through character devices, and never overlap the
 * input, nor any file the process noted as one it read. */
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/quote.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cp_file_type_name(unsigned mode) {
  if (S_ISREG(mode)) return "regular file";
  if (S_ISDIR(mode)) return "folder";
  if (S_ISFIFO(mode)) return "FIFO";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  if (S_ISLNK(mode)) return "symlink";
  return "special file";
}

int cp_open_input(const char *path, int dir_ok) {
  /* O_NONBLOCK: open() on a FIFO with no writer would otherwise wait forever. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return cp_error_set(errno == ENOENT ? CP_ENOTFOUND : CP_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = cp_error_set(CP_EIO, "%s: fstat: %s", path, strerror(errno));
    close(fd);
    return rc;
  }
  if (!S_ISREG(st.st_mode) && !(dir_ok && S_ISDIR(st.st_mode))) {
    close(fd);
    return cp_error_set(CP_EFILETYPE, "%s: is a %s, expected a regular file%s", path, cp_file_type_name(st.st_mode),
                        dir_ok ? " or a folder" : "");
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int rc = cp_error_set(CP_EIO, "%s: fcntl: %s", path, strerror(errno));
    close(fd);
    return rc;
  }
  return fd;
}

int cp_fopen_input(FILE **out, const char *path) {
  *out = NULL;
  int fd = cp_open_input(path, 0);
  if (fd < 0) return fd;
  if (!(*out = fdopen(fd, "rb"))) {
    close(fd);
    return cp_error_set(CP_ENOMEM, "%s: fdopen: %s", path, strerror(errno));
  }
  return 0;
}

int cp_output_kind(cp_output *kind, const char *path, int folder) {
  struct stat st;
  *kind = CP_OUTPUT_NEW;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 0;
    return cp_error_set(CP_EIO, "%s: cannot check output: %s", path, strerror(errno));
  }
  if (S_ISLNK(st.st_mode)) {
    /* A symlink to a character device (/dev/stdout on a terminal) writes through like the device;
     * any other symlink is refused rather than followed into, or replaced by, another file. */
    struct stat target;
    if (!folder && stat(path, &target) == 0 && S_ISCHR(target.st_mode)) {
      *kind = CP_OUTPUT_THROUGH;
      return 0;
    }
    return cp_error_set(CP_EFILETYPE, "%s: output is a symlink; refusing to follow or replace it (give the real path)",
                        path);
  }
  if (folder ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) {
    *kind = CP_OUTPUT_REPLACE;
    return 0;
  }
  if (!folder && S_ISCHR(st.st_mode)) {
    *kind = CP_OUTPUT_THROUGH;
    return 0;
  }
  return cp_error_set(CP_EFILETYPE, "%s: output is a %s; refusing to replace it with a %s", path,
                      cp_file_type_name(st.st_mode), folder ? "folder" : "file");
}

/* The absolute path `path` names, resolving every symlink in its folders; the last component
 * is resolved too when it exists. NULL when its folder does not exist. */
static char *real_output_path(const char *path) {
  char *r = realpath(path, NULL);
  if (r) return r;
  char *a = strdup(path), *b = strdup(path), *out = NULL;
  if (a && b) {
    char *parent = realpath(dirname(a), NULL);
    const char *base = basename(b);
    if (parent && (out = malloc(strlen(parent) + strlen(base) + 2)))
      sprintf(out, "%s%s%s", parent, strcmp(parent, "/") ? "/" : "", base);
    free(parent);
  }
  free(a);
  free(b);
  return out;
}

/* True when `outer` is `inner` or one of its ancestors. */
static int contains(const char *outer, const char *inner) {
  size_t n = strlen(outer);
  if (n == 1 && outer[0] == '/') return 1;
  return strncmp(outer, inner, n) == 0 && (inner[n] == '\0' || inner[n] == '/');
}

int cp_output_outside_input(const char *out, const char *in, int folder) {
  char *ri = realpath(in, NULL), *ro = real_output_path(out);
  int rc = 0;
  /* An input that cannot be resolved fails to open later, with its own message. A new file
   * beside the input's files (a certificate in the model folder) destroys nothing, replacing one
   * of them does; a folder there would become part of the input folder. */
  struct stat st;
  if (ri && ro && (contains(ro, ri) || (contains(ri, ro) && (folder || lstat(ro, &st) == 0))))
    rc = cp_error_set(CP_EOVERLAP, "%s: output %s the input %s", out,
                      !strcmp(ri, ro) ? "is" : contains(ro, ri) ? "contains" : "is inside", in);
  free(ri);
  free(ro);
  return rc;
}

/* ------------------------------------------------------------ the inputs this process read */

typedef struct {
  dev_t dev;
  ino_t ino;
  char *real; /* resolved path, or NULL */
  char *path; /* as the reader named it, for messages */
} noted_input;

static pthread_mutex_t g_inputs_lock = PTHREAD_MUTEX_INITIALIZER;
static noted_input *g_inputs;
static size_t g_n_inputs, g_cap_inputs;
static int g_inputs_lost; /* a note dropped for want of memory: checks refuse rather than pass */
static bool g_inputs_on;

void cp_input_track(bool on) {
  pthread_mutex_lock(&g_inputs_lock);
  g_inputs_on = on;
  pthread_mutex_unlock(&g_inputs_lock);
}

/* Whether `real` lies inside a temporary of this process's own atomic outputs
 * (".NAME.tmp-PID-HOST-XXXXXX", io.h): a file read back from work in progress (patch certifying
 * the folder it is building) is its output, not an input. */
static bool in_own_temporary(const char *real) {
  char needle[40];
  snprintf(needle, sizeof needle, ".tmp-%ld-", (long)getpid());
  for (const char *c = strstr(real, "/."); c; c = strstr(c + 1, "/.")) {
    const char *end = strchr(c + 1, '/'), *hit = strstr(c + 1, needle);
    if (hit && (!end || hit < end)) return end != NULL; /* the temporary itself is no file read */
  }
  return false;
}

static void note(const struct stat *st, char *real, const char *path) {
  pthread_mutex_lock(&g_inputs_lock);
  bool on = g_inputs_on;
  pthread_mutex_unlock(&g_inputs_lock);
  if (!on || (real && in_own_temporary(real))) {
    free(real);
    return;
  }
  char *copy = strdup(path);
  pthread_mutex_lock(&g_inputs_lock);
  for (size_t k = 0; k < g_n_inputs; k++)
    if (g_inputs[k].dev == st->st_dev && g_inputs[k].ino == st->st_ino && real && g_inputs[k].real &&
        !strcmp(g_inputs[k].real, real)) {
      free(real), free(copy);
      pthread_mutex_unlock(&g_inputs_lock);
      return;
    }
  if (g_n_inputs == g_cap_inputs) {
    size_t cap = g_cap_inputs ? 2 * g_cap_inputs : 16;
    noted_input *v = realloc(g_inputs, cap * sizeof *v);
    if (v) g_inputs = v, g_cap_inputs = cap;
  }
  if (g_n_inputs < g_cap_inputs && copy) {
    g_inputs[g_n_inputs++] = (noted_input){st->st_dev, st->st_ino, real, copy};
  } else {
    g_inputs_lost = 1;
    free(real), free(copy);
  }
  pthread_mutex_unlock(&g_inputs_lock);
}

void cp_input_note(const char *path) {
  struct stat st;
  /* Nothing there: the reader fails on it with its own message; nothing to protect. */
  if (!path || stat(path, &st) != 0) return;
  note(&st, realpath(path, NULL), path);
}

void cp_input_note_fd(int fd, const char *path) {
  struct stat st;
  char link[64], buf[PATH_MAX];
  if (fd < 0 || fstat(fd, &st) != 0) return;
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, buf, sizeof buf - 1);
  char *real = NULL;
  if (n > 0 && buf[0] == '/') buf[n] = '\0', real = strdup(buf);
  else real = realpath(path, NULL);
  note(&st, real, path);
}

void cp_input_forget(void) {
  pthread_mutex_lock(&g_inputs_lock);
  for (size_t k = 0; k < g_n_inputs; k++) free(g_inputs[k].real), free(g_inputs[k].path);
  free(g_inputs);
  g_inputs = NULL, g_n_inputs = g_cap_inputs = 0, g_inputs_lost = 0;
  pthread_mutex_unlock(&g_inputs_lock);
}

int cp_input_check_output(const char *out, int folder) {
  struct stat st;
  int exists = lstat(out, &st) == 0, rc = 0;
  if (exists && S_ISCHR(st.st_mode)) return 0; /* written through, nothing replaced */
  char *ro = real_output_path(out);
  pthread_mutex_lock(&g_inputs_lock);
  if (g_inputs_lost) rc = cp_error_set(CP_ENOMEM, "%s: out of memory recording the inputs", out);
  for (size_t k = 0; rc == 0 && k < g_n_inputs; k++) {
    const noted_input *in = &g_inputs[k];
    /* An inode is the input only while the input is still there: a file read and since removed
     * (a temporary of this process) frees its inode for the next file created. */
    struct stat now;
    bool alive = in->real && stat(in->real, &now) == 0 && now.st_dev == in->dev && now.st_ino == in->ino;
    bool same = (ro && in->real && !strcmp(ro, in->real)) ||
                (alive && exists && !S_ISDIR(st.st_mode) && st.st_dev == in->dev && st.st_ino == in->ino);
    char q[512]; /* a data file's name comes from the graph */
    if (same || (folder && ro && in->real && contains(ro, in->real)))
      rc = cp_error_set(CP_EOVERLAP, "%s: output %s %s, an input of this command; refusing to replace it", out,
                        same ? "is" : "contains", cp_quote(q, sizeof q, in->path, strlen(in->path)));
  }
  pthread_mutex_unlock(&g_inputs_lock);
  free(ro);
  return rc;
}

int cp_map_input(const void **map, uint64_t *size, const char *path) {
  int fd = -1, rc = cp_map_input_fd(map, size, &fd, path);
  if (fd >= 0) close(fd);
  return rc;
}

int cp_map_input_fd(const void **map, uint64_t *size, int *fd_out, const char *path) {
  *map = NULL;
  *size = 0;
  *fd_out = -1;
  int fd = cp_open_input(path, 0), rc = 0;
  if (fd < 0) return fd;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = cp_error_set(CP_EIO, "%s: fstat: %s", path, strerror(errno));
  } else if ((uint64_t)st.st_size > SIZE_MAX) {
    rc = cp_error_set(CP_EOVERFLOW, "%s: file too large to map", path);
  } else if (st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) rc = cp_error_set(CP_EIO, "%s: mmap failed: %s", path, strerror(errno));
    else *map = m, *size = (uint64_t)st.st_size;
  }
  if (rc == 0) *fd_out = fd;
  else close(fd);
  return rc;
}

void cp_unmap_input(const void *map, uint64_t size) {
  if (map) munmap((void *)map, (size_t)size);
}

int cp_path_has_suffix(const char *path, const char *suffix) {
  size_t n = strlen(path), k = strlen(suffix);
  return n >= k && !strcmp(path + n - k, suffix);
}

int cp_path_is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
