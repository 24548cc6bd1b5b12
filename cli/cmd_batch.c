/* ctxpatch batch RECIPE: a model family's patches from one recipe (docs/batch.md): validate, run
 * with a bounded pool of child processes, resume, shard over machines, report status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>

#include "ctxpatch/base/alloc.h"
#include "cli/batch.h"
#include "cli/cli.h"

static const char batch_help[] =
    "usage: ctxpatch batch RECIPE [--jobs N] [--threads T] [--shard I/N|slurm|k8s [--shard-count N]]\n"
    "                      [--device cpu|cuda] [--accept-refused] [--on-signal abandon|finish] [--json]\n"
    "       ctxpatch batch RECIPE --validate [--json]\n"
    "       ctxpatch batch RECIPE --status [--shard ...] [--json]\n\n"
    "Runs every job of RECIPE (a JSON file, docs/batch.md: inputs or globs, methods with their\n"
    "options, target lengths, formats, verify settings, output naming; the cross product or an\n"
    "explicit list) as 'ctxpatch patch' in child processes, at most N at once (default 1), the\n"
    "cores split between them. Each artifact gets a stamp (ctxpatch-batch.json; a GGUF file,\n"
    "OUT.gguf.batch.json beside it) with the digest\n"
    "of its input, options and tool version: a re-run skips done jobs, redoes partial or stale\n"
    "ones (replacing an artifact only with a certified one) and retries errors; a refused\n"
    "certification is recorded beside the output (OUT.batch-failed.json) and not retried.\n"
    "Each job is claimed (OUT.batch-claim.json: a lock and its owner) while it runs: another\n"
    "process skips it as held; a claim sweeps the temporaries a killed owner left.\n\n"
    "  --jobs N      children at once (1..256)\n"
    "  --threads T   engine threads of each child (1..1024; overrides the recipe's verify.threads;\n"
    "                default: the CPUs this process may use, from its affinity mask and\n"
    "                SLURM_CPUS_PER_TASK, split between the children)\n"
    "  --device D    cpu or cuda: where every job's engines run (passed to each 'ctxpatch patch'; not\n"
    "                part of the digest, as the thread count)\n"
    "  --shard S     only the jobs whose index in name order is I modulo N: S is I/N (0 <= I < N),\n"
    "                'slurm' (the task's place in its array: SLURM_ARRAY_TASK_ID, _MIN, _MAX, _STEP)\n"
    "                or 'k8s' (JOB_COMPLETION_INDEX of --shard-count N, the Job's completions)\n"
    "  --accept-refused  recorded refusals count as settled: exit 0 when the rest is done\n"
    "  --on-signal W on SIGTERM, SIGINT or SIGHUP start no job and 'abandon' the jobs in flight\n"
    "                (default: their children are stopped, nothing is recorded) or 'finish' them\n"
    "                (a second signal abandons); exit 128 + the signal\n"
    "  --validate    check the recipe and list its jobs; runs nothing\n"
    "  --status      done / refused / error / stale / held / pending per job and its temporaries,\n"
    "                from the outputs alone\n"
    "  --json        the report as one JSON object on stdout\n"
    "Exit status: 0 every job of the slice done; 3 some refused certification (recorded), the rest\n"
    "done; 4 some job errors (a re-run retries them); 5 some jobs held by another process; 1 a\n"
    "batch-level error; 125 a usage error or an invalid recipe; 128 + N stopped by signal N.\n";

typedef struct {
  const char *recipe;
  unsigned long long jobs, threads, shard_i, shard_n, shard_count;
  const char *shard;       /* --shard as given, or NULL */
  const char *device_text; /* --device, or NULL */
  cp_device device;
  bool validate, status, json, accept_refused, finish;
} batch_args;

