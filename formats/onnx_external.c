/* External data of the ONNX reader (formats/onnx_graph_priv.h, cp_onnx_external_map): a
 * location is opened one component at a time from the model's folder with openat + O_NOFOLLOW,
 * so no symlink (final or parent), no "..", no absolute path and nothing outside that folder is
 * ever opened (onnx's CVE-2022-25882 and CVE-2024-27318); the file must be regular and is mapped
 * read-only whole, once per location; the byte ranges tensors use are recorded, sorted and merged
 * (what the digest hashes and `patch` copies: a sparse 12 GB file with one 256-byte tensor costs
 * 256 bytes). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "formats/onnx_graph_priv.h"

#define LOCATION_MAX 4096 /* bytes of a location, at most (PATH_MAX) */

/* Refuses what no file inside the folder can be named: empty, absolute, '..' or empty parts. */
static int location_check(const cp_onnx_model *m, const char *loc, const char *what) {
  char q[128];
  size_t len = strlen(loc);
  if (!len || len > LOCATION_MAX)
    return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external location of %zu bytes", m->path, what, len);
  if (loc[0] == '/')
    return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external location '%s' is absolute (must be relative to the "
                        "model's folder)", m->path, what, cp_onnx_q(q, loc));
  for (const char *p = loc;;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external location '%s' has a '..' component (escapes the "
                          "model's folder)", m->path, what, cp_onnx_q(q, loc));
    if (n == 0)
      return cp_error_set(CP_EONNX_EXTERNAL, "%s: %s: external location '%s' has an empty component", m->path, what,
                          cp_onnx_q(q, loc));
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

/* openat of each component with O_NOFOLLOW: the descriptor of the final one, a regular file. */
static int open_inside(int *out, const cp_onnx_model *m, const char *loc, const char *what) {
  char q[128], part[LOCATION_MAX + 1];
  int dir = m->priv->dirfd, fd = -1, rc = 0;
  for (const char *p = loc;;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    memcpy(part, p, n), part[n] = 0;
    int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (e ? O_DIRECTORY : O_NONBLOCK);
    fd = openat(dir, part, flags);
    int err = errno;
    if (dir != m->priv->dirfd) close(dir);
    if (fd < 0) {
      if (err == ELOOP || (err == ENOTDIR && e))
        return cp_error_set(CP_EFILETYPE, "%s: %s: external location '%s': '%s' is a symbolic link or not a "
                            "folder (refused: it could lead outside the model's folder)", m->path, what,
                            cp_onnx_q(q, loc), part);
      return cp_error_set(err == ENOENT ? CP_ENOTFOUND : CP_EIO, "%s: %s: external data file '%s': %s", m->path,
                          what, cp_onnx_q(q, loc), strerror(err));
    }
    if (!e) break;
    dir = fd, p = e + 1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) rc = cp_error_set(CP_EIO, "%s: %s: external data file '%s': %s", m->path, what,
                                            cp_onnx_q(q, loc), strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = cp_error_set(CP_EFILETYPE, "%s: %s: external data file '%s' is a %s, not a regular file", m->path, what,
                      cp_onnx_q(q, loc), cp_file_type_name(st.st_mode));
  if (rc < 0) {
    close(fd);
    return rc;
  }
  *out = fd;
  return 0;
}

int cp_onnx_external_map(const cp_onnx_datafile **file, cp_onnx_model *m, const char *location, const char *what) {
  cp_onnx_model_priv *p = m->priv;
  for (size_t k = 0; k < p->n_files; k++)
    if (!strcmp(p->files[k].location, location)) {
      *file = &p->files[k];
      return 0;
    }
  int fd = -1, rc = location_check(m, location, what);
  if (rc == 0) rc = open_inside(&fd, m, location, what);
  if (rc < 0) return rc;
  struct stat st;
  cp_onnx_datafile f = {NULL, NULL, 0, NULL, 0, 0};
  if (fstat(fd, &st) != 0) {
    rc = cp_error_set(CP_EIO, "%s: %s: external data file: %s", m->path, what, strerror(errno));
    goto done;
  }
  f.size = (uint64_t)st.st_size;
  /* An input of the command like the graph: no output may replace it (named as the graph's folder + location). */
  const char *slash = strrchr(m->path, '/');
  int dn = slash ? (int)(slash - m->path) : 0;
  char *named = malloc((size_t)dn + strlen(location) + 2);
  if (named) sprintf(named, "%.*s%s%s", dn, m->path, slash ? "/" : "", location);
  cp_input_note_fd(fd, named ? named : location);
  free(named);
  if (f.size > 0) {
    if (f.size > SIZE_MAX) {
      rc = cp_error_set(CP_EOVERFLOW, "%s: %s: external data file too large to map", m->path, what);
      goto done;
    }
    void *map = mmap(NULL, (size_t)f.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      rc = cp_error_set(CP_EIO, "%s: %s: mapping external data file: %s", m->path, what, strerror(errno));
      goto done;
    }
    f.map = map;
  }
  if ((rc = CP_ARRAY_RESERVE(p->files, p->cap_files, p->n_files + 1, m->path)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(f.location = strdup(location), m->path);
  p->files[p->n_files] = f;
  *file = &p->files[p->n_files++];
  f.map = NULL;
done:
  if (f.map) munmap((void *)f.map, (size_t)f.size);
  if (fd >= 0) close(fd);
  return rc;
}

void cp_onnx_external_free(cp_onnx_model_priv *p) {
  for (size_t k = 0; k < p->n_files; k++) {
    if (p->files[k].map) munmap((void *)p->files[k].map, (size_t)p->files[k].size);
    free(p->files[k].location);
    free(p->files[k].ranges);
  }
  free(p->files);
  p->files = NULL, p->n_files = p->cap_files = 0;
}

int cp_onnx_external_use(cp_onnx_model *m, const cp_onnx_datafile *f, uint64_t off, uint64_t len) {
  cp_onnx_datafile *w = &m->priv->files[f - m->priv->files];
  if (!len) return 0;
  int rc = CP_ARRAY_RESERVE(w->ranges, w->cap_ranges, w->n_ranges + 1, m->path);
  if (rc < 0) return rc;
  w->ranges[w->n_ranges++] = (cp_onnx_range){off, len};
  return 0;
}

static int by_offset(const void *a, const void *b) {
  const cp_onnx_range *x = a, *y = b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

void cp_onnx_external_finish(cp_onnx_model_priv *p) {
  for (size_t k = 0; k < p->n_files; k++) {
    cp_onnx_datafile *f = &p->files[k];
    if (!f->n_ranges) continue;
    qsort(f->ranges, f->n_ranges, sizeof *f->ranges, by_offset);
    size_t n = 1;
    for (size_t i = 1; i < f->n_ranges; i++) {
      cp_onnx_range *last = &f->ranges[n - 1], *r = &f->ranges[i];
      uint64_t end = last->offset + last->length; /* each range lies inside the file: no overflow */
      if (r->offset <= end) {
        if (r->offset + r->length > end) last->length = r->offset + r->length - last->offset;
      } else f->ranges[n++] = *r;
    }
    f->n_ranges = n;
  }
}

void cp_onnx_data_ranges(const cp_onnx_range **ranges, size_t *n, uint64_t *file_size, const void **map,
                         const cp_onnx_model *m, size_t k) {
  const cp_onnx_datafile *f = &m->priv->files[k];
  *ranges = f->ranges, *n = f->n_ranges, *file_size = f->size, *map = f->map;
}
