#!/usr/bin/env python3
"""The device kit's report (scripts/device-check.sh) as the table docs/cuda.md keeps:
    python3 scripts/device-report.py OUT/device-report.json >> docs/cuda.md   (then edit in place)
One row per step: status, seconds and its figures (worst golden error per device, passkey
agreement, transformers' worst error, the benchmark's table below)."""
import json
import sys


def figures(step):
    d = step.get("detail") or {}
    name = step["step"]
    if name == "environment":
        return "%s; %s" % (d.get("gpu", "no GPU (dry run)"), d.get("ctxpatch", "").splitlines()[0] if d.get("ctxpatch") else "")
    if name == "cuda_consistency":
        tail = (d.get("output_tail") or "").strip().splitlines()
        return tail[-1] if tail else d.get("reason", "")
    if name == "engine_goldens":
        w = d.get("worst_rel_err", {})
        between = [r.get("max_abs_between_devices") for r in d.get("rows", []) if "max_abs_between_devices" in r]
        s = "%s cases, %s failed; worst rel err %s" % (d.get("cases"), d.get("failed"),
                                                       ", ".join("%s %.2g" % (k, v) for k, v in w.items() if v is not None))
        if between:
            s += "; max |cuda - cpu| %.3g" % max(between)
        return s
    if name == "verify_passkey":
        rows = d.get("rows", [])
        return "; ".join("%s: %s, same as CPU %s" % (r["model"], ",".join("%s=%s" % (k, v["accuracy"]) for k, v in r["accuracy"].items()),
                                                     "yes" if r["same_at_cpu_lengths"] else "NO") for r in rows)
    if name == "transformers":
        if d.get("status") == "skipped":
            return d.get("reason", "")
        rows = d.get("rows", [])
        worst = max((r.get("rel_err", 0) for r in rows), default=0)
        bad = [r["name"] for r in rows if not r.get("ok")]
        return "transformers %s: %d folders, worst rel err %.2g%s" % (d.get("transformers"), len(rows), worst,
                                                                      "; differ: " + ", ".join(bad) if bad else "")
    return d.get("reason", "") if isinstance(d, dict) else ""


def main():
    r = json.load(open(sys.argv[1]))
    print("Device kit report, commit %s%s: %d passed, %d failed, %d s of %d s\n" %
          (r["commit"], " (dry run, --device cpu)" if r["dry_run"] else "", r["passed"], r["failed"], r["elapsed_s"], r["budget_s"]))
    print("| step | status | s | figures |")
    print("|---|---|---|---|")
    for s in r["steps"]:
        print("| %s | %s | %d | %s |" % (s["step"], s["status"], s["seconds"], figures(s).replace("|", "/")))
    for s in r["steps"]:
        if s["step"] == "attention_bench" and s["status"] == "pass":
            print("\n" + (s["detail"] or {}).get("table", ""))


if __name__ == "__main__":
    main()
