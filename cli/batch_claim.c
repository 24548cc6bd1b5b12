/* ctxpatch batch: who works on a job (docs/batch.md, "Two processes, one output folder"). A job is
 * claimed with an open-file-description lock (fcntl F_OFD_SETLK: released by the kernel when the
 * holder dies, shared across hosts by NFS and the cluster filesystems) on OUT.batch-claim.json,
 * which holds the owner record: host, pid, process start (boot id and start tick), the child's
 * pid, and a heartbeat (the file's mtime, touched while the job runs). The record makes the claim
 * safe where a lock is not shared across hosts, and tells which temporaries a dead owner left:
 * the claimer sweeps those of the job, whatever the job's state. */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/json_strict.h"
#include "cli/batch.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/check.h" /* CP_BATCH_STAMP_NAME */

#define RECORD_MAX 4096
/* What a job's temporaries are named after, beside OUT: OUT itself (the folder or GGUF file), a
 * GGUF job's bake folder, the failure record, a GGUF job's stamp and report. */
static const char *const beside[] = {"", ".bake", ".batch-failed.json", ".batch.json", CP_REPORT_SUFFIX};

/* "BOOTID:TICKS" of process `pid` (its start, unique across pid reuse and reboots), "" when gone. */
static void proc_start(char out[64], long pid) {
  char path[64], buf[1024], boot[40] = "";
  out[0] = '\0';
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
    fclose(f);
  }
  boot[strcspn(boot, "\n")] = '\0';
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the name before it may hold spaces */
  for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
  if (p) snprintf(out, 64, "%s:%.*s", boot, (int)strspn(p + 1, "0123456789"), p + 1);
}

/* Whether process `pid` of this host lives: a zombie (killed, not yet reaped) does not. */
static bool pid_alive(long pid) {
  char path[64], buf[512];
  if (kill((pid_t)pid, 0) != 0 && errno != EPERM) return false;
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return true; /* no /proc: kill's answer */
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

static void record_clear(batch_owner *o) { memset(o, 0, sizeof *o); }

/* The owner record, read through `fd` (the claim's own descriptor), or from `path` when fd < 0;
 * its heartbeat is the file's mtime. false: no readable record. */
static bool record_read(batch_owner *o, int fd, const char *path) {
  char buf[RECORD_MAX + 1];
  struct stat st;
  bool own = fd < 0;
  record_clear(o);
  if (own && (fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)) < 0) return false;
  ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, buf, RECORD_MAX, 0) : -1;
  if (own) close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  cJSON *doc = NULL;
  if (cp_json_parse_strict(&doc, buf, (size_t)n, path, 4, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0) {
    cp_error_clear();
    return false;
  }
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(doc, "host"), *p = cJSON_GetObjectItemCaseSensitive(doc, "pid");
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc, "start"), *c = cJSON_GetObjectItemCaseSensitive(doc, "child");
  bool good = cJSON_IsString(h) && strlen(h->valuestring) < sizeof o->host && cJSON_IsNumber(p) &&
              p->valuedouble >= 1 && p->valuedouble < 1e9;
  if (good) {
    snprintf(o->host, sizeof o->host, "%s", h->valuestring);
    o->pid = (long)p->valuedouble;
    if (cJSON_IsString(s)) snprintf(o->start, sizeof o->start, "%s", s->valuestring);
    if (cJSON_IsNumber(c) && c->valuedouble >= 1 && c->valuedouble < 1e9) o->child = (long)c->valuedouble;
    o->heartbeat = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
  }
  cJSON_Delete(doc);
  return o->valid = good;
}

/* Whether the owner of a record still works: on this host, its process with the same start; on
 * another host (where its pid means nothing here), a heartbeat younger than BATCH_CLAIM_STALE_S. */
static bool owner_live(const batch_owner *o) {
  char host[33], start[64];
  cp_host_tag(host);
  if (!o->valid) return false;
  if (strcmp(o->host, host) != 0) return time(NULL) - o->heartbeat < BATCH_CLAIM_STALE_S;
  if (!pid_alive(o->pid)) return false;
  proc_start(start, o->pid);
  return !*o->start || !*start || !strcmp(start, o->start); /* a pid reused by another process */
}

void batch_owner_describe(char *out, size_t cap, const batch_owner *o) {
  snprintf(out, cap, "held by pid %ld on %s (heartbeat %.0f s ago)", o->pid, o->host,
           (double)time(NULL) - o->heartbeat);
}

