#!/usr/bin/python3
"""Golden numbers for `ctxpatch calibrate` (tests/test_calibrate.c), from the independent PyTorch
reference (python/ctxpatch_ref/torchref, float64), never from the C code.

    scripts/py tests/reference/make_calibrate_golden.py   # writes tests/goldens/calibrate.json

For the golden tiny models t5_relu (T5 encoder in scope) and bloom (every self-attention layer),
with the input convention of patchers/calibrate.c (random ids: splitmix64 from
seed * 1000003 + sample * 7919 + length, K samples per length), it computes:
  - the mean P_max / entropy over the softmaxes in scope at train_len (tau = 1) and at each length
    for every grid tau 1.0, 0.95, ..., 0.5, hence Algorithm 1's grid choice (closest mean);
  - layer 0's logit statistics: sigma = mean over heads and query rows of the standard deviation
    of the row's logits over its visible keys (docs/calibration.md), P_max of layer 0;
  - Prop. 1 (A tau^2 - B tau + C = 0, larger root) and Prop. 2 from them, and log(L_tr)/log(L_ex).
Deterministic; the torch reference weights are the golden model files themselves.
"""
import collections
import json
import math
import os
import sys

import torch

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))

from ctxpatch_ref import stio
from ctxpatch_ref.torchref import models as M
from ctxpatch_ref.torchref import rules as R

REPO = os.path.dirname(os.path.dirname(HERE))
MODELS = os.path.join(REPO, "tests", "goldens", "engine", "models")
OUT = os.path.join(REPO, "tests", "goldens", "calibrate.json")

TRAIN_LEN = 24
LENGTHS = [48, 96]
SAMPLES = 2
SEED = 0
SYNTHETIC = [(0.3, 1.0, 1.1, 512, 1024), (0.2, 1.5, 1.6, 512, 4096), (0.05, 0.8, 0.9, 512, 16384),
             (0.5, 2.0, 2.0, 24, 48), (0.001, 0.5, 0.5, 512, 600), (0.32, 9.0, 8.9, 256, 512)]
GRID = [round(1.0 - 0.05 * i, 12) for i in range(11)]
MASK64 = (1 << 64) - 1


def random_ids(n, vocab, seed):
    """cp_random_ids: splitmix64."""
    out, s = [], seed
    for _ in range(n):
        s = (s + 0x9E3779B97F4A7C15) & MASK64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        out.append(z % vocab)
    return out


def sample_ids(length, s, vocab):
    return random_ids(length, vocab, (SEED * 1000003 + s * 7919 + length) & MASK64)


# Capture every self-attention call's logits (before mask and temperature) and visibility.
CAPTURED = []
_attention = R.attention


def capturing_attention(plan, pinfo, score, v, nq, margins=None):
    if plan.kind != "cross":
        nk = v.shape[1]
        i = torch.arange(nq)[:, None]
        j = torch.arange(nk)[None, :]
        S = score(R.clamp_rel(j - i, plan.ceiling))
        vis = (j <= i) if plan.causal else torch.ones(nq, nk, dtype=torch.bool)
        CAPTURED.append((plan.kind, plan.layer, S, vis))
    return _attention(plan, pinfo, score, v, nq, margins)


R.attention = capturing_attention


def load(model, name):
    _, tensors = stio.read_safetensors(os.path.join(MODELS, name, "model.safetensors"))
    assert set(tensors) == set(model.tensors), name
    model.w = {k: v.to(torch.float64) for k, v in tensors.items()}
    return model


def run(model, is_t5, ids, rule):
    """Mean P_max, entropy over layers x heads in scope, and per-layer stats, plus captures."""
    del CAPTURED[:]
    if is_t5:
        _, stats = model.encode(torch.tensor(ids), rule)
    else:
        _, stats = model.forward(torch.tensor(ids), rule)
    pm = torch.stack([s[0] for s in stats])  # [layers, H]
    en = torch.stack([s[1] for s in stats])
    return float(pm.mean()), float(en.mean()), pm, list(CAPTURED)


def layer0_sigma(captured, kind):
    for k, layer, S, vis in captured:
        if k == kind and layer == 0:
            H = S.shape[0]
            stds = []
            for h in range(H):
                for row in range(S.shape[1]):
                    x = S[h, row][vis[row]]
                    stds.append(float(torch.sqrt(torch.clamp((x * x).mean() - x.mean() ** 2, min=0))))
            return sum(stds) / len(stds)
    raise AssertionError("no layer-0 call")


