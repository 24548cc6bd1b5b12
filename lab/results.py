#!/usr/bin/python3
"""Regenerates docs/results.md: runs the ctxpatch CLI (calibrate, patch --no-verify, verify) on
the probe models and on the pretrained stories260K, and writes every table from the verify
certificates (accuracy with its 95% Wilson interval, Tango's paired p-value; ppl NLL with a 95%
t interval over windows). Stdlib only. Called by scripts/results.sh, which documents the knobs.
"""
import json, math, os, re, shlex, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("CTXPATCH", os.path.join(ROOT, "build", "ctxpatch"))
FIX = os.path.abspath(os.environ.get("FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures")))
WORK = os.path.abspath(os.environ.get("RESULTS_WORK", os.path.join(ROOT, "build", "results-work")))
OUT = os.environ.get("RESULTS_OUT", os.path.join(ROOT, "docs", "results.md"))
SAMPLES = int(os.environ.get("RESULTS_SAMPLES", "2"))     # per (probe, length, depth) cell
WINDOWS = int(os.environ.get("RESULTS_WINDOWS", "8"))     # ppl windows per length
PM = os.path.join(ROOT, "examples", "probe-models")
TEXT = os.path.join(FIX, "third_party", "text", "tinystories_val_1000_eot.txt")
STORIES = os.path.join(FIX, "third_party", "stories260K", "stories260K.gguf")
HELD_OUT = (800, 1000)   # stories [800, 1000) of the validation file: the ppl corpus

commands = {}   # section -> list of command strings (deduplicated, in order)
timings = {}    # section -> wall seconds
cpu = {}        # section -> CPU seconds of the CLI processes (user + system)


def shown(arg):
    """A command argument as the document shows it (paths relative to the repository)."""
    s = str(arg)
    for full, short in ((WORK, "$W"), (FIX, "../shared/fixtures"), (BIN, "ctxpatch"),
                        (ROOT + "/", "")):
        s = s.replace(full, short)
    return s


def run(section, args, ok=(0,), template=False):
    """Runs the CLI and returns its standard output; records the command (with --seed N shown
    as --seed $w when templated). Exit statuses outside ok stop the run."""
    text = " ".join(shown(shlex.quote(str(a))) for a in args)
    if template:
        text = re.sub(r"--seed \d+", "--seed $w", text)
        text = re.sub(r"-w\d+\.json", "-w$w.json", text)
    lst = commands.setdefault(section, [])
    if text not in lst:
        lst.append(text)
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode not in ok:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit("results: command failed (exit %d): %s" % (p.returncode, text))
    return p.stdout


def load(path):
    with open(path) as f:
        return json.load(f)


def dump(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, sort_keys=True)


# --- formatting ---------------------------------------------------------------------------

def f2(x):
    return ("%.2f" % x).replace("0.", ".", 1) if 0 <= x < 1 else "%.2f" % x


def acc_cell(e):
    lo, hi = e["accuracy_ci95"]
    return "%s [%s, %s]" % (f2(e["accuracy"]), f2(lo), f2(hi))


def by_len(entries):
    return {e["length"]: e for e in entries}


# two-sided 95% Student t quantiles, df 1..30 (Fisher & Yates' table); normal beyond
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    t = T975[n - 2] if n - 1 <= len(T975) else 1.96
    h = t * sd / math.sqrt(n)
    return m, m - h, m + h


def nll_cell(xs):
    m, lo, hi = mean_ci(xs)
    return "%.3f [%.3f, %.3f]" % (m, lo, hi)


def diff_cell(xs):
    m, lo, hi = mean_ci(xs)
    return "%+.3f [%+.3f, %+.3f]" % (m, lo, hi)


def machine():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ver = subprocess.run([BIN, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = "%.0f GiB RAM" % (int(f.readline().split()[1]) / 2**20)
    except OSError:
        pass
    load1 = os.getloadavg()[0]
    return ("%s; nproc %d; CPU \"%s\"; %s; load average at the start %.1f; tool `%s`; commit %s"
            % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), cpu, mem,
               load1, ver.replace("\n", " / "), git or "?"))


# --- section 1: probe models, baseline vs the seed's method -------------------------------