/* One temporary of the job: which owner made it and whether it may go. */
static batch_temp_state temp_state(long pid, const char *host, const batch_owner *dead, bool live_claim) {
  char me[33];
  cp_host_tag(me);
  if (live_claim) return TEMP_LIVE;
  /* made by the child of a claim that is over (on another host, the only way to know) */
  if (dead && dead->valid && !strcmp(dead->host, host) && dead->child == pid) return TEMP_STALE;
  if (!strcmp(host, me)) return pid_alive(pid) ? TEMP_LIVE : TEMP_STALE;
  return TEMP_UNKNOWN;
}

static int push_temp(batch_temps *t, const char *dir, const char *name, long pid, const char *host,
                     batch_temp_state st) {
  int rc = CP_ARRAY_RESIZE(t->items, t->n + 1, dir);
  if (rc < 0) return rc;
  batch_temp *e = &t->items[t->n];
  CP_CHECK_ALLOC(e->path = cp_path_join(dir, name), dir);
  e->pid = pid;
  snprintf(e->host, sizeof e->host, "%s", host);
  e->state = st;
  t->n++;
  return 0;
}

/* Temporaries in folder `dir` named after any of bases[0..nb). */
static int scan(batch_temps *t, const char *dir, const char *const *bases, size_t nb, const batch_owner *dead,
                bool live_claim) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int rc = 0;
  while (d && rc == 0 && (e = readdir(d))) {
    long pid;
    char host[33];
    for (size_t b = 0; b < nb && rc == 0; b++)
      if (cp_temporary_owner(&pid, host, e->d_name, bases[b]))
        rc = push_temp(t, dir, e->d_name, pid, host, temp_state(pid, host, dead, live_claim));
  }
  if (d) closedir(d);
  return rc;
}

int batch_job_temps(batch_temps *t, const batch_job *j, const batch_owner *dead, bool live_claim) {
  memset(t, 0, sizeof *t);
  const char *slash = strrchr(j->out, '/');
  char *dir = slash ? strndup(j->out, (size_t)(slash - j->out + (slash == j->out))) : strdup(".");
  const char *base = slash ? slash + 1 : j->out;
  char *names[sizeof beside / sizeof *beside] = {0};
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(dir, j->out);
  for (size_t b = 0; b < sizeof beside / sizeof *beside; b++) {
    CP_CHECK_ALLOC_GOTO(names[b] = malloc(strlen(base) + strlen(beside[b]) + 1), j->out);
    sprintf(names[b], "%s%s", base, beside[b]);
  }
  if ((rc = scan(t, dir, (const char *const *)names, sizeof names / sizeof *names, dead, live_claim)) < 0) goto done;
  struct stat st;
  const char *stamp[] = {CP_BATCH_STAMP_NAME}; /* the stamp's temporary inside a folder OUT */
  if (lstat(j->out, &st) == 0 && S_ISDIR(st.st_mode)) rc = scan(t, j->out, stamp, 1, dead, live_claim);
done:
  for (size_t b = 0; b < sizeof names / sizeof *names; b++) free(names[b]);
  free(dir);
  if (rc < 0) batch_temps_free(t);
  return rc;
}

bool batch_dir_has_temps(batch_dirlist *c, const batch_job *j) {
  const char *slash = strrchr(j->out, '/');
  size_t dl = slash ? (size_t)(slash - j->out + (slash == j->out)) : 0;      /* "/x": the folder "/" */
  if (!c->dir || strlen(c->dir) != dl || strncmp(c->dir, j->out, dl) != 0) { /* another folder: list it */
    batch_dirlist_free(c);
    c->dir = strndup(j->out, dl);
    DIR *d = opendir(dl ? c->dir : ".");
    struct dirent *e;
    while (c->dir && d && (e = readdir(d)))
      if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp-") && CP_ARRAY_RESIZE(c->names, c->n + 1, c->dir) == 0 &&
          (c->names[c->n] = strdup(e->d_name)))
        c->n++;
    if (d) closedir(d);
    cp_error_clear();
  }
  const char *base = slash ? slash + 1 : j->out;
  char name[4096], host[33];
  long pid;
  for (size_t i = 0; i < c->n; i++)
    for (size_t b = 0; b < sizeof beside / sizeof *beside; b++) {
      snprintf(name, sizeof name, "%s%s", base, beside[b]);
      if (cp_temporary_owner(&pid, host, c->names[i], name)) return true;
    }
  return false;
}

void batch_dirlist_free(batch_dirlist *c) {
  for (size_t i = 0; i < c->n; i++) free(c->names[i]);
  free(c->names);
  free(c->dir);
  memset(c, 0, sizeof *c);
}