static int parse_args(batch_args *a, int argc, char **argv, bool *help) {
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(o)) {
      *help = true;
      return CLI_OK;
    }
    if (!strcmp(o, "--validate")) a->validate = true;
    else if (!strcmp(o, "--status")) a->status = true;
    else if (!strcmp(o, "--json")) a->json = true;
    else if (!strcmp(o, "--accept-refused")) a->accept_refused = true;
    else if (!strcmp(o, "--on-signal")) {
      if (!v || (strcmp(v, "finish") && strcmp(v, "abandon")))
        return cli_usage_error("batch", "--on-signal expects abandon or finish");
      a->finish = !strcmp(argv[++i], "finish");
    } else if (!strcmp(o, "--shard-count")) {
      if (!v) return cli_usage_error("batch", "%s needs a value", o);
      if (!cli_parse_u64_in("batch", o, argv[++i], 1, 1000000, &a->shard_count)) return CLI_USAGE;
    }
    else if (!strcmp(o, "--device")) {
      if (!v) return cli_usage_error("batch", "%s needs a value", o);
      if (!cli_parse_device("batch", v, &a->device)) return CLI_USAGE;
      a->device_text = argv[++i];
    } else if (!strcmp(o, "--jobs") || !strcmp(o, "--shard") || !strcmp(o, "--threads")) {
      if (!v) return cli_usage_error("batch", "%s needs a value", o);
      i++;
      if (o[2] == 'j' && !cli_parse_u64_in("batch", o, v, 1, 256, &a->jobs)) return CLI_USAGE;
      if (o[2] == 't' && !cli_parse_u64_in("batch", o, v, 1, 1024, &a->threads)) return CLI_USAGE;
      if (o[2] == 's') a->shard = v;
    } else if (o[0] == '-' && o[1]) return cli_usage_error("batch", "unknown option '%s'", o);
    else if (a->recipe) return cli_usage_error("batch", "unexpected argument '%s'", o);
    else a->recipe = o;
  }
  if (!a->recipe) return cli_usage_error("batch", "missing RECIPE");
  if (a->validate && a->status) return cli_usage_error("batch", "--validate and --status exclude each other");
  char why[256];
  if (a->shard_count && !a->shard) return cli_usage_error("batch", "--shard-count is for --shard k8s");
  if (a->shard && !batch_shard_parse(&a->shard_i, &a->shard_n, a->shard, a->shard_count, why, sizeof why))
    return cli_usage_error("batch", "%s", why);
  return CLI_OK;
}

/* A job's temporaries for --status, from its claim's owner record. */
static void job_temps(batch_temps *t, const batch_job *j) {
  batch_owner o;
  int claim = batch_claim_status(&o, j);
  if (batch_job_temps(t, j, claim == 0 ? &o : NULL, claim == 1) < 0) {
    cp_error_clear();
    memset(t, 0, sizeof *t);
  }
}

static cJSON *job_json(const batch_job *j, const char *mode) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", j->name);
  cJSON_AddStringToObject(o, "input", j->input);
  cJSON_AddStringToObject(o, "method", j->method->name);
  cJSON_AddNumberToObject(o, "target_length", (double)j->target);
  cJSON_AddStringToObject(o, "format", j->format);
  cJSON_AddStringToObject(o, "output", j->out);
  cJSON_AddStringToObject(o, "digest", j->digest);
  if (strcmp(mode, "validate") != 0) {
    cJSON_AddStringToObject(o, "state", batch_state_name(j->state));
    cJSON_AddNumberToObject(o, "seconds", j->seconds);
    cJSON_AddStringToObject(o, "message", j->message);
  }
  if (!strcmp(mode, "status")) {
    batch_temps t;
    job_temps(&t, j);
    cJSON *a = cJSON_AddArrayToObject(o, "temporaries");
    for (size_t i = 0; i < t.n; i++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddStringToObject(e, "path", t.items[i].path);
      cJSON_AddStringToObject(e, "host", t.items[i].host);
      cJSON_AddNumberToObject(e, "pid", (double)t.items[i].pid);
      cJSON_AddStringToObject(e, "owner", batch_temp_state_name(t.items[i].state));
      cJSON_AddItemToArray(a, e);
    }
    batch_temps_free(&t);
  }
  return o;
}

