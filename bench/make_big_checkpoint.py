#!/usr/bin/env python3
"""Writes a synthetic PyTorch zip checkpoint of about SIZE_GB gigabytes (default 2.2) for the
conversion benchmark: Llama-7B-like tensor shapes in F16, random-ish contents.
usage: make_big_checkpoint.py OUT.bin [SIZE_GB]"""
import sys

import torch


def main():
    out = sys.argv[1]
    target = float(sys.argv[2]) * 1e9 if len(sys.argv) > 2 else 2.2e9
    torch.manual_seed(0)
    sd, total, layer = {}, 0, 0
    d, f = 4096, 11008
    sd["model.embed_tokens.weight"] = torch.randn(32000, d, dtype=torch.float16)
    total += 32000 * d * 2
    while total < target:
        p = f"model.layers.{layer}."
        for name, shape in [("self_attn.q_proj.weight", (d, d)), ("self_attn.k_proj.weight", (d, d)),
                            ("self_attn.v_proj.weight", (d, d)), ("self_attn.o_proj.weight", (d, d)),
                            ("mlp.gate_proj.weight", (f, d)), ("mlp.up_proj.weight", (f, d)),
                            ("mlp.down_proj.weight", (d, f)), ("input_layernorm.weight", (d,)),
                            ("post_attention_layernorm.weight", (d,))]:
            # a cheap fill: one random row repeated keeps generation fast and bytes non-trivial
            t = torch.empty(shape, dtype=torch.float16)
            t.view(-1)[: min(t.numel(), 1 << 20)].normal_()
            sd[p + name] = t
            total += t.numel() * 2
        layer += 1
    torch.save(sd, out)
    print(f"{out}: {len(sd)} tensors, {total / 1e9:.2f} GB of tensor data")


if __name__ == "__main__":
    main()
