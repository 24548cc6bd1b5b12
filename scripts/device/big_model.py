#!/usr/bin/env python3
"""The device kit's big-model step (issue 32, item 4): a Llama-3.2-1B-shaped synthetic checkpoint
made on the spot by bench/make_llama_bf16.py (random BF16 weights, Llama 3.2's tokenizer.json), then
`ctxpatch verify` passkey (one prompt, depth 0.5) at each length, without a rule and with
LM-Infinite's Lambda mask (n_global 4, n_local and distance ceiling = the original 8192 context):
wall seconds, tokens, prefill tokens/s and the device memory in use at its peak (nvidia-smi sampled
every 0.2 s; absent on the CPU). Random weights retrieve nothing: accuracy is recorded, not judged.
Lengths run in increasing order and a length is skipped when the last one's time, scaled by the
square of the length ratio (attention dominates), would pass the deadline, so the JSON always comes
back. Prints one JSON object (the device report's step); exit 0 when every run that started ended.

    big_model.py --bin CTXPATCH --tokenizer TOKENIZER.json.gz --work DIR --device cuda
                 [--preset llama3.2-1b] [--lengths 16384,32768,65536,131072] [--deadline SECONDS]
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class MemorySampler:
    """Peak of nvidia-smi's memory.used (MiB) while a run lasts; None without nvidia-smi."""

    def __init__(self):
        self.peak, self.stop = None, threading.Event()
        self.smi = shutil.which("nvidia-smi")

    def sample(self):
        try:
            out = subprocess.run([self.smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout.split()
            used = max(int(x) for x in out)
            self.peak = used if self.peak is None else max(self.peak, used)
        except Exception:
            pass

    def __enter__(self):
        if self.smi:
            self.thread = threading.Thread(target=self.loop, daemon=True)
            self.thread.start()
        return self

    def loop(self):
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(0.2)

    def __exit__(self, *exc):
        self.stop.set()
        if self.smi:
            self.thread.join()


def run_verify(args, model, length, rule, work):
    cert = os.path.join(work, "cert.json")
    cmd = [args.bin, "verify", model, "--probe", "passkey", "--lengths", str(length), "--depths", "0.5",
           "--samples", "1", "--device", args.device, "--no-stats", "--json", "--certificate", cert,
           "--work-budget", "1000000000000"]  # 128K is 1.7e10 pairs, over the default 1e10
    if rule:
        cmd += ["--rule", rule]
    t0 = time.monotonic()
    with MemorySampler() as mem:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, args.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p = None
    wall = time.monotonic() - t0
    row = {"length": length, "rule": "lambda" if rule else "none", "exit": p.returncode if p else 124,
           "wall_s": round(wall, 2), "device_memory_peak_mib": mem.peak}
    if p is None:
        row["error"] = "passed the step's deadline"
        return row
    try:
        c = json.loads(p.stdout)
        row["tokens"] = c["run"]["tokens"]
        row["tokens_per_s"] = round(c["run"]["tokens"] / wall, 1)
        row["device"] = c["run"]["device"]
        row["accuracy"] = c["results"]["patched"]["passkey"][0]["accuracy"]
    except Exception:
        row["error"] = (p.stderr or p.stdout)[-600:]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--preset", default="llama3.2-1b")
    ap.add_argument("--lengths", default="16384,32768,65536,131072")
    ap.add_argument("--deadline", type=float, default=400, help="seconds from now")
    args = ap.parse_args()
    args.deadline += time.monotonic()
    model = os.path.join(args.work, "model")
    t0 = time.monotonic()
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_llama_bf16.py"), model, args.preset],
                   check=True, stdout=subprocess.DEVNULL)
    with gzip.open(args.tokenizer, "rb") as f, open(os.path.join(model, "tokenizer.json"), "wb") as g:
        shutil.copyfileobj(f, g)
    made = time.monotonic() - t0
    rule = os.path.join(args.work, "lambda.json")
    with open(rule, "w") as f:
        json.dump({"lambda_mask": {"n_global": 4, "n_local": 8192}, "distance_ceiling": 8192}, f)
    report = {"preset": args.preset, "device": args.device, "made_s": round(made, 1),
              "checkpoint_bytes": os.path.getsize(os.path.join(model, "model.safetensors")), "rows": [],
              "skipped": []}
    last = None  # (length, the slower of its two runs)
    ok = True
    for length in [int(x) for x in args.lengths.split(",")]:
        if last and time.monotonic() + 2 * last[1] * (length / last[0]) ** 2 > args.deadline:
            report["skipped"].append(length)
            continue
        slowest = 0.0
        for r in (None, rule):
            row = run_verify(args, model, length, r, args.work)
            report["rows"].append(row)
            slowest = max(slowest, row["wall_s"])
            ok = ok and row["exit"] == 0 and "error" not in row
            if row["exit"] == 124:
                break
        if not ok:
            break
        last = (length, slowest)
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
