#!/usr/bin/python3
"""LM-Infinite top-k on the RoPE probe through the CLI: passkey accuracy (`ctxpatch verify`,
95% Wilson intervals) with the key line hidden by the Lambda mask, over the top-k parameters the
paper varies (Appendix A.3: k, the attention distance of the middle tokens, the first layer h).

  /usr/bin/python3 lab/topk_sweep.py --bin build/ctxpatch [--samples 8] [--out FILE.md]

Two settings: (a) inside the training length (256 tokens, Lambda 10 / 64, so every distance is
one the model was trained on and top-k is the only route to the key); (b) past it (512 and 1024
tokens, Lambda 10 / 256 as the model card's patch). Depths are chosen so that the key line lies
in the hidden middle at every depth (checked by lab/topk_probe.py's token positions).
"""
import argparse
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "examples", "probe-models", "rope-probe")

# (length, n_local, depths): depths where the key line is outside the window and past the
# 10 global tokens.
SETTINGS = [(256, 64, "0:0.5:6"), (512, 256, "0:0.35:6"), (1024, 256, "0:0.7:6")]


def variants(n_local):
    D = n_local
    out = [("lambda only", None)]
    for k in (1, 5, 20):
        out.append(("k %d, distance %d (D/2), from layer 0" % (k, D // 2), {"k": k}))
    for dist in (D // 8, D // 4, 3 * D // 4, D - 1):
        out.append(("k 5, distance %d, from layer 0" % dist, {"k": 5, "distance": dist}))
    for fl in (1, 2):
        out.append(("k 5, distance %d (D/2), from layer %d" % (D // 2, fl), {"k": 5, "from_layer": fl}))
    out.append(("k 5, distance %d (D/2), rows all" % (D // 2), {"k": 5, "rows": "all"}))
    return out


def verify(bin_path, rule, length, depths, samples, td):
    rp = os.path.join(td, "rule.json")
    json.dump(rule, open(rp, "w"))
    r = subprocess.run([bin_path, "verify", MODEL, "--rule", rp, "--baseline", "--probe", "passkey",
                        "--lengths", str(length), "--depths", depths, "--samples", str(samples),
                        "--no-stats", "--threads", "1", "--json"], capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(r.stderr)
    cert = json.loads(r.stdout)
    return cert["results"]["patched"]["passkey"][0], cert["results"]["baseline"]["passkey"][0]


def cell(res):
    lo, hi = res["accuracy_ci95"]
    return "%.2f [%.2f, %.2f]" % (res["accuracy"], lo, hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "ctxpatch"))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--out")
    ap.add_argument("--json", help="write the cells there")
    a = ap.parse_args()
    lines, cells = [], []
    with tempfile.TemporaryDirectory() as td:
        for length, n_local, depths in SETTINGS:
            lam = {"n_global": 10, "n_local": n_local}
            n = 6 * a.samples
            lines.append("### %d tokens, Lambda 10 / %d (ceiling %d), depths %s, %d prompts a cell\n"
                         % (length, n_local, n_local, depths, n))
            lines.append("| top-k | passkey accuracy [95%] |")
            lines.append("|---|---|")
            base = None
            for name, tk in variants(n_local):
                rule = {"lambda_mask": lam}
                if tk:
                    rule["top_k"] = tk
                pat, base = verify(a.bin, rule, length, depths, a.samples, td)
                lines.append("| %s | %s |" % (name, cell(pat)))
                cells.append({"length": length, "n_local": n_local, "variant": name, "rule": rule,
                              "accuracy": pat["accuracy"], "ci95": pat["accuracy_ci95"]})
            lines.append("| (original, no rule) | %s |" % cell(base))
            cells.append({"length": length, "n_local": n_local, "variant": "original", "rule": None,
                          "accuracy": base["accuracy"], "ci95": base["accuracy_ci95"]})
            lines.append("")
    text = "\n".join(lines)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")
    if a.json:
        json.dump({"samples": a.samples, "cells": cells}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
