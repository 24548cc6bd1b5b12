/* Wilson intervals, Tango's paired non-inferiority score test and its detectable drop, the sign test
 * (include/ctxpatch/verify/stats.h; the formulas are derived in docs/certificate.md). */
#include <assert.h>
#include <math.h>

#include "ctxpatch/verify/stats.h"

void cp_wilson_interval(double *lo, double *hi, int64_t k, int64_t n, double z) {
  assert(k >= 0 && k <= n && z > 0);
  if (n == 0) {
    *lo = 0;
    *hi = 1;
    return;
  }
  double nn = (double)n, p = (double)k / nn, z2 = z * z;
  double centre = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  double half = z / (1 + z2 / nn) * sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn));
  /* the interval holds the bounds exactly at k = 0 and k = n (rounding may cross them) */
  *lo = k == 0 ? 0.0 : fmax(0.0, centre - half);
  *hi = k == n ? 1.0 : fmin(1.0, centre + half);
}

double cp_normal_sf(double z) { return 0.5 * erfc(z / sqrt(2.0)); }

void cp_tango_statistic(double *z, int64_t n, int64_t b, int64_t c, double margin) {
  assert(n > 0 && b >= 0 && c >= 0 && b + c <= n && margin >= 0 && margin < 1);
  double nn = (double)n, d = margin;
  /* d/dp of the log-likelihood under p_b = p_c + d, times its denominators:
   * 2n p^2 + B p + C = 0, whose non-negative root is the restricted MLE of p_c. */
  double B = -(double)b * (1 + d) - (double)c * (1 - d) + 2 * nn * d, C = -(double)c * d * (1 - d);
  double p = (-B + sqrt(B * B - 8 * nn * C)) / (4 * nn);
  double var = nn * (2 * p + d - d * d);
  *z = var > 0 ? ((double)b - (double)c - nn * d) / sqrt(var) : NAN;
}

double cp_tango_p_value(int64_t n, int64_t b, int64_t c, double margin) {
  double z;
  cp_tango_statistic(&z, n, b, c, margin);
  return isnan(z) ? 1.0 : cp_normal_sf(z);
}

int64_t cp_tango_min_reject(int64_t n, double margin, double alpha) {
  /* with c = 0 the statistic grows with b, so the rejection region is b >= the first rejected b */
  for (int64_t b = 0; b <= n; b++)
    if (cp_tango_p_value(n, b, 0, margin) < alpha) return b;
  return n + 1;
}

/* sum of P(Bin(n, q) = k) over k in [lo, hi], in log space term by term (n up to millions stays
 * finite); 0 < q < 1 */
static double binomial_sum(int64_t n, double q, int64_t lo, int64_t hi) {
  double lq = log(q), l1q = log1p(-q), lnf = lgamma((double)n + 1), sum = 0;
  for (int64_t k = lo; k <= hi; k++)
    sum += exp(lnf - lgamma((double)k + 1) - lgamma((double)(n - k) + 1) + (double)k * lq + (double)(n - k) * l1q);
  return sum;
}

/* P(Bin(n, q) >= m), the upper terms summed (relative precision, as a p-value needs). */
static double binomial_upper(int64_t n, double q, int64_t m) {
  if (m <= 0) return 1.0;
  if (m > n) return 0.0;
  if (q <= 0) return 0.0;
  if (q >= 1) return 1.0;
  return fmin(1.0, binomial_sum(n, q, m, n));
}

double cp_binomial_tail(int64_t n, double q, int64_t m) {
  if (m <= 0 || m > n || q <= 0 || q >= 1 || n - m + 1 <= m) return binomial_upper(n, q, m);
  /* the lower tail has fewer terms: 1 - P(Bin(n, q) <= m - 1), an absolute error of about 1e-16 */
  return fmax(0.0, fmin(1.0, 1.0 - binomial_sum(n, q, 0, m - 1)));
}

double cp_tango_detectable_drop(int64_t n, double margin, double alpha, double power) {
  int64_t m = cp_tango_min_reject(n, margin, alpha);
  if (m > n) return NAN;
  double lo = 0, hi = 1; /* the tail grows with q: bisect for the first q reaching `power` */
  while (hi - lo > 1e-10) {
    double mid = 0.5 * (lo + hi);
    if (binomial_upper(n, mid, m) >= power) hi = mid;
    else lo = mid;
  }
  return hi;
}

double cp_sign_test_p_value(int64_t lost, int64_t gained) {
  assert(lost >= 0 && gained >= 0);
  return binomial_upper(lost + gained, 0.5, gained);
}

double cp_sign_test_detectable_gain(int64_t n, double alpha, double power) {
  /* none lost: the sign test rejects from m gained on, P = 2^-m; m <= 1075 covers every alpha > 0 */
  int64_t m = 0;
  while (m <= n && m < 1100 && !(cp_sign_test_p_value(0, m) < alpha)) m++;
  if (m > n || m >= 1100) return NAN;
  double lo = 0, hi = 1; /* the tail grows with q */
  while (hi - lo > 1e-10) {
    double mid = 0.5 * (lo + hi);
    if (cp_binomial_tail(n, mid, m) >= power) hi = mid;
    else lo = mid;
  }
  return hi;
}
