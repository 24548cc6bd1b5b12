#!/usr/bin/env python3
"""Golden NLL per position bucket for the ppl probe, from the float64 PyTorch reference
(python/ctxpatch_ref/torchref through lab/evaluate.py) and the stdlib tokenizer
python/ctxpatch_ref/bpe.py, never from the C code:

    scripts/py tests/reference/make_ppl_golden.py [CORPUS] [OUT]

CORPUS defaults to ../shared/fixtures/third_party/text/tinyshakespeare_input.txt (ASCII, which
bpe.py requires), split at blank lines ("\\n\\n"). The corpus stream, windows and buckets follow
include/ctxpatch/verify/ppl.h: documents stripped of ASCII whitespace, empty ones dropped, each
preceded by BOS (id 2, the probe tokenizer's <s>); window w of length L starts at
splitmix64(seed + L * 1000003 + w) % (n - L + 1); position t >= 1 of a window is scored by
-log softmax(logits[t - 1])[ids[t]] in bucket t * B // L. Writes OUT (default
tests/goldens/ppl/rope-probe.json) with the settings and, per length, the mean NLL per bucket
and overall over the windows.
"""
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
PM = os.path.join(ROOT, "examples", "probe-models")

from ctxpatch_ref import bpe
from ctxpatch_ref import probes as E

MODEL, SEED, WINDOWS, BUCKETS, LENGTHS, DELIM, BOS = "rope-probe", 7, 2, 8, (64, 256, 512), "\n\n", 2
MASK = (1 << 64) - 1


def splitmix64(state):
    z = (state + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def main():
    corpus = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "..", "shared", "fixtures", "third_party", "text", "tinyshakespeare_input.txt")
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tests", "goldens", "ppl", MODEL + ".json")
    torch.set_num_threads(2)
    mdir = os.path.join(PM, MODEL)
    tok = bpe.Tokenizer(os.path.join(mdir, "tokenizer.json"))
    text = open(corpus, encoding="ascii").read()
    stream, docs = [], 0
    for d in text.split(DELIM):
        d = d.strip(" \t\n\r\f\v")
        if d:
            stream += [BOS] + tok.encode(d)
            docs += 1
    cfg, sd = E.load(mdir)
    ref = E.ref_model(MODEL, cfg, sd)
    results = []
    with torch.no_grad():
        for L in LENGTHS:
            sums, counts = [0.0] * BUCKETS, [0] * BUCKETS
            starts = []
            for w in range(WINDOWS):
                start = splitmix64((SEED + L * 1000003 + w) & MASK) % (len(stream) - L + 1)
                starts.append(start)
                ids = stream[start:start + L]
                logits, _ = ref.forward(torch.tensor(ids), {})
                logp = torch.log_softmax(logits.double(), dim=-1)
                for t in range(1, L):
                    b = t * BUCKETS // L
                    sums[b] += -float(logp[t - 1, ids[t]])
                    counts[b] += 1
            results.append({"length": L, "starts": starts, "nll": sum(sums) / sum(counts),
                            "nll_by_bucket": [s / c for s, c in zip(sums, counts)]})
            print("L=%d nll %.4f" % (L, results[-1]["nll"]))
    doc = {"generator": "tests/reference/make_ppl_golden.py", "model": MODEL, "corpus": os.path.basename(corpus),
           "delimiter": DELIM, "documents": docs, "tokens": len(stream), "seed": SEED, "windows": WINDOWS,
           "buckets": BUCKETS, "results": results}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print("wrote", out)


if __name__ == "__main__":
    main()
