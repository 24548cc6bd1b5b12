/* Floor: verify. The statistics every verdict is stated with (docs/certificate.md, "Statistics"):
 *   - a 95% Wilson score interval for an accuracy k / n;
 *   - Tango's score test for paired binary outcomes against a non-inferiority margin (Tango 1998,
 *     Stat. Med. 17:891): the same prompts are answered by the original and the patched model;
 *     b = pairs only the original answered, c = pairs only the patched model answered, n pairs.
 *     H0: drop = P(original right) - P(patched right) <= margin; H1: drop > margin (a
 *     regression). The variance is taken at the restricted maximum-likelihood estimate under
 *     H0, so the test stays defined at zero cells; at margin 0 it is McNemar's score test.
 *     One-sided p-value from the normal distribution;
 *   - the smallest drop the test detects with a given power, in the scenario where the original
 *     answers every prompt (every loss is a discordant pair), from the exact binomial law of b;
 *   - the gain test: the exact one-sided sign test on the discordant pairs (McNemar's exact test,
 *     H1: more pairs gained than lost), and the smallest gain it detects with a given power, in
 *     the scenario where the patch loses no prompt (every gain is a discordant pair).
 * Pure functions of their arguments; no allocation.
 */
#ifndef CTXPATCH_VERIFY_STATS_H
#define CTXPATCH_VERIFY_STATS_H

#include <stdint.h>

/* z_{0.975}: the two-sided 95% normal quantile. */
#define CP_STATS_Z95 1.959963984540054
/* Defaults of the paired test: one-sided level and non-inferiority margin (accuracy points). */
#define CP_STATS_ALPHA 0.05
#define CP_STATS_MARGIN 0.05
/* Power at which the smallest detectable drop is stated. */
#define CP_STATS_POWER 0.8
/* Default largest detectable drop a design may have and still pass (docs/certificate.md,
 * "Verdicts"): the default 40 pairs detect 0.162; 20 pairs (0.259) or 6 (0.731) are inconclusive. */
#define CP_STATS_MAX_DETECTABLE_DROP 0.2

/* Wilson score interval of k successes in n trials at normal quantile z; n = 0 gives [0, 1].
 * 0 <= k <= n (an assert). */
void cp_wilson_interval(double *lo, double *hi, int64_t k, int64_t n, double z);

/* Upper tail of the standard normal, P(Z > z). */
double cp_normal_sf(double z);

/* Tango's restricted MLE of the probability of "only the patched model right" under
 * drop = margin, and the statistic z = (b - c - n margin) / sqrt(n (2 p + margin - margin^2)).
 * *z is NaN when the variance is 0 (margin 0 and no discordant pair). */
void cp_tango_statistic(double *z, int64_t n, int64_t b, int64_t c, double margin);
/* One-sided p-value of a regression beyond `margin` (P(Z >= z)); 1 when z is NaN. */
double cp_tango_p_value(int64_t n, int64_t b, int64_t c, double margin);

/* Smallest b with c = 0 that the test rejects at `alpha` among n pairs; n + 1 if none. */
int64_t cp_tango_min_reject(int64_t n, double margin, double alpha);
/* Smallest true drop (original always right) the test detects at `alpha` with probability
 * `power` among n pairs, to 1e-9 (bisection on the exact binomial tail); NaN when no drop is
 * detectable (n < cp_tango_min_reject: too few pairs). */
double cp_tango_detectable_drop(int64_t n, double margin, double alpha, double power);

/* Exact one-sided sign test of a gain among the discordant pairs: P(X >= gained) for
 * X ~ Binomial(lost + gained, 1/2); 1 when there is no discordant pair. */
double cp_sign_test_p_value(int64_t lost, int64_t gained);

/* P(Binomial(n, q) >= m), summed over the shorter tail: absolute error about 1e-16 (for comparing
 * with a power or a threshold; n up to millions stays finite). */
double cp_binomial_tail(int64_t n, double q, int64_t m);
/* Smallest rate of gained prompts (none lost) the sign test over n prompts detects at `alpha` with
 * probability `power`, to 1e-9 (bisection on the exact binomial tail); NaN when even n gained of n
 * is not significant. */
double cp_sign_test_detectable_gain(int64_t n, double alpha, double power);

#endif
