#!/usr/bin/env python3
"""Writes examples/tiny-llama: a tiny random Llama-layout checkpoint saved by torch.save (zip
format) with an HF config.json -- the bundled default input of the README's main command until
the trained probe models exist. Deterministic (seed 0). Run with Debian's python3 (torch)."""
import json
import os

import torch

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-llama")
cfg = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def main():
    torch.manual_seed(0)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = d // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    sd = {"model.embed_tokens.weight": torch.randn(v, d) * 0.02}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = torch.ones(d)
        sd[p + "self_attn.q_proj.weight"] = torch.randn(d, d) * 0.05
        sd[p + "self_attn.k_proj.weight"] = torch.randn(kv, d) * 0.05
        sd[p + "self_attn.v_proj.weight"] = torch.randn(kv, d) * 0.05
        sd[p + "self_attn.o_proj.weight"] = torch.randn(d, d) * 0.05
        sd[p + "post_attention_layernorm.weight"] = torch.ones(d)
        sd[p + "mlp.gate_proj.weight"] = torch.randn(f, d) * 0.05
        sd[p + "mlp.up_proj.weight"] = torch.randn(f, d) * 0.05
        sd[p + "mlp.down_proj.weight"] = torch.randn(d, f) * 0.05
    sd["model.norm.weight"] = torch.ones(d)
    sd["lm_head.weight"] = torch.randn(v, d) * 0.02
    os.makedirs(HERE, exist_ok=True)
    torch.save(sd, os.path.join(HERE, "pytorch_model.bin"))
    with open(os.path.join(HERE, "config.json"), "w") as fp:
        json.dump(cfg, fp, indent=2)
        fp.write("\n")


if __name__ == "__main__":
    main()
