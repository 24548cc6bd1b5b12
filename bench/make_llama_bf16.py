#!/usr/bin/python3
"""Writes a synthetic Llama-shaped BF16 (or F16) checkpoint (config.json + model.safetensors, random
normal weights of standard deviation 0.02, RMSNorm weights 1) for bench/bench_bigw.sh, with numpy
only.

usage: make_llama_bf16.py OUTDIR {1b,7b,mid,tiny-256k,llama3.2-1b,tiny-llama3,llama3.2-1b-2k,...}
                          [SEED [bf16|f16]]
  1b         TinyLlama-1.1B's shape: d_model 2048, d_ff 5632, 22 layers, 32 heads (4 KV), vocab
             32000: 1.10e9 parameters, 2.2 GB
  7b         Llama-2-7B's shape: d_model 4096, d_ff 11008, 32 layers, 32 heads, vocab 32000:
             6.74e9 parameters, 13.5 GB
  mid        d_model 2048, d_ff 5632, 4 layers, 32 heads (4 KV), vocab 32000: 3.1e8 parameters,
             0.6 GB (the 16-bit kernels' bench: 1B's matrices, fewer of them)
  tiny-256k  d_model 64, 2 layers, vocab 256000: the logits-buffer check (32K-256K vocabularies)
  llama3.2-1b  Llama 3.2 1B's shape (issues 31, 32, 34): d_model 2048, d_ff 8192, 16 layers, 32 heads
             (8 KV), vocab 128256, tied head, rope_theta 500000, llama3 RoPE scaling x32 from 8192:
             1.24e9 parameters, 2.5 GB
  tiny-llama3  the same config with d_model 64, d_ff 256, 2 layers, 4 heads (2 KV): the dry run of
             the device kit's big-model step
  llama3.2-1b-2k  Llama 3.2 1B's shape trained at 2K (issue 34's time to certificate): as
             llama3.2-1b with max_position_embeddings 2048 and no rope_scaling
  llama3.2-1b-2k-1l  one layer of it (and its embedding, the tied head): a layer's cost per token
  micro-llama3-2k  d_model 32, d_ff 64, 1 layer, 1 head, the same vocabulary, at 2K: the same
             tokenizer, lengths and prompts as llama3.2-1b-2k at almost no cost, so the same work
             counts when the verdicts stop alike
Tensors are written one at a time, so the script needs memory for the largest one only.
"""
import json
import os
import struct
import sys

import numpy as np

SHAPES = {
    "1b": dict(D=2048, F=5632, L=22, H=32, Hkv=4, V=32000, ctx=2048),
    "7b": dict(D=4096, F=11008, L=32, H=32, Hkv=32, V=32000, ctx=4096),
    "mid": dict(D=2048, F=5632, L=4, H=32, Hkv=4, V=32000, ctx=2048),
    "tiny-256k": dict(D=64, F=256, L=2, H=4, Hkv=4, V=256000, ctx=32768),
    "llama3.2-1b": dict(D=2048, F=8192, L=16, H=32, Hkv=8, V=128256, ctx=131072, llama3=True),
    "tiny-llama3": dict(D=64, F=256, L=2, H=4, Hkv=2, V=128256, ctx=131072, llama3=True),
    "llama3.2-1b-2k": dict(D=2048, F=8192, L=16, H=32, Hkv=8, V=128256, ctx=2048, llama3=True, scaling=False),
    "llama3.2-1b-2k-1l": dict(D=2048, F=8192, L=1, H=32, Hkv=8, V=128256, ctx=2048, llama3=True, scaling=False),
    "micro-llama3-2k": dict(D=32, F=64, L=1, H=1, Hkv=1, V=128256, ctx=2048, llama3=True, scaling=False),
}


def tensors(s):
    D, F, V, dh = s["D"], s["F"], s["V"], s["D"] // s["H"]
    kv = s["Hkv"] * dh
    yield "model.embed_tokens.weight", (V, D), "normal"
    for i in range(s["L"]):
        p = "model.layers.%d." % i
        yield p + "input_layernorm.weight", (D,), "ones"
        yield p + "self_attn.q_proj.weight", (D, D), "normal"
        yield p + "self_attn.k_proj.weight", (kv, D), "normal"
        yield p + "self_attn.v_proj.weight", (kv, D), "normal"
        yield p + "self_attn.o_proj.weight", (D, D), "normal"
        yield p + "post_attention_layernorm.weight", (D,), "ones"
        yield p + "mlp.gate_proj.weight", (F, D), "normal"
        yield p + "mlp.up_proj.weight", (F, D), "normal"
        yield p + "mlp.down_proj.weight", (D, F), "normal"
    yield "model.norm.weight", (D,), "ones"
    if not s.get("llama3"):  # Llama 3.2's head is tied to the embedding
        yield "lm_head.weight", (V, D), "normal"


def bf16(x):
    """float32 -> bfloat16 bits, rounded to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def f16(x):
    return x.astype("<f2").view("<u2")


def main():
    out, preset = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    dtype = sys.argv[4] if len(sys.argv) > 4 else "bf16"
    enc = {"bf16": bf16, "f16": f16}[dtype]
    s = SHAPES[preset]
    header, off = {}, 0
    for name, shape, _ in tensors(s):
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": dtype.upper(), "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, kind in tensors(s):
            n = int(np.prod(shape))
            if kind == "ones":
                f.write(enc(np.ones(n, np.float32)).tobytes())
                continue
            for at in range(0, n, 1 << 26):  # 64M elements at a time
                m = min(n - at, 1 << 26)
                f.write(enc(rng.standard_normal(m, dtype=np.float32) * 0.02).tobytes())
    os.replace(path + ".tmp", path)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": s["V"],
           "hidden_size": s["D"], "intermediate_size": s["F"], "num_hidden_layers": s["L"],
           "num_attention_heads": s["H"], "num_key_value_heads": s["Hkv"],
           "max_position_embeddings": s["ctx"], "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": {"bf16": "bfloat16", "f16": "float16"}[dtype],
           "bos_token_id": 1, "eos_token_id": 2}
    if s.get("llama3"):  # Llama 3.2 1B's config.json values
        cfg.update({"tie_word_embeddings": True, "rope_theta": 500000.0, "bos_token_id": 128000,
                    "eos_token_id": 128001, "head_dim": s["D"] // s["H"]})
        if s.get("scaling", True):  # the 2K presets stand for a model trained at 2K: no extension
            cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
