#!/usr/bin/python3
"""Exports a Llama checkpoint folder (config.json + model.safetensors) with Debian's torch.onnx as
a plain-op graph (no contrib ops, anonymous initializer names such as `onnx::MatMul_123`, no
ctxpatch metadata): what a third party's export of a Llama looks like, for
tests/test_onnx_recover_llama.sh.

The module is Hugging Face's LlamaForCausalLM forward (modeling_llama.py, eager attention) in
float32 with python/ctxpatch_ref/torchref's building blocks: RMSNorm as pow/mean/rsqrt, q/k/v/o and
the MLP as bias-free Linear (MatMul with the weight stored transposed), rotate-half RoPE, GQA by
repeat_kv (Expand + Reshape), the causal mask as Trilu of a lowest-float matrix added to the
scores, SiLU as x * sigmoid(x). Two RoPE spellings:
  --rope inv_freq  (transformers >= 4.38) cos/sin computed in the graph from the inv_freq buffer
                   and position_ids (MatMul, Concat, Cos, Sin)
  --rope cache     (transformers 4.30) cos_cached/sin_cached buffers [1, 1, P, d_head] sliced
                   to the sequence and gathered by position_ids
Inputs input_ids, attention_mask (unused by the causal core but declared, as HF's are) and
position_ids, all int64 [batch, seq]; output logits [batch, seq, vocab].

  make_torch_llama.py MODEL_DIR OUT.onnx [--rope inv_freq|cache] [--check]

--check also runs the module in float64 against torchref's Llama forward (identity rule) and
prints the max relative difference.
"""
import argparse
import json
import math
import os
import sys

import torch
from torch import nn

from ctxpatch_ref import stio
from ctxpatch_ref.torchref import models as M


class RMSNorm(nn.Module):
    def __init__(self, w, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(w), eps

    def forward(self, x):  # LlamaRMSNorm
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def lin(w):
    m = nn.Linear(w.shape[1], w.shape[0], bias=False)
    m.weight = nn.Parameter(w)
    return m


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Rotary(nn.Module):
    def __init__(self, dh, theta, max_pos, style):
        super().__init__()
        self.style = style
        inv_freq = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.int64).float() / dh))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        if style == "cache":
            t = torch.arange(max_pos, dtype=torch.float32)
            emb = torch.cat((torch.outer(t, inv_freq),) * 2, dim=-1)
            self.register_buffer("cos_cached", emb.cos()[None, None], persistent=False)
            self.register_buffer("sin_cached", emb.sin()[None, None], persistent=False)

    def forward(self, x, position_ids):
        """cos, sin [batch, 1, seq, dh]"""
        if self.style == "cache":  # 4.30: cached[:, :, :seq] then [position_ids]
            T = x.shape[2]
            cos = self.cos_cached[:, :, :T].squeeze(1).squeeze(0)[position_ids].unsqueeze(1)
            sin = self.sin_cached[:, :, :T].squeeze(1).squeeze(0)[position_ids].unsqueeze(1)
            return cos, sin
        f = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1) @ position_ids[:, None, :].to(self.inv_freq.dtype)
        emb = torch.cat((f.transpose(1, 2),) * 2, dim=-1)
        return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)