def prop1_roots(p_tr, s_tr, s_ex, l_tr, l_ex):
    """Appendix A.2: A tau^2 - B tau + C = 0; (larger, smaller) positive real roots or None."""
    A = math.log(l_ex) + math.log(p_tr)
    B = math.log(l_tr) + math.log(p_tr) + s_tr * s_tr / 2
    C = s_ex * s_ex / 2
    D = B * B - 4 * A * C
    if D < 0:
        return None, None
    r = sorted([(B + math.sqrt(D)) / (2 * A), (B - math.sqrt(D)) / (2 * A)], reverse=True)
    return tuple(x if x > 0 else None for x in r)


def prop1(p_tr, s_tr, s_ex, l_tr, l_ex):
    return prop1_roots(p_tr, s_tr, s_ex, l_tr, l_ex)[0]


def prop2(s_tr, s_ex, l_tr, l_ex):
    return s_ex / math.sqrt(s_tr * s_tr + 2 * math.log(l_ex / l_tr))


def calibrate(name, model, is_t5):
    kind = "enc" if is_t5 else "dec"
    vocab = model.V

    def means(length, tau):
        pm = en = sig = p0 = 0.0
        rule = collections.OrderedDict() if tau == 1.0 else collections.OrderedDict([("temperature", tau)])
        for s in range(SAMPLES):
            a, b, per_layer, cap = run(model, is_t5, sample_ids(length, s, vocab), rule)
            pm += a / SAMPLES
            en += b / SAMPLES
            sig += layer0_sigma(cap, kind) / SAMPLES
            p0 += float(per_layer[0].mean()) / SAMPLES
        return pm, en, sig, p0

    tr_pm, tr_en, s_tr, p0_tr = means(TRAIN_LEN, 1.0)
    out = collections.OrderedDict([
        ("train_len", TRAIN_LEN), ("samples", SAMPLES), ("target_pmax", tr_pm), ("target_entropy", tr_en),
        ("pmax_tr0", p0_tr), ("sigma_tr", s_tr), ("lengths", [])])
    for L in LENGTHS:
        grid_pm, grid_en, s_ex = [], [], None
        for tau in GRID:
            pm, en, sig, _ = means(L, tau)
            grid_pm.append(pm)
            grid_en.append(en)
            if tau == 1.0:
                s_ex = sig

        def pick(vals, target):
            d = [abs(v - target) for v in vals]
            best = min(range(len(d)), key=lambda g: d[g])
            second = min((d[g] for g in range(len(d)) if g != best), default=float("inf"))
            return GRID[best], second - d[best]

        tau_pm, gap_pm = pick(grid_pm, tr_pm)
        tau_en, gap_en = pick(grid_en, tr_en)
        out["lengths"].append(collections.OrderedDict([
            ("length", L), ("grid_pmax", grid_pm), ("grid_entropy", grid_en),
            ("tau_pmax", tau_pm), ("tau_pmax_gap", gap_pm), ("tau_entropy", tau_en), ("tau_entropy_gap", gap_en),
            ("sigma_ex", s_ex), ("prop1", prop1(p0_tr, s_tr, s_ex, TRAIN_LEN, L)),
            ("prop2", prop2(s_tr, s_ex, TRAIN_LEN, L)), ("log", math.log(TRAIN_LEN) / math.log(L))]))
    return out


def main():
    torch.set_num_threads(1)
    t5 = load(M.T5("t5_relu", 101, gated=False, tied=True, mix=3.0, emb_std=0.3, final_gain=3.0), "t5_relu")
    bloom = load(M.Bloom("bloom", 201, mix=3.0), "bloom")
    doc = collections.OrderedDict([
        ("generator", "tests/reference/make_calibrate_golden.py"),
        ("grid", GRID),
        # closed forms on synthetic statistics: (P_tr, sigma_tr, sigma_ex, L_tr, L_ex) -> tau
        ("synthetic", [collections.OrderedDict([("pmax_tr", p), ("sigma_tr", a), ("sigma_ex", b), ("l_tr", lt),
                                                ("l_ex", le), ("prop1", prop1(p, a, b, lt, le)),
                                                ("prop1_smaller", prop1_roots(p, a, b, lt, le)[1]),
                                                ("prop2", prop2(a, b, lt, le))])
                       for p, a, b, lt, le in SYNTHETIC]),
        ("models", collections.OrderedDict([("t5_relu", calibrate("t5_relu", t5, True)),
                                            ("bloom", calibrate("bloom", bloom, False))]))])
    stio.write_atomic(OUT, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
    print("wrote", OUT)


if __name__ == "__main__":
    main()
