#!/usr/bin/python3
"""NLL against position past the training length (the LM-Infinite paper's Figure 3 view), through
the CLI users run: `ctxpatch verify --probe ppl` on W windows per length (one run per window,
--seed w), NLL per token by 512-token position bucket, mean over windows with a 95% Student-t
interval, and the paired difference to the original per window.

  /usr/bin/python3 lab/nll_position.py --bin build/ctxpatch [--windows 16] [--out FILE.md]
      [--model GGUF] [--corpus TEXT] [--train-len 512] [--lengths 512,1024,2048,4096]
      [--llamacpp tests/runtimes/node_modules] [--bucket 512]

A model that is not a .gguf file (a checkpoint folder, e.g. examples/probe-models/v2/rope-probe)
gets its RoPE PI copies in the default output format (config rope_scaling linear) instead of GGUF.

Sides (the training length L_tr = 512 of stories260K is given explicitly: its GGUF says 2048):
  original; LM-Infinite (Lambda 10 / L_tr and ceiling L_tr, the paper's n_starting 10 and window
  L_pretrain); its two parts alone (Lambda without a ceiling; ceiling without Lambda); RoPE PI
  with factor F = L / L_tr (`patch --method rope-pi --to gguf`, linear rope scaling) at L and at
  L_tr; and RoPE PI F with a distance ceiling of L_tr (distances past L_tr clamped before the
  positions are divided by F). With --llamacpp, window 0 of the original at L_tr is recomputed by
  llama.cpp (tests/gguf/llamacpp_nll.mjs: its own tokenizer, corpus stream and window start).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(HERE, "..", "..", "shared", "fixtures", "third_party")
BUCKET = 512
# Two-sided 95% Student-t quantiles by degrees of freedom (scipy.stats.t.ppf(0.975, df)).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
        18: 2.101, 19: 2.093, 20: 2.086, 23: 2.069, 29: 2.045, 31: 2.040, 39: 2.023, 63: 1.998}


def tq(df):
    return T975.get(df) or T975[max(k for k in T975 if k <= df)] if df >= 1 else float("nan")


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, m, m
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = tq(n - 1) * sd / math.sqrt(n)
    return m, m - h, m + h


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr))
    return r.stdout


def ppl(bin_path, model, rule, corpus, length, seed, bucket=BUCKET):
    """NLL by `bucket`-token position bucket of window `seed` at `length` (one verify run)."""
    cmd = [bin_path, "verify", model, "--probe", "ppl", "--corpus", corpus, "--lengths", str(length),
           "--ppl-windows", "1", "--ppl-buckets", str(max(1, length // bucket)), "--seed", str(seed),
           "--no-stats", "--threads", "1", "--json"]
    if rule:
        cmd[3:3] = ["--rule", rule]
    res = json.loads(run(cmd))["results"]["patched"]["ppl"][0]
    return res["nll_by_bucket"], res["nll"]


def shown_args():
    """This run's options as the document shows them: repository-relative paths, no output files."""
    root = os.path.dirname(HERE)
    out, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if x in ("--bin", "--out", "--json"):
            skip = True
            continue
        if os.path.isabs(x) and os.path.exists(x):
            x = os.path.relpath(x, root)
        out.append(x)
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "ctxpatch"))
    ap.add_argument("--model", default=os.path.join(SHARED, "stories260K", "stories260K.gguf"))
    ap.add_argument("--corpus", default=os.path.join(SHARED, "text", "tinystories_val_1000_eot.txt"))
    ap.add_argument("--train-len", type=int, default=512)
    ap.add_argument("--lengths", default="512,1024,2048,4096")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--llamacpp", help="node_modules folder holding node-llama-cpp (tests/runtimes)")
    ap.add_argument("--bucket", type=int, default=BUCKET, help="tokens per position bucket")
    ap.add_argument("--out")
    ap.add_argument("--json")
    a = ap.parse_args()
    bucket = a.bucket
    gguf = a.model.endswith(".gguf")
    for p in (a.model, a.corpus):
        if not os.path.exists(p):
            raise SystemExit("missing %s (../shared/fixtures is not here)" % p)
    Ltr = a.train_len
    lengths = [int(x) for x in a.lengths.split(",")]
    t0 = time.time()
    load0 = os.getloadavg()[0]
    td = tempfile.mkdtemp(prefix="nll_position.")
    try:
        def rule_file(name, rule):
            p = os.path.join(td, name + ".rule.json")
            json.dump(rule, open(p, "w"))
            return p

        lam = {"n_global": 10, "n_local": Ltr}
        # side -> (model, rule file, lengths it runs at)
        sides = {
            "original": (a.model, None, lengths),
            "LM-Infinite": (a.model, rule_file("lmi", {"lambda_mask": lam, "distance_ceiling": Ltr}), lengths),
            "Lambda only": (a.model, rule_file("lam", {"lambda_mask": lam, "distance_ceiling": 1 << 20}), lengths),
            "ceiling only": (a.model, rule_file("ceil", {"distance_ceiling": Ltr}), lengths),
        }
        for L in lengths:
            F = L // Ltr
            if F < 2:
                continue
            gg = os.path.join(td, "pi%d" % F + (".gguf" if gguf else ""))
            run([a.bin, "patch", a.model, gg, "--method", "rope-pi", "--factor", str(F)]
                + (["--to", "gguf"] if gguf else []) + ["--no-verify", "--force"])
            sides["PI %d" % F] = (gg, None, [Ltr, L])
            sides["PI %d + ceiling %d" % (F, Ltr)] = (gg, rule_file("ceil", {"distance_ceiling": Ltr}), [Ltr, L])
        data = {}  # side -> length -> list over windows of (buckets, nll)
        for side, (model, rule, lens) in sides.items():
            data[side] = {}
            for L in lens:
                data[side][L] = [ppl(a.bin, model, rule, a.corpus, L, w, bucket) for w in range(a.windows)]
        cross = None
        if a.llamacpp:
            w = os.path.join(td, "lc")
            os.makedirs(w)
            shutil.copy(os.path.join(HERE, "..", "tests", "gguf", "llamacpp_nll.mjs"), os.path.join(w, "run.mjs"))
            shutil.copy(os.path.join(HERE, "..", "tests", "gguf", "llamacpp_window.mjs"), w)  # run.mjs imports it
            os.symlink(os.path.abspath(a.llamacpp), os.path.join(w, "node_modules"))
            out = json.loads(run(["node", os.path.join(w, "run.mjs"), os.path.abspath(a.model),
                                  os.path.abspath(a.corpus), str(Ltr), "0", "1"]))
            cross = {"llamacpp": out["nll"], "ctxpatch": data["original"][Ltr][0][1], "start": out["start"],
                     "n_ids": out["n_ids"]}
    finally:
        shutil.rmtree(td, ignore_errors=True)
    wall = time.time() - t0

    lines = []
    P = lines.append
    P("Measured %s on a machine with load average %.1f at the start (nproc %d), %.0f s wall; "
      "%d windows per length (random starts in the corpus, seeds 0..%d; windows of one length may "
      "overlap, so the t intervals are somewhat optimistic). Command: `/usr/bin/python3 "
      "lab/nll_position.py %s`.\n"
      % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load0, os.cpu_count(), wall, a.windows,
         a.windows - 1, shown_args()))
    if cross:
        P("Pipeline cross-check: window 0 of the original at %d tokens (start %d of %d corpus tokens): "
          "`ctxpatch verify --probe ppl` %.5f nats, llama.cpp (node-llama-cpp, its own tokenizer and "
          "window, tests/gguf/llamacpp_nll.mjs) %.5f nats, difference %.1e.\n"
          % (Ltr, cross["start"], cross["n_ids"], cross["ctxpatch"], cross["llamacpp"],
             cross["ctxpatch"] - cross["llamacpp"]))
    for L in lengths:
        nb = max(1, L // bucket)
        P("**%d tokens (%gx).** Mean NLL per token (nats) by position, 95%% interval over windows:\n" % (L, L / Ltr))
        P("| side | " + " | ".join("%d-%d" % (b * bucket, (b + 1) * bucket - 1) for b in range(nb)) + " | all |")
        P("|---|" + "---|" * (nb + 1))
        for side in data:
            if L not in data[side]:
                continue
            ws = data[side][L]
            cells = []
            for b in range(nb):
                m, lo, hi = mean_ci([x[0][b] for x in ws])
                cells.append("%.2f [%.2f, %.2f]" % (m, lo, hi))
            m, lo, hi = mean_ci([x[1] for x in ws])
            cells.append("%.3f [%.3f, %.3f]" % (m, lo, hi))
            P("| %s | %s |" % (side, " | ".join(cells)))
        P("")
        P("Paired difference to the original over the whole window (nats per token):\n")
        P("| side | − original [95%] |")
        P("|---|---|")
        base = data["original"][L]
        for side in data:
            if side == "original" or L not in data[side]:
                continue
            m, lo, hi = mean_ci([x[1] - y[1] for x, y in zip(data[side][L], base)])
            P("| %s | %+.3f [%+.3f, %+.3f] |" % (side, m, lo, hi))
        P("")
    text = "\n".join(lines)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")
    if a.json:
        json.dump({"data": {s: {str(L): v for L, v in d.items()} for s, d in data.items()}, "cross": cross,
                   "windows": a.windows, "load": load0, "wall_s": wall}, open(a.json, "w"))


if __name__ == "__main__":
    main()