SMOKE = os.environ.get("RESULTS_SMOKE") == "1"   # a quick check of the script itself
S1_LENGTHS = "256,512" if SMOKE else "256,512,1024,2048"
S1 = [  # (model, label, patch options)
    ("t5-probe", "temperature, pmax at 2048 (T5 seed)",
     ["--method", "temperature", "--calibrate", "pmax", "--target-len", "2048"]),
    ("alibi-probe", "alibi-pi dynamic (ALiBi seed)", ["--method", "alibi-pi", "--dynamic"]),
    ("rope-probe", "lm-infinite 10 / 256, ceiling 256", ["--method", "lm-infinite"]),
    ("rope-probe", "lm-infinite + top-k 5", ["--method", "lm-infinite", "--top-k", "5"]),
    ("fire-probe", "fire-threshold 512 (not the seed's patch)",
     ["--method", "fire-threshold", "--threshold", "512"]),
]


def artifact_rule(folder):
    c = load(os.path.join(folder, "config.json"))["ctxpatch"]
    r = dict(c["rule"])
    r.update(c["baked_rule"])
    return c, r


def section1():
    sec = "1"
    rows = []
    for i, (model, label, opts) in enumerate(S1):
        art = os.path.join(WORK, "s1-%d-%s" % (i, model))
        # --for ctxpatch: the artifact is read back for its rule, some of which only ctxpatch runs
        run(sec, [BIN, "patch", os.path.join(PM, model), art] + opts + ["--for", "ctxpatch", "--no-verify", "--force"])
        meta, rule = artifact_rule(art)
        rp = os.path.join(WORK, "s1-%d.rule.json" % i)
        dump(rp, rule)
        common = ["--probe", "passkey", "--lengths", S1_LENGTHS, "--depths", "0:1:10",
                  "--samples", str(SAMPLES), "--no-stats"]
        cert = os.path.join(WORK, "s1-%d.json" % i)
        run(sec, [BIN, "verify", os.path.join(PM, model), "--rule", rp, "--baseline"] + common
            + ["--no-regression-at", S1_LENGTHS, "--certificate", cert], ok=(0, 1))
        re_cert = os.path.join(WORK, "s1-%d-reverify.json" % i)
        run(sec, [BIN, "verify", art] + common + ["--certificate", re_cert])
        rows.append((model, label, meta, rule, load(cert), load(re_cert)))
    lens = [int(x) for x in S1_LENGTHS.split(",")]
    out = ["| model | method | fidelity | " + " | ".join(str(L) for L in lens)
           + " | verdict | artifact re-verify |", "|---" * (len(lens) + 5) + "|"]
    ptab = ["| model | method | " + " | ".join(str(L) for L in lens) + " |",
            "|---" * (len(lens) + 2) + "|"]
    for model, label, meta, rule, c, rc in rows:
        b = by_len(c["results"]["baseline"]["passkey"])
        p = by_len(c["results"]["patched"]["passkey"])
        cmp_ = by_len(c["results"]["comparison"]["passkey"])
        r = by_len(rc["results"]["patched"]["passkey"])
        cells = ["%s → %s" % (acc_cell(b[L]), acc_cell(p[L])) for L in lens]
        v = c["verdict"]
        verdict = v["result"] + ("" if v["result"] == "pass" else
                                 ": " + "; ".join(v["reasons"]))
        same = all(r[L]["correct_by_depth"] == p[L]["correct_by_depth"] for L in lens)
        rv = "equal" if same else "differs: " + ", ".join(
            "%d %s" % (L, f2(r[L]["accuracy"])) for L in lens
            if r[L]["correct_by_depth"] != p[L]["correct_by_depth"])
        out.append("| %s | %s | %s | %s | %s | %s |" % (model, label, meta["fidelity"],
                                                       " | ".join(cells), verdict, rv))
        ptab.append("| %s | %s | %s |" % (model, label, " | ".join(
            "%+.2f, p %.3f" % (cmp_[L]["drop"], cmp_[L]["p_value"]) for L in lens)))
    st = rows[0][4]["statistics"]
    n = st["pairs"]
    det = st["detectable_drop"]
    return {"table": "\n".join(out), "ptable": "\n".join(ptab), "rows": rows, "n": n,
            "detectable": det}


