/* ctxpatch batch: running jobs. Each job is a child process, this binary again
 * (`ctxpatch batch --run-job DIGEST NAME patch IN OUT ARGS...`), which runs `patch` in-process and
 * then writes the job's stamp into the artifact (beside it for a GGUF file; or its failure record
 * beside it). The pool keeps
 * at most N children, each under the job's claim (cli/batch_claim.c); a child dies with the batch
 * (PR_SET_PDEATHSIG), and patch's own watchdog removes its temporary folder, so kill -9 leaves
 * finished jobs stamped and nothing half-made (a kill of the whole tree leaves the temporary to the
 * next claim of the job, which sweeps it).
 * A job's state is read back from its output alone (batch_job_probe). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/json_strict.h"
#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/clock.h"
#include "cli/batch.h"
#include "cli/cli.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/check.h"

#define STAMP_MAX ((size_t)1 << 20)
#define LOG_TAIL ((size_t)64 << 10)
#define EXIT_REFUSED 3

const char *batch_state_name(batch_state s) {
  static const char *const n[] = {"pending", "done", "skipped", "refused", "error", "stale", "held"};
  return n[s];
}

static cJSON *read_json(const char *path) {
  char *text = NULL;
  size_t len = 0;
  cJSON *doc = NULL;
  if (cp_read_file(&text, &len, path, STAMP_MAX) == 0 &&
      cp_json_parse_strict(&doc, text, len, path, 16, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0)
    doc = NULL;
  free(text);
  cp_error_clear();
  return doc;
}

static const char *str_at(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* A gguf job's OUT is one file (OUT.gguf): its stamp lies beside it, OUT.gguf.batch.json, and
 * stands for the file's own SHA-256. A folder's stamp lies inside it and stands for SHA256SUMS. */
static char *stamp_path(const char *out, bool file) {
  if (!file) return cp_path_join(out, CP_BATCH_STAMP_NAME);
  char *p = malloc(strlen(out) + sizeof ".batch.json");
  if (p) sprintf(p, "%s.batch.json", out);
  return p;
}

/* SHA-256 of what the stamp stands for (OUT itself, or OUT/SHA256SUMS), "" when unreadable. */
static void content_digest(char hex[65], const char *out, bool file) {
  char *p = file ? strdup(out) : cp_path_join(out, "SHA256SUMS");
  hex[0] = '\0';
  if (!p || cp_sha256_file(hex, p) < 0) hex[0] = '\0';
  free(p);
  cp_error_clear();
}

batch_state batch_job_probe(batch_job *j) {
  struct stat st;
  bool file = !strcmp(j->format, "gguf");
  bool exists = stat(j->out, &st) == 0;
  j->message[0] = '\0';
  if (exists) {
    char *p = stamp_path(j->out, file), sums[65];
    cJSON *stamp = p ? read_json(p) : NULL;
    free(p);
    content_digest(sums, j->out, file);
    const char *key = file ? "gguf_sha256" : "sha256sums";
    bool done = stamp && !strcmp(str_at(stamp, "digest"), j->digest) && *sums && !strcmp(str_at(stamp, key), sums);
    cJSON_Delete(stamp);
    if (done) return j->state = JOB_DONE;
  }
  cJSON *rec = read_json(j->failed);
  batch_state s = exists ? JOB_STALE : JOB_PENDING;
  if (rec && !strcmp(str_at(rec, "digest"), j->digest)) {
    s = !strcmp(str_at(rec, "state"), "refused") ? JOB_REFUSED : JOB_ERROR;
    snprintf(j->message, sizeof j->message, "%s", str_at(rec, "message"));
  }
  cJSON_Delete(rec);
  return j->state = s;
}

/* The arguments the digest covers: those after IN OUT, without --threads T, --baseline-cache DIR
 * and --force. */
static cJSON *digested_args(int argc, char **argv) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < argc; i++) {
    if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "--baseline-cache")) i++;
    else if (strcmp(argv[i], "--force") != 0) cJSON_AddItemToArray(a, cJSON_CreateString(argv[i]));
  }
  return a;
}

