#!/usr/bin/env bash
# GGUF for llama.cpp's gpt2 architecture (issue #15), proven in llama.cpp (node-llama-cpp 3.22.1,
# tests/gguf/llamacpp_run.mjs, F32 K/V cache):
#   - a tiny random GPT-2 folder (tests/gguf/make_random_family.py gpt2: Conv1D matrices stored
#     [n_in, n_out], learned positions, tied head, the probe models' byte-level BPE) -> `convert
#     --to gguf`: llama.cpp's tensor names and order, every Conv1D matrix = numpy's transpose of the
#     HF tensor (convert_hf_to_gguf.py's GPT2Model), position_embd = wpe, no output.weight (tied),
#     gpt2.* keys, tokenizer.ggml.model gpt2 / pre gpt-2;
#   - the engine on the GGUF == on the HF folder; the engine goldens' GPT-2 (PyTorch logits,
#     tests/reference/make_engine_goldens.py) written as GGUF and run by `ctxpatch forward` gives
#     PyTorch's logits, and so does llama.cpp (its C API through tests/gguf/llamacpp_ctypes.py:
#     the file has no vocabulary, which node-llama-cpp refuses) to 1e-3 of the largest logit;
#   - GGUF -> safetensors (HF names, Conv1D layout: equal to the source folder) -> GGUF:
#     tensor-identical, gpt2.* keys equal;
#   - tau 1.3 (`patch --to gguf`, from the folder and from the GGUF): the q rows of attn_qkv are the
#     unpatched file's / 1.3, k and v rows bit-identical, both inputs give the same tensors;
#     lm-infinite is ctxpatch.* metadata applied by `ctxpatch forward`;
#   - llama.cpp's logits on a 300-token prompt == `ctxpatch forward` on the same file (unpatched and
#     tau 1.3) within 1e-3 of the largest logit (ggml's f16 GELU table), argmax equal where the
#     engine's top-2 margin exceeds twice the difference, greedy 20 tokens equal;
#   - refused: a GPT-2 with scale_attn_by_inverse_layer_idx (the goldens' gpt2_bin; llama.cpp's gpt2
#     scales every layer by 1/sqrt(dh)), nothing written; a gpt2 GGUF without gpt2.context_length
#     (the learned position table's size) when read.
# llama.cpp parts skip (the rest still runs) when node-llama-cpp is not in $CTXPATCH_NODE_MODULES;
# the test needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"
g2=$w/gpt2
check "$py" "$src/tests/gguf/make_random_family.py" "$g2" gpt2
check "$bin" convert "$g2" "$w/gpt2.gguf" --to gguf
prompt=$("$py" -c "import random; r=random.Random(7); print(','.join(['2']+[str(r.randrange(3,559)) for _ in range(299)]))")
fwd() { "$bin" forward "$1" --ids "$prompt" --out "$2" --threads 1 >/dev/null; }
check fwd "$g2" "$w/e_hf.bin"
check fwd "$w/gpt2.gguf" "$w/e_gpt2.bin"
check "$bin" convert "$w/gpt2.gguf" "$w/gpt2_sf" --to safetensors
check "$bin" convert "$w/gpt2_sf" "$w/gpt2_rt.gguf" --to gguf
nv="--no-verify"
check "$bin" patch "$g2" "$w/tp.gguf" --method temperature --tau 1.3 --to gguf $nv
check "$bin" patch "$w/gpt2.gguf" "$w/tp_g.gguf" --method temperature --tau 1.3 --to gguf $nv
check "$bin" patch "$g2" "$w/lm.gguf" --method lm-infinite --n-global 4 --n-local 64 --to gguf --for ctxpatch $nv
for f in tp lm; do check fwd "$w/$f.gguf" "$w/e_$f.bin"; done