void batch_temps_free(batch_temps *t) {
  for (size_t i = 0; i < t->n; i++) free(t->items[i].path);
  free(t->items);
  memset(t, 0, sizeof *t);
}

const char *batch_temp_state_name(batch_temp_state s) {
  static const char *const n[] = {"stale", "live", "unknown owner"};
  return n[s];
}

int batch_claim_status(batch_owner *o, const batch_job *j) {
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  bool rec = record_read(o, -1, j->claim);
  int fd = open(j->claim, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  bool locked = fd >= 0 && fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
  if (fd >= 0) close(fd);
  if (locked || (rec && owner_live(o))) return 1;
  return rec ? 0 : -1;
}

/* Removes the stale temporaries of j (`dead`: the record of the claim before ours, or NULL);
 * the others are left and named by --status. */
static void sweep(const batch_job *j, const batch_owner *dead) {
  batch_temps t;
  if (batch_job_temps(&t, j, dead, false) < 0) {
    cp_error_clear();
    return;
  }
  for (size_t i = 0; i < t.n; i++)
    if (t.items[i].state == TEMP_STALE) cp_remove_tree(t.items[i].path);
  batch_temps_free(&t);
}

static int record_write(batch_claim *c, const batch_job *j) {
  char host[33], start[64], text[RECORD_MAX];
  cp_host_tag(host);
  proc_start(start, (long)getpid());
  int n = snprintf(text, sizeof text,
                   "{\"claim_version\": 1, \"host\": \"%s\", \"pid\": %ld, \"start\": \"%s\", \"child\": %ld, "
                   "\"digest\": \"%s\", \"claimed_at\": %lld}\n",
                   host, (long)getpid(), start, (long)c->child, j->digest, (long long)time(NULL));
  if (n <= 0 || n >= (int)sizeof text || ftruncate(c->fd, 0) != 0 || pwrite(c->fd, text, (size_t)n, 0) != n ||
      fsync(c->fd) != 0) /* fsync: a reader on another host sees the record */
    return cp_error_set(CP_EIO, "%s: cannot write the claim: %s", j->claim, strerror(errno));
  return 0;
}

int batch_claim_take(batch_claim *c, batch_job *j) {
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  batch_owner prev;
  c->fd = -1;
  c->child = 0;
  for (int attempt = 0; attempt < 8; attempt++) {
    int fd = open(j->claim, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) return cp_error_set(CP_EIO, "%s: cannot open the claim: %s", j->claim, strerror(errno));
    struct stat a, b;
    if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
      close(fd);
      return cp_error_set(CP_EFILETYPE, "%s: the claim is not a regular file", j->claim);
    }
    if (fcntl(fd, F_OFD_SETLK, &l) != 0) {
      int e = errno;
      if (e != EAGAIN && e != EACCES) {
        close(fd);
        return cp_error_set(CP_EIO, "%s: cannot lock the claim: %s", j->claim, strerror(e));
      }
      if (!record_read(&prev, fd, j->claim)) snprintf(prev.host, sizeof prev.host, "?");
      close(fd);
      batch_owner_describe(j->message, sizeof j->message, &prev);
      return 0;
    }
    /* The holder before us unlinks the file before unlocking it: a lock on an unlinked file is
     * no claim, so check that the path still names the file we locked. */
    if (lstat(j->claim, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
      c->fd = fd;
      break;
    }
    close(fd);
  }
  if (c->fd < 0) return cp_error_set(CP_EIO, "%s: the claim file keeps changing", j->claim);
  bool had = record_read(&prev, c->fd, j->claim);
  if (had && owner_live(&prev)) { /* a lock not shared with the owner's host: its heartbeat says it works */
    batch_owner_describe(j->message, sizeof j->message, &prev);
    close(c->fd);
    c->fd = -1;
    return 0;
  }
  sweep(j, had ? &prev : NULL); /* before our record replaces the dead owner's */
  int rc = record_write(c, j);
  if (rc < 0) {
    batch_claim_release(c, j);
    return rc;
  }
  c->beat = time(NULL);
  return 1;
}

int batch_claim_child(batch_claim *c, const batch_job *j, long child) {
  c->child = child;
  return record_write(c, j);
}

void batch_claim_beat(batch_claim *c) {
  if (c->fd >= 0 && futimens(c->fd, NULL) == 0) c->beat = time(NULL);
}

void batch_claim_release(batch_claim *c, const batch_job *j) {
  if (c->fd < 0) return;
  if (c->child) sweep(j, NULL); /* our child is gone: what it left on this host is stale */
  unlink(j->claim);             /* before the unlock: see batch_claim_take */
  close(c->fd);
  c->fd = -1;
  c->child = 0;
}
