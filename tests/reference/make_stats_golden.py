#!/usr/bin/env python3
"""Golden values for verify/stats.c, computed independently of the C code with the standard
library only (math, statistics, fractions):

    scripts/py tests/reference/make_stats_golden.py   # writes tests/goldens/stats/stats.json

- Wilson score interval: the closed form (Wilson 1927) with z = NormalDist().inv_cdf(0.975).
- Tango's paired non-inferiority score test: the restricted MLE of p_c (pairs only the patched
  model answered) under p_b = p_c + margin found by maximising the trinomial log-likelihood
  numerically (golden-section search, not the C code's quadratic), the statistic
  (b - c - n margin) / sqrt(n (2 p_c + margin - margin^2)), and P(Z >= z) from NormalDist.
- Smallest detectable drop (original always right, so c = 0 and b ~ Binomial(n, drop)): the
  smallest b rejected at alpha, then bisection on the exact binomial tail summed in exact
  rational arithmetic.
- The gain test (exact one-sided sign test on the discordant pairs): P(X >= gained) for
  X ~ Binomial(lost + gained, 1/2), summed in exact rationals (math.comb / 2^n).
Deterministic: the same bytes on every run.
"""
import json
import math
import os
import sys
from fractions import Fraction
from statistics import NormalDist

# the one golden-section restricted MLE (python/ctxpatch_ref/seqdesign.py, standard library only);
# the C code solves a quadratic instead
from ctxpatch_ref.seqdesign import restricted_mle

N = NormalDist()
Z95 = N.inv_cdf(0.975)


def wilson(k, n, z=Z95):
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def tango(n, b, c, d):
    p = restricted_mle(n, b, c, d)
    var = n * (2 * p + d - d * d)
    if var <= 1e-12:  # margin 0 and no discordant pair: 0 / 0, no evidence
        return None, 1.0
    z = (b - c - n * d) / math.sqrt(var)
    return z, 1 - N.cdf(z)


def min_reject(n, d, alpha):
    for b in range(n + 1):
        if tango(n, b, 0, d)[1] < alpha:
            return b
    return n + 1


def tail(n, q, m):
    q = Fraction(q)
    return sum(math.comb(n, k) * q ** k * (1 - q) ** (n - k) for k in range(m, n + 1))


def detectable(n, d, alpha, power):
    m = min_reject(n, d, alpha)
    if m > n:
        return None, m
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2
        if tail(n, mid, m) >= power:
            hi = mid
        else:
            lo = mid
    return hi, m


def sign_test(lost, gained):
    n = lost + gained
    return float(Fraction(sum(math.comb(n, k) for k in range(gained, n + 1)), 2 ** n))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "goldens", "stats", "stats.json")
    wil = []
    for n in (1, 2, 5, 10, 20, 29, 40, 148, 263, 1000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n} & set(range(n + 1))):
            lo, hi = wilson(k, n)
            wil.append({"k": k, "n": n, "lo": lo, "hi": hi})
    wil.append({"k": 0, "n": 0, "lo": 0.0, "hi": 1.0})
    tan = []
    for n, b, c in ((1, 0, 0), (1, 1, 0), (1, 0, 1), (3, 3, 0), (5, 0, 0), (10, 4, 1), (20, 6, 2),
                    (30, 0, 0), (30, 30, 0), (40, 10, 3), (40, 3, 10), (44, 5, 0), (100, 17, 6),
                    (100, 0, 100), (50, 25, 25)):
        for d in (0.0, 0.05, 0.1, 0.2):
            z, p = tango(n, b, c, d)
            tan.append({"n": n, "b": b, "c": c, "margin": d, "z": z, "p": p})
    det = []
    for n in (1, 3, 5, 10, 20, 40, 100):
        for d in (0.0, 0.05, 0.1):
            drop, m = detectable(n, d, 0.05, 0.8)
            det.append({"n": n, "margin": d, "alpha": 0.05, "power": 0.8, "min_reject": m, "drop": drop})
    sign = []
    for lost, gained in ((0, 0), (1, 0), (0, 1), (0, 4), (0, 5), (1, 5), (2, 8), (5, 5), (8, 2), (3, 12),
                         (10, 25), (40, 60), (0, 40), (200, 260)):
        sign.append({"lost": lost, "gained": gained, "p": sign_test(lost, gained)})
    doc = {"generator": "tests/reference/make_stats_golden.py", "z95": Z95, "wilson": wil, "tango": tan,
           "detectable": det, "sign": sign}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out)
    print("wrote", out)


if __name__ == "__main__":
    main()
