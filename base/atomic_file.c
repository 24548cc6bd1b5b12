/* Atomic output (files and folders, see include/ctxpatch/base/io.h) and the whole-file read and
 * path join its callers share. */
#define _GNU_SOURCE /* renameat2 and RENAME_EXCHANGE (glibc 2.28+) */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "base/hash_pipe.h"
#include "base/json_strict.h"
#include "ctxpatch/base/io.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct cp_atomic_file {
  char *path;
  char *tmp; /* NULL when writing through a character device */
  int fd;
  uint64_t written;
  uint64_t wb_started, wb_dropped; /* bytes handed to writeback, and dropped from the page cache */
  int copy_ok;                     /* copy_file_range not yet refused by the kernel */
  cp_sha256 *hash;
  cp_hash_pipe *pipe; /* hashes `hash` on its own thread */
  int rewritten;      /* a cp_atomic_pwrite changed written bytes: `hash` is stale */
  /* Staged handles (cp_atomic_open_staged): every byte goes through two aligned buffers. */
  unsigned char *stage[2]; /* [STAGE_BYTES] each, STAGE_ALIGN-aligned; NULL when not staged */
  size_t stage_len;        /* bytes in stage[stage_k] */
  int stage_k;
  uint64_t stage_ticket[2]; /* the hash job of each buffer's last write */
  int direct;               /* the descriptor is O_DIRECT (only while `written` is STAGE_ALIGN-aligned) */
  int stage_rc;             /* a failed flush inside cp_atomic_sha256, reported by commit */
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

/* This host's name as it goes into temporaries: at most 32 bytes of [A-Za-z0-9_.], so it can
 * be compared and cannot be confused with the '-' separators around it. */
void cp_host_tag(char out[33]) {
  char h[256] = "";
  if (gethostname(h, sizeof h - 1) != 0) h[0] = '\0';
  size_t n = 0;
  for (const char *p = h; *p && n < 32; p++)
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.')
      out[n++] = *p;
  if (n == 0) out[n++] = '_';
  out[n] = '\0';
}

/* "dir/name" -> "dir/.name.tmp-PID-HOST-XXXXXX" template: the owner is named so that a later run
 * can tell a temporary of a killed process from one still being written. */
static char *temp_template(const char *path) {
  char *copy = strdup(path);
  if (!copy) return NULL;
  char *base = basename(copy);
  char *parent = parent_of(path);
  char *tmp = NULL, host[33];
  cp_host_tag(host);
  if (parent) {
    size_t n = strlen(parent) + strlen(base) + strlen(host) + 48;
    tmp = malloc(n);
    if (tmp) snprintf(tmp, n, "%s/.%s.tmp-%ld-%s-XXXXXX", parent, base, (long)getpid(), host);
  }
  free(parent);
  free(copy);
  return tmp;
}

int cp_atomic_name_check(const char *path) {
  char *tmp = temp_template(path), *copy = strdup(path);
  int rc = 0;
  if (!tmp || !copy) {
    rc = cp_error_set(CP_ENOMEM, "%s: out of memory", path);
  } else {
    size_t base = strlen(basename(copy)), n = strlen(strrchr(tmp, '/') + 1);
    if (n > NAME_MAX)
      rc = cp_error_set(CP_EARG, "%s: a name of %zu bytes: its temporary beside it (%zu bytes) would pass the %d-byte "
                        "limit on a file name; at most %zu bytes here", path, base, n, NAME_MAX,
                        base + NAME_MAX > n ? base + NAME_MAX - n : 0);
  }
  free(tmp);
  free(copy);
  return rc;
}


int cp_temporary_owner(long *pid, char host[33], const char *entry, const char *base) {
  size_t bl = strlen(base);
  if (entry[0] != '.' || strncmp(entry + 1, base, bl) != 0 || strncmp(entry + 1 + bl, ".tmp-", 5) != 0) return 0;
  const char *p = entry + 1 + bl + 5;
  char *end;
  errno = 0;
  long v = strtol(p, &end, 10);
  if (end == p || *end != '-' || v <= 0 || errno) return 0;
  const char *h = end + 1, *dash = strchr(h, '-');
  if (!dash || dash == h || dash - h > 32) return 0;
  memcpy(host, h, (size_t)(dash - h));
  host[dash - h] = '\0';
  *pid = v;
  return 1;
}