"$py" - "$w" <<'PY' && ok || bad "GPT-2 GGUF names, layout, keys, round trip, patches"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
def st(folder, raw_bytes=False):
    raw = open(f"{folder}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
    get = lambda e: raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
    return {k: get(e) if raw_bytes else np.frombuffer(get(e), "<f4").reshape(e["shape"])
            for k, e in hdr.items() if k != "__metadata__"}
hf = st(f"{w}/gpt2")
_, kv, _, t, order = g.read(f"{w}/gpt2.gguf")
T = lambda n: g.f32(t[n])
L, D = 2, 64
want_order = ["token_embd.weight", "position_embd.weight"]
for l in range(L):
    want_order += [f"blk.{l}.{n}.{s}" for n in ("attn_norm", "attn_qkv", "attn_output", "ffn_norm", "ffn_up", "ffn_down")
                   for s in ("weight", "bias")]
want_order += ["output_norm.weight", "output_norm.bias"]  # tied: llama.cpp duplicates token_embd
assert order == want_order, order
keys = {"general.architecture": "gpt2", "gpt2.context_length": 512, "gpt2.embedding_length": 64,
        "gpt2.block_count": 2, "gpt2.feed_forward_length": 256, "gpt2.attention.head_count": 4,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2"}
assert all(kv[k] == v for k, v in keys.items()), {k: kv.get(k) for k in keys}
assert abs(kv["gpt2.attention.layer_norm_epsilon"] - 1e-5) < 1e-9
p = "transformer."
assert np.array_equal(T("token_embd.weight").reshape(-1), hf[p + "wte.weight"].reshape(-1))
assert np.array_equal(T("position_embd.weight").reshape(-1), hf[p + "wpe.weight"].reshape(-1))
conv = {"attn_qkv": "attn.c_attn", "attn_output": "attn.c_proj", "ffn_up": "mlp.c_fc", "ffn_down": "mlp.c_proj"}
for l in range(L):
    for gn, hn in conv.items():  # llama.cpp's converter: data_torch.transpose(1, 0)
        a, b = T(f"blk.{l}.{gn}.weight"), hf[f"{p}h.{l}.{hn}.weight"]
        assert a.shape == b.T.shape and np.array_equal(a, b.T), (l, gn)
        assert np.array_equal(T(f"blk.{l}.{gn}.bias").reshape(-1), hf[f"{p}h.{l}.{hn}.bias"]), (l, gn)
# engine: GGUF == folder
ld = lambda n: np.fromfile(f"{w}/e_{n}.bin", "<f4").reshape(300, -1)
assert np.abs(ld("gpt2") - ld("hf")).max() <= 1e-5, np.abs(ld("gpt2") - ld("hf")).max()
# round trip
_, kv2, _, t2, order2 = g.read(f"{w}/gpt2_rt.gguf")
assert order == order2 and all(t[n] == t2[n] for n in t)
assert all(kv2[x] == kv[x] for x in kv if x.startswith("gpt2."))
a, b = st(f"{w}/gpt2", True), st(f"{w}/gpt2_sf", True)
assert set(a) == set(b) and all(a[n] == b[n] for n in a), sorted(set(a) ^ set(b))
assert json.load(open(f"{w}/gpt2_sf/config.json"))["model_type"] == "gpt2"
# tau 1.3: q rows of attn_qkv divided, k / v rows untouched; same from the folder and the GGUF
for f in ("tp", "tp_g"):
    _, kvp, _, tp, _ = g.read(f"{w}/{f}.gguf")
    assert kvp["ctxpatch.fidelity"] == "exact-weights", f
    for l in range(L):
        for s, n in (("weight", D * D), ("bias", D)):
            x, y = T(f"blk.{l}.attn_qkv.{s}").reshape(-1), g.f32(tp[f"blk.{l}.attn_qkv.{s}"]).reshape(-1)
            assert np.allclose(y[:n], x[:n] / np.float32(1.3), rtol=1e-6, atol=0) and np.array_equal(x[n:], y[n:]), (f, l, s)
_, _, _, tpg, _ = g.read(f"{w}/tp_g.gguf")
_, _, _, tpf, _ = g.read(f"{w}/tp.gguf")
assert all(tpg[n] == tpf[n] for n in tpf)
_, kvl, _, _, _ = g.read(f"{w}/lm.gguf")
assert kvl["ctxpatch.fidelity"] == "ctxpatch-metadata" and json.loads(kvl["ctxpatch.rule"])
moved = {f: float(np.abs(ld(f) - ld("gpt2")).max()) for f in ("tp", "lm")}
assert min(moved.values()) > 0.05, moved
print("gpt2 GGUF: llama.cpp names/order, Conv1D transposed, round trip identical, tau in attn_qkv q rows; moved",
      {k: round(v, 2) for k, v in moved.items()})
PY

# --- a gpt2 GGUF without gpt2.context_length (renamed in place) is refused: no position table size
"$py" -c "import sys; b=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(b.replace(b'gpt2.context_length', b'gpt2.context_lengtX', 1))" \
  "$w/gpt2.gguf" "$w/nolen.gguf"
"$bin" forward "$w/nolen.gguf" --ids 5,6 --out "$w/nolen.bin" 2>"$w/nolen.err" && bad "gpt2 GGUF without context_length read" || ok
check grep -qxF "ctxpatch: error CP_ENOTFOUND: $w/nolen.gguf: key 'gpt2.context_length' is absent: gpt2's learned position table needs it" "$w/nolen.err"
check test ! -e "$w/nolen.bin"

# --- the PyTorch-made GPT-2 of the engine goldens, as GGUF: the engine still computes PyTorch's logits
gd=$src/tests/goldens/engine
if [ -f "$gd/MANIFEST.json" ]; then
  check "$bin" convert "$gd/models/gpt2" "$w/golden.gguf" --to gguf
  ids=$("$py" "$src/tests/cli_forward_check.py" ids "$gd/cases/gpt2__identity.safetensors" input_ids)
  check "$bin" forward "$w/golden.gguf" --ids "$ids" --out "$w/golden.bin" --threads 1
  "$py" - "$gd/cases/gpt2__identity.safetensors" "$w/golden.bin" <<'PY' && ok || bad "GGUF GPT-2 vs PyTorch golden"
import sys, json, struct, numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
e = h["logits"]; want = np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
got = np.fromfile(sys.argv[2], "<f4").reshape(want.shape)
d = np.abs(got - want).max()
assert d <= 1e-4 * max(1.0, np.abs(want).max()), d
print(f"golden GPT-2 as GGUF: engine vs PyTorch max |diff| {d:.1e}")
PY
  # llama.cpp's C API (tests/gguf/llamacpp_ctypes.py; llama.cpp runs this no_vocab file on ids, which
  # node-llama-cpp refuses) on the same file: PyTorch's logits to ggml's GELU table
  bins=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}/@node-llama-cpp/linux-x64/bins/linux-x64
  if [ -f "$bins/libllama.v0.5.0.so" ]; then
    "$py" "$src/tests/gguf/llamacpp_ctypes.py" "$bins" "$w/golden.gguf" decoder "$ids" 0 >"$w/golden_lc.json" && ok ||
      bad "llama.cpp on the golden GPT-2"
    "$py" - "$gd/cases/gpt2__identity.safetensors" "$w/golden_lc.json" <<'PY' && ok || bad "llama.cpp vs PyTorch golden"
import sys, json, struct, numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n])
e = h["logits"]; want = np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
lc = np.array(json.load(open(sys.argv[2]))["logits"], np.float64)
d = np.abs(lc - want).max()
assert lc.shape == want.shape and d <= 1e-3 * np.abs(want).max(), (lc.shape, d)
print(f"golden GPT-2 as GGUF: llama.cpp vs PyTorch max |diff| {d:.1e} (logits up to {np.abs(want).max():.1f})")
PY
  fi
  # refused: llama.cpp's gpt2 has no per-layer score scaling
  "$bin" convert "$gd/models/gpt2_bin" "$w/inv.gguf" --to gguf 2>"$w/inv.err" && bad "inverse-layer GPT-2 exported" || ok
  check grep -q "scale_attn_by_inverse_layer_idx" "$w/inv.err"
  check test ! -e "$w/inv.gguf"
