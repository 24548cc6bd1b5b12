"""A probe model folder (examples/probe-models/<name>/, v2/<name>/) as the batched float32 modules
of nets (training, evaluation) or as a torchref model (the float64 reference), and each probe's
patch (the card's; lab/evaluate.py's t5 "pmax" is the tau it aligns per length)."""
import json
import os

import torch

from ctxpatch_ref import nets, stio
from ctxpatch_ref.torchref import models as M
from ctxpatch_ref.torchref import rules as R

PATCH = {
    "alibi-probe": {"alibi_scale": {"mode": "dynamic"}},
    "rope-probe": {"lambda_mask": {"n_global": 10, "n_local": 256}},
    "fire-probe": None,
    "t5-probe": "pmax",
}


def load(mdir):
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    _, sd = stio.read_safetensors(os.path.join(mdir, "model.safetensors"))
    return cfg, sd


def fast_net(name, cfg, sd, dev):
    if name == "t5-probe":
        n = nets.T5Net(cfg, 0)
    elif name == "alibi-probe":
        n = nets.BloomNet(cfg, 0)
    else:
        n = nets.LlamaNet(cfg, 0, "rope" if name == "rope-probe" else "fire")
    n.p = {}
    n.load(sd)
    return n.to(dev)


def ref_model(name, cfg, sd):
    """A torchref model object carrying the trained tensors (attributes as its __init__ sets)."""
    if name == "t5-probe":
        m = M.T5.__new__(M.T5)
        m.V, m.D, m.H, m.dkv = cfg["vocab_size"], cfg["d_model"], cfg["num_heads"], cfg["d_kv"]
        m.L, m.nb, m.md = cfg["num_layers"], cfg["relative_attention_num_buckets"], cfg["relative_attention_max_distance"]
        m.gated, m.tied, m.eps = False, cfg["tie_word_embeddings"], cfg["layer_norm_epsilon"]
        m.facts = R.ModelFacts(True, m.L, m.L, None, "t5")
    elif name == "alibi-probe":
        m = M.Bloom.__new__(M.Bloom)
        m.V, m.D, m.H, m.L = cfg["vocab_size"], cfg["hidden_size"], cfg["n_head"], cfg["n_layer"]
        m.eps = cfg["layer_norm_epsilon"]
        m.facts = R.ModelFacts(False, 0, m.L, cfg["seq_length"], "alibi")
        m.slopes = R.bloom_slopes(m.H)
    else:
        m = M.Llama.__new__(M.Llama)
        m.pos = "rope" if name == "rope-probe" else "fire"
        m.V, m.D, m.H = cfg["vocab_size"], cfg["hidden_size"], cfg["num_attention_heads"]
        m.Hkv, m.L = cfg["num_key_value_heads"], cfg["num_hidden_layers"]
        m.dh = m.D // m.H
        m.eps, m.theta, m.rope_factor = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0), 1.0
        m.tied, m.fire_shared = False, False
        m.fire_layers = cfg.get("fire_mlp_layers", 1)   # 2: the paper's MLP (docs/fire-layout.md)
        m.facts = R.ModelFacts(False, 0, m.L, cfg["max_position_embeddings"], m.pos)
    m.name, m.config, m.storage = name, cfg, torch.float32
    m.finish(dict(sd))
    return m
