/* ctxpatch batch RECIPE: a model family's patches from one recipe (docs/batch.md): validate, run
 * with a bounded pool of child processes, resume, shard over machines, report status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "cli/batch.h"
#include "cli/cli.h"

static const char batch_help[] =
    "usage: ctxpatch batch RECIPE [--jobs N] [--threads T] [--shard I/N] [--device cpu|cuda] [--json]\n"
    "       ctxpatch batch RECIPE --validate [--json]\n"
    "       ctxpatch batch RECIPE --status [--shard I/N] [--json]\n\n"
    "Runs every job of RECIPE (a JSON file, docs/batch.md: inputs or globs, methods with their\n"
    "options, target lengths, formats, verify settings, output naming; the cross product or an\n"
    "explicit list) as 'ctxpatch patch' in child processes, at most N at once (default 1), the\n"
    "cores split between them. Each artifact gets a stamp (ctxpatch-batch.json; a GGUF file,\n"
    "OUT.gguf.batch.json beside it) with the digest\n"
    "of its input, options and tool version: a re-run skips done jobs, redoes partial or stale\n"
    "ones (replacing an artifact only with a certified one) and retries errors; a refused\n"
    "certification is recorded beside the output (OUT.batch-failed.json) and not retried.\n\n"
    "  --jobs N      children at once (1..256)\n"
    "  --threads T   engine threads of each child (1..1024; overrides the recipe's verify.threads;\n"
    "                default: the CPUs this process may use, from its affinity mask and\n"
    "                SLURM_CPUS_PER_TASK, split between the children)\n"
    "  --device D    cpu or cuda: where every job's engines run (passed to each 'ctxpatch patch'; not\n"
    "                part of the digest, as the thread count)\n"
    "  --shard I/N   only the jobs whose index in name order is I modulo N (0 <= I < N)\n"
    "  --validate    check the recipe and list its jobs; runs nothing\n"
    "  --status      done / refused / error / stale / pending per job, from the outputs alone\n"
    "  --json        the report as one JSON object on stdout\n"
    "Exit status: the number of jobs not done at the end (refused + errors, at most 100);\n"
    "125 for a usage error or an invalid recipe.\n";

typedef struct {
  const char *recipe;
  unsigned long long jobs, threads, shard_i, shard_n;
  const char *device_text; /* --device, or NULL */
  cp_device device;
  bool validate, status, json;
} batch_args;

static bool parse_shard(batch_args *a, const char *v) {
  char *end;
  a->shard_i = strtoull(v, &end, 10);
  if (end == v || *end != '/' || v[0] == '-') return false;
  const char *n = end + 1;
  a->shard_n = strtoull(n, &end, 10);
  return end != n && !*end && n[0] != '-' && a->shard_n >= 1 && a->shard_n <= 1000000 && a->shard_i < a->shard_n;
}

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
    else if (!strcmp(o, "--device")) {
      if (!v) return cli_usage_error("batch", "%s needs a value", o);
      if (!cli_parse_device("batch", v, &a->device)) return CLI_USAGE;
      a->device_text = argv[++i];
    } else if (!strcmp(o, "--jobs") || !strcmp(o, "--shard") || !strcmp(o, "--threads")) {
      if (!v) return cli_usage_error("batch", "%s needs a value", o);
      i++;
      if (o[2] == 'j' && !cli_parse_u64_in("batch", o, v, 1, 256, &a->jobs)) return CLI_USAGE;
      if (o[2] == 't' && !cli_parse_u64_in("batch", o, v, 1, 1024, &a->threads)) return CLI_USAGE;
      if (o[2] == 's' && !parse_shard(a, v))
        return cli_usage_error("batch", "--shard expects I/N with 0 <= I < N, got '%s'", v);
    } else if (o[0] == '-' && o[1]) return cli_usage_error("batch", "unknown option '%s'", o);
    else if (a->recipe) return cli_usage_error("batch", "unexpected argument '%s'", o);
    else a->recipe = o;
  }
  if (!a->recipe) return cli_usage_error("batch", "missing RECIPE");
  if (a->validate && a->status) return cli_usage_error("batch", "--validate and --status exclude each other");
  return CLI_OK;
}

static cJSON *job_json(const batch_job *j, bool with_state) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", j->name);
  cJSON_AddStringToObject(o, "input", j->input);
  cJSON_AddStringToObject(o, "method", j->method->name);
  cJSON_AddNumberToObject(o, "target_length", (double)j->target);
  cJSON_AddStringToObject(o, "format", j->format);
  cJSON_AddStringToObject(o, "output", j->out);
  cJSON_AddStringToObject(o, "digest", j->digest);
  if (with_state) {
    cJSON_AddStringToObject(o, "state", batch_state_name(j->state));
    cJSON_AddNumberToObject(o, "seconds", j->seconds);
    cJSON_AddStringToObject(o, "message", j->message);
  }
  return o;
}

