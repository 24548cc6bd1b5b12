"""Writes docs/results.md from the numbers lab/results.py measured. Every sentence that states
a measured number or a comparison is computed here from the certificates, so a rerun cannot
leave a stale claim behind; the papers' claims are quoted with their table or figure."""
import re


def commands(R, sec):
    """The section's commands as a shell block; the per-window ones inside one loop."""
    out, loop = [], []
    for c in R.commands.get(sec, []):
        c = re.sub(r"'(\$W/[^']*)'", r"\1", c)     # $W must expand
        if "$w" in c:
            loop.append("  " + c)
            continue
        if loop:
            out += ["for w in $(seq 0 %d); do" % (R.WINDOWS - 1)] + loop + ["done"]
            loop = []
        out.append(c)
    if loop:
        out += ["for w in $(seq 0 %d); do" % (R.WINDOWS - 1)] + loop + ["done"]
    return "```sh\n" + "\n".join(out) + "\n```"


def render(R, head, s1, s2, s3, have_fix):
    d = []
    w = R.WINDOWS
    d += ["# Results: the originals against the seeds' methods, with 95% intervals", "",
          "This file is generated; do not edit it by hand. Regenerate it from the repository root "
          "with one command:", "", "```sh", "bash scripts/results.sh", "```", "",
          "(it builds `build/ctxpatch` when missing, runs every command listed below from scratch "
          "in `build/results-work/`, and rewrites this file; `RESULTS_SAMPLES` (samples per "
          "probe x length x depth cell, default 2) and `RESULTS_WINDOWS` (ppl windows per length, "
          "default 8) scale it; `bash scripts/results.sh --render` rewrites the text from the "
          "last run's numbers without measuring). In the commands, `ctxpatch` is "
          "`build/ctxpatch` and `W=build/results-work`.", "",
          "The probe models here are v1 (trained on synthetic retrieval only). The v2 probes "
          "(trained with TinyStories in the mix) and each seed's phenomenon measured on them "
          "(ALiBi PI perplexity, LM-Infinite and RoPE PI NLL by position, FIRE with its "
          "threshold, the T5 temperature) are in [results-v2.md](results-v2.md) (`bash "
          "scripts/results_v2.sh`); LM-Infinite on the pretrained stories260K in "
          "[results-seeds.md](results-seeds.md).", "",
          "**This run:** %s." % head, "",
          "**Time per section (wall / CPU of the CLI processes):** " + ", ".join(
              "section %s %.0f s / %s" % (k, v, "%.0f s" % getattr(R, "cpu", {})[k]
                                            if k in getattr(R, "cpu", {}) else "-")
              for k, v in sorted(R.timings.items()))
          + "; total %.0f s wall%s." % (sum(R.timings.values()), cpu_note(R)), "",
          "**How to read the cells.** Retrieval: accuracy k/n with its 95%% Wilson score "
          "interval `[lo, hi]` as `ctxpatch verify` reports it (verify/stats.c); `p` is Tango's "
          "one-sided paired test of a drop larger than 0.05 against the original on the same "
          "prompts (a small p means a regression; a large p means no regression was shown, not "
          "that there is none). ppl: mean NLL per token (nats) over %d windows per length, each "
          "window a separate `verify --probe ppl --ppl-windows 1 --seed w` run (w = 0..%d; the "
          "seed fixes the window, the same on every side), with a 95%% Student-t interval over "
          "the windows; the difference to the original is paired per window. Windows of one "
          "length may overlap (random starts in the corpus), so the t interval is optimistic "
          "about their independence." % (w, w - 1), ""]

    d += summary(R, s1, s2, s3)

    # ---- section 1
    d += ["## 1. Probe models: the original against each seed's method", "",
          "Passkey accuracy at 1x-8x the training length (256), original → patched, "
          "%d prompts per length (depths 0:1:10, %d samples a depth), one run with both sides "
          "on the same prompts. The patch is built by `ctxpatch patch --no-verify`; its rule "
          "(the `ctxpatch` block of the artifact, metadata and baked parts) is then run with "
          "`verify --rule --baseline` and the certification criterion `patch` uses by default "
          "(`--no-regression-at` every length). The last column re-verifies the artifact itself "
          "(`ctxpatch verify OUT`: baked weights and metadata rule applied on load) and says "
          "whether it answers exactly the prompts the rule answered." % (s1["n"], R.SAMPLES), "",
          s1["table"], "",
          "Paired comparison, drop (original − patched) and Tango's p for a drop > 0.05:", "",
          s1["ptable"], "",
          "With %d pairs a length, the test detects a true drop of %s with 80%% power (when the "
          "original answers every prompt); smaller regressions go unseen at this sample size."
          % (s1["n"], "%.3f" % s1["detectable"] if s1["detectable"] is not None else "none"), ""]
    d += ["What the numbers show (computed from the table):", ""]
    for model, label, meta, rule, c, rc in s1["rows"]:
        b = R.by_len(c["results"]["baseline"]["passkey"])
        p = R.by_len(c["results"]["patched"]["passkey"])
        lens = sorted(b)
        gains = [L for L in lens if p[L]["accuracy_ci95"][0] > b[L]["accuracy_ci95"][1]]
        losses = [L for L in lens if p[L]["accuracy_ci95"][1] < b[L]["accuracy_ci95"][0]]
        txt = "- %s, %s: " % (model, label)
        if gains:
            txt += "better than the original beyond the intervals at %s" % ", ".join(map(str, gains))
        else:
            txt += "no length where it is better beyond the intervals"
        if losses:
            txt += "; worse beyond the intervals at %s" % ", ".join(map(str, losses))
        txt += "; verdict %s." % c["verdict"]["result"]
        d.append(txt)
    d += ["", "Papers, for comparison (these probes measure passkey retrieval on 3-layer models "
          "trained on synthetic data, not the papers' settings):", "",
          "- ALiBi PI (../shared/seeds/alibi-position-interpolation.txt, Figures 2 and 3): "
          "on BTLM-3B and MPT-7B, interpolated slopes keep Proof-pile perplexity low to at "
          "least 2x the training length where the originals degrade past 9-10K (8K models); "
          "Figure 4 reports LongEval line and topic retrieval gains. Here dynamic PI removes "
          "retrieval the small ALiBi probe has; issue 18's probe trained on text is where the "
          "perplexity claim can be tested.",
          "- LM-Infinite (../shared/seeds/lm-infinite.txt, Table 2): on Llama-2 the Lambda "
          "mask and ceiling keep passkey retrieval beyond 4K above the original and the "
          "truncation baseline. On this probe a key is visible only inside the 256-token window "
          "or the 10 global tokens, so retrieval tracks the share of depths inside the window; "
          "section 3 tests the paper's NLL claim (Figure 3) on a pretrained model.",
          "- FIRE (../shared/seeds/fire-functional-interpolation.txt, Figure 1 and Table 2): "
          "FIRE's learned interpolation gives the best C4 perplexity across lengths among the "
          "encodings compared. Its threshold patch here is this project's mechanism check, "
          "not the paper's method; the paper's learned threshold is issue 18's probe v2.",
          "", "Commands:", "", commands(R, "1"), ""]

    # ---- section 2
    cal, single, sched = s2["t5_cal"]
    d += ["## 2. T5 seed: one baked temperature against the temperature schedule, 1x-16x", "",
          "Algorithm 1 (P_max alignment, grid 1.0..0.5 step 0.05) is run once by `ctxpatch "
          "calibrate --method pmax --schedule` at %s; the schedule is its table with [L_tr, 1] "
          "first (tau(T) linear in log T between points, spec `temperature_schedule`), and the "
          "single tau is the same calibration's value at the longest length, %s (the tau "
          "`patch --method temperature --calibrate pmax --target-len %d` bakes by the same "
          "algorithm: %s; baked into weights it is exact, see section 1's re-verify column)."
          % (", ".join(str(L) for L in R.S2_LENGTHS[1:]), single, R.S2_LENGTHS[-1],
             same_tau(s1, cal)), "",
          "### t5-probe (encoder temperature), passkey and needle", "",
          "Schedule: %s. %d prompts per probe and length." % (sched_text(sched), s1["n"]), "",
          s2["t5_tables"][0], "",
          "Mean P_max of the encoder self-attention on one probe prompt per length (the "
          "quantity Algorithm 1 aligns; at the training length the original's is the target):",
          "", s2["t5_tables"][1], ""]
    d += obs_retrieval(R, s2["t5_certs"])
    cal, single, sched = s2["rope_cal"]
    d += ["### rope-probe (decoder self-attention), passkey and ppl", "",
          "The t5-probe is an encoder-decoder, which the ppl probe refuses (it scores "
          "decoder-only models), so the ppl comparison runs on the RoPE probe model with its own "
          "calibration (needle is left out here: the rope-probe was never trained on it and "
          "answered 0 of 10 needle prompts at its training length in a trial run). Schedule: %s; single tau %s. The probe models were trained on synthetic "
          "retrieval data only, never on natural text, so their NLL on stories is high in "
          "absolute terms; what matters is how it moves with length and with the rule."
          % (sched_text(sched), single), "",
          s2["rope_tables"][0], "", s2["rope_tables"][1], ""]
    d += obs_retrieval(R, s2["rope_certs"])
    if "rope_ppl" in s2:
        d += ["ppl on a held-out TinyStories slice: the last 200 of the 1000 stories (0-based "
              "800-999) of `../shared/fixtures/third_party/text/tinystories_val_1000_eot.txt` "
              "(the validation split), cut by lab/results.py into "
              "`$W/tinystories_val_800_1000.txt`, documents split at `<|endoftext|>`; the first "
              "800 stay free for training a probe model on text. %d tokens of the probe "
              "tokenizer, %d windows per length:"
              % (s2["rope_ppl_tokens"], w), "", s2["rope_ppl"], "",
              "At %dx (%d): " % (R.S2_LENGTHS[-1] // 256, R.S2_LENGTHS[-1])
              + R.ppl_summary(s2["rope_ppl_res"], ["one tau", "schedule"],
                              R.S2_LENGTHS[-1]) + ". At 1x (256): "
              + R.ppl_summary(s2["rope_ppl_res"], ["one tau", "schedule"], R.S2_LENGTHS[0])
              + ".", "", uniform_note(R, s2["rope_ppl_res"]), ""]
    else:
        d += ["ppl: SKIPPED, `../shared/fixtures` was not reachable.", ""]
    d += ["Paper (../shared/seeds/t5-attention-alignment.txt): Table 4, Flan-T5-Large "
          "passkey at 55k sentences rises from 9 to 85 with P_max alignment, and Table 10 "
          "calibrates one temperature per task length, decreasing as the length grows (a "
          "schedule in all but name); Table 3 (T5-Large-LM, trained at 512) reports perplexity "
          "above 1k from 4096 on without alignment and 45-53 with P_max alignment, while at 2048 "
          "alignment made it worse (40.1 -> 45.5). The comparison above checks "
          "the same two things on a model 10^4 times smaller: whether one tau aimed at the "
          "longest length costs accuracy at short lengths, and whether a per-length tau avoids "
          "that.", "", "Commands:", "", commands(R, "2"), ""]

    # ---- section 3
    d += ["## 3. Pretrained stories260K (RoPE Llama, trained at 512): ppl 1x-8x", ""]
    if s3 is None:
        d += ["SKIPPED: `../shared/fixtures` (stories260K and the TinyStories text) was not "
              "reachable when this file was generated.", ""]
        return d
    cal, single, sched = s3["cal"]
    names = [n for n in s3["res"] if n != "original"]
    d += ["karpathy's stories260K (`../shared/fixtures/third_party/stories260K/stories260K.gguf`, "
          "read directly as GGUF with its own SentencePiece tokenizer from the GGUF metadata; the "
          "GGUF says context 2048, but the model was trained at 512, so every rule below is "
          "given 512 explicitly). Corpus: the same held-out TinyStories validation slice "
          "(stories 800-999 of the validation file; %d tokens of tok512; the model was trained on the train split). "
          "%d windows per length." % (s3["tokens"], w), "",
          "Sides: **lm-infinite**: rule %s (Lambda mask with 10 global tokens and a 512 local "
          "window, distance ceiling 512; made by `patch --method lm-infinite --n-local 512`). "
          "**one tau** %s and **schedule** %s: Algorithm 1 (pmax) by `calibrate --train-len 512 "
          "--schedule`. **rope-pi F**: `patch --method rope-pi --factor F --to gguf` "
          "(llama.rope.scaling linear), F = length / 512, measured at its own length and at "
          "512 (what interpolation costs at the training length)."
          % (json_s(s3["lmi_rule"]), single, sched_text(sched)), "",
          "Mean NLL per token, and the paired difference to the original:", "",
          s3["table"], "",
          "NLL by position at %d (mean of the windows; the LM-Infinite paper's Figure 3 view):"
          % R.S3_LENGTHS[-1], "", s3["buckets"], "",
          "At %dx (%d): " % (R.S3_LENGTHS[-1] // 512, R.S3_LENGTHS[-1]) + R.ppl_summary(
              s3["res"], [n for n in names if R.S3_LENGTHS[-1] in s3["res"][n]],
              R.S3_LENGTHS[-1]) + ".", "",
          "At 1x (512): " + R.ppl_summary(s3["res"], names, R.S3_LENGTHS[0]) + ".", "",
          "Calibration: at tau = 1 the mean P_max at the long lengths is %s, against the target "
          "%.4f (the original at 512); entries marked clipped hit the grid's end (tau 1 when "
          "the long length's P_max is not below the target).%s" % (", ".join(
              "%.4f at %d%s" % (e["at_tau_1"], e["length"], " (clipped)" if e.get("note") else "")
              for e in cal["entries"]), cal["entries"][0]["target"],
              " Algorithm 1 therefore finds almost nothing to correct on this model: every tau "
              "is 0.95 or more." if min(e["tau"] for e in cal["entries"]) >= 0.95 else ""), "",
          "Not applicable to this model: **alibi-pi** (it scales ALiBi slopes; a RoPE model has "
          "none), **fire-threshold** (it replaces FIRE's learned threshold; there is no FIRE "
          "MLP); LM-Infinite's optional **top-k** middle tokens act by default only on decode "
          "rows (`rows: \"decode\"`), which a ppl pass has none of, so it was not measured here.",
          "",
          "Papers: LM-Infinite (../shared/seeds/lm-infinite.txt, Figure 3) reports that the "
          "Lambda mask plus ceiling flattens the NLL curves of several LLMs on ArXiv far past "
          "their pre-training length without parameter updates (Table 1: the best perplexity "
          "on 7 of 9 columns); the by-position table above is the same view on a 260K-parameter "
          "model; [results-seeds.md](results-seeds.md) (`bash scripts/results_seeds.sh`) has it "
          "at every length with intervals, the paper's Figure 5 ablation (Lambda alone, ceiling "
          "alone), RoPE PI with and without a ceiling, a llama.cpp cross-check, and the "
          "top-k investigation on the RoPE probe. No seed claims that RoPE position "
          "interpolation works without fine-tuning: the T5 seed's Table 7 shows YaRN without fine-tuning falling from 85 to "
          "30 passkey accuracy at 8192; the temperature method (T5 seed) is defined and "
          "evaluated on T5's encoder, and applying it to a RoPE decoder is this project's "
          "extension, not the paper's claim.", "", "Commands:", "", commands(R, "3"), ""]
    return d


def acc_at(R, cert, side, probe, L):
    return R.acc_cell(R.by_len(cert["results"][side][probe])[L])


def summary(R, s1, s2, s3):
    """The headline numbers, taken from the tables below."""
    lo, hi = R.S2_LENGTHS[0], R.S2_LENGTHS[-1]
    one, sch = s2["t5_certs"]["one tau"], s2["t5_certs"]["schedule"]
    out = ["## Summary (computed from the tables below)", ""]
    for probe, L in (("passkey", hi), ("needle", lo), ("needle", hi)):
        if probe not in one["probes"]["names"]:
            continue
        out.append("- t5-probe, %s at %d (%dx): original %s, one tau %s, schedule %s." % (
            probe, L, L // lo, acc_at(R, one, "baseline", probe, L),
            acc_at(R, one, "patched", probe, L), acc_at(R, sch, "patched", probe, L)))
    if "rope_ppl_res" in s2:
        out.append("- rope-probe ppl at %d, against the original: %s." % (
            hi, R.ppl_summary(s2["rope_ppl_res"], ["one tau", "schedule"], hi)))
    if s3 is not None:
        L = R.S3_LENGTHS[-1]
        names = [n for n in s3["res"] if n != "original" and L in s3["res"][n]]
        o = [e["nll"] for e in s3["res"]["original"][L]]
        t = [e["nll"] for e in s3["res"]["original"][R.S3_LENGTHS[0]]]
        out.append("- stories260K ppl at %d (%dx), original %s nats (at 512: %s); against the "
                   "original: %s." % (L, L // R.S3_LENGTHS[0], R.nll_cell(o), R.nll_cell(t),
                                      R.ppl_summary(s3["res"], names, L)))
    verdicts = ["%s %s: %s" % (m, lab.split(" (")[0], c["verdict"]["result"])
                for m, lab, _, _, c, _ in s1["rows"]]
    out += ["- Section 1 verdicts (no regression at any length, Tango's test): "
            + "; ".join(verdicts) + ".", ""]
    return out


def uniform_note(R, res):
    """Compares the original's NLL with a uniform guess over the vocabulary."""
    import json, math, os
    with open(os.path.join(R.PM, "rope-probe", "config.json")) as f:
        u = math.log(json.load(f)["vocab_size"])
    L = R.S2_LENGTHS[0]
    m = sum(e["nll"] for e in res["original"][L]) / len(res["original"][L])
    if m < u:
        return ("The original's NLL at %d (%.2f) is below a uniform guess over its vocabulary "
                "(ln V = %.2f)." % (L, m, u))
    return ("Caution: the original's NLL at %d (%.2f nats) is above that of a uniform guess over "
            "its vocabulary (ln V = %.2f): the probe model does not model natural text at all, "
            "so these ppl differences say how a temperature reshapes a wrong distribution, "
            "not whether it preserves language modelling; section 3's pretrained model is the "
            "meaningful ppl test." % (L, m, u))


def same_tau(s1, cal):
    """Section 1's patch calibrated the t5-probe at 2048 by itself: does calibrate agree?"""
    t1 = s1["rows"][0][3].get("temperature")
    t2 = [e["tau"] for e in cal["entries"] if e["length"] == 2048]
    if t1 is None or not t2:
        return "not compared in this run"
    return ("section 1's `patch` found %s at 2048, calibrate %s" % (t1, t2[0])
            + (", the same" if abs(t1 - t2[0]) < 1e-9 else ", which differs"))


def cpu_note(R):
    c = getattr(R, "cpu", {})
    if not c:
        return ""
    total = sum(c.values())
    return (", %.0f s CPU. The wall time is what this run took on a machine shared with other "
            "jobs (see the load average); an idle 2-core machine should need about the CPU time "
            "over the %d cores the engine threads use, %.0f-%.0f min (an estimate, not a "
            "measurement)"
            % (total, 2, total / 2 / 60, total / 1.5 / 60))


def json_s(x):
    import json
    return "`" + json.dumps(x, sort_keys=True, separators=(",", ":")) + "`"


def sched_text(s):
    return ", ".join("tau(%d) = %s" % (L, t) for L, t in s["temperature_schedule"]["points"])


def obs_retrieval(R, certs):
    """Computed sentences: where each side beats the original beyond the intervals, and where
    the two sides' intervals do not overlap."""
    out = []
    for probe in certs["one tau"]["probes"]["names"]:
        parts = []
        for name in ("one tau", "schedule"):
            c = certs[name]
            b = R.by_len(c["results"]["baseline"][probe])
            p = R.by_len(c["results"]["patched"][probe])
            cmp_ = R.by_len(c["results"]["comparison"][probe])
            up = [L for L in sorted(b) if p[L]["accuracy_ci95"][0] > b[L]["accuracy_ci95"][1]]
            reg = [L for L in sorted(b) if cmp_[L]["p_value"] < 0.05]
            parts.append("%s beats the original beyond the intervals at %s, and the paired test "
                         "finds a regression at %s" % (name, ", ".join(map(str, up)) or "no length",
                                                      ", ".join(map(str, reg)) or "no length"))
        sep = [L for L in R.S2_LENGTHS if not R.overlap(certs, "one tau", "schedule", probe, L)]
        parts.append("one tau and the schedule have disjoint intervals at %s"
                     % (", ".join(map(str, sep)) or "no length"))
        out.append("- %s: %s." % (probe, "; ".join(parts)))
    out.append("")
    return out
