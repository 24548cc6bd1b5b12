#!/usr/bin/env python3
"""llama.cpp's logits (tests/gguf/llamacpp_run.mjs output) against the engine's on the same GGUF and
prompt: max |diff| <= 1e-4 x max |engine logit| (SiLU and RMSNorm in f32; --tol R for R x instead,
as GELU families need for ggml's f16 GELU table), and with a generate file, llama.cpp's greedy
tokens a prefix of the engine's (ending at EOS id 1 or at 20 tokens).
usage: llamacpp_compare.py [--tol R] NAME LC_JSON ENGINE_LOGITS_BIN ROWS VOCAB [ENGINE_GREEDY_TXT]
Prints one line with the difference; exits nonzero (an assertion) when they differ."""
import json
import sys

import numpy as np


def main():
    args, tol = sys.argv[1:], 1e-4
    if args[:1] == ["--tol"]:
        tol, args = float(args[1]), args[2:]
    name, lc_json, engine_bin, rows, vocab = args[:5]
    res = json.load(open(lc_json))
    lc = np.array(res["logits"], np.float64)
    e = np.fromfile(engine_bin, "<f4").reshape(int(rows), -1)
    d, scale = np.abs(lc - e).max(), np.abs(e).max()
    assert lc.shape == (int(rows), int(vocab)) and d <= tol * scale, (d, scale)
    what = ""
    if len(args) > 5:
        eng, n = [int(x) for x in open(args[5]).read().strip().split(",")], len(res["greedy"])
        assert n > 0 and res["greedy"] == eng[:n] and (n == 20 or eng[n] == 1), (res["greedy"], eng)
        what = "; greedy tokens equal"
    print(f"llama.cpp {name} == engine: max |diff| {d:.2e} ({d / scale:.1e} of {scale:.1f}){what}")


if __name__ == "__main__":
    main()