/* Last lines of the child's own log: whether patch refused certification (a failed verdict, or a
 * work plan over the budget), and its error line. */
static bool refused_in_log(char *msg, size_t cap, const char *log) {
  FILE *f = fopen(log, "rb");
  char *buf = malloc(LOG_TAIL + 1);
  size_t n = 0;
  snprintf(msg, cap, "exited 1 (see %s)", log);
  if (f && buf) {
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > (long)LOG_TAIL) fseek(f, -(long)LOG_TAIL, SEEK_END);
    else rewind(f);
    n = fread(buf, 1, LOG_TAIL, f);
  }
  if (f) fclose(f);
  if (!buf) return false;
  buf[n] = '\0';
  const char *line = strstr(buf, "ctxpatch: error");
  /* a plan over the work budget is refused before any work runs, as a failed verdict after it */
  static const char work[] = "ctxpatch: error CP_EVERIFY_WORK: ";
  bool over = line && !strncmp(line, work, sizeof work - 1), refused = (strstr(buf, "certification failed:") && !line) || over;
  if (refused && !over) { /* the first reason; over the budget: its error line */
    line = strstr(buf, "verdict: "); /* fail, no effect, inconclusive */
    line = line ? strchr(line, '\n') : NULL;
    if (line) line++;
  }
  if (line && *line) {
    const char *end = strchr(line, '\n');
    while (*line == ' ') line++;
    snprintf(msg, cap, "%.*s", (int)(end ? end - line : (long)strlen(line)), line);
  }
  free(buf);
  return refused;
}

/* The stamp (success) or the failure record, written atomically. */
static int write_record(const char *path, const char *digest, const char *name, const char *in, int argc, char **argv,
                        const char *out, bool file, const char *state, const char *message) {
  cJSON *o = cJSON_CreateObject();
  CP_CHECK_ALLOC(o, path);
  cJSON_AddNumberToObject(o, "stamp_version", 1);
  cJSON_AddStringToObject(o, "tool_version", CTXPATCH_VERSION);
  cJSON_AddStringToObject(o, "job", name);
  cJSON_AddStringToObject(o, "digest", digest);
  cJSON_AddStringToObject(o, "input", in);
  cJSON_AddItemToObject(o, "args", digested_args(argc, argv));
  cJSON_AddStringToObject(o, "state", state);
  if (out && file) { /* the certificate is inside the GGUF (ctxpatch.certificate_sha256) */
    char sha[65];
    content_digest(sha, out, true);
    cJSON_AddStringToObject(o, "gguf_sha256", sha);
  } else if (out) {
    char sums[65], cert[65] = "";
    content_digest(sums, out, false);
    char *c = cp_path_join(out, "certificate.json");
    if (!c || cp_sha256_file(cert, c) < 0) cert[0] = '\0';
    free(c);
    cJSON_AddStringToObject(o, "sha256sums", sums);
    cJSON_AddStringToObject(o, "certificate_sha256", cert);
  } else cJSON_AddStringToObject(o, "message", message);
  int rc = cp_write_json_atomic(NULL, path, o);
  cJSON_Delete(o);
  return rc;
}