# --- section 2: the T5 seed, one tau vs the schedule --------------------------------------

S2_LENGTHS = [256, 512] if SMOKE else [256, 512, 1024, 2048, 4096]


def calibrate(sec, model, train_len, lengths, tag):
    sched = os.path.join(WORK, "%s-schedule.rule.json" % tag)
    args = [BIN, "calibrate", model, "--method", "pmax", "--lengths",
            ",".join(str(L) for L in lengths), "--schedule", "--out", sched, "--json"]
    if train_len:
        args[3:3] = ["--train-len", str(train_len)]
    cal = json.loads(run(sec, args))
    single = [r["tau"] for r in cal["entries"] if r["length"] == max(lengths)][0]
    single_p = os.path.join(WORK, "%s-single.rule.json" % tag)
    dump(single_p, {"temperature": single})
    return cal, single, single_p, sched


def retrieval(sec, model, rules, tag, probes):
    """verify probes at S2_LENGTHS for each (name, rule file), baseline side by side."""
    certs = {}
    for name, rp in rules:
        cert = os.path.join(WORK, "%s-%s-retrieval.json" % (tag, slug(name)))
        run(sec, [BIN, "verify", model, "--rule", rp, "--baseline", "--probe", probes,
                  "--lengths", ",".join(str(L) for L in S2_LENGTHS), "--depths", "0:1:10",
                  "--samples", str(SAMPLES), "--certificate", cert])
        certs[name] = load(cert)
    return certs


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower())


def retrieval_table(certs, names):
    out = ["| probe | length | original | " + " | ".join(names) + " |",
           "|---" * (len(names) + 3) + "|"]
    first = certs[names[0]]
    for probe in first["probes"]["names"]:
        b = by_len(first["results"]["baseline"][probe])
        for L in S2_LENGTHS:
            cells = []
            for n in names:
                e = by_len(certs[n]["results"]["patched"][probe])[L]
                c = by_len(certs[n]["results"]["comparison"][probe])[L]
                cells.append("%s (p %.2f)" % (acc_cell(e), c["p_value"]))
            out.append("| %s | %d | %s | %s |" % (probe, L, acc_cell(b[L]), " | ".join(cells)))
    att = ["| length | original P_max | " + " | ".join("%s P_max" % n for n in names) + " |",
           "|---" * (len(names) + 2) + "|"]
    for L in S2_LENGTHS:
        base = by_len(first["results"]["baseline"].get("attention", [])).get(L)
        cells = [by_len(certs[n]["results"]["patched"].get("attention", [])).get(L)
                 for n in names]
        att.append("| %d | %s | %s |" % (L, "%.4f" % base["pmax"] if base else "-", " | ".join(
            "%.4f" % c["pmax"] if c else "-" for c in cells)))
    return "\n".join(out), "\n".join(att)


def ppl_runs(sec, model, configs, corpus, tag):
    """configs: (name, model path, rule file or None, lengths). Each window is its own verify
    run (--ppl-windows 1 --seed w), so the windows give a t interval; the seed fixes the
    window (docs/certificate.md), the same on every side. Returns name -> L -> [nll per w]."""
    res = {}
    tokens = set()
    for name, mpath, rp, lengths in configs:
        per = {}
        for w in range(WINDOWS):
            cert = os.path.join(WORK, "%s-ppl-%s-w%d.json" % (tag, slug(name), w))
            args = [BIN, "verify", mpath, "--probe", "ppl", "--corpus", corpus, "--lengths",
                    ",".join(str(L) for L in lengths), "--ppl-windows", "1", "--seed", str(w),
                    "--no-stats", "--certificate", cert]
            if rp:
                args[3:3] = ["--rule", rp]
            run(sec, args, template=True)
            c = load(cert)
            tokens.add(c["probes"]["ppl"]["tokens"])
            for e in c["results"]["patched"]["ppl"]:
                per.setdefault(e["length"], []).append(e)
        res[name] = per
    if len(tokens) != 1:
        raise SystemExit("results: %s: the sides tokenised the corpus differently: %s"
                         % (tag, sorted(tokens)))
    return res, tokens.pop()


