"""The sequential verdict design of docs/certificate.md ("Sequential verdicts"), written
independently of verify/sequential.c (stdlib only): the looks, the nominal levels of every look
(Haybittle-Peto-type alpha spending, Bonferroni over the looks), the boundaries in counts, the
design's power and detectable drop by exact recursion over the looks, and the gain-futility rule
(the conditional power of the pooled gain test under the design's target gain).

Tango's statistic takes its restricted MLE by golden-section maximisation of the trinomial
likelihood (the C code solves the quadratic), the normal tail from statistics.NormalDist, the
binomial laws in floats summed term by term from math.comb. The conditional power sums the
binomial law of the remaining gains over every outcome that makes the sign test reject (the C code
bisects for the fewest gains that reject and takes one tail); the target gain bisects on that
power at the start (the C code on the tail from the fewest gains that reject with none lost).
"""
import math
from functools import lru_cache
from statistics import NormalDist

_N = NormalDist()

# Share of each test's alpha the interim looks spend (equally); the last look keeps the rest.
INTERIM_SHARE = 0.1
# Total probability, under a drop of futility_drop, that the interim looks stop for "no regression".
FUTILITY_BETA = 0.1
# Gain futility: conditional power below which the pooled gain test stops, the power the target
# gain is stated at, and the most prompts the gain cells may hold together for the rule to apply.
GAIN_GAMMA = 0.1
POWER = 0.8
GAIN_MAX_PROMPTS = 100000


def restricted_mle(n, b, c, d):
    """argmax over p in [0, (1-d)/2] of b log(p+d) + c log p + (n-b-c) log(1-2p-d)."""
    rest = n - b - c

    def ll(p):
        s = 0.0
        for cnt, prob in ((b, p + d), (c, p), (rest, 1 - 2 * p - d)):
            if cnt:
                if prob <= 0:
                    return -math.inf
                s += cnt * math.log(prob)
        return s

    lo, hi = 0.0, (1 - d) / 2
    g = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = ll(x1), ll(x2)
    for _ in range(120):
        if f1 < f2:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = ll(x2)
        else:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = ll(x1)
    p = (lo + hi) / 2
    for edge in (0.0, (1 - d) / 2):
        if ll(edge) > ll(p):
            p = edge
    return p


@lru_cache(maxsize=None)
def tango_z(n, b, c, d):
    p = restricted_mle(n, b, c, d)
    var = n * (2 * p + d - d * d)
    return None if var <= 1e-12 else (b - c - n * d) / math.sqrt(var)


def tango_p(n, b, c, d):
    """One-sided p-value of a drop beyond d (upper tail)."""
    z = tango_z(n, b, c, d)
    return 1.0 if z is None else 1 - _N.cdf(z)


@lru_cache(maxsize=None)
def sign_p(lost, gained):
    m = lost + gained
    return sum(math.comb(m, k) for k in range(gained, m + 1)) / 2.0 ** m


