#!/usr/bin/python3
"""Exports a small random GPT-2-shaped decoder with Debian's torch.onnx (plain ops, anonymous
initializer names as torch.onnx gives them), for tests/test_onnx_recover.sh: the plain-op pattern
recovery on a graph that spells LayerNorm as LayerNormalization (opset 17) and the causal mask as a
registered lower-triangular buffer, with an explicit untied head.

  make_torch_gpt2.py OUT.onnx [--gelu tanh|erf] [--opset N] [--vocab V] [--positions P]

(--vocab 559 --positions 128: room for rope-probe's tokenizer and a short passkey probe.)
"""
import argparse
import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d, h, ff, n_pos, gelu):
        super().__init__()
        self.h, self.dh = h, d // h
        self.ln_1, self.ln_2 = nn.LayerNorm(d, eps=1e-5), nn.LayerNorm(d, eps=1e-5)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, ff), nn.Linear(ff, d)
        self.gelu = nn.GELU(approximate=gelu)
        self.register_buffer("bias", torch.tril(torch.ones(n_pos, n_pos)).view(1, 1, n_pos, n_pos))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, self.dh).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
        s = s.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.c_proj(a)
        return x + self.proj(self.gelu(self.fc(self.ln_2(x))))


class Model(nn.Module):
    def __init__(self, vocab=50, d=16, h=2, ff=40, layers=2, n_pos=32, gelu="tanh"):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_pos, d)
        self.blocks = nn.ModuleList(Block(d, h, ff, n_pos, gelu) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d, eps=1e-5), nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gelu", default="tanh", choices=["tanh", "none"])
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--vocab", type=int, default=50)
    ap.add_argument("--positions", type=int, default=32)
    a = ap.parse_args()
    torch.manual_seed(5)
    m = Model(vocab=a.vocab, n_pos=a.positions, gelu=a.gelu).eval()
    with torch.no_grad():
        for p in m.parameters():  # large enough that attention depends on content and position
            p.normal_(0, 0.5 if p.dim() > 1 else 0.1)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    torch.onnx.export(m, (ids,), a.out, input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                      opset_version=a.opset)


if __name__ == "__main__":
    main()
