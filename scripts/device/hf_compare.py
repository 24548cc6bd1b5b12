#!/usr/bin/env python3
"""Hugging Face transformers itself against `ctxpatch forward` (issue 32, step 3 of the kit).

Loads each model folder with AutoModelForCausalLM / T5ForConditionalGeneration (float32, eager
attention, on the CPU so no TF32 or fused kernel differs from the reference arithmetic), runs the
same ids through `ctxpatch forward --device cpu`, and reports max|a - b| / max|b| per folder.
The folders are the project's tiny models and ctxpatch artifacts made from them (a RoPE-scaling
config, a baked temperature): what transformers executes of a patch is what ships. Saves
transformers' logits and ids as goldens to --save (one .npz: the repo can keep them).
Prints one JSON object (the device report's step); exit 1 when a folder differs beyond 1e-4.

    hf_compare.py --bin BUNDLE/bin/ctxpatch --save OUT/hf-goldens.npz NAME=FOLDER ...
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TOL = 1e-4


def ids_for(vocab, n, salt=0):
    return [(7 * i + 3 + salt) % vocab for i in range(n)]


def hf_logits(folder, ids, dec):
    import torch
    import transformers
    cfg = transformers.AutoConfig.from_pretrained(folder)
    kw = dict(torch_dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        if cfg.model_type == "t5":
            m = transformers.T5ForConditionalGeneration.from_pretrained(folder, **kw).eval()
            out = m(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([dec])).logits
        else:
            m = transformers.AutoModelForCausalLM.from_pretrained(folder, **kw).eval()
            out = m(input_ids=torch.tensor([ids])).logits
    return out[0].double().numpy(), cfg


def ctxpatch_logits(binary, folder, ids, dec, shape, tmp):
    import numpy as np
    out = os.path.join(tmp, "logits.f32")
    cmd = [binary, "forward", folder, "--ids", ",".join(map(str, ids)), "--device", "cpu", "--out", out]
    if dec:
        cmd += ["--decoder-ids", ",".join(map(str, dec))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode:
        raise RuntimeError((p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1])
    return np.fromfile(out, dtype=np.float32).reshape(shape).astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--save", default="")
    ap.add_argument("--tokens", type=int, default=41)
    ap.add_argument("folders", nargs="+", help="NAME=FOLDER")
    args = ap.parse_args()
    try:
        import numpy as np
        import torch
        import transformers
    except ImportError as e:
        print(json.dumps({"status": "skipped", "reason": "transformers or torch not importable: %s" % e}))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, goldens, failed = [], {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.folders:
            name, folder = spec.split("=", 1)
            row = {"name": name}
            try:
                cfg = transformers.AutoConfig.from_pretrained(folder)
                ids = ids_for(cfg.vocab_size, args.tokens)
                dec = ids_for(cfg.vocab_size, 9, 5) if cfg.model_type == "t5" else []
                want, _ = hf_logits(folder, ids, dec)
                got = ctxpatch_logits(args.bin, folder, ids, dec, want.shape, tmp)
                row["rel_err"] = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
                row["ok"] = row["rel_err"] <= TOL
                goldens[name + "/ids"] = np.array(ids, dtype=np.int64)
                if dec:
                    goldens[name + "/decoder_ids"] = np.array(dec, dtype=np.int64)
                goldens[name + "/logits"] = want.astype(np.float32)
            except Exception as e:  # a folder transformers cannot load is a finding, not a crash
                row["ok"], row["error"] = False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])
            failed += 0 if row["ok"] else 1
            rows.append(row)
    if args.save and goldens:
        np.savez_compressed(args.save, **goldens)
    print(json.dumps({"status": "fail" if failed else "pass", "transformers": transformers.__version__,
                      "torch": torch.__version__, "tolerance": TOL, "rows": rows}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
