#!/usr/bin/python3
"""PyTorch (Debian's, CPU, eager) side of bench/bench_bigw.sh: the Llama forward of
bench/prefill_torch.py with a KV cache, on a checkpoint of bench/make_llama_bf16.py.

usage: bigw_torch.py DIR --ids FILE --threads T --new N [--dtype float32|bfloat16]
Weights are read from the safetensors mapping and converted to --dtype (float32: what eager
PyTorch on a CPU without native BF16 matrix units runs; the activations follow the weights).
Prefill: every prompt token in one pass (attention one head at a time, causal mask), then N
greedy decode steps against the cache. Prints JSON {"prompt", "new", "prefill_s", "decode_s",
"prefill_tokens_per_s", "decode_tokens_per_s", "tokens"}; model loading is excluded from both.
"""
import argparse
import json
import math
import os
import struct
import time


import numpy as np
import torch

from prefill_torch import rms, rotate_half  # bench/prefill_torch.py beside it: the same Llama pieces


def load(path, dtype):
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    raw = np.memmap(os.path.join(path, "model.safetensors"), dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        assert info["dtype"] == "BF16"
        bits = torch.from_numpy(np.array(raw[8 + n + s:8 + n + e]).view(np.int16))
        out[name] = bits.view(torch.bfloat16).reshape(info["shape"]).to(dtype)
    return out


@torch.no_grad()
def step(t, c, ids, pos0, cache):
    """Rows ids at positions pos0.. against cache (list of [k, v] per layer, grown here); logits of the last row."""
    D, H = c["hidden_size"], c["num_attention_heads"]
    Hkv, dh, eps = c["num_key_value_heads"], D // H, c["rms_norm_eps"]
    T = ids.shape[0]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    ang = torch.outer(torch.arange(pos0, pos0 + T, dtype=torch.float64), inv)
    dt = t["model.norm.weight"].dtype
    cos = torch.cat((ang, ang), -1).cos().to(dt)
    sin = torch.cat((ang, ang), -1).sin().to(dt)
    x = t["model.embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, t[p + "input_layernorm.weight"], eps)
        q = (h @ t[p + "self_attn.q_proj.weight"].T).view(T, H, dh).transpose(0, 1)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).view(T, Hkv, dh).transpose(0, 1)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).view(T, Hkv, dh).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if len(cache) <= i:
            cache.append([k, v])
        else:
            cache[i] = [torch.cat((cache[i][0], k), 1), torch.cat((cache[i][1], v), 1)]
        K, V = cache[i]
        S = K.shape[1]
        mask = torch.full((T, S), float("-inf"), dtype=dt).triu(S - T + 1)
        out = torch.empty(H, T, dh, dtype=dt)
        for hh in range(H):
            g = hh // (H // Hkv)
            s = (q[hh] @ K[g].T) / math.sqrt(dh) + mask
            out[hh] = torch.softmax(s, dim=-1) @ V[g]
            del s
        x = x + out.transpose(0, 1).reshape(T, D) @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"], eps)
        a = torch.nn.functional.silu(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)
        x = x + a @ t[p + "mlp.down_proj.weight"].T
    return rms(x[-1:], t["model.norm.weight"], eps) @ t["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.dir, "config.json")) as f:
        c = json.load(f)
    t = load(a.dir, getattr(torch, a.dtype))
    with open(a.ids) as f:
        ids = torch.tensor([int(v) for v in f.read().replace(",", " ").split()], dtype=torch.long)
    step(t, c, ids[:8], 0, [])  # warm-up: first-call allocations and kernel selection
    cache = []
    t0 = time.perf_counter()
    logits = step(t, c, ids, 0, cache)
    t1 = time.perf_counter()
    out = [int(logits.argmax())]
    for i in range(a.new - 1):
        logits = step(t, c, torch.tensor(out[-1:]), len(ids) + i, cache)
        out.append(int(logits.argmax()))
    t2 = time.perf_counter()
    n = len(ids)
    print(json.dumps({"prompt": n, "new": a.new, "prefill_s": t1 - t0, "decode_s": t2 - t1,
                      "prefill_tokens_per_s": n / (t1 - t0),
                      "decode_tokens_per_s": (a.new - 1) / (t2 - t1) if a.new > 1 else None,
                      "tokens": out}))


if __name__ == "__main__":
    main()
