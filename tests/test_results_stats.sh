#!/usr/bin/env bash
# lab/results.py (docs/results.md's generator): its Student-t table against quantiles computed
# here independently (the t density integrated numerically, inverted by bisection), its
# t interval against the statistics module, and the paired-difference and cell formatting.
set -uo pipefail
src=${CTXPATCH_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
py=${CTXPATCH_PYTHON:-/usr/bin/python3}
PYTHONPATH=$src/lab${PYTHONPATH:+:$PYTHONPATH} "$py" - <<'PY'
import math, statistics, sys
import results as R   # lab/results.py

def t_cdf(t, df, steps=2000):
    # P(T <= t) = 1/2 + integral_0^t of the density (Simpson), t >= 0
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    f = lambda x: c * (1 + x * x / df) ** (-(df + 1) / 2)
    h = t / steps
    s = f(0) + f(t) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, steps))
    return 0.5 + s * h / 3

def t_quantile(p, df):
    lo, hi = 0.0, 50.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2

fails = 0
for df in range(1, len(R.T975) + 1):
    q = t_quantile(0.975, df)
    if abs(q - R.T975[df - 1]) > 2e-3:
        print("FAIL: t table df %d: %.4f, computed %.4f" % (df, R.T975[df - 1], q)); fails += 1
# closed forms: df 1 is Cauchy, df 2 has t = (2p - 1) / sqrt(2 p (1 - p))
if abs(R.T975[0] - math.tan(math.pi * 0.475)) > 1e-3: fails += 1; print("FAIL: df 1")
if abs(R.T975[1] - 0.95 / math.sqrt(2 * 0.975 * 0.025)) > 1e-3: fails += 1; print("FAIL: df 2")

xs = [2.1, 2.5, 1.9, 2.8, 2.2, 2.0, 2.6, 2.4]
m, lo, hi = R.mean_ci(xs)
half = R.T975[len(xs) - 2] * statistics.stdev(xs) / math.sqrt(len(xs))
if abs(m - statistics.mean(xs)) > 1e-12 or abs((hi - lo) / 2 - half) > 1e-12:
    print("FAIL: mean_ci", m, lo, hi); fails += 1
m, lo, hi = R.mean_ci([1.0] * 5)          # no spread: a zero-width interval
if not (m == lo == hi == 1.0):
    print("FAIL: mean_ci constant", m, lo, hi); fails += 1
if not math.isnan(R.mean_ci([3.0])[1]):   # one window: no interval
    print("FAIL: mean_ci single"); fails += 1
if R.acc_cell({"accuracy": 0.85, "accuracy_ci95": [0.64, 0.948]}) != ".85 [.64, .95]":
    print("FAIL: acc_cell", R.acc_cell({"accuracy": 0.85, "accuracy_ci95": [0.64, 0.948]})); fails += 1
if R.acc_cell({"accuracy": 1, "accuracy_ci95": [0.8389, 1]}) != "1.00 [.84, 1.00]":
    print("FAIL: acc_cell 1"); fails += 1
base = {"original": {512: [{"nll": 2.0}, {"nll": 3.0}, {"nll": 2.5}]},
        "x": {512: [{"nll": 1.5}, {"nll": 2.4}, {"nll": 2.1}]}}
s = R.ppl_summary(base, ["x"], 512)
if "lower (better)" not in s or "-0.500" not in s:   # diffs -0.5, -0.6, -0.4: CI excludes 0
    print("FAIL: ppl_summary", s); fails += 1
print("results stats: %d failures" % fails)
sys.exit(1 if fails else 0)
PY
