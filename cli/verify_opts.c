/* The probe and threshold options `verify` and `patch` share: one parser, one set of range
 * checks, one place that fills cp_verify_params and cp_verify_thresholds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/stats.h"

void cli_verify_opts_init(cli_verify_opts *o, const char *default_depths) {
  memset(o, 0, sizeof *o);
  o->depths_text = default_depths;
  o->min_accuracy = -1;
  o->margin = CP_STATS_MARGIN;
  o->ppl_margin = 0.05;
  o->ppl_flat = -1;
  o->max_detectable_drop = CP_STATS_MAX_DETECTABLE_DROP;
  o->ppl_windows = 4;
  o->ppl_buckets = 8;
}

/* A number in [lo, hi) for option `a`; false after a usage error. */
static bool parse_num(const char *cmd, const char *a, const char *v, double lo, double hi, double *out) {
  char *end;
  *out = strtod(v, &end);
  if (*end || !(*out >= lo && *out < hi)) {
    cli_usage_error(cmd, "%s expects a number in [%g, %g), got '%s'", a, lo, hi, v);
    return false;
  }
  return true;
}

/* --corpus-delimiter: \n, \t and \\ stand for newline, tab and backslash ("\n\n": blank lines). */
static char *unescape(const char *v) {
  char *out = malloc(strlen(v) + 1), *w = out;
  if (!out) return NULL;
  for (const char *p = v; *p; p++) {
    if (p[0] == '\\' && (p[1] == 'n' || p[1] == 't' || p[1] == '\\')) {
      *w++ = p[1] == 'n' ? '\n' : p[1] == 't' ? '\t' : '\\';
      p++;
    } else *w++ = *p;
  }
  *w = 0;
  return out;
}

int cli_verify_opt(cli_verify_opts *o, const char *cmd, const char *a, const char *v) {
  if (!strcmp(a, "--probe") || !strcmp(a, "--verify")) {
    if (o->probes_text) return cli_usage_error(cmd, "--probe and --verify are one option (give it once)"), -1;
    o->probes_text = v;
  } else if (!strcmp(a, "--lengths")) o->lengths_text = v;
  else if (!strcmp(a, "--depths")) o->depths_text = v;
  else if (!strcmp(a, "--no-regression-at")) o->no_reg_text = v;
  else if (!strcmp(a, "--samples")) return cli_parse_u64_in(cmd, a, v, 1, 100000, &o->samples) ? 1 : -1;
  else if (!strcmp(a, "--looks")) return cli_parse_u64_in(cmd, a, v, 1, CP_SEQ_MAX_PROMPTS, &o->looks) ? 1 : -1;
  else if (!strcmp(a, "--seed")) return cli_parse_u64(cmd, a, v, &o->seed) ? 1 : -1;
  else if (!strcmp(a, "--threads")) return cli_parse_u64_in(cmd, a, v, 0, 1024, &o->threads) ? 1 : -1;
  else if (!strcmp(a, "--device")) return cli_parse_device(cmd, v, &o->device) ? 1 : -1;
  else if (!strcmp(a, "--margin")) return parse_num(cmd, a, v, 0, 1, &o->margin) ? 1 : -1;
  else if (!strcmp(a, "--ppl-margin")) return parse_num(cmd, a, v, 0, 1e6, &o->ppl_margin) ? 1 : -1;
  else if (!strcmp(a, "--max-detectable-drop")) {
    if (!parse_num(cmd, a, v, 0, 1, &o->max_detectable_drop)) return -1;
    if (o->max_detectable_drop > 0) return 1;
    return cli_usage_error(cmd, "--max-detectable-drop expects a number in (0, 1), got '%s'", v), -1;
  } else if (!strcmp(a, "--ppl-flat")) return parse_num(cmd, a, v, 0, 1e6, &o->ppl_flat) ? 1 : -1;
  else if (!strcmp(a, "--ppl-windows")) return cli_parse_u64_in(cmd, a, v, 1, 10000, &o->ppl_windows) ? 1 : -1;
  else if (!strcmp(a, "--ppl-buckets")) return cli_parse_u64_in(cmd, a, v, 1, 1024, &o->ppl_buckets) ? 1 : -1;
  else if (!strcmp(a, "--work-budget"))
    return cli_parse_u64_in(cmd, a, v, 1, UINT64_MAX, &o->work_budget) ? 1 : -1;
  else if (!strcmp(a, "--corpus")) o->corpus = v;
  else if (!strcmp(a, "--baseline-cache")) {
    if (!*v) return cli_usage_error(cmd, "--baseline-cache must not be empty"), -1;
    o->baseline_cache = v;
  }
  else if (!strcmp(a, "--corpus-delimiter")) {
    if (!*v) return cli_usage_error(cmd, "--corpus-delimiter must not be empty"), -1;
    o->corpus_delimiter_text = v;
  } else if (!strcmp(a, "--min-accuracy")) {
    char *end;
    o->min_accuracy = strtod(v, &end);
    if (*end || !(o->min_accuracy >= 0 && o->min_accuracy <= 1)) {
      cli_usage_error(cmd, "--min-accuracy expects a number in [0, 1], got '%s'", v);
      return -1;
    }
  } else return 0;
  return 1;
}

