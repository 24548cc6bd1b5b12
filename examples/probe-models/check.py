#!/usr/bin/env python3
"""Checks a probe model and writes its golden logits.

    scripts/py examples/probe-models/check.py --model NAME [--golden] [--hf]

1. torchref (python/ctxpatch_ref/torchref, float64) and nets.py (float32, the training/evaluation
   modules) give the same logits on the saved weights (max|a-b|/max|b| <= 1e-4), without a rule
   and with the card's patch.
2. --golden: writes <model>/golden/{ids.txt,decoder_ids.txt,logits.f32,meta.json}: one ~64-token
   passkey prompt from data.py, and torchref's float32 logits of every position of the last stack
   ([T, V] row-major little-endian) -- what `ctxpatch forward` must reproduce.
3. --hf: if Hugging Face transformers / tokenizers are importable, the checkpoint loads with
   from_pretrained and its logits match; tokenizers' encoding of the data equals bpe.py's.
"""
import argparse
import json
import os
import random

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

from ctxpatch_ref import bpe, data, stio
from ctxpatch_ref import probes as E


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def golden_prompt(tok):
    s = data.passkey(random.Random(7), 64, tok.encode, depth=0.5, key=68132)
    return tok.encode(s["prompt"]), [0] + tok.encode(s["answer"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--golden", action="store_true")
    ap.add_argument("--hf", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    mdir = a.dir or os.path.join(HERE, a.model)
    tok = bpe.Tokenizer(os.path.join(mdir, "tokenizer.json"))
    cfg, sd = E.load(mdir)
    fast = E.fast_net(a.model, cfg, sd, "cpu")
    ref = E.ref_model(a.model, cfg, sd)
    ids, dec = golden_prompt(tok)
    patch = E.PATCH[a.model]
    rules = [{}]
    if patch == "pmax":
        rules.append({"temperature": 0.8})
    elif patch:
        rules.append(patch)
    worst = 0.0
    with torch.no_grad():
        for rule in rules:
            for T in (len(ids), 600):        # 600 > 256 so that the patches act
                x = ids if T == len(ids) else tok.encode(data.passkey(random.Random(3), T, tok.encode)["prompt"])
                if a.model == "t5-probe":
                    r, _ = ref.forward(torch.tensor(x), rule, torch.tensor(dec))
                    xx = torch.tensor([x])
                    km = torch.ones_like(xx, dtype=torch.bool)
                    f = fast.decode(fast.encode(xx, km, rule), km, torch.tensor([dec]))[0]
                else:
                    r, _ = ref.forward(torch.tensor(x), rule)
                    f = fast.forward(torch.tensor([x]), rule)[0]
                e = rel(f.double(), r)
                worst = max(worst, e)
                print("%s rule=%s T=%d: nets vs torchref rel err %.2e" % (a.model, json.dumps(rule), len(x), e))
    assert worst <= 1e-4, worst
    if a.golden:
        with torch.no_grad():
            if a.model == "t5-probe":
                r, _ = ref.forward(torch.tensor(ids), {}, torch.tensor(dec))
            else:
                r, _ = ref.forward(torch.tensor(ids), {})
        g = os.path.join(mdir, "golden")
        os.makedirs(g, exist_ok=True)
        stio.write_atomic(os.path.join(g, "ids.txt"), (",".join(map(str, ids)) + "\n").encode())
        if a.model == "t5-probe":
            stio.write_atomic(os.path.join(g, "decoder_ids.txt"), (",".join(map(str, dec)) + "\n").encode())
        stio.write_atomic(os.path.join(g, "logits.f32"), stio.tensor_bytes(r.float()))
        meta = {"rows": r.shape[0], "vocab": r.shape[1], "dtype": "F32", "rule": None,
                "generator": "examples/probe-models/check.py --golden (torchref float64, rounded)",
                "argmax_last": int(r[-1].argmax())}
        stio.write_atomic(os.path.join(g, "meta.json"), stio.json_bytes(meta))
        print("wrote %s" % g)
    if a.hf:
        hf_check(a.model, mdir, tok, fast, ids, dec)


def hf_check(name, mdir, tok, fast, ids, dec):
    try:
        import tokenizers
        t = tokenizers.Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
        n = 0
        for s in data.corpus(5, 100):
            assert t.encode(s).ids == tok.encode(s), s[:80]
            assert t.decode(tok.encode(s)) == s
            n += 1
        print("HF tokenizers %s agrees with bpe.py on %d texts" % (tokenizers.__version__, n))
    except ImportError:
        print("HF tokenizers not importable: skipped")
    if name == "fire-probe":
        return
    try:
        import transformers
    except ImportError:
        print("transformers not importable: skipped")
        return
    m = transformers.AutoModelForSeq2SeqLM.from_pretrained(mdir, torch_dtype=torch.float32) if name == "t5-probe" \
        else transformers.AutoModelForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32)
    m = m.eval().cpu()
    with torch.no_grad():
        if name == "t5-probe":
            hf = m(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([dec])).logits[0]
            xx = torch.tensor([ids])
            km = torch.ones_like(xx, dtype=torch.bool)
            f = fast.decode(fast.encode(xx, km), km, torch.tensor([dec]))[0]
        else:
            hf = m(input_ids=torch.tensor([ids])).logits[0]
            f = fast.forward(torch.tensor([ids]))[0]
    e = rel(f.double(), hf.double())
    print("HF transformers %s %s vs nets rel err %.2e" % (transformers.__version__, type(m).__name__, e))
    assert e <= 1e-4


if __name__ == "__main__":
    main()
