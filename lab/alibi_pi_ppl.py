#!/usr/bin/env python3
"""The ALiBi seed's perplexity claim on an ALiBi probe trained on text (issue 18): the held-out
TinyStories NLL per token at 1x..8x the training length with no rule and with each alibi_scale
mode (static factor 2 and 4, dynamic, progressive), measured by the C tool
(`ctxpatch verify --probe ppl`), plus passkey / lines at the training length.

    scripts/py lab/alibi_pi_ppl.py --model examples/probe-models/v2/alibi-probe \\
        --bin build/ctxpatch [--lengths 256,512,1024,2048] [--windows 16] [--out DIR]

Writes DIR/ppl.json (every certificate's ppl entries) and prints the markdown table (mean NLL
over the windows, then per position bucket at the longest length). Stdlib only.
"""
import argparse
import json
import os
import subprocess

from ctxpatch_ref import data

RULES = [("none", None),
         ("static 2", {"alibi_scale": {"mode": "static", "factor": 2.0}}),
         ("static 4", {"alibi_scale": {"mode": "static", "factor": 4.0}}),
         ("dynamic", {"alibi_scale": {"mode": "dynamic"}}),
         ("progressive", {"alibi_scale": {"mode": "progressive"}})]


def verify(a, out, tag, rule, probes, lengths, extra=()):
    cert = os.path.join(out, "%s.json" % tag.replace(" ", "-"))
    cmd = [a.bin, "verify", a.model, "--probe", probes, "--lengths", lengths, "--no-stats",
           "--threads", str(a.threads), "--certificate", cert] + list(extra)
    if rule is not None:
        rp = os.path.join(out, "%s.rule.json" % tag.replace(" ", "-"))
        with open(rp, "w") as f:
            json.dump(rule, f)
        cmd += ["--rule", rp]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(cert) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lengths", default="256,512,1024,2048")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=None, help="retrieval prompts per depth at 256")
    ap.add_argument("--out", default="/tmp/alibi_pi_ppl")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = os.path.join(a.out, "tinystories_val_800_1000.txt")
    data.write_held_out(corpus)
    res = {}
    for tag, rule in RULES:
        c = verify(a, a.out, tag, rule, "ppl", a.lengths,
                   ["--corpus", corpus, "--ppl-windows", str(a.windows)])
        res[tag] = c["results"]["patched"]["ppl"]
        print("%s: %s" % (tag, " ".join("%d %.3f" % (e["length"], e["nll"]) for e in res[tag])), flush=True)
    extra = ["--samples", str(a.samples)] if a.samples else []
    ret = verify(a, a.out, "retrieval-256", None, "passkey,lines", "256", extra)
    with open(os.path.join(a.out, "ppl.json"), "w") as f:
        json.dump({"ppl": res, "retrieval_256": ret["results"]}, f, indent=1)
    lens = [e["length"] for e in res["none"]]
    print("\n| rule | " + " | ".join(str(L) for L in lens) + " |")
    print("|---" * (len(lens) + 1) + "|")
    for tag, _ in RULES:
        print("| %s | %s |" % (tag, " | ".join("%.3f" % e["nll"] for e in res[tag])))
    L = lens[-1]
    print("\nNLL by position bucket at %d:" % L)
    for tag, _ in RULES:
        b = [e for e in res[tag] if e["length"] == L][0]["nll_by_bucket"]
        print("| %s | %s |" % (tag, " | ".join("%.2f" % x for x in b)))
    print("\nretrieval at 256 (C engine): %s" % json.dumps(ret["results"])[:2000])


if __name__ == "__main__":
    main()
