#!/usr/bin/env python3
"""Cross-check of eval.json against the C engine (`ctxpatch forward --generate 10 --stop-at-eos`)
on a subset of samples: the generated text must be the same. Stdlib only.

    scripts/py lab/crosscheck_c.py --model rope-probe --bin build/ctxpatch \
        [--every 25] [--lengths 4096]

Writes <model>/eval-c.json: per sample the PyTorch answer, the C answer and whether they agree.
"""
import argparse
import json
import os
import subprocess
import tempfile

from ctxpatch_ref import bpe, data

PM = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "probe-models")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--lengths", default="4096")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    mdir = os.path.join(PM, a.model)
    tok = bpe.Tokenizer(os.path.join(mdir, "tokenizer.json"))
    with open(os.path.join(mdir, "eval.json")) as f:
        ev = json.load(f)
    lengths = {int(x) for x in a.lengths.split(",")}
    out = {"model": a.model, "engine": "ctxpatch forward (C, float32)", "samples": []}
    agree = tot = 0
    with tempfile.TemporaryDirectory() as tmp:
        for cell in ev["cells"]:
            if cell["length"] not in lengths:
                continue
            samples = data.eval_set(cell["task"], cell["length"] - 8, cell["n_set"], 0, tok.encode)
            for si, n_ids, key, text, good in cell["answers"]:
                if si % a.every:
                    continue
                ids = tok.encode(samples[si]["prompt"])
                assert len(ids) == n_ids
                idf = os.path.join(tmp, "ids.txt")
                with open(idf, "w") as f:
                    f.write(",".join(map(str, ids)))
                cmd = [a.bin, "forward", mdir, "--ids", "@" + idf, "--generate", "10", "--stop-at-eos",
                       "--threads", str(a.threads)]
                if cell["rule_json"]:
                    rf = os.path.join(tmp, "rule.json")
                    with open(rf, "w") as f:
                        json.dump(cell["rule_json"], f)
                    cmd += ["--rule", rf]
                r = subprocess.run(cmd, capture_output=True, text=True, check=True)
                gen = [int(x) for x in r.stdout.strip().split(",") if x.strip()]
                gen = [t for t in gen if t != 1]          # the eos the engine may print
                ctext = tok.decode(gen)
                same = ctext == text
                agree += same
                tot += 1
                out["samples"].append([cell["task"], cell["length"], cell["rule"], si, text, ctext, same])
                print("%s %d %s #%d torch=%r c=%r %s" % (cell["task"], cell["length"], cell["rule"], si,
                                                        text, ctext, "ok" if same else "DIFFER"), flush=True)
    out["agree"], out["total"] = agree, tot
    with open(os.path.join(mdir, "eval-c.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("%d of %d agree" % (agree, tot))


if __name__ == "__main__":
    main()