int batch_run_job_main(int argc, char **argv) {
  /* argv: DIGEST NAME patch IN OUT ARGS... */
  if (argc < 5 || strcmp(argv[2], "patch") != 0) return BATCH_USAGE;
  const char *digest = argv[0], *name = argv[1], *in = argv[3], *out = argv[4];
  char *failed = malloc(strlen(out) + 32), *log = malloc(strlen(out) + 32), msg[512];
  if (!failed || !log) return CLI_FAIL;
  sprintf(failed, "%s.batch-failed.json", out);
  sprintf(log, "%s.batch.log", out);
  cp_error_clear();
  int status = cmd_patch(argc - 2, argv + 2), rc;
  bool file = false; /* --to gguf: OUT is one file */
  for (int i = 5; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--to") && !strcmp(argv[i + 1], "gguf")) file = true;
  fflush(stdout);
  fflush(stderr);
  if (status == CLI_OK) {
    char *stamp = stamp_path(out, file);
    rc = stamp ? write_record(stamp, digest, name, in, argc - 5, argv + 5, out, file, "done", NULL)
               : cp_nomem("%s", out);
    free(stamp);
    if (rc == 0) unlink(failed);
    else status = cli_report(rc);
  } else {
    bool refused = status == CLI_FAIL && refused_in_log(msg, sizeof msg, log);
    if (!refused && status != CLI_FAIL) snprintf(msg, sizeof msg, "exited %d (see %s)", status, log);
    if ((rc = write_record(failed, digest, name, in, argc - 5, argv + 5, NULL, false, refused ? "refused" : "error", msg)) < 0)
      cli_report(rc);
    status = refused ? EXIT_REFUSED : CLI_FAIL;
  }
  free(failed);
  free(log);
  return status;
}

/* mkdir -p of the folder that holds `path`. */
static int make_parent(const char *path) {
  char *p = strdup(path);
  CP_CHECK_ALLOC(p, path);
  int rc = 0;
  for (char *s = strchr(p + 1, '/'); s && rc == 0; s = strchr(s + 1, '/')) {
    *s = '\0';
    if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = cp_error_set(CP_EIO, "%s: %s", p, strerror(errno));
    *s = '/';
  }
  free(p);
  return rc;
}

/* Signals that stop a run; the pool waits for them and for SIGCHLD with sigtimedwait. */
static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP};

/* Installed so that the signals reach us as PID 1 of a container (where a signal with the default
 * action is dropped); they are blocked and taken by sigtimedwait, so it never runs. */
static void no_op(int sig) { (void)sig; }

/* Forks and execs the child for job j; its stdout and stderr go to OUT.batch.log. The child
 * leaves the pool's signal mask behind; with `finish` it ignores the stop signals (a scancel sends
 * SIGTERM to every process of the job), so the job in flight can end. */