class Design:
    def __init__(self, n_max, every=8, alpha=0.05, margin=0.05, futility_drop=0.2, gain_cells=1):
        self.n_max, self.every, self.alpha, self.margin = n_max, every, alpha, margin
        self.futility_drop, self.gain_cells = futility_drop, gain_cells
        self.looks = [min(j * every, n_max) for j in range(1, -(-n_max // every) + 1)]
        self.J = len(self.looks)
        self.gain_gamma = GAIN_GAMMA if gain_cells * n_max <= GAIN_MAX_PROMPTS else 0.0
        self._target = self._cp = None

    def fail_level(self, j):
        if self.J == 1:
            return self.alpha
        return self.alpha * INTERIM_SHARE / (self.J - 1) if j < self.J - 1 else self.alpha * (1 - INTERIM_SHARE)

    def futility_level(self, j):
        return FUTILITY_BETA / (self.J - 1) if j < self.J - 1 else 0.0

    def gain_level(self, j):
        if j == self.J - 1:
            return 0.0
        return self.alpha * INTERIM_SHARE / (self.gain_cells * (self.J - 1))

    def gain_final_alpha(self):
        return self.alpha if self.J == 1 else self.alpha * (1 - INTERIM_SHARE)

    def fails(self, j, b, c):
        return tango_p(self.looks[j], b, c, self.margin) < self.fail_level(j)

    def futile(self, j, b, c):
        if j == self.J - 1:
            return False
        z = tango_z(self.looks[j], b, c, self.futility_drop)
        return z is not None and _N.cdf(z) < self.futility_level(j)

    def gain_crossed(self, j, lost, gained):
        return j < self.J - 1 and sign_p(lost, gained) < self.gain_level(j)

    def _gain_power_at(self, q, lost, gained, rest):
        """P(sign_p(lost, gained + Y) < gain_final_alpha) for Y ~ Binomial(rest, q): every outcome
        of the remaining prompts (each gained with probability q, none lost) summed."""
        assert rest <= 1000, "the float binomial terms overflow past 1000 prompts"
        a = self.gain_final_alpha()
        return sum(math.comb(rest, y) * q ** y * (1 - q) ** (rest - y)
                   for y in range(rest + 1) if sign_p(lost, gained + y) < a)

    def gain_target(self):
        """Smallest rate of gained prompts (none lost) the fixed pooled sign test over
        gain_cells x n_max prompts detects with power POWER; None when none is."""
        if self._target is None:
            n = self.gain_cells * self.n_max
            if self._gain_power_at(1.0, 0, 0, n) < POWER:
                self._target = float("nan")
            else:
                lo, hi = 0.0, 1.0
                while hi - lo > 1e-10:
                    mid = (lo + hi) / 2
                    if self._gain_power_at(mid, 0, 0, n) >= POWER:
                        hi = mid
                    else:
                        lo = mid
                self._target = hi
        return None if math.isnan(self._target) else self._target

    def gain_power(self, lost, gained, rest):
        """Conditional power of the pooled gain test with lost / gained pairs so far and rest prompts
        of the gain cells to come, each gained with probability gain_target(), none lost."""
        if self._cp is None:
            self._cp = {}
        key = (lost, gained, rest)
        if key not in self._cp:
            q = self.gain_target()
            self._cp[key] = 0.0 if q is None else self._gain_power_at(q, lost, gained, rest)
        return self._cp[key]

    def gain_futile(self, lost, gained, rest):
        return self.gain_gamma > 0 and self.gain_power(lost, gained, rest) < self.gain_gamma

    def fail_bounds(self, j):
        """Smallest b rejected at look j when c = 0 (n_j + 1: none)."""
        n = self.looks[j]
        return next((b for b in range(n + 1) if self.fails(j, b, 0)), n + 1)

    def futility_bounds(self, j):
        """Largest b that stops for futility at look j when c = 0 (-1: none)."""
        n = self.looks[j]
        return max((b for b in range(n + 1) if self.futile(j, b, 0)), default=-1)

    def power(self, drop):
        """P(the design declares a regression) when the original answers every prompt and the
        patch loses each with probability `drop` (c = 0): exact recursion over b at the looks."""
        mass = {0: 1.0}
        got, prev = 0.0, 0
        for j, n in enumerate(self.looks):
            step = n - prev
            new = {}
            for b, w in mass.items():
                for k in range(step + 1):
                    pk = math.comb(step, k) * drop ** k * (1 - drop) ** (step - k)
                    new[b + k] = new.get(b + k, 0.0) + w * pk
            mass = {}
            for b, w in new.items():
                if self.fails(j, b, 0):
                    got += w
                elif not self.futile(j, b, 0):
                    mass[b] = w
            prev = n
        return got

    def detectable_drop(self, power=0.8):
        if self.power(1.0) < power:
            return None
        lo, hi = 0.0, 1.0
        while hi - lo > 1e-9:
            mid = (lo + hi) / 2
            if self.power(mid) >= power:
                hi = mid
            else:
                lo = mid
        return hi


@lru_cache(maxsize=None)
def cannot_fail(design, j, b, c):
    """Curtailment: no later look rejects even if every remaining prompt is lost."""
    n = design.looks[j]
    return not any(design.fails(i, b + design.looks[i] - n, c) for i in range(j + 1, design.J))


def run_cells(design, cells, gain_judged=True, gain_futility=True, has_ppl=False):
    """A run through the looks of verify/verify_seq.c: cells in run order (probes outer, lengths
    inner), each (outcomes, compared, gain): outcomes a sequence of +1 (lost), -1 (gained), 0 (tie)
    per prompt; compared: the regression test judges it; gain: the gain test pools it. No
    --min-accuracy. Returns ([(stop, prompts, lost, gained)] per cell, fail, gain shown by the pairs)."""
    a = design.gain_final_alpha()
    pool_b = pool_c = 0
    declared = futile = failed = False
    out = []
    for i, (outcomes, compared, gain) in enumerate(cells):
        gain_after = sum(1 for x in cells[i + 1:] if x[2])
        b = c = 0
        for j, n in enumerate(design.looks):
            prev = design.looks[j - 1] if j else 0
            for o in outcomes[prev:n]:
                b += o == 1
                c += o == -1
            if compared and design.fails(j, b, c):
                failed, stop = True, "regression"
                break
            if j == design.J - 1:
                stop = "last look"
                break
            if failed:
                stop = "curtailed"
                break
            if gain and design.gain_crossed(j, b, c):
                declared = True
            stop = "curtailed"
            if compared and not cannot_fail(design, j, b, c):
                if not design.futile(j, b, c):
                    continue
                stop = "futility"
            if gain and gain_judged and not (declared or futile):
                rest = design.n_max - n + design.n_max * gain_after
                lost, gained = pool_b + b, pool_c + c
                settled = sign_p(lost + rest, gained) < a or (not has_ppl and not sign_p(lost, gained + rest) < a)
                if not settled:
                    if not (gain_futility and design.gain_futile(lost, gained, rest)):
                        continue
                    futile, stop = True, "gain-futility"
            break
        out.append((stop, n, b, c))
        if gain:
            pool_b, pool_c = pool_b + b, pool_c + c
    return out, failed, declared or (not futile and sign_p(pool_b, pool_c) < a)


def run_cell(design, outcomes, compared=True, gain_judged=True, gain_futility=True):
    """One cell (compared, the only gain cell) through the looks of verify/verify_seq.c: outcomes is
    a sequence of +1 (lost), -1 (gained), 0 (tie) per prompt. Returns (stop, prompts, fail, gain)."""
    cells, fail, gain = run_cells(design, [(outcomes, compared, gain_judged)], gain_judged, gain_futility)
    return cells[0][0], cells[0][1], fail, gain
