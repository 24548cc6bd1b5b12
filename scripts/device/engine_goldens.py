#!/usr/bin/env python3
"""Every engine golden case (tests/goldens/engine: PyTorch float64 references) through
`ctxpatch forward` on each device given, as test_engine_goldens does in-process: logits within
max|a - b| / max|b| <= 1e-4 of the golden, greedy continuations equal. With two devices it also
reports the largest difference between them. Prints one JSON object (the device report's step).

    engine_goldens.py --bin BUNDLE/bin/ctxpatch --devices cpu,cuda [--only SUBSTRING] [--jobs N]
"""
import argparse
import concurrent.futures
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

TOL = 1e-4
DTYPES = {"F32": np.float32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for name, t in head.items():
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return meta, out


def run_case(binary, root, case, device, tmp):
    meta, t = read_safetensors(os.path.join(root, case["file"]))
    model = os.path.join(root, "models", case["model"])
    rule = os.path.join(tmp, "rule.json")
    with open(rule, "w") as f:
        json.dump(case["rule"], f)
    cmd = [binary, "forward", model, "--ids", ",".join(map(str, t["input_ids"])), "--rule", rule,
           "--device", device]
    if "decoder_input_ids" in t:
        cmd += ["--decoder-ids", ",".join(map(str, t["decoder_input_ids"]))]
    out = os.path.join(tmp, "logits.f32")
    if case["kind"] == "generate":
        cmd += ["--generate", str(len(t["generated"]))]
    else:
        cmd += ["--out", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}, None
    if case["kind"] == "generate":
        got = [int(x) for x in p.stdout.strip().split(",") if x]
        return {"generated_equal": got == [int(x) for x in t["generated"]]}, np.array(got)
    got = np.fromfile(out, dtype=np.float32).reshape(t["logits"].shape)
    want = t["logits"].astype(np.float64)
    rel = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    return {"rel_err": rel}, got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--devices", default="cpu")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "goldens", "engine"))
    ap.add_argument("--only", default="")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = ap.parse_args()
    devices = args.devices.split(",")
    with open(os.path.join(args.root, "MANIFEST.json")) as f:
        cases = [c for c in json.load(f)["cases"] if args.only in c["file"]]
    def one(c):
        row = {"case": c["model"] + "/" + c["case"], "kind": c["kind"]}
        outs, bad = {}, 0
        with tempfile.TemporaryDirectory() as tmp:
            for d in devices:
                r, outs[d] = run_case(args.bin, args.root, c, d, tmp)
                row[d] = r
                ok = "error" not in r and (r.get("generated_equal") if c["kind"] == "generate" else r["rel_err"] <= TOL)
                bad += 0 if ok else 1
        if len(devices) == 2 and all(v is not None for v in outs.values()):
            a, b = (outs[d] for d in devices)
            if c["kind"] == "forward":
                row["max_abs_between_devices"] = float(np.max(np.abs(a.astype(np.float64) - b)))
            else:
                row["generated_equal_between_devices"] = bool(np.array_equal(a, b))
        return row, bad

    # Processes in parallel: each pays its own start (a CUDA context and cuBLAS handle on a device).
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, cases))
    rows = [r for r, _ in results]
    failed = sum(b for _, b in results)
    worst = {d: max((r[d].get("rel_err", 0.0) for r in rows if "rel_err" in r[d]), default=None) for d in devices}
    print(json.dumps({"cases": len(rows), "failed": failed, "tolerance": TOL, "worst_rel_err": worst, "rows": rows}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
