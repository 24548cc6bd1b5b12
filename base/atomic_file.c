/* Atomic output (files and folders, see include/ctxpatch/base/io.h) and the whole-file read and
 * path join its callers share. */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "base/json_strict.h"
#include "ctxpatch/base/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct cp_atomic_file {
  char *path;
  char *tmp;
  int fd;
  uint64_t written;
  cp_sha256 *hash;
};

struct cp_atomic_dir {
  char *path;
  char *tmp;
  int replace;
};

char *cp_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *p = malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  size_t n = a;
  if (a && dir[a - 1] != '/') p[n++] = '/';
  memcpy(p + n, name, b + 1);
  return p;
}

static char *parent_of(const char *path) {
  char *copy = strdup(path);
  if (!copy) return NULL;
  char *parent = strdup(dirname(copy));
  free(copy);
  return parent;
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return cp_error_set(CP_EIO, "%s: cannot open folder: %s", dir, strerror(errno));
  int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : cp_error_set(CP_EIO, "%s: fsync: %s", dir, strerror(errno));
  close(fd);
  return rc;
}

/* "dir/name" -> "dir/.name.tmp-XXXXXX" template */
static char *temp_template(const char *path) {
  char *copy = strdup(path);
  if (!copy) return NULL;
  char *base = basename(copy);
  char *parent = parent_of(path);
  char *tmp = NULL;
  if (parent) {
    size_t n = strlen(parent) + strlen(base) + 16;
    tmp = malloc(n);
    if (tmp) snprintf(tmp, n, "%s/.%s.tmp-XXXXXX", parent, base);
  }
  free(parent);
  free(copy);
  return tmp;
}

static void atomic_free(cp_atomic_file *f);

int cp_atomic_open(cp_atomic_file **out, const char *path) {
  *out = NULL;
  int rc = 0;
  cp_atomic_file *f = calloc(1, sizeof *f);
  CP_CHECK_ALLOC(f, path);
  f->fd = -1;
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);
  CP_CHECK_ALLOC_GOTO(f->tmp = temp_template(path), path);
  if ((f->fd = mkstemp(f->tmp)) < 0) {
    rc = cp_error_set(CP_EIO, "%s: cannot create temporary file: %s", path, strerror(errno));
    goto done;
  }
  fchmod(f->fd, 0644);
  rc = cp_sha256_new(&f->hash);
done:
  if (rc < 0) {
    if (f->fd >= 0) cp_atomic_abort(f); /* the temporary exists: remove it too */
    else atomic_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

typedef struct {
  cp_sha256 *hash;
  const void *data;
  size_t len;
} hash_job;

static void *hash_worker(void *arg) {
  hash_job *job = arg;
  cp_sha256_update(job->hash, job->data, job->len);
  return NULL;
}

static int write_all(cp_atomic_file *f, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(f->fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return cp_error_set(CP_EIO, "%s: write failed: %s", f->path, strerror(errno));
    }
    p += n;
    len -= (size_t)n;
    f->written += (uint64_t)n;
  }
  return 0;
}

/* Large writes hash on a second thread while this one writes: SHA-256 (about 1.8 GB/s with
 * SHA-NI) and the copy into the page cache then overlap instead of adding up. */
#define PARALLEL_HASH_MIN ((size_t)4 << 20)

int cp_atomic_write(cp_atomic_file *f, const void *data, size_t len) {
  hash_job job = {f->hash, data, len};
  pthread_t worker;
  if (len < PARALLEL_HASH_MIN || pthread_create(&worker, NULL, hash_worker, &job) != 0) {
    cp_sha256_update(f->hash, data, len);
    return write_all(f, data, len);
  }
  int rc = write_all(f, data, len);
  pthread_join(worker, NULL); /* the caller's buffer must stay valid until both are done */
  return rc;
}

uint64_t cp_atomic_tell(const cp_atomic_file *f) { return f->written; }

void cp_atomic_sha256(const cp_atomic_file *f, char out_hex[65]) { cp_sha256_peek(f->hash, out_hex); }

static void atomic_free(cp_atomic_file *f) {
  cp_sha256_free(f->hash);
  free(f->tmp);
  free(f->path);
  free(f);
}

void cp_atomic_abort(cp_atomic_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  unlink(f->tmp);
  atomic_free(f);
}

int cp_atomic_commit(cp_atomic_file *f) {
  int rc = 0;
  char *parent = NULL;
  if (fsync(f->fd) != 0) {
    rc = cp_error_set(CP_EIO, "%s: fsync failed: %s", f->path, strerror(errno));
    goto done;
  }
  if (close(f->fd) != 0) {
    f->fd = -1;
    rc = cp_error_set(CP_EIO, "%s: close failed: %s", f->path, strerror(errno));
    goto done;
  }
  f->fd = -1;
  if (rename(f->tmp, f->path) != 0) {
    rc = cp_error_set(CP_EIO, "%s: rename failed: %s", f->path, strerror(errno));
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(parent = parent_of(f->path), f->path);
  rc = fsync_dir(parent);
done:
  free(parent);
  if (rc < 0) {
    cp_atomic_abort(f);
    return rc;
  }
  atomic_free(f);
  return 0;
}

static int remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *child = cp_path_join(path, e->d_name);
        if (child) remove_tree(child);
        free(child);
      }
      closedir(d);
    }
    return rmdir(path);
  }
  return unlink(path);
}

