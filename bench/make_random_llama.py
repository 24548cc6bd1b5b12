#!/usr/bin/env python3
"""Writes a synthetic Llama checkpoint folder (config.json + model.safetensors, random finite F16
weights) of about SIZE_MB megabytes, with the standard library only, for bench/kill9.sh.
usage: make_random_llama.py OUTDIR SIZE_MB [SEED]"""
import json
import os
import random
import struct
import sys

D, F, V, H = 256, 688, 4096, 4


def main():
    out, size_mb = sys.argv[1], float(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    per_layer = 2 * (4 * D * D + 3 * D * F + 2 * D)
    layers = max(1, int((size_mb * 1e6 - 4 * V * D) // per_layer))
    shapes = [("model.embed_tokens.weight", (V, D))]
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes += [(p + "self_attn.q_proj.weight", (D, D)), (p + "self_attn.k_proj.weight", (D, D)),
                   (p + "self_attn.v_proj.weight", (D, D)), (p + "self_attn.o_proj.weight", (D, D)),
                   (p + "mlp.gate_proj.weight", (F, D)), (p + "mlp.up_proj.weight", (F, D)),
                   (p + "mlp.down_proj.weight", (D, F)), (p + "input_layernorm.weight", (D,)),
                   (p + "post_attention_layernorm.weight", (D,))]
    shapes += [("model.norm.weight", (D,)), ("lm_head.weight", (V, D))]
    header, off = {}, 0
    for name, shape in shapes:
        n = 2
        for s in shape:
            n *= s
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    clear = bytes(i & 0xBF for i in range(256))  # exponent < 16: finite, |x| < 2
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = off
        while left:
            n = min(left, 1 << 24)
            b = bytearray(rng.randbytes(n))
            b[1::2] = bytes(b[1::2]).translate(clear)
            f.write(b)
            left -= n
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": layers, "num_attention_heads": H,
           "num_key_value_heads": H, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