bool cli_verify_flag(cli_verify_opts *o, const char *a) {
  if (!strcmp(a, "--accept-no-gain")) o->accept_no_gain = true;
  else if (!strcmp(a, "--accept-underpowered")) o->accept_underpowered = true;
  else if (!strcmp(a, "--sequential")) o->sequential = true;
  else if (!strcmp(a, "--no-shared-prefix")) o->unshared = true;
  else return false;
  return true;
}

bool cli_verify_opts_parse(cli_verify_opts *o, const char *cmd) {
  if (cli_device_ready(cmd, o->device, o->device_desc, sizeof o->device_desc) != CLI_OK) return false;
  if (o->corpus_delimiter_text && !(o->corpus_delimiter = unescape(o->corpus_delimiter_text)))
    return cli_usage_error(cmd, "out of memory"), false;
  if (o->corpus_delimiter_text && !o->corpus) return cli_usage_error(cmd, "--corpus-delimiter needs --corpus"), false;
  if (o->looks && !o->sequential) return cli_usage_error(cmd, "--looks needs --sequential"), false;
  if (o->lengths_text && !cli_parse_lengths(cmd, o->lengths_text, &o->lengths, &o->n_lengths)) return false;
  if (o->no_reg_text && !cli_parse_lengths(cmd, o->no_reg_text, &o->no_reg, &o->n_no_reg)) return false;
  if (cli_parse_depths(&o->depths, &o->n_depths, o->depths_text) < 0)
    return cli_usage_error(cmd, "--depths expects A:B:N or a list of numbers in [0, 1], got '%s'", o->depths_text),
           false;
  if (o->sequential && o->samples * (unsigned long long)o->n_depths > CP_SEQ_MAX_PROMPTS)
    return cli_usage_error(cmd, "--sequential: %llu prompts a probe and length (--samples x depths), more than the %d a "
                                "sequential design takes", o->samples * (unsigned long long)o->n_depths, CP_SEQ_MAX_PROMPTS),
           false;
  return true;
}

void cli_verify_opts_apply(const cli_verify_opts *o, const cp_probe_kind *probes, int n_probes,
                           cp_verify_params *vp, cp_verify_thresholds *th) {
  vp->probes = probes;
  vp->n_probes = n_probes;
  vp->lengths = o->lengths;
  vp->n_lengths = o->n_lengths;
  vp->depths = o->depths;
  vp->n_depths = o->n_depths;
  vp->samples = o->samples ? (int)o->samples : (CLI_DEFAULT_PAIRS + o->n_depths - 1) / o->n_depths;
  vp->seed = o->seed;
  vp->threads = (int)o->threads;
  vp->device = o->device;
  th->min_accuracy = o->min_accuracy;
  th->no_regression_at = o->no_reg;
  th->n_no_regression = o->n_no_reg;
  th->margin = o->margin;
  th->ppl_margin = o->ppl_margin;
  th->ppl_flat = o->ppl_flat;
  th->max_detectable_drop = o->max_detectable_drop;
  th->accept_no_gain = o->accept_no_gain;
  th->accept_underpowered = o->accept_underpowered;
  vp->corpus_path = o->corpus;
  vp->corpus_delimiter = o->corpus_delimiter;
  vp->ppl_windows = (int)o->ppl_windows;
  vp->ppl_buckets = (int)o->ppl_buckets;
  vp->work_budget = o->work_budget;
  vp->baseline_cache = o->baseline_cache;
  vp->looks = o->sequential ? (o->looks ? (int)o->looks : CP_SEQ_DEFAULT_EVERY) : 0;
  vp->unshared = o->unshared;
  vp->judge = th; /* a command that judges by other thresholds points it there (patch) */
}

void cli_verify_opts_free(cli_verify_opts *o) {
  free(o->lengths);
  free(o->no_reg);
  free(o->depths);
  free(o->corpus_delimiter);
  memset(o, 0, sizeof *o);
}
