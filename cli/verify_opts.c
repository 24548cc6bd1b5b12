/* The probe and threshold options `verify` and `patch` share: one parser, one set of range
 * checks, one place that fills cp_verify_params and cp_verify_thresholds. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_verify_opts_init(cli_verify_opts *o, const char *default_depths) {
  memset(o, 0, sizeof *o);
  o->depths_text = default_depths;
  o->samples = 1;
  o->min_accuracy = -1;
}

int cli_verify_opt(cli_verify_opts *o, const char *cmd, const char *a, const char *v) {
  if (!strcmp(a, "--lengths")) o->lengths_text = v;
  else if (!strcmp(a, "--depths")) o->depths_text = v;
  else if (!strcmp(a, "--no-regression-at")) o->no_reg_text = v;
  else if (!strcmp(a, "--samples")) return cli_parse_u64_in(cmd, a, v, 1, 100000, &o->samples) ? 1 : -1;
  else if (!strcmp(a, "--seed")) return cli_parse_u64(cmd, a, v, &o->seed) ? 1 : -1;
  else if (!strcmp(a, "--threads")) return cli_parse_u64_in(cmd, a, v, 0, 1024, &o->threads) ? 1 : -1;
  else if (!strcmp(a, "--min-accuracy")) {
    char *end;
    o->min_accuracy = strtod(v, &end);
    if (*end || !(o->min_accuracy >= 0 && o->min_accuracy <= 1)) {
      cli_usage_error(cmd, "--min-accuracy expects a number in [0, 1], got '%s'", v);
      return -1;
    }
  } else return 0;
  return 1;
}

bool cli_verify_opts_parse(cli_verify_opts *o, const char *cmd) {
  if (o->lengths_text && !cli_parse_lengths(cmd, o->lengths_text, &o->lengths, &o->n_lengths)) return false;
  if (o->no_reg_text && !cli_parse_lengths(cmd, o->no_reg_text, &o->no_reg, &o->n_no_reg)) return false;
  if (cli_parse_depths(&o->depths, &o->n_depths, o->depths_text) < 0)
    return cli_usage_error(cmd, "--depths expects A:B:N or a list of numbers in [0, 1], got '%s'", o->depths_text),
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
  vp->samples = (int)o->samples;
  vp->seed = o->seed;
  vp->threads = (int)o->threads;
  th->min_accuracy = o->min_accuracy;
  th->no_regression_at = o->no_reg;
  th->n_no_regression = o->n_no_reg;
}

void cli_verify_opts_free(cli_verify_opts *o) {
  free(o->lengths);
  free(o->no_reg);
  free(o->depths);
  memset(o, 0, sizeof *o);
}