/* The exit status of a run from its counts (docs/batch.md, "Exit status"). */
static int run_status(const size_t *count, const batch_args *a, int stopped) {
  if (stopped) return 128 + stopped;
  if (count[JOB_ERROR] || count[JOB_PENDING] || count[JOB_STALE]) return BATCH_ERRORS;
  if (count[JOB_HELD]) return BATCH_HELD;
  if (count[JOB_REFUSED] && !a->accept_refused) return BATCH_REFUSED;
  return CLI_OK;
}

static void print_table(const batch_recipe *r, const size_t *idx, size_t n, const char *mode) {
  for (size_t k = 0; k < n; k++) {
    const batch_job *j = &r->jobs[idx[k]];
    if (!strcmp(mode, "validate")) {
      cli_printf(stdout, "%-48s %s\n", j->name, j->digest);
      continue;
    }
    cli_printf(stdout, "%-48s %-8s %7.1f s  %s\n", j->name, batch_state_name(j->state), j->seconds, j->message);
    if (strcmp(mode, "status") != 0) continue;
    batch_temps t;
    job_temps(&t, j);
    for (size_t i = 0; i < t.n; i++)
      cli_printf(stdout, "    temporary %s (pid %ld on %s: %s)\n", t.items[i].path, t.items[i].pid, t.items[i].host,
             batch_temp_state_name(t.items[i].state));
    batch_temps_free(&t);
  }
}

/* The table (or JSON) of the slice and the counts per state; returns the exit status. */
static int report(const batch_recipe *r, const size_t *idx, size_t n, const batch_args *a, const char *mode, int stopped) {
  size_t count[JOB_N_STATES] = {0};
  for (size_t k = 0; k < n; k++) count[r->jobs[idx[k]].state]++;
  int status = strcmp(mode, "run") ? CLI_OK : run_status(count, a, stopped);
  if (a->json) {
    cJSON *o = cJSON_CreateObject(), *jobs, *sum;
    cJSON_AddStringToObject(o, "recipe", r->path);
    cJSON_AddStringToObject(o, "mode", mode);
    char shard[64];
    snprintf(shard, sizeof shard, "%llu/%llu", a->shard_i, a->shard_n);
    cJSON_AddStringToObject(o, "shard", shard);
    cJSON_AddNumberToObject(o, "recipe_jobs", (double)r->n_jobs);
    jobs = cJSON_AddArrayToObject(o, "jobs");
    for (size_t k = 0; k < n; k++) cJSON_AddItemToArray(jobs, job_json(&r->jobs[idx[k]], mode));
    sum = cJSON_AddObjectToObject(o, "summary");
    cJSON_AddNumberToObject(sum, "jobs", (double)n);
    for (int s = JOB_PENDING; s < JOB_N_STATES && strcmp(mode, "validate"); s++)
      cJSON_AddNumberToObject(sum, batch_state_name((batch_state)s), (double)count[s]);
    if (!strcmp(mode, "run")) {
      cJSON_AddNumberToObject(o, "exit_status", status);
      if (stopped) cJSON_AddStringToObject(o, "stopped_by", strsignal(stopped));
    }
    cli_json_round(o, NULL);
    int printed = cli_print_json(o);
    cJSON_Delete(o);
    return printed == CLI_OK ? status : printed;
  }
  print_table(r, idx, n, mode);
  if (!strcmp(mode, "validate")) cli_printf(stdout, "batch: %s: valid, %zu jobs in this slice of %zu\n", r->path, n, r->n_jobs);
  else
    printf("batch: %zu jobs (shard %llu/%llu of %zu): done %zu, skipped %zu, refused %zu, errors %zu, stale %zu, "
           "held %zu, pending %zu%s%s\n",
           n, a->shard_i, a->shard_n, r->n_jobs, count[JOB_DONE], count[JOB_SKIPPED], count[JOB_REFUSED],
           count[JOB_ERROR], count[JOB_STALE], count[JOB_HELD], count[JOB_PENDING], stopped ? "; stopped by " : "",
           stopped ? strsignal(stopped) : "");
  return status;
}

