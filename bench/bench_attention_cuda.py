#!/usr/bin/env python3
"""Attention kernel benchmark for issue 7 (docs/perf.md, "CUDA attention kernel").

On one GPU, in one run: ctxpatch's fused kernel (through the bench_attention_cuda driver that
CMake builds when nvcc is found) against
  - PyTorch SDPA, flash backend, plain causal (the speed of light without any rule),
  - FlexAttention with the rule as score_mod / block mask (torch >= 2.5, compiled),
  - eager attention with the bias materialised as an [H, L, L] tensor (OOM is reported as such),
at lengths 4K, 16K, 32K and head dims 64 and 128, bfloat16, batch 1, 16 heads.
TFLOP/s counts 4 * L^2 * dh * H / 2 (dense causal) for every row, so rows compare times.

    /usr/bin/python3 bench/bench_attention_cuda.py --driver build/bench_attention_cuda \
        [--lens 4096,16384,32768] [--dhs 64,128] [--rules causal,alibi,...] [--json out.json]

Prints a markdown table (paste into docs/perf.md with the GPU's name). Needs a CUDA GPU and
PyTorch with CUDA; a missing backend is reported in its column, not fatal.
"""
import argparse
import json
import math
import subprocess
import sys

RULES = ["causal", "temperature", "alibi", "alibi-static", "alibi-dynamic", "alibi-progressive",
         "t5", "rope", "lambda", "ceiling", "fire"]
HEADS = 16
N_GLOBAL, N_LOCAL, CEILING = 4, 2048, 2048
TRAIN_LEN = 4096