static pid_t spawn(const batch_recipe *r, const batch_job *j, int threads, bool finish) {
  char t[16];
  snprintf(t, sizeof t, "%d", threads);
  struct stat st;
  bool force = stat(j->out, &st) == 0; /* stale: replaced atomically, and only by a certified one */
  /* A GGUF's report left beside a deleted OUT is the job's own too (patch replaces it only with --force). */
  char *report = malloc(strlen(j->out) + sizeof CP_REPORT_SUFFIX);
  if (!report) return -1;
  sprintf(report, "%s" CP_REPORT_SUFFIX, j->out);
  force = force || lstat(report, &st) == 0;
  free(report);
  int n = 0;
  const char **argv = calloc((size_t)j->n_args + 18, sizeof *argv);
  if (!argv) return -1;
  const char *head[] = {"ctxpatch", "batch", "--run-job", j->digest, j->name, "patch", j->input, j->out};
  for (size_t i = 0; i < sizeof head / sizeof *head; i++) argv[n++] = head[i];
  for (int i = 0; i < j->n_args; i++) argv[n++] = j->args[i];
  argv[n++] = "--threads";
  argv[n++] = t;
  if (r->device) {
    argv[n++] = "--device";
    argv[n++] = r->device;
  }
  if (r->baseline_cache) {
    argv[n++] = "--baseline-cache";
    argv[n++] = r->baseline_cache;
  }
  if (force) argv[n++] = "--force";
  /* Opened only under the job's claim: a second process never truncates the holder's log. */
  int fd = open(j->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_t parent = getpid(), pid = fd < 0 ? -1 : fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    for (size_t s = 0; s < sizeof stop_signals / sizeof *stop_signals; s++)
      signal(stop_signals[s], finish ? SIG_IGN : SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    execv("/proc/self/exe", (char *const *)argv);
    _exit(127);
  }
  if (fd >= 0) close(fd);
  free(argv);
  return pid;
}

typedef struct {
  pid_t pid; /* 0: free */
  size_t job;
  double start;
  batch_claim claim;
  bool abandoned;
} slot;

static void line(size_t k, size_t n, const batch_job *j, const char *state, const char *note) {
  cli_printf(stderr, "[%zu/%zu] %-8s %s (%.1f s)%s%s\n", k, n, state, j->name, j->seconds, *note ? ": " : "", note);
  fflush(stderr);
}

/* Claims job j and decides: 1 run it (claimed), 0 settled without a child (its state set). */
static int take(batch_job *j, batch_claim *c) {
  int rc = make_parent(j->out);
  if (rc == 0) rc = batch_claim_take(c, j);
  if (rc <= 0) {
    char who[sizeof j->message];
    snprintf(who, sizeof who, "%s", j->message);
    /* its holder may have finished it while we looked */
    if (rc == 0 && batch_job_probe(j) == JOB_DONE) j->state = JOB_SKIPPED;
    else if (rc == 0) {
      j->state = JOB_HELD;
      snprintf(j->message, sizeof j->message, "%s", who);
    }
    return rc;
  }
  batch_state s = batch_job_probe(j); /* again, under the claim: another process may have done it */
  if (s == JOB_DONE || s == JOB_REFUSED) {
    if (s == JOB_DONE) j->state = JOB_SKIPPED;
    batch_claim_release(c, j);
    return 0;
  }
  return 1;
}

/* The job of slot s has ended with wait status ws: its state from its output. */
static void ended(slot *s, batch_job *j, int ws) {
  j->seconds = cp_monotonic_seconds() - s->start;
  batch_job_probe(j);
  for (size_t k = 0; k < sizeof stop_signals / sizeof *stop_signals; k++) /* a scancel signals the child too */
    if (WIFSIGNALED(ws) && WTERMSIG(ws) == stop_signals[k]) s->abandoned = true;
  if (s->abandoned && j->state != JOB_DONE) {
    if (j->state == JOB_ERROR || j->state == JOB_REFUSED) return; /* it wrote its record before the signal */
    snprintf(j->message, sizeof j->message, "abandoned on a stop signal (nothing recorded; a re-run does it)");
  } else if (j->state != JOB_DONE && j->state != JOB_REFUSED && j->state != JOB_ERROR) {
    j->state = JOB_ERROR;
    if (WIFSIGNALED(ws)) snprintf(j->message, sizeof j->message, "killed by signal %d", WTERMSIG(ws));
    else snprintf(j->message, sizeof j->message, "exited %d without a record (see %s)", WEXITSTATUS(ws), j->log);
  }
}

static void setup_signals(sigset_t *set, sigset_t *old) {
  struct sigaction sa = {.sa_handler = no_op};
  sigemptyset(set);
  sigaddset(set, SIGCHLD);
  for (size_t s = 0; s < sizeof stop_signals / sizeof *stop_signals; s++) sigaddset(set, stop_signals[s]);
  sigprocmask(SIG_BLOCK, set, old);
  sigaction(SIGCHLD, &sa, NULL);
  for (size_t s = 0; s < sizeof stop_signals / sizeof *stop_signals; s++) sigaction(stop_signals[s], &sa, NULL);
}

/* A stop signal: no job starts from now on; the jobs in flight are abandoned (without finish, or
 * at a second signal) or left to finish. */
static void on_stop(slot *slots, int jobs, int running, batch_run_opts *o, int sig) {
  bool abandon = !o->finish || o->stopped;
  o->stopped = sig;
  fprintf(stderr, "batch: %s: %s the %d job(s) in flight, starting no more\n", strsignal(sig),
          abandon ? "abandoning" : "finishing", running);
  for (int s = 0; abandon && s < jobs; s++)
    if (slots[s].pid) {
      slots[s].abandoned = true;
      kill(slots[s].pid, o->finish ? SIGKILL : SIGTERM); /* with finish, the child ignores SIGTERM */
    }
}

int batch_run_jobs(batch_recipe *r, const size_t *idx, size_t n, batch_run_opts *o) {
  long cpus = cp_cpu_count(); /* the job's CPUs under Slurm or taskset, not the node's */
  int jobs = o->jobs, width = jobs < (int)n ? jobs : (int)n;
  int threads = r->threads ? r->threads : (int)(cpus / (width > 0 ? width : 1));
  if (threads < 1) threads = 1;
  slot *slots = calloc((size_t)jobs, sizeof *slots);
  size_t next = 0, finished = 0;
  int running = 0, rc = 0;
  sigset_t set, old;
  CP_CHECK_ALLOC(slots, r->path);
  setup_signals(&set, &old);
  o->stopped = 0;
  fflush(stdout);
  while (finished < n) {
    for (int s = 0; s < jobs && next < n && rc == 0 && !o->stopped; s++) {
      if (slots[s].pid) continue;
      batch_job *j = &r->jobs[idx[next++]];
      int t = take(j, &slots[s].claim);
      if (t < 0) rc = t;
      if (t <= 0) {
        if (t == 0) line(++finished, n, j, batch_state_name(j->state), j->message);
        s--; /* the slot is still free */
        continue;
      }
      slots[s].start = cp_monotonic_seconds();
      slots[s].job = idx[next - 1];
      slots[s].abandoned = false;
      cli_printf(stderr, "[-/%zu] start    %s\n", n, j->name);
      if ((slots[s].pid = spawn(r, j, threads, o->finish)) <= 0) {
        slots[s].pid = 0;
        rc = cp_error_set(CP_EIO, "%s: cannot start the job: %s", j->name, strerror(errno));
        batch_claim_release(&slots[s].claim, j);
        break;
      }
      if ((rc = batch_claim_child(&slots[s].claim, j, (long)slots[s].pid)) < 0) break;
      running++;
    }
    if (running == 0) break;
    if (rc < 0) break;
    siginfo_t info;
    struct timespec wait = {.tv_sec = BATCH_HEARTBEAT_S}, zero = {0};
    /* every signal pending is taken before a job starts: a scancel's SIGTERM and the SIGCHLD of
     * the child it also killed may come together */
    int sig = sigtimedwait(&set, &info, &wait);
    do {
      if (sig > 0 && sig != SIGCHLD) on_stop(slots, jobs, running, o, sig);
      for (int s = 0; s < jobs; s++) /* heartbeats */
        if (slots[s].pid && time(NULL) - slots[s].claim.beat >= BATCH_HEARTBEAT_S) batch_claim_beat(&slots[s].claim);
      int ws;
      pid_t pid;
      while ((pid = waitpid(-1, &ws, WNOHANG)) > 0) { /* as PID 1 we also reap orphans: not ours */
        int s = 0;
        while (s < jobs && slots[s].pid != pid) s++;
        if (s == jobs) continue;
        batch_job *j = &r->jobs[slots[s].job];
        slots[s].pid = 0;
        running--;
        finished++;
        ended(&slots[s], j, ws);
        batch_claim_release(&slots[s].claim, j);
        line(finished, n, j, slots[s].abandoned && j->state != JOB_DONE ? "abandoned" : batch_state_name(j->state),
             j->message);
      }
    } while ((sig = sigtimedwait(&set, &info, &zero)) > 0);
  }
  for (int s = 0; s < jobs; s++) /* only after an error: leave nothing behind */
    if (slots[s].pid > 0) {
      kill(slots[s].pid, SIGKILL);
      waitpid(slots[s].pid, NULL, 0);
      batch_claim_release(&slots[s].claim, &r->jobs[slots[s].job]);
    }
  for (size_t k = next; o->stopped && k < n; k++)
    snprintf(r->jobs[idx[k]].message, sizeof r->jobs[idx[k]].message, "not started: stopped by %s", strsignal(o->stopped));
  sigprocmask(SIG_SETMASK, &old, NULL);
  free(slots);
  return rc;
}
