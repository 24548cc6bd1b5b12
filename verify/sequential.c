/* The sequential verdict design: looks, nominal levels, boundaries and the design's power
 * (include/ctxpatch/verify/sequential.h; derived in docs/certificate.md, "Sequential verdicts"). */
#include <math.h>
#include <stdlib.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/stats.h"

int cp_seq_design_init(cp_seq_design *d, int64_t n_max, int64_t every, double alpha, double margin,
                       double futility_drop, int gain_cells) {
  if (n_max < 1 || n_max > CP_SEQ_MAX_PROMPTS || every < 1)
    return cp_error_set(CP_EARG,
                        "sequential design: %lld prompts a cell, a look every %lld: expected 1 to %d prompts and "
                        "at least 1 between looks",
                        (long long)n_max, (long long)every, CP_SEQ_MAX_PROMPTS);
  d->n_max = n_max;
  d->every = every;
  d->n_looks = (int)((n_max + every - 1) / every);
  d->alpha = alpha;
  d->margin = margin;
  d->futility_drop = futility_drop;
  d->gain_cells = gain_cells > 0 ? gain_cells : 1;
  int64_t pooled = (int64_t)d->gain_cells * n_max;
  d->gain_target = cp_sign_test_detectable_gain(pooled, cp_seq_gain_final_alpha(d), CP_STATS_POWER);
  d->gain_gamma = pooled <= CP_SEQ_GAIN_MAX_PROMPTS ? CP_SEQ_GAIN_GAMMA : 0;
  return 0;
}

int64_t cp_seq_look_prompts(const cp_seq_design *d, int j) {
  int64_t n = ((int64_t)j + 1) * d->every;
  return n < d->n_max ? n : d->n_max;
}

static bool last(const cp_seq_design *d, int j) { return j >= d->n_looks - 1; }

double cp_seq_fail_level(const cp_seq_design *d, int j) {
  if (d->n_looks == 1) return d->alpha;
  return last(d, j) ? d->alpha * (1 - CP_SEQ_INTERIM_SHARE) : d->alpha * CP_SEQ_INTERIM_SHARE / (d->n_looks - 1);
}

double cp_seq_futility_level(const cp_seq_design *d, int j) {
  return last(d, j) ? 0.0 : CP_SEQ_FUTILITY_BETA / (d->n_looks - 1);
}

double cp_seq_gain_level(const cp_seq_design *d, int j) {
  return last(d, j) ? 0.0 : d->alpha * CP_SEQ_INTERIM_SHARE / ((double)d->gain_cells * (d->n_looks - 1));
}

double cp_seq_gain_final_alpha(const cp_seq_design *d) {
  return d->n_looks == 1 ? d->alpha : d->alpha * (1 - CP_SEQ_INTERIM_SHARE);
}

bool cp_seq_fails(const cp_seq_design *d, int j, int64_t b, int64_t c) {
  return cp_tango_p_value(cp_seq_look_prompts(d, j), b, c, d->margin) < cp_seq_fail_level(d, j);
}

bool cp_seq_futile(const cp_seq_design *d, int j, int64_t b, int64_t c) {
  if (last(d, j)) return false;
  double z;
  cp_tango_statistic(&z, cp_seq_look_prompts(d, j), b, c, d->futility_drop);
  /* lower tail: the data are unlikely under a drop of futility_drop */
  return !isnan(z) && cp_normal_sf(-z) < cp_seq_futility_level(d, j);
}

bool cp_seq_gain_crossed(const cp_seq_design *d, int j, int64_t lost, int64_t gained) {
  return !last(d, j) && cp_sign_test_p_value(lost, gained) < cp_seq_gain_level(d, j);
}

bool cp_seq_cannot_fail(const cp_seq_design *d, int j, int64_t b, int64_t c) {
  /* Tango's p falls as b grows and rises as c grows: "every later prompt lost" is the worst case */
  for (int i = j + 1; i < d->n_looks; i++)
    if (cp_seq_fails(d, i, b + cp_seq_look_prompts(d, i) - cp_seq_look_prompts(d, j), c)) return false;
  return true;
}

double cp_seq_gain_power(const cp_seq_design *d, int64_t lost, int64_t gained, int64_t rest) {
  double a = cp_seq_gain_final_alpha(d);
  if (cp_sign_test_p_value(lost, gained) < a) return 1.0;
  if (rest <= 0 || !(cp_sign_test_p_value(lost, gained + rest) < a)) return 0.0;
  /* the p-value falls with each gained pair: bisect for the fewest gains that reject */
  int64_t lo = 0, hi = rest; /* lo does not reject, hi does */
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (cp_sign_test_p_value(lost, gained + mid) < a) hi = mid;
    else lo = mid;
  }
  return isnan(d->gain_target) ? 0.0 : cp_binomial_tail(rest, d->gain_target, hi);
}

bool cp_seq_gain_futile(const cp_seq_design *d, int64_t lost, int64_t gained, int64_t rest) {
  return d->gain_gamma > 0 && cp_seq_gain_power(d, lost, gained, rest) < d->gain_gamma;
}

/* log C(n, k) */
static double log_choose(int64_t n, int64_t k) {
  return lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1);
}

double cp_seq_power(const cp_seq_design *d, double drop) {
  size_t n = (size_t)d->n_max + 1;
  double *mass = calloc(n, sizeof *mass), *next = calloc(n, sizeof *next), got = 0;
  if (!mass || !next) {
    free(mass);
    free(next);
    return NAN;
  }
  mass[0] = 1;
  int64_t prev = 0;
  for (int j = 0; j < d->n_looks; j++) {
    int64_t nj = cp_seq_look_prompts(d, j), step = nj - prev;
    for (int64_t b = 0; b <= nj; b++) next[b] = 0;
    for (int64_t k = 0; k <= step; k++) { /* Binomial(step, drop) increments of b */
      double pk = drop <= 0   ? (k == 0)
                  : drop >= 1 ? (k == step)
                              : exp(log_choose(step, k) + (double)k * log(drop) + (double)(step - k) * log1p(-drop));
      if (pk == 0) continue;
      for (int64_t b = 0; b <= prev; b++) next[b + k] += mass[b] * pk;
    }
    /* c = 0: the rejection region is b >= some count, the futility region b <= another */
    for (int64_t b = 0; b <= nj; b++) {
      mass[b] = 0;
      if (next[b] == 0) continue;
      if (cp_seq_fails(d, j, b, 0)) got += next[b];
      else if (!cp_seq_futile(d, j, b, 0)) mass[b] = next[b];
    }
    prev = nj;
  }
  free(mass);
  free(next);
  return got;
}

double cp_seq_detectable_drop(const cp_seq_design *d, double power) {
  double top = cp_seq_power(d, 1.0);
  if (isnan(top) || top < power) return NAN;
  double lo = 0, hi = 1;
  while (hi - lo > 1e-9) {
    double mid = 0.5 * (lo + hi), pw = cp_seq_power(d, mid);
    if (isnan(pw)) return NAN;
    if (pw >= power) hi = mid;
    else lo = mid;
  }
  return hi;
}