def ppl_table(res, names, lengths, base="original"):
    out = ["| length | %s NLL | " % base + " | ".join("%s NLL | %s − %s" % (n, n, base)
                                                     for n in names) + " |",
           "|---" * (2 * len(names) + 2) + "|"]
    for L in lengths:
        b = [e["nll"] for e in res[base][L]]
        cells = []
        for n in names:
            if L not in res[n]:
                cells += ["-", "-"]
                continue
            x = [e["nll"] for e in res[n][L]]
            cells += [nll_cell(x), diff_cell([u - v for u, v in zip(x, b)])]
        out.append("| %d | %s | %s |" % (L, nll_cell(b), " | ".join(cells)))
    return "\n".join(out)


def bucket_table(res, names, L):
    nb = len(res[names[0]][L][0]["nll_by_bucket"])
    out = ["| side | " + " | ".join("%d-%d" % (L * k // nb, L * (k + 1) // nb - 1)
                                    for k in range(nb)) + " |", "|---" * (nb + 1) + "|"]
    for n in names:
        if L not in res[n]:
            continue
        ws = res[n][L]
        out.append("| %s | %s |" % (n, " | ".join(
            "%.2f" % (sum(e["nll_by_bucket"][k] for e in ws) / len(ws)) for k in range(nb))))
    return "\n".join(out)


def held_out_corpus():
    """Stories HELD_OUT of TEXT, written by the probe models' data.py (one copy of the split:
    the v2 probe models train on the stories before it)."""
    from ctxpatch_ref import data
    assert data.HELD_OUT == HELD_OUT and os.path.samefile(data.STORIES, TEXT)
    path = os.path.join(WORK, "tinystories_val_800_1000.txt")
    data.write_held_out(path)
    return path


def section2(have_fix):
    sec = "2"
    t5 = os.path.join(PM, "t5-probe")
    rope = os.path.join(PM, "rope-probe")
    out = {}
    for tag, model, probes in (("t5", t5, "passkey,needle"), ("rope", rope, "passkey")):
        cal, single, single_p, sched = calibrate(sec, model, None, S2_LENGTHS[1:], tag)
        out[tag + "_cal"] = (cal, single, load(sched))
        certs = retrieval(sec, model, [("one tau", single_p), ("schedule", sched)], tag, probes)
        out[tag + "_tables"] = retrieval_table(certs, ["one tau", "schedule"])
        out[tag + "_certs"] = certs
    if have_fix:   # single_p and sched are the rope-probe's (the loop's last model)
        corpus = held_out_corpus()
        res, tokens = ppl_runs(sec, rope, [("original", rope, None, S2_LENGTHS),
                                           ("one tau", rope, single_p, S2_LENGTHS),
                                           ("schedule", rope, sched, S2_LENGTHS)], corpus, "rope")
        out["rope_ppl"] = ppl_table(res, ["one tau", "schedule"], S2_LENGTHS)
        out["rope_ppl_tokens"] = tokens
        out["rope_ppl_res"] = res
    return out


# --- section 3: the pretrained stories260K ------------------------------------------------

S3_TRAIN = 512
S3_LENGTHS = [512, 1024] if SMOKE else [512, 1024, 2048, 4096]


def section3():
    sec = "3"
    corpus = held_out_corpus()
    cal, single, single_p, sched = calibrate(sec, STORIES, S3_TRAIN, S3_LENGTHS[1:], "stories")
    lmi = os.path.join(WORK, "stories-lm-infinite")
    run(sec, [BIN, "patch", STORIES, lmi, "--method", "lm-infinite", "--n-local", str(S3_TRAIN),
              "--for", "ctxpatch", "--no-verify", "--force"])
    _, rule = artifact_rule(lmi)
    lmi_p = os.path.join(WORK, "stories-lm-infinite.rule.json")
    dump(lmi_p, rule)
    configs = [("original", STORIES, None, S3_LENGTHS),
               ("lm-infinite", STORIES, lmi_p, S3_LENGTHS),
               ("one tau", STORIES, single_p, S3_LENGTHS),
               ("schedule", STORIES, sched, S3_LENGTHS)]
    for L in S3_LENGTHS[1:]:
        f = L // S3_TRAIN
        g = os.path.join(WORK, "stories-rope-pi-%d.gguf" % f)
        run(sec, [BIN, "patch", STORIES, g, "--method", "rope-pi", "--factor", str(f),
                  "--to", "gguf", "--no-verify", "--force"])
        configs.append(("rope-pi %d" % f, g, None, [S3_TRAIN, L]))
    res, tokens = ppl_runs(sec, STORIES, configs, corpus, "stories")
    names = [c[0] for c in configs[1:]]
    return {"cal": (cal, single, load(sched)), "lmi_rule": rule, "res": res, "tokens": tokens,
            "table": ppl_table(res, names, S3_LENGTHS),
            "buckets": bucket_table(res, ["original"] + names, S3_LENGTHS[-1])}


# --- the document -------------------------------------------------------------------------

def sched_text(s):
    return ", ".join("%d: %s" % (L, t) for L, t in s["temperature_schedule"]["points"])


def ppl_summary(res, names, L, base="original"):
    """One sentence per side at length L: the paired difference and whether its interval
    excludes 0."""
    b = [e["nll"] for e in res[base][L]]
    parts = []
    for n in names:
        if L not in res[n]:
            continue
        x = [e["nll"] for e in res[n][L]]
        diffs = [u - v for u, v in zip(x, b)]
        m, lo, hi = mean_ci(diffs)
        verdict = ("lower (better)" if hi < 0 else "higher (worse)" if lo > 0
                   else "identical in every window" if not any(diffs)
                   else "not distinguishable")
        parts.append("%s %+.3f [%+.3f, %+.3f] nats, %s" % (n, m, lo, hi, verdict))
    return "; ".join(parts)


def cmp_summary(certs, name, probe, L):
    b = by_len(certs[name]["results"]["baseline"][probe])[L]
    p = by_len(certs[name]["results"]["patched"][probe])[L]
    return "%s %s → %s" % (probe, f2(b["accuracy"]), f2(p["accuracy"]))


def overlap(certs, a, b, probe, L):
    x = by_len(certs[a]["results"]["patched"][probe])[L]["accuracy_ci95"]
    y = by_len(certs[b]["results"]["patched"][probe])[L]["accuracy_ci95"]
    return x[0] <= y[1] and y[0] <= x[1]


def write(doc_parts):
    tmp = OUT + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(doc_parts).rstrip() + "\n")
    os.replace(tmp, OUT)