/* The owner's pid when `entry` is a temporary of `base` made on this host, else 0. */
static long stale_owner(const char *entry, const char *base, const char *host) {
  long pid;
  char h[33];
  return cp_temporary_owner(&pid, h, entry, base) && !strcmp(h, host) ? pid : 0;
}

int cp_sweep_stale_temporaries(const char *path) {
  char *copy = strdup(path), *parent = parent_of(path), host[33];
  int removed = 0;
  DIR *d = copy && parent ? opendir(parent) : NULL;
  cp_host_tag(host);
  const char *base = copy ? basename(copy) : "";
  struct dirent *e;
  while (d && (e = readdir(d))) {
    long pid = stale_owner(e->d_name, base, host);
    /* ESRCH only: EPERM means the process lives (as another user). */
    if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char *child = cp_path_join(parent, e->d_name);
    if (child && cp_remove_tree(child) == 0) removed++;
    free(child);
  }
  if (d) closedir(d);
  free(parent);
  free(copy);
  return removed;
}

static void atomic_free(cp_atomic_file *f);

int cp_atomic_open(cp_atomic_file **out, const char *path) {
  *out = NULL;
  int rc = 0;
  cp_atomic_file *f = calloc(1, sizeof *f);
  CP_CHECK_ALLOC(f, path);
  f->fd = -1;
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);
  cp_output kind;
  if ((rc = cp_output_kind(&kind, path, 0)) < 0 || (rc = cp_input_check_output(path, 0)) < 0) goto done;
  if (kind == CP_OUTPUT_THROUGH) {
    /* A device is written in place: renaming over it would replace /dev/null with a file. */
    struct stat st;
    if ((f->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY)) < 0)
      rc = cp_error_set(CP_EIO, "%s: cannot open: %s", path, strerror(errno));
    else if (fstat(f->fd, &st) != 0 || !S_ISCHR(st.st_mode))
      rc = cp_error_set(CP_EFILETYPE, "%s: output changed while being opened", path);
    if (rc == 0) rc = cp_sha256_new(&f->hash);
    if (rc == 0) rc = cp_hash_pipe_new(&f->pipe, f->hash);
    goto done;
  }
  cp_sweep_stale_temporaries(path);
  CP_CHECK_ALLOC_GOTO(f->tmp = temp_template(path), path);
  if ((f->fd = mkstemp(f->tmp)) < 0) {
    rc = cp_error_set(CP_EIO, "%s: cannot create temporary file: %s", path, strerror(errno));
    goto done;
  }
  fchmod(f->fd, 0644);
  f->copy_ok = 1;
  if ((rc = cp_sha256_new(&f->hash)) == 0) rc = cp_hash_pipe_new(&f->pipe, f->hash);
