#!/usr/bin/env python3
"""Writes a synthetic Llama-7B-shaped checkpoint of about SIZE_GB gigabytes (default 2.2) for the
conversion benchmark, with config.json beside it (so `convert --to gguf|onnx` can read it too).
OUT ending in .bin: a PyTorch zip written by torch.save (F16, random-ish contents; the whole state
dict is built in memory first). OUT ending in .safetensors: BF16 written tensor by tensor with the
standard library only (memory stays flat: for the 7B-sized, ~14 GB case).
usage: make_big_checkpoint.py OUT.bin|OUT.safetensors [SIZE_GB]"""
import json
import os
import random
import struct
import sys

D, F, V, H = 4096, 11008, 32000, 32


def shapes_for(target_bytes, esize):
    shapes, total, layer = [("model.embed_tokens.weight", (V, D))], V * D * esize, 0
    while total < target_bytes:
        p = f"model.layers.{layer}."
        for name, shape in [("self_attn.q_proj.weight", (D, D)), ("self_attn.k_proj.weight", (D, D)),
                            ("self_attn.v_proj.weight", (D, D)), ("self_attn.o_proj.weight", (D, D)),
                            ("mlp.gate_proj.weight", (F, D)), ("mlp.up_proj.weight", (F, D)),
                            ("mlp.down_proj.weight", (D, F)), ("input_layernorm.weight", (D,)),
                            ("post_attention_layernorm.weight", (D,))]:
            shapes.append((p + name, shape))
            n = esize
            for s in shape:
                n *= s
            total += n
        layer += 1
    shapes.append(("model.norm.weight", (D,)))
    return shapes, layer, total


def write_config(folder, layers, dtype):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": layers, "num_attention_heads": H,
           "num_key_value_heads": H, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": True, "torch_dtype": dtype}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_pytorch(out, target):
    import torch
    torch.manual_seed(0)
    shapes, layers, total = shapes_for(target, 2)
    sd = {}
    for name, shape in shapes:
        # a cheap fill: the first 2^20 values random, the rest zero, keeps generation fast
        t = torch.zeros(shape, dtype=torch.float16)
        t.view(-1)[: min(t.numel(), 1 << 20)].normal_()
        sd[name] = t
    torch.save(sd, out)
    return shapes, layers, total, "float16"


def write_safetensors(out, target):
    shapes, layers, total = shapes_for(target, 2)
    header, off = {}, 0
    for name, shape in shapes:
        n = 2
        for s in shape:
            n *= s
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = random.Random(0)
    block = bytearray(rng.randbytes(1 << 24))
    block[1::2] = bytes(b & 0xBF for b in block[1::2])  # exponent < 128: finite BF16
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = off
        while left:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
    return shapes, layers, off, "bfloat16"


def main():
    out = sys.argv[1]
    target = float(sys.argv[2]) * 1e9 if len(sys.argv) > 2 else 2.2e9
    make = write_safetensors if out.endswith(".safetensors") else write_pytorch
    shapes, layers, total, dtype = make(out, target)
    write_config(os.path.dirname(os.path.abspath(out)), layers, dtype)
    print(f"{out}: {len(shapes)} tensors, {total / 1e9:.2f} GB of tensor data")


if __name__ == "__main__":
    main()