def t5_bucket(rel, num_buckets=32, max_distance=128):
    """HF T5 causal bucket of relative position rel = j - i (torch version, elementwise)."""
    import torch
    n = torch.clamp(-rel, min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return torch.where(is_small, n, large)


def rule_terms(rule, L, dh, dev):
    """The rule as (score_mod, mask_mod, dense bias [H, L, L] builder) in PyTorch, following
    ../shared/spec/attention-rules.md; None where a piece is absent."""
    import torch
    tau = 0.8 if rule == "temperature" else 1.0
    slopes = torch.tensor([2 ** (-8 * (h + 1) / HEADS) for h in range(HEADS)], device=dev)
    table = torch.randn(32, HEADS, device=dev)
    fire_w1, fire_b1 = torch.randn(32, device=dev), torch.randn(32, device=dev)
    fire_w2, fire_b2 = torch.randn(HEADS, 32, device=dev), torch.randn(HEADS, device=dev)
    ceiling = CEILING if rule == "ceiling" else (N_LOCAL if rule == "lambda" else None)
    div = 1.0
    if rule == "alibi-static":
        div = 2.0
    elif rule == "alibi-dynamic":
        div = max(1.0, L / TRAIN_LEN)

    def dist(q_idx, kv_idx):
        d = q_idx - kv_idx
        return torch.clamp(d, max=ceiling) if ceiling is not None else d

    def bias(b, h, q_idx, kv_idx):
        d = dist(q_idx, kv_idx)
        if rule.startswith("alibi"):
            f = torch.clamp((q_idx + 1).float() / TRAIN_LEN, min=1.0) if rule == "alibi-progressive" else div
            return -slopes[h] / f * d
        if rule == "t5":
            return table[t5_bucket(-d), h]
        if rule == "fire":
            c, Lf = 1.0, float(TRAIN_LEN)
            x = torch.log(c * d.float() + 1) / torch.log(c * torch.clamp(q_idx.float(), min=Lf) + 1)
            a = torch.relu(x[..., None] * fire_w1 + fire_b1)
            return (a * fire_w2[h]).sum(-1) + fire_b2[h]
        return torch.zeros((), device=dev)

    # RoPE under a ceiling changes q for far pairs: FlexAttention cannot express a second query
    # inside score_mod, so "ceiling"/"lambda" time the mask only (listed in docs/perf.md).
    def score_mod(score, b, h, q_idx, kv_idx):
        return (score + bias(b, h, q_idx, kv_idx)) / tau

    def mask_mod(b, h, q_idx, kv_idx):
        causal = kv_idx <= q_idx
        if rule == "lambda":
            return causal & ((kv_idx < N_GLOBAL) | (q_idx - kv_idx < N_LOCAL))
        return causal

    def dense_bias():
        i = torch.arange(L, device=dev)[:, None]
        j = torch.arange(L, device=dev)[None, :]
        out = torch.empty(HEADS, L, L, device=dev, dtype=torch.bfloat16)
        for h in range(HEADS):
            hb = bias(0, torch.tensor(h, device=dev), i, j) if rule not in ("causal", "temperature", "rope",
                                                                              "lambda", "ceiling") else 0.0
            m = mask_mod(0, h, i, j)
            out[h] = torch.where(m, torch.as_tensor(hb, device=dev).float(), float("-inf")).to(torch.bfloat16)
        return out

    return score_mod, mask_mod, dense_bias, tau


def time_cuda(fn, reps=10, warmup=3):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps


def tflops(L, dh, ms):
    return 4.0 * L * L * dh * HEADS / 2.0 / (ms * 1e-3) / 1e12


def run_torch(rule, L, dh, dev):
    import torch
    import torch.nn.functional as F
    res = {}
    q, k, v = (torch.randn(1, HEADS, L, dh, device=dev, dtype=torch.bfloat16) for _ in range(3))
    score_mod, mask_mod, dense_bias, tau = rule_terms(rule, L, dh, dev)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            res["sdpa_flash_causal"] = time_cuda(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    except Exception as exc:  # noqa: BLE001 - report, do not stop the sweep
        res["sdpa_flash_causal"] = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
        bm = create_block_mask(mask_mod, 1, 1, L, L, device=dev)
        res["flex"] = time_cuda(lambda: flex(q, k, v, score_mod=score_mod, block_mask=bm))
    except Exception as exc:  # noqa: BLE001
        res["flex"] = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
    try:
        bias = dense_bias()

        def eager():
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)) + bias
            return torch.softmax(s.float() / tau, dim=-1).to(q.dtype) @ v

        res["eager_bias"] = time_cuda(eager, reps=3, warmup=1)
        del bias
    except torch.cuda.OutOfMemoryError:
        res["eager_bias"] = "OOM"
    except Exception as exc:  # noqa: BLE001
        res["eager_bias"] = f"n/a ({type(exc).__name__}: {str(exc)[:60]})"
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--driver", required=True, help="path of the bench_attention_cuda binary")
    ap.add_argument("--lens", default="4096,16384,32768")
    ap.add_argument("--dhs", default="64,128")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", help="also write every measurement here")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_attention_cuda.py: PyTorch is required")
    if not torch.cuda.is_available():
        sys.exit("bench_attention_cuda.py: no CUDA device (nothing to measure)")
    dev = "cuda"
    gpu = torch.cuda.get_device_name(0)
    rows = []
    for L in map(int, args.lens.split(",")):
        for dh in map(int, args.dhs.split(",")):
            for rule in args.rules.split(","):
                out = subprocess.run([args.driver, "--rule", rule, "--len", str(L), "--dh", str(dh),
                                      "--heads", str(HEADS), "--reps", str(args.reps)],
                                     capture_output=True, text=True)
                ours = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr.strip()}
                row = {"len": L, "dh": dh, "rule": rule, "ctxpatch": ours.get("ms", ours.get("error"))}
                row.update(run_torch(rule, L, dh, dev))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    cols = ["ctxpatch", "sdpa_flash_causal", "flex", "eager_bias"]
    print(f"GPU: {gpu}; torch {torch.__version__}; bf16, batch 1, {HEADS} heads; TFLOP/s (ms)\n")
    print("| L | dh | rule | " + " | ".join(cols) + " |")
    print("|---|---|---|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(f"{tflops(r['len'], r['dh'], v):.1f} ({v:.2f})" if isinstance(v, float) else str(v))
        print(f"| {r['len']} | {r['dh']} | {r['rule']} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
