#!/usr/bin/python3
"""The layout Optimum and transformers.js users have, made from a torch.onnx GPT-2 graph
(tests/onnx/make_torch_gpt2.py): every initializer renamed to Hugging Face's GPT-2 name
(`transformer.wte.weight`, `transformer.h.0.attn.c_attn.weight` [in, out] as Conv1D keeps it,
...), the head dropped so that the graph outputs the final LayerNorm's hidden states as Optimum's
GPT2Model export does (`last_hidden_state`; the head is tied to `wte`), and a config.json beside
it. Issue 33 item 1: such a graph used to be read by its names alone, so a tampered copy
(tests/onnx/make_tampered.py) computed one thing in onnxruntime and was certified as another.

  make_hf_named.py TORCH_GPT2.onnx OUTDIR

Writes OUTDIR/model.onnx, OUTDIR/config.json and OUTDIR/ref/ (the same weights as a safetensors
checkpoint with the same config.json: `forward` on the graph must equal `forward` on it).
"""
import json
import os
import re
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ctxpatch_ref import stio

PARTS = {"ln_1": "ln_1", "ln_2": "ln_2", "c_attn": "attn.c_attn", "c_proj": "attn.c_proj", "fc": "mlp.c_fc",
         "proj": "mlp.c_proj"}


def main():
    src, out = sys.argv[1:3]
    m = onnx.load(src)
    g = m.graph
    users = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    # the head: the last MatMul, whose output is the graph's output; its input is the final norm's
    head = next(n for n in g.node if n.op_type == "MatMul" and n.output[0] == g.output[0].name)
    hidden = head.input[0]
    ren = {}
    for t in g.initializer:
        mm = re.fullmatch(r"blocks\.(\d+)\.(\w+)\.(weight|bias)", t.name)
        if t.name in ("wte.weight", "wpe.weight") or t.name.startswith("ln_f."):
            ren[t.name] = "transformer." + t.name
        elif mm:
            ren[t.name] = f"transformer.h.{mm.group(1)}.{PARTS[mm.group(2)]}.{mm.group(3)}"
        elif re.fullmatch(r"blocks\.(\d+)\.bias", t.name):  # the causal buffer, HF's attn.bias
            ren[t.name] = f"transformer.h.{t.name.split('.')[1]}.attn.bias"
        elif t.name.startswith("onnx::MatMul_"):
            user = users[t.name][0]
            if user is head:
                continue
            mm = re.fullmatch(r"/blocks\.(\d+)/(\w+)/MatMul", user.name)
            ren[t.name] = f"transformer.h.{mm.group(1)}.{PARTS[mm.group(2)]}.weight"  # [in, out]: Conv1D
    keep = [t for t in g.initializer if t.name in ren]
    for t in keep:
        t.name = ren[t.name]
    del g.initializer[:]
    g.initializer.extend(keep)
    for n in g.node:
        n.input[:] = [ren.get(i, i) for i in n.input]
    nodes = [n for n in g.node if n is not head]
    del g.node[:]
    g.node.extend(nodes)
    for n in g.node:
        n.output[:] = ["last_hidden_state" if o == hidden else o for o in n.output]
        n.input[:] = ["last_hidden_state" if i == hidden else i for i in n.input]
    d = next(t for t in g.initializer if t.name == "transformer.wte.weight").dims[1]
    g.output[0].name = "last_hidden_state"
    g.output[0].type.tensor_type.shape.dim[2].dim_value = d
    os.makedirs(os.path.join(out, "ref"), exist_ok=True)
    onnx.save(m, os.path.join(out, "model.onnx"))

    w = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    ln = next(n for n in g.node if n.op_type == "LayerNormalization")
    eps = next((a.f for a in ln.attribute if a.name == "epsilon"), 1e-5)
    heads = 2  # make_torch_gpt2.py's; the graph's Reshape into heads says the same (the recovery reads it)
    layers = len({k.split(".")[2] for k in w if k.startswith("transformer.h.")})
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": int(w["transformer.wte.weight"].shape[0]),
           "n_embd": int(d), "n_layer": layers, "n_head": heads,
           "n_positions": int(w["transformer.wpe.weight"].shape[0]),
           "n_inner": int(w["transformer.h.0.mlp.c_fc.weight"].shape[1]), "layer_norm_epsilon": float(np.float32(eps)),
           "activation_function": "gelu_new", "tie_word_embeddings": True}
    for p in (out, os.path.join(out, "ref")):
        with open(os.path.join(p, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    tensors = {k: torch.from_numpy(v.copy()) for k, v in sorted(w.items()) if not k.endswith(".attn.bias")}
    stio.write_atomic(os.path.join(out, "ref", "model.safetensors"), stio.safetensors_bytes(tensors))


if __name__ == "__main__":
    main()
