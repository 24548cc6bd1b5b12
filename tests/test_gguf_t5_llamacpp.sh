#!/usr/bin/env bash
# T5 as GGUF (llama.cpp arch t5, issue #15), proven in llama.cpp's own encoder-decoder path:
# node-llama-cpp's addon never calls llama_encode, so tests/gguf/llamacpp_ctypes.py calls the C API
# of the libllama that node-llama-cpp 3.22.1's prebuilt package ships (structs from llama.h of that
# release, defaults asserted): llama_encode on the encoder ids, llama_decode from the decoder start
# token, logits at every decoder position, greedy decoding.
#   - examples/probe-models/t5-probe -> `convert --to gguf`: llama.cpp's names (enc./dec. blocks,
#     enc/dec.blk.0.attn_rel_b, cross_attn_*, enc/dec.output_norm, output), every tensor equal to
#     its HF tensor, t5.* keys as conversion/t5.py writes them;
#   - the engine on the GGUF == on the folder; GGUF -> safetensors (equal to the source folder's
#     tensors) -> GGUF tensor-identical, t5.* keys equal;
#   - tau 1.3 (`patch --to gguf`, from the folder and from the GGUF, identical files): with the
#     default scope (encoder) the encoder's q weights and bucket table are the unpatched file's / 1.3,
#     with --scope all every q / cross q weight and both tables, the rest bit-identical;
#     lm-infinite stays ctxpatch.* metadata;
#   - llama.cpp on the unpatched and both tau files: 300 encoder ids (past the 256 training length),
#     decoder fed the start token + 40 ids: logits == `ctxpatch forward` within 1e-4 of the largest
#     logit (measured ~5e-7), argmax equal, greedy 20 tokens equal (up to llama.cpp's stop at eos);
#   - llama.cpp's logits on stories260K.gguf (decoder-only, through the same C API) == the engine's,
#     which the node-llama-cpp tests compared as greedy tokens only;
#   - a tied T5 (the probe's weights without lm_head, tie_word_embeddings true): HF scales the
#     head's input by d_model^-0.5, llama.cpp's t5 does not, so output.weight is written as the
#     embedding times d_model^-0.5 (0.125 here, exact); engine on the file == on the folder, llama.cpp
#     == engine;
#   - a T5 folder with a SentencePiece tokenizer.model gets no_vocab (llama.cpp would run it as
#     SPM BPE under "llama"; T5's Unigram is llama.cpp's "t5" vocabulary, not written);
#   - refused, nothing written: a gated-silu FFN, relative_attention_max_distance other than 128; a t5
#     GGUF without output.weight is refused when read.
# Needs numpy; the llama.cpp parts need the node-llama-cpp package in $CTXPATCH_NODE_MODULES (default
# tests/runtimes/node_modules): without it the rest runs and the test exits 77.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
t5=$src/examples/probe-models/t5-probe
[ -f "$t5/model.safetensors" ] || { echo "SKIP: $t5 is absent"; exit 77; }
export PYTHONPATH=$src/tests/gguf${PYTHONPATH:+:$PYTHONPATH}
w=$work
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
bins=$nm/@node-llama-cpp/linux-x64/bins/linux-x64
ct=0; [ -f "$bins/libllama.v0.5.0.so" ] && ct=1

