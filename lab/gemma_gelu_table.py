#!/usr/bin/env python3
"""How much of llama.cpp's distance from the engine on a Gemma or StarCoder2 GGUF is ggml's f16 GELU table
(ggml-cpu/vec.h ggml_vec_geglu_f32 under GGML_GELU_FP16: gelu(x) looked up at fp16(x), the entry
stored as fp16; 0 at x <= -10, x at x >= 10). Runs the PyTorch reference (float64) of a Gemma /
Gemma 2 / StarCoder2 folder (no window) twice, with the tanh GELU and with the table, and prints both against llama.cpp's
logits (tests/gguf/llamacpp_run.mjs JSON) and the engine's (ctxpatch forward --out).
usage: scripts/py lab/gemma_gelu_table.py FOLDER LLAMACPP_JSON ENGINE_BIN PROMPT_IDS(comma)"""
import json
import math
import sys

import numpy as np
import torch

from ctxpatch_ref.torchref import models as M
from ctxpatch_ref.torchref import rules as R


TANH_GELU = M.gelu_tanh


def gelu_table(x):
    y = TANH_GELU(x.to(torch.float16).to(torch.float64)).to(torch.float16).to(torch.float64)
    return torch.where(x <= -10, torch.zeros_like(x), torch.where(x >= 10, x, y))


def load(folder):
    cfg = json.load(open(f"{folder}/config.json"))
    raw = open(f"{folder}/model.safetensors", "rb").read()
    n = int.from_bytes(raw[:8], "little")
    hdr = json.loads(raw[8:8 + n])
    w = {k: torch.from_numpy(np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4")
                             .reshape(e["shape"]).astype(np.float64)) for k, e in hdr.items() if k != "__metadata__"}
    if cfg["model_type"] == "starcoder2":
        return load_starcoder2(cfg, w)
    m = M.Gemma.__new__(M.Gemma)
    g2 = cfg["model_type"] == "gemma2"
    m.w, m.gemma2, m.eps, m.theta = w, g2, cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    m.V, m.D, m.H, m.Hkv, m.L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_attention_heads"], \
        cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    m.dh = cfg["head_dim"]
    m.c = (cfg["query_pre_attn_scalar"] if g2 else m.dh) ** -0.5
    m.attn_cap = cfg.get("attn_logit_softcapping") if g2 else None
    m.final_cap = cfg.get("final_logit_softcapping") if g2 else None
    m.windows = [cfg["sliding_window"] if g2 and l % 2 == 0 else None for l in range(m.L)]
    m.facts = R.ModelFacts(False, 0, m.L, cfg["max_position_embeddings"], "rope")
    return m


def load_starcoder2(cfg, w):
    """torchref's Starcoder2 on the folder's weights (use_bias true, no sliding_window)."""
    m = M.Starcoder2.__new__(M.Starcoder2)
    m.w, m.window, m.eps, m.theta = w, cfg.get("sliding_window"), cfg["norm_epsilon"], cfg.get("rope_theta", 10000.0)
    m.V, m.D, m.H, m.Hkv, m.L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_attention_heads"], \
        cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    m.dh, m.tied = m.D // m.H, cfg.get("tie_word_embeddings", True)
    m.facts = R.ModelFacts(False, 0, m.L, cfg["max_position_embeddings"], "rope")
    return m


def main():
    folder, lc_json, engine_bin, prompt = sys.argv[1:5]
    ids = [int(x) for x in prompt.split(",")]
    m = load(folder)
    lc = np.array(json.load(open(lc_json))["logits"], np.float64)
    eng = np.fromfile(engine_bin, "<f4").reshape(len(ids), -1).astype(np.float64)
    exact = m.forward(ids, {})[0].numpy()
    M.gelu_tanh, kept = gelu_table, M.gelu_tanh
    table = m.forward(ids, {})[0].numpy()
    M.gelu_tanh = kept
    scale = np.abs(exact).max()
    for name, a, b in (("engine - reference (tanh GELU)", eng, exact), ("llama.cpp - engine", lc, eng),
                       ("llama.cpp - reference (tanh GELU)", lc, exact),
                       ("llama.cpp - reference (f16 GELU table)", lc, table),
                       ("reference: table - tanh", table, exact)):
        d = np.abs(a - b).max()
        print(f"{name:40s} max |diff| {d:.2e} ({d / scale:.1e} of max |logit| {scale:.2f})")


if __name__ == "__main__":
    main()
