/* ctxpatch batch (docs/batch.md): the recipe (cli/batch_recipe.c), the jobs it expands to, their
 * digests, stamps and failure records, and the pool that runs them (cli/batch_run.c). */
#ifndef CTXPATCH_CLI_BATCH_H
#define CTXPATCH_CLI_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* Exit status of a run (docs/batch.md, "Exit status"), one per outcome so that a scheduler's
 * dependency (Slurm afterok / afternotok, a Kubernetes podFailurePolicy) can tell them apart.
 * 1 (CLI_FAIL) is a batch-level error; a signal that stopped the run gives 128 + its number. */
#define BATCH_REFUSED 3 /* jobs refused certification (recorded, not retried); the rest done */
#define BATCH_ERRORS 4  /* job errors (a re-run retries them) */
#define BATCH_HELD 5    /* jobs claimed by another live process, not done here */
#define BATCH_USAGE 125 /* usage error or invalid recipe */
#define BATCH_MAX_JOBS 100000
/* A claim's heartbeat (its file's mtime) is touched every BATCH_HEARTBEAT_S seconds while its job
 * runs; a claim from another host whose heartbeat is BATCH_CLAIM_STALE_S old is over. */
#define BATCH_HEARTBEAT_S 30
#define BATCH_CLAIM_STALE_S 300

typedef struct {
  char *name;   /* the recipe's name for it: output names use it */
  char *method; /* ctxpatch patch --method */
  char **args;  /* its options as patch arguments ("--tau", "0.9", ...) */
  int n_args;
} batch_method;

/* HELD: claimed by another live process (batch_claim_take), not done. */
typedef enum { JOB_PENDING, JOB_DONE, JOB_SKIPPED, JOB_REFUSED, JOB_ERROR, JOB_STALE, JOB_HELD, JOB_N_STATES } batch_state;

typedef struct {
  char *name;          /* output name, relative to the output folder: the stable key */
  char *input;         /* real path */
  const batch_method *method;
  int64_t target;      /* --target-len */
  const char *format;  /* "safetensors" */
  char *out;           /* output folder path */
  char *log, *failed;  /* OUT.batch.log, OUT.batch-failed.json */
  char *claim;         /* OUT.batch-claim.json: the lock and owner record (cli/batch_claim.c) */
  char **args;         /* patch arguments after IN OUT, without --threads: what the digest covers */
  int n_args;
  char digest[65];
  /* filled by a run or --status */
  batch_state state;
  double seconds;
  char message[512];
} batch_job;

typedef struct {
  char *path, *dir;    /* the recipe file and its folder (relative paths start there) */
  char *out_dir;       /* output.dir, resolved */
  batch_method *methods;
  int n_methods;
  char **verify_args;  /* --verify, --lengths, ... for every job */
  int n_verify_args;
  int threads;         /* verify.threads; 0 = split the cores between jobs */
  const char *device;  /* the batch command's --device (cpu or cuda), passed to every job as
                          --threads is (not in the digest); NULL: none */
  char *baseline_cache; /* verify.baseline_cache resolved: patch --baseline-cache for every job, not in
                           the digest (where the original's side is kept changes no output); NULL: none */
  batch_job *jobs;     /* sorted by name */
  size_t n_jobs;
  bool stat_inputs;    /* "input_digest": "stat" */
} batch_recipe;

/* Reads, validates and expands the recipe (cross product or explicit list), computes each job's
 * digest. 0 or a negative cp_err with a message naming the recipe key. */
int batch_recipe_load(batch_recipe *r, const char *path);
void batch_recipe_free(batch_recipe *r);

/* The recipe's outputs apart from its inputs (cli/batch_apart.c): no job's output, log, failure
 * record or stamp is, holds or lies inside any job's input, nor matches one of `patterns` (the
 * inputs entries as resolved paths or globs) or has a folder that does. CP_EOVERLAP naming them. */
int batch_check_apart(const batch_recipe *r, const char *const *patterns, int n_patterns);

/* The job's state from its output alone: DONE (stamp matches digest and SHA256SUMS), REFUSED /
 * ERROR (a failure record with this digest), STALE (an output that is not this job's), PENDING. */
