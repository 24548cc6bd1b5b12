/* A sequential run's decisions at each look (docs/certificate.md, "Sequential verdicts"): a cell
 * stops on a declared regression, or once no regression is established (futility boundary or
 * curtailment) and its accuracy threshold and the pooled gain are decided (shown, settled, or
 * declared not shown by the gain-futility rule), or at its first look once an earlier cell has
 * failed. */
#include <stdlib.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/verify/stats.h"
#include "verify/verify_seq.h"

const char *cp_seq_stop_name(cp_seq_stop s) {
  static const char *const names[CP_SEQ_STOP_COUNT] = {"last look", "regression", "futility", "curtailed",
                                                       "gain-futility"};
  return (unsigned)s < CP_SEQ_STOP_COUNT ? names[s] : "?";
}

int verify_seq_alloc(cp_verify_result *r, const cp_verify_params *p) {
  int64_t n = (int64_t)p->samples * p->n_depths;
  if (n > CP_SEQ_MAX_PROMPTS)
    return cp_error_set(CP_EARG,
                        "--sequential: %lld prompts a probe and length, more than the %d a sequential design takes",
                        (long long)n, CP_SEQ_MAX_PROMPTS);
  r->looks_every = p->looks;
  r->n_looks = (int)((n + p->looks - 1) / p->looks);
  size_t cells = (size_t)p->n_probes * (size_t)p->n_lengths + 1;
  r->used = calloc(cells, sizeof *r->used);
  r->looks_taken = calloc(cells, sizeof *r->looks_taken);
  r->look_pairs = calloc(cells * (size_t)r->n_looks * 2, sizeof *r->look_pairs);
  r->stop = calloc(cells, 1);
  r->gain_crossed = calloc(cells, 1);
  CP_CHECK_ALLOC(r->used && r->looks_taken && r->look_pairs && r->stop && r->gain_crossed, "verify: sequential");
  return 0;
}

static int gain_cells(const cp_verify_result *r, const cp_verify_thresholds *t) {
  int g = 0;
  for (int l = 0; l < r->n_lengths; l++) g += cp_verify_gain_length(r, t, l);
  return g * r->n_probes;
}

int cp_verify_seq_design(cp_seq_design *d, const cp_verify_result *r, const cp_verify_thresholds *t) {
  if (r->looks_every <= 0) return cp_error_set(CP_EARG, "verify: not a sequential result");
  return cp_seq_design_init(d, cp_verify_prompts_at(r), r->looks_every, t->alpha, t->margin, t->max_detectable_drop,
                            gain_cells(r, t));
}

double cp_verify_detectable_drop(const cp_verify_result *r, const cp_verify_thresholds *t) {
  cp_seq_design d;
  if (r->looks_every > 0 && cp_verify_seq_design(&d, r, t) == 0) return cp_seq_detectable_drop(&d, CP_STATS_POWER);
  return cp_tango_detectable_drop(cp_verify_prompts_at(r), t->margin, t->alpha, CP_STATS_POWER);
}

int verify_seq_start(verify_seq_state *st, const cp_verify_result *r, const cp_verify_params *p) {
  st->gain_lost = st->gain_gained = 0;
  st->gain_declared = st->gain_futile = false;
  return cp_verify_seq_design(&st->design, r, p->judge);
}

static bool compared_length(const cp_verify_result *r, const cp_verify_thresholds *t, int l) {
  for (int i = 0; r->has_baseline && i < t->n_no_regression; i++)
    if (t->no_regression_at[i] == r->lengths[l]) return true;
  return false;
}

/* Prompts the gain cells after (pi, l) in run order (probes outer, lengths inner) will run. */
static int64_t gain_prompts_after(const cp_verify_result *r, const cp_verify_thresholds *t, int pi, int l) {
  int64_t cells = 0, per_probe = 0;
  for (int k = 0; k < r->n_lengths; k++) {
    per_probe += cp_verify_gain_length(r, t, k);
    if (k > l) cells += cp_verify_gain_length(r, t, k);
  }
  return (cells + per_probe * (r->n_probes - pi - 1)) * cp_verify_prompts_at(r);
}

