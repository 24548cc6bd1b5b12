#!/usr/bin/env python3
"""Bake exactness against the independent PyTorch reference (python/ctxpatch_ref/torchref, float64):
for each exact-weights patch of a golden tiny model, torchref's logits of the ORIGINAL weights
under the rule equal torchref's logits of the BAKED weights (`ctxpatch patch --no-verify`) with
no rule, within 1e-5 of the largest logit. So the weights alone carry the rule in a runtime that
shares no code with ctxpatch.

    scripts/py tests/cli_patch_torchref.py CTXPATCH_BIN SOURCE_DIR WORK_DIR
"""
import json
import os
import subprocess
import sys

import torch

binary, src, work = sys.argv[1:4]
from ctxpatch_ref import stio
from ctxpatch_ref.torchref import models as M

# The constructors tests/reference/make_engine_goldens.py made the golden models with; if they
# drifted from the files, the comparison below fails loudly (the baked side comes from the files).
CTORS = {
    "t5_relu": lambda: M.T5("t5_relu", 101, gated=False, tied=True, mix=3.0, emb_std=0.3, final_gain=3.0),
    "t5_gated": lambda: M.T5("t5_gated", 102, gated=True, tied=False, storage=torch.float16),
    "llama": lambda: M.Llama("llama", 401, pos="rope", n_layers=3),
    "gpt_neox": lambda: M.NeoX("gpt_neox", 501),
    "fire": lambda: M.Llama("fire", 601, pos="fire", n_layers=2, n_kv=2, fire_c=0.5, fire_L=20.0),
    "fire_shared": lambda: M.Llama("fire_shared", 602, pos="fire", n_layers=2, n_kv=4, fire_shared=True,
                                   fire_c=2.0, fire_L=18.0, tied=True, mix=3.0),
    "fire2": lambda: M.Llama("fire2", 603, pos="fire", n_layers=2, n_kv=2, fire_layers=2, fire_c=0.7, fire_L=22.0),
    "fire2_shared": lambda: M.Llama("fire2_shared", 604, pos="fire", n_layers=2, n_kv=4, fire_shared=True,
                                    fire_layers=2, fire_c=1.5, fire_L=16.0, tied=True, mix=3.0),
}

CASES = [
    ("t5_relu", ["--method", "temperature", "--tau", "0.7"], {"temperature": 0.7}),
    ("t5_relu", ["--method", "temperature", "--tau", "0.8", "--scope", "all"],
     {"temperature": 0.8, "temperature_scope": "all"}),
    ("t5_gated", ["--method", "temperature", "--tau", "0.5", "--scope", "self"],
     {"temperature": 0.5, "temperature_scope": "self"}),
    ("llama", ["--method", "temperature", "--tau", "0.7"], {"temperature": 0.7}),
    ("gpt_neox", ["--method", "temperature", "--tau", "0.75"], {"temperature": 0.75}),
    ("fire", ["--method", "temperature", "--tau", "0.6"], {"temperature": 0.6}),
    ("fire_shared", ["--method", "temperature", "--tau", "0.6"], {"temperature": 0.6}),
    ("fire", ["--method", "fire-threshold", "--threshold", "6"], {"fire_threshold": 6}),
    ("fire_shared", ["--method", "fire-threshold", "--threshold", "5"], {"fire_threshold": 5}),
    # two hidden layers (the paper's): the output layer is mlp.4
    ("fire2", ["--method", "temperature", "--tau", "0.6"], {"temperature": 0.6}),
    ("fire2_shared", ["--method", "temperature", "--tau", "0.7"], {"temperature": 0.7}),
    ("fire2", ["--method", "fire-threshold", "--threshold", "7"], {"fire_threshold": 7}),
]

torch.manual_seed(0)
failed = 0
for i, (name, args, rule) in enumerate(CASES):
    out = os.path.join(work, "torchref_case%d" % i)
    subprocess.run([binary, "patch", os.path.join(src, "tests/goldens/engine/models", name), out] + args +
                   ["--no-verify"], check=True, stdout=subprocess.DEVNULL)
    meta, tensors = stio.read_safetensors(os.path.join(out, "model.safetensors"))
    block = json.loads(meta["ctxpatch"])
    ref = CTORS[name]()
    ids = torch.randint(0, ref.V if hasattr(ref, "V") else 96, (12,))
    dec = torch.tensor([0, 5, 7, 3])
    with torch.no_grad():
        if name.startswith("t5"):
            want, _ = ref.forward(ids, rule, dec)
            base, _ = ref.forward(ids, {}, dec)
        else:
            want, _ = ref.forward(ids, rule)
            base, _ = ref.forward(ids, {})
        ref.finish(tensors)  # the baked weights, same names
        got, _ = (ref.forward(ids, {}, dec) if name.startswith("t5") else ref.forward(ids, {}))
    err = float((got - want).abs().max() / want.abs().max())
    moved = float((base - want).abs().max() / want.abs().max())
    ok = block["fidelity"] == "exact-weights" and block["rule"] == {} and err <= 1e-5 and moved > 1e-4
    print("%-12s %-55s fidelity %s: baked vs rule %.2e (rule moves logits by %.2e) %s" %
          (name, json.dumps(rule), block["fidelity"], err, moved, "ok" if ok else "FAIL"))
    failed += not ok
sys.exit(1 if failed else 0)