def main():
    os.makedirs(WORK, exist_ok=True)
    state = os.path.join(WORK, "state.pickle")
    if sys.argv[1:] == ["--render"]:    # redo the document from the last run's numbers
        import pickle
        with open(state, "rb") as f:
            st = pickle.load(f)
        head, s1, s2, s3, have_fix, cmds, tims = st[:7]
        commands.update(cmds)
        timings.update(tims)
        cpu.update(st[7] if len(st) > 7 else {})
    else:
        head, s1, s2, s3, have_fix = measure()
        import pickle
        with open(state, "wb") as f:
            pickle.dump((head, s1, s2, s3, have_fix, commands, timings, cpu), f)
    import results_doc
    write(results_doc.render(sys.modules[__name__], head, s1, s2, s3, have_fix))
    print("results: wrote %s (total %.0f s)" % (shown(OUT), sum(timings.values())))


def timed(sec, what, fn):
    t, c = time.time(), os.times()
    out = fn()
    c2 = os.times()
    timings[sec] = time.time() - t
    cpu[sec] = (c2.children_user - c.children_user) + (c2.children_system - c.children_system)
    print("results: section %s (%s): %.0f s wall, %.0f s CPU" % (sec, what, timings[sec],
                                                                 cpu[sec]), flush=True)
    return out


def measure():
    have_fix = os.path.isfile(TEXT) and os.path.isfile(STORIES)
    if not have_fix:
        print("results: SKIP: %s is missing (stories260K or the TinyStories text): the ppl "
              "table of section 2 and all of section 3 are skipped" % FIX, flush=True)
    head = machine()
    s1 = timed("1", "probe models", section1)
    s2 = timed("2", "T5 seed, one tau vs schedule", lambda: section2(have_fix))
    s3 = timed("3", "stories260K", section3) if have_fix else None
    return head, s1, s2, s3, have_fix


if __name__ == "__main__":
    main()
