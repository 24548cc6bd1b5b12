#!/usr/bin/env python3
"""Golden values for verify/sequential.c, from python/ctxpatch_ref/seqdesign.py (stdlib only,
written independently of the C code: Tango's restricted MLE by golden-section maximisation, the
binomial laws from math.comb, the power by its own recursion over the looks):

    scripts/py tests/reference/make_sequential_golden.py   # writes tests/goldens/stats/sequential.json

Per design (prompts, look every, alpha, margin, futility drop, gain cells): the looks, the nominal
levels of every look, the boundaries in counts (the smallest lost count that fails and the largest
that stops for futility, at a few gained counts), curtailment on a few (b, c), the gain boundary,
the power at a few drops and the detectable drop at 80% power, and the gain-futility rule: its
target gain, threshold, and the conditional power at a few (lost, gained, prompts to come).
Deterministic.
"""
import json
import os
import sys

from ctxpatch_ref import seqdesign as sd

DESIGNS = [(40, 8, 0.05, 0.05, 0.2, 1), (40, 8, 0.05, 0.05, 0.2, 3), (80, 8, 0.05, 0.05, 0.2, 2),
           (40, 10, 0.05, 0.1, 0.25, 1), (24, 8, 0.05, 0.05, 0.2, 1), (8, 8, 0.05, 0.05, 0.2, 1),
           (30, 7, 0.1, 0.0, 0.2, 1)]


def design_doc(n, every, alpha, margin, fdrop, cells):
    d = sd.Design(n, every=every, alpha=alpha, margin=margin, futility_drop=fdrop, gain_cells=cells)
    looks = []
    for j, nj in enumerate(d.looks):
        cs = sorted({0, 1, 3, nj // 4})
        fail_b = {str(c): next((b for b in range(nj - c + 1) if d.fails(j, b, c)), -1) for c in cs}
        fut_b = {str(c): max((b for b in range(nj - c + 1) if d.futile(j, b, c)), default=-1) for c in cs}
        gain_c = {str(b): next((c for c in range(nj - b + 1) if d.gain_crossed(j, b, c)), -1) for b in (0, 1)}
        curtail = [[b, c, sd.cannot_fail(d, j, b, c)] for b, c in ((0, 0), (0, nj // 2), (1, nj - 1), (nj // 8, nj // 2))
                   if b + c <= nj]
        looks.append({"prompts": nj, "fail_level": d.fail_level(j), "futility_level": d.futility_level(j),
                      "gain_level": d.gain_level(j), "fail_min_b": fail_b, "futility_max_b": fut_b,
                      "gain_min_c": gain_c, "cannot_fail": curtail})
    power = [[q, d.power(q)] for q in (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)]
    det = d.detectable_drop(0.8)
    pooled = n * cells
    cases = sorted({(0, 0, pooled - n // 5), (0, 0, pooled // 2), (0, 0, pooled // 4), (0, 0, n // 5),
                    (1, 1, pooled // 2), (2, 1, pooled // 3), (3, 5, pooled // 4), (2, 0, n // 5), (0, 5, 0),
                    (0, 4, 0), (0, 4, n // 5), (5, 5, pooled // 2), (6, 2, pooled - n), (0, 0, 0)})
    gain_power = [[b, c, rest, d.gain_power(b, c, rest), d.gain_futile(b, c, rest)] for b, c, rest in cases]
    return {"prompts": n, "every": every, "alpha": alpha, "margin": margin, "futility_drop": fdrop,
            "gain_cells": cells, "gain_final_alpha": d.gain_final_alpha(), "looks": looks, "power": power,
            "detectable_drop": det, "gain_target": d.gain_target(), "gain_gamma": d.gain_gamma,
            "gain_power": gain_power}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "goldens", "stats", "sequential.json")
    doc = {"generator": "tests/reference/make_sequential_golden.py",
           "interim_share": sd.INTERIM_SHARE, "futility_beta": sd.FUTILITY_BETA, "gain_gamma": sd.GAIN_GAMMA,
           "designs": [design_doc(*x) for x in DESIGNS]}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, out)
    print("wrote", out)


if __name__ == "__main__":
    main()