static int run(batch_recipe *r, size_t *idx, size_t n, const batch_args *a) {
  size_t *todo = calloc(n ? n : 1, sizeof *todo), n_todo = 0;
  batch_dirlist dl = {0};
  if (!todo) return cli_report(cp_nomem("batch"));
  for (size_t k = 0; k < n; k++) {
    batch_job *j = &r->jobs[idx[k]];
    batch_state s = batch_job_probe(j);
    /* a recorded refusal is deterministic, a done job done: claimed only to sweep what a killed
     * run left beside them */
    if ((s != JOB_DONE && s != JOB_REFUSED) || batch_dir_has_temps(&dl, j)) todo[n_todo++] = idx[k];
    else {
      if (s == JOB_DONE) j->state = JOB_SKIPPED;
      cli_printf(stderr, "[-/-] %-8s %s\n", s == JOB_DONE ? "skipped" : "refused", j->name);
    }
  }
  batch_dirlist_free(&dl);
  if (a->threads) r->threads = (int)a->threads; /* not in the jobs' digests: same jobs, other threads */
  batch_run_opts o = {.jobs = (int)a->jobs, .finish = a->finish};
  int rc = batch_run_jobs(r, todo, n_todo, &o);
  free(todo);
  if (rc < 0) return cli_report(rc);
  return report(r, idx, n, a, "run", o.stopped);
}

int cmd_batch(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "--run-job")) return batch_run_job_main(argc - 2, argv + 2);
  batch_args a = {.jobs = 1, .shard_i = 0, .shard_n = 1};
  bool help = false;
  int status = parse_args(&a, argc, argv, &help);
  if (help) fputs(batch_help, stdout);
  setvbuf(stdout, NULL, _IOLBF, 0); /* a task log (Slurm's --output) shows each line as it comes */
  if (help || status != CLI_OK) return status == CLI_USAGE ? BATCH_USAGE : status;
  char device_desc[512];
  if (!a.validate && !a.status && cli_device_ready("batch", a.device, device_desc, sizeof device_desc) != CLI_OK)
    return BATCH_USAGE;
  batch_recipe r;
  int rc = batch_recipe_load(&r, a.recipe);
  size_t *idx = NULL, n = 0;
  if (rc < 0) {
    cli_report(rc);
    status = BATCH_USAGE;
    goto done;
  }
  if (!(idx = calloc(r.n_jobs ? r.n_jobs : 1, sizeof *idx))) {
    status = cli_report(cp_nomem("batch"));
    goto done;
  }
  for (size_t k = 0; k < r.n_jobs; k++) /* jobs are sorted by name: round-robin is balanced to one job */
    if (k % a.shard_n == a.shard_i) idx[n++] = k;
  if (a.validate) status = report(&r, idx, n, &a, "validate", 0);
  else if (a.status) {
    for (size_t k = 0; k < n; k++) {
      batch_job *j = &r.jobs[idx[k]];
      batch_owner o;
      if (batch_job_probe(j) != JOB_DONE && batch_claim_status(&o, j) == 1) {
        j->state = JOB_HELD;
        if (o.valid) batch_owner_describe(j->message, sizeof j->message, &o);
        else snprintf(j->message, sizeof j->message, "held (its lock is taken)");
      }
    }
    status = report(&r, idx, n, &a, "status", 0);
  } else {
    r.device = a.device_text;
    status = run(&r, idx, n, &a);
  }
done:
  free(idx);
  batch_recipe_free(&r);
  return status;
}