class Layer(nn.Module):
    def __init__(self, t, p, cfg):
        super().__init__()
        self.H, self.Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.dh = cfg["hidden_size"] // self.H
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(t[p + "input_layernorm.weight"], eps)
        self.post_attention_layernorm = RMSNorm(t[p + "post_attention_layernorm.weight"], eps)
        for n in ("q", "k", "v", "o"):
            setattr(self, n + "_proj", lin(t[p + "self_attn.%s_proj.weight" % n]))
        for n in ("gate", "up", "down"):
            setattr(self, n + "_proj", lin(t[p + "mlp.%s_proj.weight" % n]))

    def attn(self, x, cos, sin, mask):
        b, T, _ = x.shape
        q = self.q_proj(x).view(b, T, self.H, self.dh).transpose(1, 2)
        k = self.k_proj(x).view(b, T, self.Hkv, self.dh).transpose(1, 2)
        v = self.v_proj(x).view(b, T, self.Hkv, self.dh).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.H // self.Hkv
        if rep > 1:  # repeat_kv
            k = k[:, :, None].expand(b, self.Hkv, rep, T, self.dh).reshape(b, self.H, T, self.dh)
            v = v[:, :, None].expand(b, self.Hkv, rep, T, self.dh).reshape(b, self.H, T, self.dh)
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.dh) + mask
        a = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v
        return self.o_proj(a.transpose(1, 2).reshape(b, T, self.H * self.dh))

    def forward(self, h, cos, sin, mask):
        h = h + self.attn(self.input_layernorm(h), cos, sin, mask)
        x = self.post_attention_layernorm(h)
        g = self.gate_proj(x)
        return h + self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class Llama(nn.Module):
    def __init__(self, t, cfg, rope):
        super().__init__()
        L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
        self.embed_tokens = nn.Embedding.from_pretrained(t["model.embed_tokens.weight"], freeze=False)
        self.layers = nn.ModuleList(Layer(t, "model.layers.%d." % l, cfg) for l in range(L))
        self.norm = RMSNorm(t["model.norm.weight"], cfg["rms_norm_eps"])
        head = t["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else t["lm_head.weight"]
        self.lm_head = lin(head.clone())
        self.rotary = Rotary(cfg["hidden_size"] // H, cfg.get("rope_theta", 10000.0),
                             cfg["max_position_embeddings"], rope)

    def forward(self, input_ids, attention_mask, position_ids):
        h = self.embed_tokens(input_ids)
        T = input_ids.shape[1]
        mask = torch.triu(torch.full((T, T), torch.finfo(h.dtype).min, dtype=h.dtype), diagonal=1)[None, None]
        cos, sin = self.rotary(h[:, None], position_ids)
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.lm_head(self.norm(h))


def load(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    if cfg.get("model_type") != "llama" or cfg.get("rope_scaling"):
        sys.exit("make_torch_llama: %s: a llama without rope_scaling is needed" % model_dir)
    _, t = stio.read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return cfg, {k: v.to(torch.float32) for k, v in t.items()}


def check(cfg, t, m):
    """The module in float64 against torchref's Llama (identity rule) on the same weights."""
    ref = M.Llama("check", 0, n_layers=cfg["num_hidden_layers"], n_heads=cfg["num_attention_heads"],
                  n_kv=cfg["num_key_value_heads"], D=cfg["hidden_size"], dff=cfg["intermediate_size"],
                  V=cfg["vocab_size"], train_len=cfg["max_position_embeddings"],
                  tied=bool(cfg.get("tie_word_embeddings")))
    ref.eps, ref.theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    ref.finish({k: v for k, v in t.items()})
    T = min(40, cfg["max_position_embeddings"])
    ids = [(i * 37 + 5) % cfg["vocab_size"] for i in range(T)]
    want, _ = ref.forward(ids, {})
    m64 = m.double()
    x = torch.tensor([ids])
    got = m64(x, torch.ones_like(x), torch.arange(T)[None])[0]
    m.float()
    d = float((got - want).abs().max() / want.abs().max())
    print("module (float64) vs torchref Llama: max|a-b|/max|b| %.3g" % d)
    if d > 1e-6:  # inv_freq is a float32 buffer, as HF keeps it; torchref's is float64
        sys.exit("make_torch_llama: the module disagrees with torchref")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--rope", default="inv_freq", choices=["inv_freq", "cache"])
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    cfg, t = load(a.model_dir)
    m = Llama(t, cfg, a.rope).eval()
    if a.check:
        with torch.no_grad():
            check(cfg, t, m)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with torch.no_grad():
        torch.onnx.export(m, (ids, torch.ones_like(ids), torch.arange(8)[None]), a.out,
                          input_names=["input_ids", "attention_mask", "position_ids"], output_names=["logits"],
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                        ("input_ids", "attention_mask", "position_ids", "logits")},
                          opset_version=17)


if __name__ == "__main__":
    main()