check "$bin" convert "$t5" "$w/t5.gguf" --to gguf
mkdir "$w/tied" && cp "$t5/tokenizer.json" "$w/tied/" && "$py" - "$t5" "$w/tied" <<'PY' && ok || bad "tied T5 folder"
import sys, json, struct
src, dst = sys.argv[1:3]
raw = open(f"{src}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
keep = {k: v for k, v in hdr.items() if k not in ("__metadata__", "lm_head.weight")}
out, blobs, off = {}, [], 0
for k in sorted(keep):
    b = raw[8 + n + keep[k]["data_offsets"][0]:8 + n + keep[k]["data_offsets"][1]]
    out[k] = {"dtype": keep[k]["dtype"], "shape": keep[k]["shape"], "data_offsets": [off, off + len(b)]}
    off += len(b); blobs.append(b)
h = json.dumps(out).encode(); h += b" " * (-len(h) % 8)
open(f"{dst}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
c = json.load(open(f"{src}/config.json")); c["tie_word_embeddings"] = True
json.dump(c, open(f"{dst}/config.json", "w"))
PY
check "$bin" convert "$w/tied" "$w/tied.gguf" --to gguf
enc=$("$py" -c "import random; r=random.Random(5); print(','.join([str(r.randrange(3,559)) for _ in range(299)]+['1']))")
dec=$("$py" -c "import random; r=random.Random(6); print(','.join([str(r.randrange(3,559)) for _ in range(40)]))")
fwd() { "$bin" forward "$1" --ids "$enc" --decoder-ids "0,$dec" --out "$2" --threads 1 >/dev/null; }
check fwd "$t5" "$w/e_hf.bin"
check fwd "$w/tied" "$w/e_tied_hf.bin"
check fwd "$w/tied.gguf" "$w/e_tied.bin"
check fwd "$w/t5.gguf" "$w/e_t5.bin"
check "$bin" convert "$w/t5.gguf" "$w/t5_sf" --to safetensors
check "$bin" convert "$w/t5_sf" "$w/t5_rt.gguf" --to gguf
nv="--no-verify"
check "$bin" patch "$t5" "$w/tp.gguf" --method temperature --tau 1.3 --to gguf $nv
check "$bin" patch "$w/t5.gguf" "$w/tp_g.gguf" --method temperature --tau 1.3 --to gguf $nv
check "$bin" patch "$t5" "$w/ta.gguf" --method temperature --tau 1.3 --scope all --to gguf $nv
check "$bin" patch "$t5" "$w/lm.gguf" --method lm-infinite --n-global 4 --n-local 64 --to gguf --for ctxpatch $nv
for f in tp ta lm; do check fwd "$w/$f.gguf" "$w/e_$f.bin"; done

"$py" - "$w" "$t5" <<'PY' && ok || bad "T5 GGUF names, keys, round trip, patches"
import sys, json, struct, numpy as np, gguf_py as g
w, t5 = sys.argv[1:3]
def st(folder, raw_bytes=False):
    raw = open(f"{folder}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
    get = lambda e: raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
    return {k: get(e) if raw_bytes else np.frombuffer(get(e), "<f4").reshape(e["shape"])
            for k, e in hdr.items() if k != "__metadata__"}
hf = st(t5)
_, kv, _, t, order = g.read(f"{w}/t5.gguf")
# llama.cpp's names (src/llama-arch.cpp) for HF's (modeling_t5.py)
names = {"token_embd": "shared", "output": "lm_head", "enc.output_norm": "encoder.final_layer_norm",
         "dec.output_norm": "decoder.final_layer_norm",
         "enc.blk.0.attn_rel_b": "encoder.block.0.layer.0.SelfAttention.relative_attention_bias",
         "dec.blk.0.attn_rel_b": "decoder.block.0.layer.0.SelfAttention.relative_attention_bias"}
for l in range(3):
    for s, h in (("enc", "encoder"), ("dec", "decoder")):
        b = f"{h}.block.{l}.layer."
        names.update({f"{s}.blk.{l}.attn_norm": b + "0.layer_norm", f"{s}.blk.{l}.attn_o": b + "0.SelfAttention.o"})
        names.update({f"{s}.blk.{l}.attn_{x}": b + f"0.SelfAttention.{x}" for x in "qkv"})
        f = b + ("1" if s == "enc" else "2")
        names.update({f"{s}.blk.{l}.ffn_norm": f + ".layer_norm", f"{s}.blk.{l}.ffn_up": f + ".DenseReluDense.wi",
                      f"{s}.blk.{l}.ffn_down": f + ".DenseReluDense.wo"})
    b = f"decoder.block.{l}.layer.1."
    names.update({f"dec.blk.{l}.cross_attn_{x}": b + f"EncDecAttention.{x}" for x in "qkvo"})
    names[f"dec.blk.{l}.cross_attn_norm"] = b + "layer_norm"
assert sorted(order) == sorted(n + ".weight" for n in names), sorted(set(order) ^ {n + ".weight" for n in names})
assert len(hf) == len(names)
for n, h in names.items():
    assert np.array_equal(g.f32(t[n + ".weight"]).reshape(hf[h + ".weight"].shape), hf[h + ".weight"]), n
keys = {"general.architecture": "t5", "t5.context_length": 256, "t5.embedding_length": 64, "t5.feed_forward_length": 256,
        "t5.block_count": 3, "t5.decoder_block_count": 3, "t5.attention.head_count": 4, "t5.attention.key_length": 16,
        "t5.attention.value_length": 16, "t5.attention.relative_buckets_count": 32, "t5.decoder_start_token_id": 0,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.eos_token_id": 1}
assert all(kv[k] == v for k, v in keys.items()), {k: kv.get(k) for k in keys}
assert abs(kv["t5.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
ld = lambda n: np.fromfile(f"{w}/e_{n}.bin", "<f4").reshape(41, -1)
assert np.abs(ld("t5") - ld("hf")).max() <= 1e-5
_, kv2, _, t2, order2 = g.read(f"{w}/t5_rt.gguf")
assert order == order2 and all(t[n] == t2[n] for n in t)
assert all(kv2[x] == kv[x] for x in kv if x.startswith("t5."))
a, b = st(t5, True), st(f"{w}/t5_sf", True)
assert set(a) == set(b) and all(a[n] == b[n] for n in a), sorted(set(a) ^ set(b))
scope_all = [n for n in names if n.endswith(("attn_q", "attn_rel_b"))]  # self q, cross q, both bucket tables
scope_enc = [n for n in scope_all if n.startswith("enc.")]
assert len(scope_all) == 3 + 3 + 3 + 2 and len(scope_enc) == 3 + 1
for f, scaled in (("tp", scope_enc), ("tp_g", scope_enc), ("ta", scope_all)):
    _, kvp, _, tp, _ = g.read(f"{w}/{f}.gguf")
    assert kvp["ctxpatch.fidelity"] == "exact-weights", f
    for n in names:
        x, y = g.f32(t[n + ".weight"]), g.f32(tp[n + ".weight"])
        if n in scaled:
            assert np.allclose(y, x / np.float32(1.3), rtol=1e-6, atol=0), (f, n)
        else:
            assert tp[n + ".weight"] == t[n + ".weight"], (f, n)
_, _, _, tpg, _ = g.read(f"{w}/tp_g.gguf")
_, _, _, tpf, _ = g.read(f"{w}/tp.gguf")
assert all(tpg[n] == tpf[n] for n in tpf)
_, kvl, _, _, _ = g.read(f"{w}/lm.gguf")
assert kvl["ctxpatch.fidelity"] == "ctxpatch-metadata" and json.loads(kvl["ctxpatch.rule"])
_, _, _, tt, _ = g.read(f"{w}/tied.gguf")  # output = shared x 64^-0.5 = x 0.125 (exact in float32)
assert np.array_equal(g.f32(tt["output.weight"]), g.f32(tt["token_embd.weight"]) * np.float32(0.125))
assert np.array_equal(g.f32(tt["token_embd.weight"]).reshape(-1), hf["shared.weight"].reshape(-1))
dt = np.abs(ld("tied") - ld("tied_hf")).max()
assert dt <= 1e-5 * np.abs(ld("tied_hf")).max(), dt
moved = {f: float(np.abs(ld(f) - ld("t5")).max()) for f in ("tp", "ta", "lm")}
assert min(moved.values()) > 0.05, moved
print("t5 GGUF: llama.cpp names, tensors equal to HF, round trip identical, tau in q weights and bucket tables; moved",
      {k: round(v, 2) for k, v in moved.items()})
PY

# --- refused, nothing written
refuse() { # NAME JSON-EDIT WORD
  mkdir "$w/$1" && cp "$t5/model.safetensors" "$t5/tokenizer.json" "$w/$1/" &&
    "$py" -c "import json,sys; c=json.load(open(sys.argv[1])); $2; json.dump(c, open(sys.argv[2],'w'))" \
      "$t5/config.json" "$w/$1/config.json"
  "$bin" convert "$w/$1" "$w/$1.gguf" --to gguf 2>"$w/$1.err" && bad "$1 exported" || ok
  check grep -q "$3" "$w/$1.err"
  check test ! -e "$w/$1.gguf"
}
refuse silu "c['feed_forward_proj']='gated-silu'" "gated-silu"
refuse far "c['relative_attention_max_distance']=64" "128"
# a T5 folder whose tokenizer is a SentencePiece tokenizer.model (stories260K's tok512.model): not
# written as llama.cpp's "llama" vocabulary (SPM BPE; T5's is Unigram, llama.cpp's "t5"), no_vocab
spm=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party/stories260K/tok512.model
if [ -f "$spm" ]; then
  mkdir "$w/t5spm" && cp "$t5/model.safetensors" "$t5/config.json" "$w/t5spm/" && cp "$spm" "$w/t5spm/tokenizer.model"
  check "$bin" convert "$w/t5spm" "$w/t5spm.gguf" --to gguf
  "$py" -c "import sys, gguf_py as g; kv = g.read(sys.argv[1])[1]; assert kv['tokenizer.ggml.model'] == 'no_vocab', kv['tokenizer.ggml.model']" \
    "$w/t5spm.gguf" && ok || bad "T5 with a SentencePiece tokenizer.model: vocabulary written"
fi
# a t5 GGUF without output.weight (renamed in place): llama.cpp would run the embedding unscaled
"$py" -c "import sys; b=open(sys.argv[1],'rb').read(); open(sys.argv[2],'wb').write(b.replace(b'output.weight', b'outpux.weight', 1))" \
  "$w/t5.gguf" "$w/nohead.gguf"
"$bin" forward "$w/nohead.gguf" --ids 5,6,1 --out "$w/nohead.bin" 2>"$w/nohead.err" && bad "t5 GGUF without output read" || ok
check grep -qxF "ctxpatch: error CP_ENOTFOUND: $w/nohead.gguf: tensor 'output.weight' is absent: llama.cpp's t5 would run the embedding as an unscaled head, which HF's T5 does not" "$w/nohead.err"
check test ! -e "$w/nohead.bin"

if [ "$ct" = 1 ]; then
  lcrun() { "$py" "$src/tests/gguf/llamacpp_ctypes.py" "$bins" "$@"; }
  for f in t5 tp ta tied; do
    lcrun "$w/$f.gguf" t5 "$enc" "$dec" 20 >"$w/lc_$f.json" && ok || bad "llama.cpp $f.gguf"
    "$bin" forward "$w/$f.gguf" --ids "$enc" --generate 20 --threads 1 >"$w/g_$f.txt" && ok || bad "generate $f"
  done
  "$py" - "$w" <<'PY' && ok || bad "llama.cpp == engine on the t5 files"
import sys, json, numpy as np
w = sys.argv[1]
out = []
for f in ("t5", "tp", "ta", "tied"):
    res = json.load(open(f"{w}/lc_{f}.json"))
    lc, e = np.array(res["logits"], np.float64), np.fromfile(f"{w}/e_{f}.bin", "<f4").reshape(41, -1)
    d, scale = np.abs(lc - e).max(), np.abs(e).max()
    assert res["decoder_start"] == 0 and lc.shape == (41, 559) and d <= 1e-4 * scale, (f, d, scale)
    assert (lc.argmax(1) == e.argmax(1)).all(), f
    eng, n = [int(x) for x in open(f"{w}/g_{f}.txt").read().strip().split(",")], len(res["greedy"])
    assert n > 0 and res["greedy"] == eng[:n] and (n == 20 or eng[n - 1] == 1), (f, res["greedy"], eng)
    out.append(f"{f} {d:.1e} (of {scale:.1f}), greedy {n} equal")
print("llama.cpp t5 (llama_encode + llama_decode) == engine:", "; ".join(out))
PY
  # decoder-only logits through the same API: stories260K (the node-llama-cpp tests compare its tokens)
  stories=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party/stories260K/stories260K.gguf
  if [ -f "$stories" ]; then
    ids=$("$py" -c "import random; r=random.Random(3); print(','.join(['1']+[str(r.randrange(3,512)) for _ in range(199)]))")
    check "$bin" forward "$stories" --ids "$ids" --out "$w/e_st.bin" --threads 1
    lcrun "$stories" decoder "$ids" 0 >"$w/lc_st.json" && ok || bad "llama.cpp stories260K"
    "$py" - "$w" <<'PY' && ok || bad "llama.cpp logits == engine on stories260K"
import sys, json, numpy as np
w = sys.argv[1]
lc = np.array(json.load(open(f"{w}/lc_st.json"))["logits"], np.float64)
e = np.fromfile(f"{w}/e_st.bin", "<f4").reshape(lc.shape[0], -1)
d, scale = np.abs(lc - e).max(), np.abs(e).max()
assert lc.shape == (200, 512) and d <= 1e-4 * scale, (d, scale)
print(f"stories260K: llama.cpp logits == engine, max |diff| {d:.1e} of {scale:.1f}")
PY
  else
    echo "note: $stories absent: stories260K logits not compared"
  fi
fi
if [ "$ct" = 0 ] && [ "$failed" = 0 ]; then
  echo "SKIP: llama.cpp (node-llama-cpp's libllama) not in $bins; the $passed other checks passed"
  exit 77
fi
finish
