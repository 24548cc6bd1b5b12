/* ctxpatch batch (docs/batch.md): the recipe (cli/batch_recipe.c), the jobs it expands to, their
 * digests, stamps and failure records, and the pool that runs them (cli/batch_run.c). */
#ifndef CTXPATCH_CLI_BATCH_H
#define CTXPATCH_CLI_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* Exit status of batch's own refusals (usage, unreadable or invalid recipe): apart from the
 * count of failed jobs, which is the exit status of a run (capped at BATCH_MAX_EXIT). */
#define BATCH_USAGE 125
#define BATCH_MAX_EXIT 100
#define BATCH_MAX_JOBS 100000

typedef struct {
  char *name;   /* the recipe's name for it: output names use it */
  char *method; /* ctxpatch patch --method */
  char **args;  /* its options as patch arguments ("--tau", "0.9", ...) */
  int n_args;
} batch_method;

typedef enum { JOB_PENDING, JOB_DONE, JOB_SKIPPED, JOB_REFUSED, JOB_ERROR, JOB_STALE } batch_state;

typedef struct {
  char *name;          /* output name, relative to the output folder: the stable key */
  char *input;         /* real path */
  const batch_method *method;
  int64_t target;      /* --target-len */
  const char *format;  /* "safetensors" */
  char *out;           /* output folder path */
  char *log, *failed;  /* OUT.batch.log, OUT.batch-failed.json */
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

/* Runs the jobs (indices `idx`, n of them) with at most `jobs` children at once; updates each
 * job's state, seconds and message. `progress`: one line per job on stderr. */
int batch_run_jobs(batch_recipe *r, const size_t *idx, size_t n, int jobs, bool progress);
/* The child side: `ctxpatch batch --run-job DIGEST NAME patch IN OUT ARGS...`. */
int batch_run_job_main(int argc, char **argv);

#endif