int cp_atomic_dir_open(cp_atomic_dir **out, const char *path, int replace) {
  *out = NULL;
  struct stat st;
  if (!replace && stat(path, &st) == 0)
    return cp_error_set(CP_EEXIST, "%s: output already exists (remove it or pass --force)", path);
  int rc = 0;
  cp_atomic_dir *d = calloc(1, sizeof *d);
  CP_CHECK_ALLOC(d, path);
  d->replace = replace;
  CP_CHECK_ALLOC_GOTO(d->path = strdup(path), path);
  CP_CHECK_ALLOC_GOTO(d->tmp = temp_template(path), path);
  if (!mkdtemp(d->tmp))
    rc = cp_error_set(CP_EIO, "%s: cannot create temporary folder: %s", path, strerror(errno));
done:
  if (rc < 0) { /* nothing was created on disk: free only */
    free(d->tmp);
    free(d->path);
    free(d);
    return rc;
  }
  chmod(d->tmp, 0755);
  *out = d;
  return 0;
}

const char *cp_atomic_dir_path(const cp_atomic_dir *d) { return d->tmp; }

void cp_atomic_dir_abort(cp_atomic_dir *d) {
  if (!d) return;
  remove_tree(d->tmp);
  free(d->tmp);
  free(d->path);
  free(d);
}

static int fsync_tree_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return cp_error_set(CP_EIO, "%s: cannot list folder: %s", dir, strerror(errno));
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *child = cp_path_join(dir, e->d_name);
    CP_CHECK_ALLOC_GOTO(child, dir);
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) {
      rc = fsync_tree_files(child);
    } else {
      int fd = open(child, O_RDONLY);
      if (fd < 0 || fsync(fd) != 0)
        rc = cp_error_set(CP_EIO, "%s: fsync failed: %s", child, strerror(errno));
      if (fd >= 0) close(fd);
    }
    free(child);
  }
done:
  closedir(d);
  return rc < 0 ? rc : fsync_dir(dir);
}

int cp_atomic_dir_commit(cp_atomic_dir *d) {
  int rc = fsync_tree_files(d->tmp);
  char *parent = NULL, *old = NULL;
  if (rc < 0) goto done;
  struct stat st;
  if (d->replace && stat(d->path, &st) == 0) {
    /* Swap the old output aside first, so a crash leaves the old or the new, never neither. */
    CP_CHECK_ALLOC_GOTO(old = malloc(strlen(d->tmp) + 8), d->path);
    sprintf(old, "%s.old", d->tmp);
    if (rename(d->path, old) != 0) {
      rc = cp_error_set(CP_EIO, "%s: cannot move old output aside: %s", d->path, strerror(errno));
      goto done;
    }
  }
  if (rename(d->tmp, d->path) != 0) {
    rc = cp_error_set(CP_EIO, "%s: rename failed: %s", d->path, strerror(errno));
    if (old) rename(old, d->path);
    goto done;
  }
  if (old) remove_tree(old);
  CP_CHECK_ALLOC_GOTO(parent = parent_of(d->path), d->path);
  rc = fsync_dir(parent);
done:
  free(parent);
  free(old);
  if (rc < 0) {
    cp_atomic_dir_abort(d);
    return rc;
  }
  free(d->tmp);
  free(d->path);
  free(d);
  return 0;
}

int cp_read_file(char **out, size_t *out_len, const char *path, size_t max_len) {
  *out = NULL;
  if (out_len) *out_len = 0;
  FILE *fp = fopen(path, "rb");
  if (!fp) return cp_error_set(errno == ENOENT ? CP_ENOTFOUND : CP_EIO, "%s: cannot open: %s", path, strerror(errno));
  int rc = 0;
  char *buf = NULL;
  struct stat st;
  if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = cp_error_set(CP_EIO, "%s: not a regular file", path);
    goto done;
  }
  if ((uint64_t)st.st_size > max_len) {
    rc = cp_error_set(CP_EOVERFLOW, "%s: file is %lld bytes, over the %zu-byte limit", path,
                      (long long)st.st_size, max_len);
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(buf = malloc((size_t)st.st_size + 1), path);
  if (fread(buf, 1, (size_t)st.st_size, fp) != (size_t)st.st_size) {
    rc = cp_error_set(CP_EIO, "%s: short read", path);
    goto done;
  }
  buf[st.st_size] = '\0';
  *out = buf;
  if (out_len) *out_len = (size_t)st.st_size;
  buf = NULL;
done:
  free(buf);
  fclose(fp);
  return rc;
}

int cp_write_file_atomic(char sha256_hex[65], const char *path, const void *data, size_t len) {
  cp_atomic_file *f = NULL;
  int rc = cp_atomic_open(&f, path);
  if (rc < 0) return rc;
  if ((rc = cp_atomic_write(f, data, len)) < 0) {
    cp_atomic_abort(f);
    return rc;
  }
  if (sha256_hex) cp_atomic_sha256(f, sha256_hex);
  return cp_atomic_commit(f); /* frees the handle, also on error */
}

int cp_copy_file_atomic(char sha256_hex[65], const char *dst, const char *src, size_t max_len) {
  char *buf = NULL;
  size_t len = 0;
  int rc = cp_read_file(&buf, &len, src, max_len);
  if (rc == 0) rc = cp_write_file_atomic(sha256_hex, dst, buf, len);
  free(buf);
  return rc;
}

int cp_write_json_atomic(char sha256_hex[65], const char *path, const cJSON *doc) {
  int rc = 0;
  char *text = cJSON_Print(doc), *line = NULL;
  CP_CHECK_ALLOC_GOTO(text, path);
  size_t n = strlen(text);
  CP_CHECK_ALLOC_GOTO(line = realloc(text, n + 2), path);
  text = NULL; /* now owned by `line` */
  memcpy(line + n, "\n", 2);
  rc = cp_write_file_atomic(sha256_hex, path, line, n + 1);
done:
  free(text);
  free(line);
  return rc;
}