else
  echo "note: $gd/MANIFEST.json absent: golden GPT-2 checks skipped"
fi

if [ "$lc" = 1 ]; then
  for f in gpt2 tp; do node "$w/run.mjs" "$w/$f.gguf" 20 "$prompt" 1 >"$w/lc_$f.json" && ok || bad "llama.cpp $f.gguf"; done
  for f in gpt2 tp; do "$bin" forward "$w/$f.gguf" --ids "$prompt" --generate 20 --threads 1 >"$w/g_$f.txt" && ok || bad "generate $f"; done
  "$py" - "$w" <<'PY' && ok || bad "llama.cpp == engine on the gpt2 files"
import sys, json, numpy as np
w = sys.argv[1]
out = []
for f in ("gpt2", "tp"):
    res = json.load(open(f"{w}/lc_{f}.json"))
    lc, e = np.array(res["logits"], np.float64), np.fromfile(f"{w}/e_{f}.bin", "<f4").reshape(300, -1)
    d, scale = np.abs(lc - e).max(), np.abs(e).max()
    top2 = np.sort(e, 1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * d
    assert lc.shape == (300, 559) and d <= 1e-3 * scale, (f, d, scale)
    assert (lc.argmax(1) == e.argmax(1))[clear].all() and clear.sum() >= 290, (f, clear.sum())
    eng, n = [int(x) for x in open(f"{w}/g_{f}.txt").read().strip().split(",")], len(res["greedy"])
    assert n > 0 and res["greedy"] == eng[:n] and (n == 20 or eng[n] == 1), (f, res["greedy"], eng)
    out.append(f"{f} {d:.1e} ({d / scale:.0e} of {scale:.1f})")
print("llama.cpp gpt2 logits == engine (max |diff|, relative):", "; ".join(out), "; greedy tokens equal")
PY
fi
finish