done:
  if (rc < 0) {
    if (f->fd >= 0) cp_atomic_abort(f); /* the temporary exists: remove it too */
    else atomic_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

/* A staged buffer: a multiple of every O_DIRECT alignment (logical block, page) and big enough that
 * one write per buffer costs nothing next to filling it. */
#define STAGE_BYTES ((size_t)8 << 20)
#define STAGE_ALIGN ((size_t)4096)
#define HUGE_PAGE ((size_t)2 << 20)

int cp_atomic_open_staged(cp_atomic_file **out, const char *path) {
  int rc = cp_atomic_open(out, path);
  if (rc < 0) return rc;
  cp_atomic_file *f = *out;
  for (int k = 0; k < 2; k++)
    if (!(f->stage[k] = aligned_alloc(HUGE_PAGE, STAGE_BYTES))) {
      cp_atomic_abort(f);
      *out = NULL;
      return cp_nomem("%s: staging buffers", path);
    } else { /* huge pages where the kernel has them: fewer TLB misses, and O_DIRECT pins 4 pages, not 2048 */
      (void)madvise(f->stage[k], STAGE_BYTES, MADV_HUGEPAGE);
    }
  /* Where the filesystem takes O_DIRECT (ext4, xfs; tmpfs since 6.6), full buffers skip the page
   * cache: no copy into it, no writeback to start and drop. Elsewhere the buffers are written. */
  int fl = f->tmp ? fcntl(f->fd, F_GETFL) : -1;
  f->direct = fl >= 0 && fcntl(f->fd, F_SETFL, fl | O_DIRECT) == 0;
  return 0;
}

/* Writeback is started every WB_STEP bytes (sync_file_range), and what was written more than
 * WB_LAG bytes ago is waited for and dropped from the page cache (POSIX_FADV_DONTNEED): the disk
 * works while we write, the final fsync has little left to do, and a large output does not push
 * everything else out of the page cache. Errors here are left for fsync at commit to report. */
#define WB_STEP ((uint64_t)8 << 20)
#define WB_LAG ((uint64_t)64 << 20)

static void writeback(cp_atomic_file *f) {
  if (!f->tmp || f->written - f->wb_started < WB_STEP) return;
  (void)sync_file_range(f->fd, (off_t)f->wb_started, (off_t)(f->written - f->wb_started), SYNC_FILE_RANGE_WRITE);
  f->wb_started = f->written;
  if (f->wb_started - f->wb_dropped < WB_LAG + WB_STEP) return;
  uint64_t end = f->wb_started - WB_LAG;
  (void)sync_file_range(f->fd, (off_t)f->wb_dropped, (off_t)(end - f->wb_dropped),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
  (void)posix_fadvise(f->fd, (off_t)f->wb_dropped, (off_t)(end - f->wb_dropped), POSIX_FADV_DONTNEED);
  f->wb_dropped = end;
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
  writeback(f);
  return 0;
}

/* ---------------------------------------------------------------- staged handles */

/* Leaves O_DIRECT: the next write is not whole aligned blocks, or the filesystem refused one. */
static void direct_off(cp_atomic_file *f) {
  int fl = fcntl(f->fd, F_GETFL);
  if (fl >= 0) (void)fcntl(f->fd, F_SETFL, fl & ~O_DIRECT);
  f->direct = 0;
}

/* Writes a staging buffer's p[0..len): its whole blocks with O_DIRECT while that is on, the rest
 * (a partial tail, or everything after an EINVAL: the flag taken but an alignment refused)
 * buffered, which ends direct writing. */
static int stage_write(cp_atomic_file *f, const unsigned char *p, size_t len) {
  size_t whole = f->direct ? len / STAGE_ALIGN * STAGE_ALIGN : 0;
  while (whole > 0) {
    ssize_t n = write(f->fd, p, whole);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL) break;
    if (n < 0) return cp_error_set(CP_EIO, "%s: write failed: %s", f->path, strerror(errno));
    p += n, len -= (size_t)n, whole -= (size_t)n, f->written += (uint64_t)n;
    if ((size_t)n % STAGE_ALIGN) break; /* a short write off the block grid */
  }
  if (len == 0) return 0;
  if (f->direct) direct_off(f);
  return write_all(f, (const char *)p, len);
}

/* Queues the filling buffer for the hash and writes it, then switches to the other buffer once
 * the hash is done with that one. */
static int stage_flush(cp_atomic_file *f) {
  int k = f->stage_k;
  size_t len = f->stage_len;
  if (len == 0) return 0;
  f->stage_ticket[k] = cp_hash_pipe_push(f->pipe, f->stage[k], len, NULL, 0);
  int rc = stage_write(f, f->stage[k], len);
  f->stage_k = k ^ 1, f->stage_len = 0;
  cp_hash_pipe_wait(f->pipe, f->stage_ticket[k ^ 1]);
  return rc;
}

unsigned char *cp_atomic_room(cp_atomic_file *f, size_t *room) {
  assert(f->stage[0]);
  *room = STAGE_BYTES - f->stage_len; /* never 0: a full buffer is flushed at once */
  return f->stage[f->stage_k] + f->stage_len;
}

int cp_atomic_advance(cp_atomic_file *f, size_t n) {
  assert(f->stage[0] && n <= STAGE_BYTES - f->stage_len);
  f->stage_len += n;
  return f->stage_len == STAGE_BYTES ? stage_flush(f) : 0;
}

/* Copies data[0..len) into the staging buffers; with src_fd >= 0 (the same bytes at src_off of that
 * file) read() takes them from the page cache instead: no faults on the mapping, no pages to drop
 * (memcpy from the mapping where the descriptor cannot be read at an offset, or reads short). */
static int stage_copy(cp_atomic_file *f, const void *data, size_t len, int src_fd, uint64_t src_off) {
  const unsigned char *p = data;
  int rc = 0;
  while (rc == 0 && len > 0) {
    size_t room, n;
    unsigned char *at = cp_atomic_room(f, &room);
    n = len < room ? len : room;
    ssize_t got = src_fd >= 0 ? pread(src_fd, at, n, (off_t)src_off) : -1;
    if (got < 0 || (size_t)got > n) got = 0;
    if ((size_t)got < n) memcpy(at + got, p + got, n - (size_t)got);
    p += n, len -= n, src_off += n;
    rc = cp_atomic_advance(f, n);
  }
  return rc;
}

/* Before a write that does not append (a rewrite, a hole) or the end: the staged bytes go out and
 * O_DIRECT ends (the file's end may leave the block grid). */
static int stage_finish(cp_atomic_file *f) {
  int rc = f->stage[0] ? stage_flush(f) : 0;
  if (f->direct) direct_off(f);
  return rc;
}

/* ---------------------------------------------------------------- writes */

/* Writes under this size are hashed from a copy when the hash thread is busy (from the caller's
 * buffer, on this thread, when it is idle); larger ones are hashed from the caller's buffer on
 * the hash thread while this one writes, and waited for before returning. */
#define PARALLEL_HASH_MIN ((size_t)4 << 20)

int cp_atomic_write(cp_atomic_file *f, const void *data, size_t len) {
  if (len == 0) return 0;
  if (f->stage[0]) return stage_copy(f, data, len, -1, 0);
  if (len >= PARALLEL_HASH_MIN) {
    uint64_t k = cp_hash_pipe_push(f->pipe, data, len, NULL, 0);
    int rc = write_all(f, data, len);
    cp_hash_pipe_wait(f->pipe, k); /* the caller's buffer must stay valid until both are done */
    return rc;
  }
  if (cp_hash_pipe_idle(f->pipe)) {
    cp_sha256_update(f->hash, data, len);
  } else {
    void *copy = malloc(len);
    CP_CHECK_ALLOC(copy, f->path);
    memcpy(copy, data, len);
    cp_hash_pipe_push(f->pipe, copy, len, copy, 0);
  }
  return write_all(f, data, len);
}

int cp_atomic_write_queued(cp_atomic_file *f, const void *data, size_t len, uint64_t *ticket) {
  *ticket = 0;
  if (len == 0) return 0;
  if (f->stage[0]) return stage_copy(f, data, len, -1, 0); /* copied: the caller's buffer is free at once */
  *ticket = cp_hash_pipe_push(f->pipe, data, len, NULL, 0);
  return write_all(f, data, len);
}

void cp_atomic_wait(cp_atomic_file *f, uint64_t ticket) {
  if (ticket) cp_hash_pipe_wait(f->pipe, ticket);
}

/* Copies len bytes of src_fd from src_off to the end of the output in the kernel; the count copied
 * (maybe short of len, 0 when the kernel refuses the pair of files: then write() takes over). */
static int copy_range(size_t *copied, cp_atomic_file *f, int src_fd, uint64_t src_off, size_t len) {
  *copied = 0;
  loff_t in = (loff_t)src_off;
  while (f->copy_ok && *copied < len) {
    ssize_t n = copy_file_range(src_fd, &in, f->fd, NULL, len - *copied, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && *copied == 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP ||
                                  errno == EBADF || errno == ETXTBSY || errno == EPERM)) {
      f->copy_ok = 0; /* not between these files: write() from the mapping from now on */
      break;
    }
    if (n < 0) return cp_error_set(CP_EIO, "%s: copy_file_range failed: %s", f->path, strerror(errno));
    if (n == 0) break; /* the source ended early (truncated under us): write() says the rest */
    *copied += (size_t)n;
    f->written += (uint64_t)n;
  }
  writeback(f);
  return 0;
}

