#!/usr/bin/env python3
"""Operating characteristics of the sequential verdict design (docs/certificate.md, "Sequential
verdicts") against the fixed-n design, by simulation:

    scripts/py lab/sequential_oc.py [--cells 20000] [--seed 1]

One (probe, length) cell compared with the original, in two roles: the only cell of the gain test
(as the main job's 4x cell) and a cell outside it (the main job's 1x cell: the training length,
where no gain is sought). 40 prompts, a look every 8, margin 0.05, alpha 0.05, max detectable
drop 0.2. Each scenario draws every prompt's paired outcome independently: lost with probability
p_b, gained with p_c, a tie otherwise (true drop = p_b - p_c). The sequential cell runs the looks
of python/ctxpatch_ref/seqdesign.py (the Python twin of verify/verify_seq.c); the fixed design
judges all 40 pairs (Tango at alpha, the sign test at alpha). Reported: P(fail), P(gain shown),
mean prompts used. Deterministic for a seed (random.Random).
"""
import argparse
import random

from ctxpatch_ref import seqdesign as sd

SCENARIOS = [  # name, p_b (lost), p_c (gained)
    ("drop = margin (H0 of fail), no discordance", 0.05, 0.0),
    ("drop = margin (H0 of fail), p_c 0.10", 0.15, 0.10),
    ("drop = margin (H0 of fail), p_c 0.25", 0.30, 0.25),
    ("no difference (H0 of gain), p 0.10", 0.10, 0.10),
    ("no difference (H0 of gain), p 0.30", 0.30, 0.30),
    ("identical answers", 0.0, 0.0),
    ("drop 0.20 (power)", 0.20, 0.0),
    ("drop 0.30", 0.30, 0.0),
    ("gain 0.20 (p_c 0.25, p_b 0.05)", 0.05, 0.25),
    ("clear gain (p_c 0.6)", 0.0, 0.6),
]


def fixed(outcomes, d):
    n = len(outcomes)
    b, c = outcomes.count(1), outcomes.count(-1)
    return sd.tango_p(n, b, c, d.margin) < d.alpha, sd.sign_p(b, c) < d.alpha


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--every", type=int, default=8)
    a = ap.parse_args()
    design = sd.Design(a.prompts, every=a.every)
    rng = random.Random(a.seed)
    print(f"design: {a.prompts} prompts, a look every {a.every}, looks {design.looks}")
    print(f"fail levels {[round(design.fail_level(j), 5) for j in range(design.J)]}, "
          f"detectable drop {design.detectable_drop():.3f} (fixed: "
          f"{sd.Design(a.prompts, every=a.prompts).detectable_drop():.3f})")
    print(f"{a.cells} cells per scenario")
    print("| scenario | p_b | p_c | P(fail) fixed | P(fail) seq, gain cell | P(fail) seq, other cell | P(gain) fixed "
          "| P(gain) seq | prompts seq, gain cell | prompts seq, other cell |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, pb, pc in SCENARIOS:
        other = of = 0
        ff = fg = sf = sg = used = 0
        for _ in range(a.cells):
            out = []
            for _ in range(a.prompts):
                u = rng.random()
                out.append(1 if u < pb else -1 if u < pb + pc else 0)
            f1, g1 = fixed(out, design)
            _, n, f2, g2 = sd.run_cell(design, out)
            _, n3, f3, _ = sd.run_cell(design, out, gain_judged=False)
            other += n3
            of += f3
            ff += f1
            fg += g1 and not f1
            sf += f2
            sg += g2 and not f2
            used += n
        k = a.cells
        print(f"| {name} | {pb} | {pc} | {ff / k:.4f} | {sf / k:.4f} | {of / k:.4f} | {fg / k:.4f} | {sg / k:.4f} | "
              f"{used / k:.1f} | {other / k:.1f} |", flush=True)


if __name__ == "__main__":
    main()