/* Whether the pooled gain test's outcome is settled: a boundary was crossed, the gain-futility rule
 * ended it, or no outcome of the prompts still to come (every one lost, every one gained) changes
 * the fixed test at its level. */
static bool gain_decided(const verify_seq_state *st, const cp_verify_result *r, int64_t lost, int64_t gained,
                         int64_t rest) {
  if (st->gain_declared || st->gain_futile) return true;
  double a = cp_seq_gain_final_alpha(&st->design);
  if (cp_sign_test_p_value(lost + rest, gained) < a) return true;
  /* with ppl a gain may still come from the corpus, so only a found gain is settled here */
  return !r->has_ppl && !(cp_sign_test_p_value(lost, gained + rest) < a);
}

bool verify_seq_look(verify_seq_state *st, cp_verify_result *r, const cp_verify_thresholds *t, int pi, int l, int j,
                     int64_t b, int64_t c, int64_t k_ok) {
  const cp_seq_design *d = &st->design;
  size_t cl = (size_t)pi * (size_t)r->n_lengths + (size_t)l;
  r->looks_taken[cl] = j + 1;
  r->look_pairs[(cl * (size_t)r->n_looks + (size_t)j) * 2] = (int)b;
  r->look_pairs[(cl * (size_t)r->n_looks + (size_t)j) * 2 + 1] = (int)c;
  bool compared = compared_length(r, t, l), gain_cell = r->has_baseline && cp_verify_gain_length(r, t, l);
  if (compared && cp_seq_fails(d, j, b, c)) {
    r->stop[cl] = CP_SEQ_REGRESSION;
    st->failed = true;
    return true;
  }
  if (j >= d->n_looks - 1) {
    r->stop[cl] = CP_SEQ_LAST_LOOK;
    return true;
  }
  if (st->failed) { /* an earlier cell failed: nothing this one gives changes the verdict */
    r->stop[cl] = CP_SEQ_CURTAILED;
    return true;
  }
  if (gain_cell && cp_seq_gain_crossed(d, j, b, c)) r->gain_crossed[cl] = 1, st->gain_declared = true;
  int64_t n = cp_seq_look_prompts(d, j), N = d->n_max;
  if (t->min_accuracy >= 0) { /* decided either way whatever the remaining prompts give */
    double need = t->min_accuracy * (double)N;
    if (!((double)k_ok >= need || (double)(k_ok + N - n) < need)) return false;
    if ((double)(k_ok + N - n) < need) { /* --min-accuracy is missed whatever the rest gives */
      st->failed = true;
      r->stop[cl] = CP_SEQ_CURTAILED;
      return true;
    }
  }
  cp_seq_stop why = CP_SEQ_CURTAILED;
  if (compared && !cp_seq_cannot_fail(d, j, b, c)) {
    if (!cp_seq_futile(d, j, b, c)) return false;
    why = CP_SEQ_FUTILITY;
  }
  if (gain_cell && cp_verify_gain_judged(r, t)) {
    int64_t rest = N - n + gain_prompts_after(r, t, pi, l), lost = st->gain_lost + b, gained = st->gain_gained + c;
    if (!gain_decided(st, r, lost, gained, rest)) {
      /* the gain is all that keeps the cell: the rule ends the pooled test, or the cell goes on */
      if (!cp_seq_gain_futile(d, lost, gained, rest)) return false;
      st->gain_futile = true;
      why = CP_SEQ_GAIN_FUTILITY;
    }
  }
  r->stop[cl] = (unsigned char)why;
  return true;
}

void verify_seq_cell_done(verify_seq_state *st, const cp_verify_result *r, const cp_verify_thresholds *t, int l,
                          int64_t b, int64_t c) {
  if (!r->has_baseline || !cp_verify_gain_length(r, t, l)) return;
  st->gain_lost += b;
  st->gain_gained += c;
}