int cp_atomic_write_mapped(cp_atomic_file *f, const void *data, size_t len, int src_fd, uint64_t src_off, int drop) {
  if (len == 0) return 0;
  if (f->stage[0]) { /* copied into the stage, which the hash reads: any pages touched can go at once */
    int rc = stage_copy(f, data, len, src_fd, src_off);
    if (drop) cp_drop_pages(data, len);
    return rc;
  }
  int kernel = src_fd >= 0 && f->tmp && f->copy_ok;
  /* The hash thread drops the pages only when the kernel copies: write() from the mapping would
   * fault them back in after a drop that came first, and they would stay resident. */
  uint64_t k = cp_hash_pipe_push(f->pipe, data, len, NULL, drop && kernel);
  size_t copied = 0;
  int rc = kernel ? copy_range(&copied, f, src_fd, src_off, len) : 0;
  if (rc == 0 && copied < len) {
    rc = write_all(f, (const char *)data + copied, len - copied);
    if (drop) { /* both done with the pages (the hash overlapped the write): drop them here */
      cp_hash_pipe_wait(f->pipe, k);
      cp_drop_pages(data, len);
    }
  }
  return rc;
}

int cp_atomic_pwrite(cp_atomic_file *f, uint64_t offset, const void *data, size_t len) {
  if (!f->tmp) return 0; /* through a character device the bytes are gone already: nothing to rewrite */
  int rc = stage_finish(f);
  if (rc < 0) return rc;
  if (offset > f->written || len > f->written - offset)
    return cp_error_set(CP_EARG, "%s: rewrite of bytes [%llu, +%zu) outside the %llu written", f->path,
                        (unsigned long long)offset, len, (unsigned long long)f->written);
  for (size_t done = 0; done < len;) {
    ssize_t n = pwrite(f->fd, (const char *)data + done, len - done, (off_t)(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return cp_error_set(CP_EIO, "%s: write failed: %s", f->path, n < 0 ? strerror(errno) : "no progress");
    done += (size_t)n;
  }
  f->rewritten = 1;
  return 0;
}

int cp_atomic_skip(cp_atomic_file *f, uint64_t len) {
  if (len == 0) return 0;
  if (!f->tmp) return cp_error_set(CP_EARG, "%s: a hole cannot be written through a character device", f->path);
  int rc = stage_finish(f);
  if (rc < 0) return rc;
  if (len > (uint64_t)INT64_MAX - f->written)
    return cp_error_set(CP_EOVERFLOW, "%s: a hole of %llu bytes passes the largest file offset", f->path,
                        (unsigned long long)len);
  off_t end = (off_t)(f->written + len);
  if (ftruncate(f->fd, end) != 0 || lseek(f->fd, end, SEEK_SET) != end)
    return cp_error_set(CP_EIO, "%s: extending by a hole failed: %s", f->path, strerror(errno));
  f->written += len;
  f->rewritten = 1; /* the running digest skipped the hole's zeros */
  return 0;
}

uint64_t cp_atomic_tell(const cp_atomic_file *f) { return f->written + f->stage_len; }

void cp_atomic_sha256(cp_atomic_file *f, char out_hex[65]) {
  if (f->stage_len && f->stage_rc == 0) f->stage_rc = stage_flush(f);
  cp_hash_pipe_drain(f->pipe);
  if (f->rewritten || f->stage_rc) out_hex[0] = '\0';
  else cp_sha256_peek(f->hash, out_hex);
}

static void atomic_free(cp_atomic_file *f) {
  cp_hash_pipe_free(f->pipe); /* before the hash it feeds, and before a mapping it reads goes */
  cp_sha256_free(f->hash);
  free(f->stage[0]);
  free(f->stage[1]);
  free(f->tmp);
  free(f->path);
  free(f);
}

void cp_atomic_abort(cp_atomic_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) unlink(f->tmp);
  atomic_free(f);
}

int cp_atomic_commit(cp_atomic_file *f) {
  char *parent = NULL;
  int rc = f->stage_rc ? f->stage_rc : stage_finish(f);
  if (rc < 0) goto done;
  if (!f->tmp) { /* written through a device: nothing to rename */
    rc = close(f->fd) == 0 ? 0 : cp_error_set(CP_EIO, "%s: close failed: %s", f->path, strerror(errno));
    f->fd = -1;
    goto done;
  }
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
  /* Checked again: the path may have become a symlink or a FIFO while we wrote. */
  cp_output kind;
  if ((rc = cp_output_kind(&kind, f->path, 0)) < 0) goto done;
  if (kind == CP_OUTPUT_THROUGH) {
    rc = cp_error_set(CP_EFILETYPE, "%s: output became a device while being written", f->path);
    goto done;
  }
  if (rename(f->tmp, f->path) != 0) {
    rc = cp_error_set(CP_EIO, "%s: rename failed: %s", f->path, strerror(errno));
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(parent = parent_of(f->path), f->path);
  rc = fsync_dir(parent);
  if (rc < 0) { /* the rename happened: the temporary is gone */
    free(f->tmp);
    f->tmp = NULL;
  }
done:
  free(parent);
  if (rc < 0) {
    cp_atomic_abort(f);
    return rc;
  }
  atomic_free(f);
  return 0;
}

int cp_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *child = cp_path_join(path, e->d_name);
        if (child) cp_remove_tree(child);
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
  if (!replace && lstat(path, &st) == 0)
    return cp_error_set(CP_EEXIST, "%s: output already exists (remove it or pass --force)", path);
  cp_output kind;
  int rc = cp_output_kind(&kind, path, 1);
  if (rc == 0) rc = cp_input_check_output(path, 1);
  if (rc < 0) return rc;
  cp_sweep_stale_temporaries(path);
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
  if (d->tmp) cp_remove_tree(d->tmp);
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
  cp_output kind;
  if ((rc = cp_output_kind(&kind, d->path, 1)) < 0) goto done;
  if (kind == CP_OUTPUT_REPLACE && !d->replace) {
    rc = cp_error_set(CP_EEXIST, "%s: output appeared while being written (pass --force to replace it)", d->path);
    goto done;
  }
  if (kind == CP_OUTPUT_REPLACE && renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->path, RENAME_EXCHANGE) == 0) {
    /* One step: the path holds the old folder or the new, never neither. The old one now sits
     * at the temporary's name, which the sweep removes should we die before remove_tree. */
    cp_remove_tree(d->tmp);
    goto synced;
  }
  if (kind == CP_OUTPUT_REPLACE && errno != EINVAL) {
    rc = cp_error_set(CP_EIO, "%s: cannot swap in the new output: %s", d->path, strerror(errno));
    goto done;
  }
  if (kind == CP_OUTPUT_REPLACE) {
    /* The filesystem has no RENAME_EXCHANGE (EINVAL): the two-rename protocol, with a window in
     * which the path is missing (the old folder waits at the temporary's name + ".old"). */
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
  if (old) cp_remove_tree(old);
synced:
  CP_CHECK_ALLOC_GOTO(parent = parent_of(d->path), d->path);
  rc = fsync_dir(parent);
  if (rc < 0) { /* renamed already: nothing of ours to remove */
    free(d->tmp);
    d->tmp = NULL;
  }
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
  FILE *fp = NULL;
  int rc = cp_fopen_input(&fp, path);
  if (rc < 0) return rc;
  char *buf = NULL;
  struct stat st;
  if (fstat(fileno(fp), &st) != 0) {
    rc = cp_error_set(CP_EIO, "%s: fstat: %s", path, strerror(errno));
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
  char *text = cp_json_print(doc, true), *line = NULL;
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