batch_state batch_job_probe(batch_job *j);
const char *batch_state_name(batch_state s);

/* How a run ends on SIGTERM, SIGINT or SIGHUP: no new job starts; the jobs in flight are
 * abandoned (their children get SIGTERM, nothing is recorded for them, they stay pending) or, with
 * `finish`, run to their end (a second signal abandons them). */
typedef struct {
  int jobs;      /* children at once */
  bool finish;   /* --on-signal finish */
  int stopped;   /* out: the signal that stopped the run, 0 if none */
} batch_run_opts;

/* Runs the jobs (indices `idx`, n of them): claims each, skips it when another process holds it
 * (HELD) or it turns out done or refused once claimed, else runs it in a child; updates each
 * job's state, seconds and message, one progress line per job on stderr as it ends. 0, or a
 * negative cp_err for a batch-level error. */
int batch_run_jobs(batch_recipe *r, const size_t *idx, size_t n, batch_run_opts *o);

/* The owner record of a claim (cli/batch_claim.c). */
typedef struct {
  bool valid;
  char host[33];   /* cp_host_tag of the claimer's host */
  long pid, child; /* the batch process and its job's child (whose pid names the temporaries) */
  char start[64];  /* the batch process's start: "BOOT_ID:START_TICK" */
  double heartbeat; /* the claim file's mtime, Unix seconds */
} batch_owner;

typedef struct {
  int fd; /* -1: not held */
  long child;
  double beat; /* time of the last heartbeat, Unix seconds */
} batch_claim;

/* 1: claimed (a dead owner's stale temporaries swept, our record written); 0: another live
 * owner holds it (j->message says who); negative cp_err on I/O failure. */
int batch_claim_take(batch_claim *c, batch_job *j);
/* Records the child's pid in the owner record (its temporaries carry it). */
int batch_claim_child(batch_claim *c, const batch_job *j, long child);
void batch_claim_beat(batch_claim *c);
/* Sweeps what the (ended) child left, removes the claim file, unlocks. */
void batch_claim_release(batch_claim *c, const batch_job *j);
/* For --status, without locking: 1 a live owner holds the job (o filled when its record is
 * readable), 0 a claim of a dead owner is left (o filled), -1 no claim. */
int batch_claim_status(batch_owner *o, const batch_job *j);
void batch_owner_describe(char *out, size_t cap, const batch_owner *o);

typedef enum { TEMP_STALE, TEMP_LIVE, TEMP_UNKNOWN } batch_temp_state;
typedef struct {
  char *path;
  long pid;
  char host[33];
  batch_temp_state state; /* STALE: its owner is gone (the next claim of the job removes it) */
} batch_temp;
typedef struct {
  batch_temp *items;
  size_t n;
} batch_temps;
/* The temporaries of job j (beside OUT, and the stamp's inside a folder OUT). `dead`: the owner
 * record of an ended claim (its child's temporaries on another host are stale), or NULL;
 * `live_claim`: a live owner holds the job (all its temporaries are live). */
int batch_job_temps(batch_temps *t, const batch_job *j, const batch_owner *dead, bool live_claim);
void batch_temps_free(batch_temps *t);
/* Whether a temporary of job j lies beside its output, from a listing of the output's folder kept
 * in `c` while consecutive jobs share it (jobs are sorted by name): one listing per folder, not per
 * job. */
typedef struct {
  char *dir;
  char **names; /* the folder's entries that look like temporaries */
  size_t n;
} batch_dirlist;
bool batch_dir_has_temps(batch_dirlist *c, const batch_job *j);
void batch_dirlist_free(batch_dirlist *c);
const char *batch_temp_state_name(batch_temp_state s);

/* --shard: "I/N", "slurm" (SLURM_ARRAY_TASK_ID, _MIN, _MAX, _STEP) or "k8s" (JOB_COMPLETION_INDEX,
 * with `count` from --shard-count, 0 if not given). false with a one-line message in `why`. */
bool batch_shard_parse(unsigned long long *i, unsigned long long *n, const char *v, unsigned long long count, char *why,
                       size_t cap);
/* The child side: `ctxpatch batch --run-job DIGEST NAME patch IN OUT ARGS...`. */
int batch_run_job_main(int argc, char **argv);

#endif
