#!/usr/bin/env python3
"""Operating characteristics of the sequential verdict design (docs/certificate.md, "Sequential
verdicts") against the fixed-n design, by simulation:

    scripts/py lab/sequential_oc.py [--cells 20000] [--seed 1]            # the table
    scripts/py lab/sequential_oc.py --sweep [--cells 20000] [--seed 1]    # gain futility's gamma
    scripts/py lab/sequential_oc.py --pooled [--cells 5000] [--seed 1]    # four probes pooled

One (probe, length) cell compared with the original, in two roles: the only cell of the gain test
(as the main job's 4x cell) and a cell outside it (the main job's 1x cell: the training length,
where no gain is sought). 40 prompts, a look every 8, margin 0.05, alpha 0.05, max detectable
drop 0.2. Each scenario draws every prompt's paired outcome independently: lost with probability
p_b, gained with p_c, a tie otherwise (true drop = p_b - p_c). The sequential cell runs the looks
of python/ctxpatch_ref/seqdesign.py (the Python twin of verify/verify_seq.c), without the
gain-futility rule (the design before it) and with it; the fixed design judges all 40 pairs
(Tango at alpha, the sign test at alpha). Reported: P(fail), P(gain shown), mean prompts used.

--sweep runs the gain cell under the rule at several thresholds gamma (the same draws for each):
the gain's power where there is one, and the prompts where there is none. --pooled runs the 1B
time-to-certificate bench's shape (docs/perf.md): four probes, each a 1x cell outside the gain
test and a 4x gain cell, the four 4x cells pooled (160 prompts), and reports the 4x cells' prompts
and P(gain). Deterministic for a seed (random.Random).
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


def draw(rng, n, pb, pc):
    out = []
    for _ in range(n):
        u = rng.random()
        out.append(1 if u < pb else -1 if u < pb + pc else 0)
    return out


def table(a, design):
    rng = random.Random(a.seed)
    print(f"design: {a.prompts} prompts, a look every {a.every}, looks {design.looks}")
    print(f"fail levels {[round(design.fail_level(j), 5) for j in range(design.J)]}, "
          f"detectable drop {design.detectable_drop():.3f} (fixed: "
          f"{sd.Design(a.prompts, every=a.prompts).detectable_drop():.3f}); gain futility: gamma "
          f"{design.gain_gamma}, target gain {design.gain_target():.4f}")
    print(f"{a.cells} cells per scenario")
    print("| scenario | p_b | p_c | P(fail) fixed | P(fail) seq, gain cell | P(fail) seq, gain cell, gain futility "
          "| P(fail) seq, other cell | P(gain) fixed | P(gain) seq | P(gain) seq, gain futility | prompts seq, gain cell "
          "| prompts seq, gain cell, gain futility | prompts seq, other cell |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, pb, pc in SCENARIOS:
        k = a.cells
        ff = fg = sf = sg = used = other = of = gf_f = gf_g = gf_used = 0
        for _ in range(k):
            out = draw(rng, a.prompts, pb, pc)
            f1, g1 = fixed(out, design)
            _, n, f2, g2 = sd.run_cell(design, out, gain_futility=False)
            _, n4, f4, g4 = sd.run_cell(design, out)
            _, n3, f3, _ = sd.run_cell(design, out, gain_judged=False)
            other += n3
            of += f3
            ff += f1
            fg += g1 and not f1
            sf += f2
            sg += g2 and not f2
            used += n
            gf_f += f4
            gf_g += g4 and not f4
            gf_used += n4
        print(f"| {name} | {pb} | {pc} | {ff / k:.4f} | {sf / k:.4f} | {gf_f / k:.4f} | {of / k:.4f} | {fg / k:.4f} | "
              f"{sg / k:.4f} | "
              f"{gf_g / k:.4f} | {used / k:.1f} | {gf_used / k:.1f} | {other / k:.1f} |", flush=True)


def sweep(a, design):
    gammas = [0.0, 0.05, 0.1, 0.15, 0.2, 0.3]
    target = design.gain_target()
    rows = [(f"target gain (p_c {target:.3f}, p_b 0)", 0.0, target)] + [x for x in SCENARIOS if x[0].startswith(
        ("gain", "no difference", "identical", "clear"))]
    print(f"the gain cell (the only one, {a.prompts} prompts, a look every {a.every}) under gain futility at "
          f"gamma {gammas} (0: no rule); {a.cells} cells a row, the same draws for each gamma")
    print("| scenario | p_b | p_c | " + " | ".join(f"P(gain) / prompts, gamma {g}" for g in gammas) + " |")
    print("|---|---|---|" + "---|" * len(gammas))
    for name, pb, pc in rows:
        rng = random.Random(a.seed)
        gain = [0] * len(gammas)
        used = [0] * len(gammas)
        for _ in range(a.cells):
            out = draw(rng, a.prompts, pb, pc)
            for i, g in enumerate(gammas):
                design.gain_gamma = g
                _, n, f, gs = sd.run_cell(design, out)
                gain[i] += gs and not f
                used[i] += n
        design.gain_gamma = sd.GAIN_GAMMA
        print(f"| {name} | {pb} | {pc:.3f} | " + " | ".join(
            f"{gain[i] / a.cells:.4f} / {used[i] / a.cells:.1f}" for i in range(len(gammas))) + " |", flush=True)


def pooled(a):
    probes = 4
    design = sd.Design(a.prompts, every=a.every, gain_cells=probes)
    print(f"{probes} probes, each a 1x cell (compared, no gain sought: identical answers) and a 4x gain cell; "
          f"{a.prompts} prompts a cell, the gain test pooling {probes * a.prompts}: target gain "
          f"{design.gain_target():.4f}, gamma {design.gain_gamma}; {a.cells} runs a row")
    print("| 4x cells: scenario | p_b | p_c | P(gain) fixed | P(gain) seq | P(gain) seq, gain futility "
          "| 4x prompts seq | 4x prompts seq, gain futility |")
    print("|---|---|---|---|---|---|---|---|")
    rows = [("identical answers", 0.0, 0.0), ("no difference, p 0.10", 0.10, 0.10),
            (f"target gain (p_c {design.gain_target():.3f}, p_b 0)", 0.0, design.gain_target()),
            ("gain 0.05 (p_c 0.05, p_b 0)", 0.0, 0.05), ("gain 0.20 (p_c 0.25, p_b 0.05)", 0.05, 0.25)]
    for name, pb, pc in rows:
        rng = random.Random(a.seed)
        k = a.cells
        fg = sg = gg = su = gu = 0
        for _ in range(k):
            cells = []
            for _ in range(probes):
                cells.append(([0] * a.prompts, True, False))
                cells.append((draw(rng, a.prompts, pb, pc), True, True))
            allb = sum(o.count(1) for o, _, g in cells if g)
            allc = sum(o.count(-1) for o, _, g in cells if g)
            fg += sd.sign_p(allb, allc) < design.alpha
            r0, f0, g0 = sd.run_cells(design, cells, gain_futility=False)
            r1, f1, g1 = sd.run_cells(design, cells)
            sg += g0 and not f0
            gg += g1 and not f1
            su += sum(x[1] for x, c in zip(r0, cells) if c[2])
            gu += sum(x[1] for x, c in zip(r1, cells) if c[2])
        print(f"| {name} | {pb} | {pc:.3f} | {fg / k:.4f} | {sg / k:.4f} | {gg / k:.4f} | {su / k:.1f} | {gu / k:.1f} |",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--pooled", action="store_true")
    a = ap.parse_args()
    design = sd.Design(a.prompts, every=a.every)
    if a.sweep:
        sweep(a, design)
    elif a.pooled:
        pooled(a)
    else:
        table(a, design)


if __name__ == "__main__":
    main()