/* The table (or JSON) of the slice and the counts per state; returns the exit status. */
static int report(const batch_recipe *r, const size_t *idx, size_t n, const batch_args *a, const char *mode) {
  size_t count[JOB_STALE + 1] = {0};
  for (size_t k = 0; k < n; k++) count[r->jobs[idx[k]].state]++;
  size_t failed = count[JOB_REFUSED] + count[JOB_ERROR];
  int status = failed > BATCH_MAX_EXIT ? BATCH_MAX_EXIT : (int)failed;
  if (!strcmp(mode, "validate") || !strcmp(mode, "status")) status = CLI_OK;
  if (a->json) {
    cJSON *o = cJSON_CreateObject(), *jobs, *sum;
    cJSON_AddStringToObject(o, "recipe", r->path);
    cJSON_AddStringToObject(o, "mode", mode);
    char shard[64];
    snprintf(shard, sizeof shard, "%llu/%llu", a->shard_i, a->shard_n);
    cJSON_AddStringToObject(o, "shard", shard);
    cJSON_AddNumberToObject(o, "recipe_jobs", (double)r->n_jobs);
    jobs = cJSON_AddArrayToObject(o, "jobs");
    for (size_t k = 0; k < n; k++) cJSON_AddItemToArray(jobs, job_json(&r->jobs[idx[k]], strcmp(mode, "validate") != 0));
    sum = cJSON_AddObjectToObject(o, "summary");
    cJSON_AddNumberToObject(sum, "jobs", (double)n);
    for (int s = JOB_PENDING; s <= JOB_STALE && strcmp(mode, "validate"); s++)
      cJSON_AddNumberToObject(sum, batch_state_name((batch_state)s), (double)count[s]);
    cli_json_round(o, NULL);
    int printed = cli_print_json(o);
    cJSON_Delete(o);
    return printed == CLI_OK ? status : printed;
  }
  for (size_t k = 0; k < n; k++) {
    const batch_job *j = &r->jobs[idx[k]];
    if (!strcmp(mode, "validate")) printf("%-48s %s\n", j->name, j->digest);
    else printf("%-48s %-8s %7.1f s  %s\n", j->name, batch_state_name(j->state), j->seconds, j->message);
  }
  if (!strcmp(mode, "validate")) printf("batch: %s: valid, %zu jobs in this slice of %zu\n", r->path, n, r->n_jobs);
  else
    printf("batch: %zu jobs (shard %llu/%llu of %zu): done %zu, skipped %zu, refused %zu, errors %zu, stale %zu, pending %zu\n",
           n, a->shard_i, a->shard_n, r->n_jobs, count[JOB_DONE], count[JOB_SKIPPED], count[JOB_REFUSED],
           count[JOB_ERROR], count[JOB_STALE], count[JOB_PENDING]);
  return status;
}

static int run(batch_recipe *r, size_t *idx, size_t n, const batch_args *a) {
  size_t *todo = calloc(n ? n : 1, sizeof *todo), n_todo = 0;
  if (!todo) return cli_report(cp_nomem("batch"));
  bool progress = cli_progress_wanted();
  for (size_t k = 0; k < n; k++) {
    batch_job *j = &r->jobs[idx[k]];
    batch_state s = batch_job_probe(j);
    if (s == JOB_DONE) j->state = JOB_SKIPPED;
    else if (s != JOB_REFUSED) todo[n_todo++] = idx[k]; /* a recorded refusal is deterministic */
    if (progress && s != JOB_DONE && s != JOB_REFUSED) continue;
    if (progress) fprintf(stderr, "[-/-] %-8s %s\n", s == JOB_DONE ? "skipped" : "refused", j->name);
  }
  if (a->threads) r->threads = (int)a->threads; /* not in the jobs' digests: same jobs, other threads */
  int rc = batch_run_jobs(r, todo, n_todo, (int)a->jobs, progress);
  free(todo);
  if (rc < 0) return cli_report(rc);
  return report(r, idx, n, a, "run");
}

int cmd_batch(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "--run-job")) return batch_run_job_main(argc - 2, argv + 2);
  batch_args a = {.jobs = 1, .shard_i = 0, .shard_n = 1};
  bool help = false;
  int status = parse_args(&a, argc, argv, &help);
  if (help) fputs(batch_help, stdout);
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
  if (a.validate) status = report(&r, idx, n, &a, "validate");
  else if (a.status) {
    for (size_t k = 0; k < n; k++) batch_job_probe(&r.jobs[idx[k]]);
    status = report(&r, idx, n, &a, "status");
  } else {
    r.device = a.device_text;
    status = run(&r, idx, n, &a);
  }
done:
  free(idx);
  batch_recipe_free(&r);
  return status;
}
