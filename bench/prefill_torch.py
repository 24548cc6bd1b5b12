"""PyTorch side of bench/bench_prefill.sh: makes the tiny benchmark model and runs its prefill.

  prefill_torch.py make-model DIR            random Llama-layout model (safetensors + config.json)
  prefill_torch.py run DIR --ids FILE --threads T [--out LOGITS.bin]
      float32 forward of every position, written like `ctxpatch forward --out`; prints JSON
      {"tokens", "seconds", "tokens_per_s"} with the time of the forward alone (model loading and
      Python start-up excluded). Attention is the eager HF form (scores, softmax, weighted sum),
      one head at a time so that 16K tokens need 1 GiB of scores rather than H GiB.
"""
import argparse
import json
import math
import os
import time

import torch

from ctxpatch_ref import stio  # the project's minimal safetensors writer/reader

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "hidden_act": "silu",
}


def make_model(path):
    g = torch.Generator().manual_seed(1234)
    c = CONFIG
    D, F, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    dh = D // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * dh

    def w(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    t = {"model.embed_tokens.weight": w(V, D, scale=1.0)}
    for i in range(L):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = 1 + w(D, scale=0.1)
        t[p + "self_attn.q_proj.weight"] = w(D, D)
        t[p + "self_attn.k_proj.weight"] = w(kv, D)
        t[p + "self_attn.v_proj.weight"] = w(kv, D)
        t[p + "self_attn.o_proj.weight"] = w(D, D)
        t[p + "post_attention_layernorm.weight"] = 1 + w(D, scale=0.1)
        t[p + "mlp.gate_proj.weight"] = w(F, D)
        t[p + "mlp.up_proj.weight"] = w(F, D)
        t[p + "mlp.down_proj.weight"] = w(D, F)
    t["model.norm.weight"] = 1 + w(D, scale=0.1)
    t["lm_head.weight"] = w(V, D)
    os.makedirs(path, exist_ok=True)
    stio.write_atomic(os.path.join(path, "model.safetensors"), stio.safetensors_bytes(t))
    stio.write_atomic(os.path.join(path, "config.json"), stio.json_bytes(c))


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


@torch.no_grad()
def forward(t, c, ids):
    D, H = c["hidden_size"], c["num_attention_heads"]
    Hkv, dh, eps = c["num_key_value_heads"], D // H, c["rms_norm_eps"]
    T = ids.shape[0]
    # Angles in float64 as the project's reference does (HF's float32 angles drift by ~1e-3 rad
    # at 16K positions, which would hide real differences in the comparison).
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos = torch.cat((ang, ang), -1).cos().float()
    sin = torch.cat((ang, ang), -1).sin().float()
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = t["model.embed_tokens.weight"][ids]
    for i in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, t[p + "input_layernorm.weight"], eps)
        q = (h @ t[p + "self_attn.q_proj.weight"].T).view(T, H, dh).transpose(0, 1)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).view(T, Hkv, dh).transpose(0, 1)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).view(T, Hkv, dh).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = torch.empty(H, T, dh)
        for hh in range(H):
            g = hh // (H // Hkv)
            s = (q[hh] @ k[g].T) / math.sqrt(dh) + mask
            out[hh] = torch.softmax(s, dim=-1) @ v[g]
            del s
        x = x + out.transpose(0, 1).reshape(T, D) @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"], eps)
        a = torch.nn.functional.silu(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)
        x = x + a @ t[p + "mlp.down_proj.weight"].T
    return rms(x, t["model.norm.weight"], eps) @ t["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["make-model", "run"])
    ap.add_argument("dir")
    ap.add_argument("--ids")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.what == "make-model":
        make_model(a.dir)
        return
    torch.set_num_threads(a.threads)
    with open(os.path.join(a.dir, "config.json")) as f:
        c = json.load(f)
    _, t = stio.read_safetensors(os.path.join(a.dir, "model.safetensors"))
    with open(a.ids) as f:
        ids = torch.tensor([int(v) for v in f.read().replace(",", " ").split()], dtype=torch.long)
    forward(t, c, ids[:32])  # warm-up: first-call allocations and kernel selection
    t0 = time.perf_counter()
    logits = forward(t, c, ids)
    secs = time.perf_counter() - t0
    if a.out:
        with open(a.out, "wb") as f:
            f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    print(json.dumps({"tokens": int(ids.shape[0]), "seconds": secs, "tokens_per_s": ids.shape[0] / secs}))


if __name__ == "__main__":
    main()
