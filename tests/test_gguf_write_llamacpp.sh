#!/usr/bin/env bash
# GGUF writing (convert --to gguf, patch --to gguf), checked by an independent numpy GGUF reader
# (tests/gguf/gguf_py.py) and by llama.cpp itself (node-llama-cpp 3.22.1, tests/gguf/llamacpp_run.mjs):
#   - stories260K.gguf -> GGUF: every tensor byte-identical, every key equal with its type, the
#     file written twice byte-identical; --dtype q8_0 / f16 / bf16 bytes equal ggml's encodings
#     recomputed in numpy; llama.cpp's greedy tokens on the written files == `ctxpatch forward`;
#   - stories260K.gguf -> safetensors (HF names) -> GGUF: tensor-identical;
#   - rope-probe (HF safetensors) -> GGUF: q/k rows in llama.cpp's rotary order, llama.cpp's logits
#     on a 300-token prompt (past the 256 training length) == the engine's on the HF folder;
#   - patch --to gguf: rope-pi F=2 (llama.rope.scaling.*) and temperature tau=1.3 (baked q) change
#     llama.cpp's logits exactly as the engine's rule on the patched HF folder says; lm-infinite is
#     ctxpatch.* metadata (fidelity ctxpatch-metadata, --require exact refuses, leaves nothing);
#     stories260K patched rope-pi x2 (certified) greedy 100 in llama.cpp == ctxpatch (and changed);
#     a certified file carries its certificate whose sha256 is ctxpatch.certificate_sha256;
#   - refused inputs (a FIRE model, a bad --dtype, a failing certification, an existing OUT without
#     --force) leave nothing and change nothing.
# llama.cpp parts skip (the rest still runs) when node-llama-cpp is not in $CTXPATCH_NODE_MODULES
# (default tests/runtimes/node_modules); the whole test skips (77) without ../shared/fixtures.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
fx=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}
stories=$fx/third_party/stories260K/stories260K.gguf
probe=$src/examples/probe-models/rope-probe
[ -f "$stories" ] || { echo "SKIP: ../shared/fixtures (stories260K) not found at $fx"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"

# --- stories260K: GGUF -> GGUF, all dtypes, determinism
check "$bin" convert "$stories" "$w/s.gguf" --to gguf
check "$bin" convert "$stories" "$w/s2.gguf" --to gguf
check cmp -s "$w/s.gguf" "$w/s2.gguf"
for d in q8_0 f16 bf16; do check "$bin" convert "$stories" "$w/s_$d.gguf" --to gguf --dtype $d; done
"$py" - "$stories" "$w" <<'PY' && ok || bad "stories260K GGUF tensors and keys"
import sys, numpy as np, gguf_py as g
src, w = sys.argv[1:]
_, kv, ty, t, order = g.read(src)
v, kv2, ty2, t2, order2 = g.read(f"{w}/s.gguf")
assert v == 3 and order == order2 and len(t) == 48
assert all(t[n] == t2[n] for n in t), "tensor bytes differ"
for k in kv:
    assert k in kv2 and kv[k] == kv2[k] and ty[k] == ty2[k], k
assert kv2["general.alignment"] == 32 and kv2["general.file_type"] == 0 and kv2["ctxpatch.source"] == "stories260K.gguf"
def bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
for d, ft in (("q8_0", 7), ("f16", 1), ("bf16", 32)):
    _, kvd, _, td, _ = g.read(f"{w}/s_{d}.gguf")
    assert kvd["general.file_type"] == ft
    for n, (gt, ne, raw) in td.items():
        x = g.f32(t[n]).reshape(-1)
        if len(ne) == 1:
            assert gt == 0 and raw == t[n][2], n
        elif d == "q8_0" and ne[0] % 32:
            assert gt == 1 and raw == x.astype("<f2").tobytes(), n  # llama.cpp's F16 fallback
        elif d == "q8_0":
            assert gt == 8 and raw == g.q8_0(x), n
        elif d == "f16":
            assert gt == 1 and raw == x.astype("<f2").tobytes(), n
        else:
            assert gt == 30 and raw == bf16(x), n
print("stories260K: 48 tensors identical, keys equal; q8_0/f16/bf16 bytes equal numpy's ggml encodings")
PY

# --- round trip: stories260K.gguf -> safetensors (HF names, config.json) -> GGUF, tensor-identical
check "$bin" convert "$stories" "$w/sf" --to safetensors
check "$bin" convert "$w/sf" "$w/rt.gguf" --to gguf
"$py" - "$stories" "$w/rt.gguf" "$w/sf" <<'PY' && ok || bad "GGUF -> safetensors -> GGUF"
import sys, json, struct, gguf_py as g
a, b, folder = sys.argv[1:]
_, kv, _, t, order = g.read(a)
_, kv2, _, t2, order2 = g.read(b)
assert sorted(order) == sorted(order2) and all(t[n] == t2[n] for n in t), "tensors differ"
for k in ("llama.embedding_length", "llama.block_count", "llama.attention.head_count",
          "llama.attention.head_count_kv", "llama.context_length", "llama.feed_forward_length"):
    assert kv[k] == kv2[k], k
raw = open(f"{folder}/model.safetensors", "rb").read()
names = set(json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])) - {"__metadata__"}
assert "model.layers.0.self_attn.q_proj.weight" in names and "lm_head.weight" in names and len(names) == 48
print("round trip: 48 tensors identical through an HF-named safetensors folder")
PY

# --- rope-probe (HF) -> GGUF: q/k rows permuted as llama.cpp's converter does
check "$bin" convert "$probe" "$w/r.gguf" --to gguf
"$py" - "$probe" "$w/r.gguf" <<'PY' && ok || bad "rope-probe GGUF tensors"
import sys, json, struct, numpy as np, gguf_py as g
folder, path = sys.argv[1:]
raw = open(f"{folder}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
def st(name):
    e = hdr[name]; a, b = e["data_offsets"]
    return np.frombuffer(raw[8 + n + a:8 + n + b], "<f4").reshape(e["shape"])
cfg = json.load(open(f"{folder}/config.json"))
H, D = cfg["num_attention_heads"], cfg["hidden_size"]; dh = D // H
def permute(w, heads):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
_, kv, _, t, _ = g.read(path)
assert kv["llama.context_length"] == 256 and kv["llama.rope.dimension_count"] == dh
assert kv["tokenizer.ggml.model"] == "gpt2" and len(kv["tokenizer.ggml.tokens"][0]) == cfg["vocab_size"]
for l in range(cfg["num_hidden_layers"]):
    p = f"model.layers.{l}.self_attn."
    assert np.array_equal(g.f32(t[f"blk.{l}.attn_q.weight"]), permute(st(p + "q_proj.weight"), H))
    assert np.array_equal(g.f32(t[f"blk.{l}.attn_k.weight"]), permute(st(p + "k_proj.weight"), cfg["num_key_value_heads"]))
    assert np.array_equal(g.f32(t[f"blk.{l}.attn_v.weight"]), st(p + "v_proj.weight"))
assert np.array_equal(g.f32(t["token_embd.weight"]), st("model.embed_tokens.weight"))
print("rope-probe: q/k permuted as llama.cpp's converter, other tensors equal")
PY

# --- patches written as GGUF (and as HF folders, the engine's side)
nv="--no-verify"
check "$bin" patch "$probe" "$w/rp.gguf" --method rope-pi --factor 2 --to gguf $nv
check "$bin" patch "$probe" "$w/rp" --method rope-pi --factor 2 $nv
check "$bin" patch "$probe" "$w/tp.gguf" --method temperature --tau 1.3 --to gguf $nv
check "$bin" patch "$probe" "$w/tp" --method temperature --tau 1.3 $nv
check "$bin" patch "$probe" "$w/lm.gguf" --method lm-infinite --n-global 4 --n-local 64 --to gguf --for ctxpatch $nv
check "$bin" patch "$probe" "$w/lm" --method lm-infinite --n-global 4 --n-local 64 --for ctxpatch $nv
"$bin" patch "$probe" "$w/ex.gguf" --method lm-infinite --n-global 4 --to gguf --require exact --for ctxpatch $nv >/dev/null 2>&1 &&
  bad "--require exact accepted a metadata rule" || ok
check "$bin" patch "$stories" "$w/sp.gguf" --method rope-pi --factor 2 --to gguf --verify passkey --lengths 512 --samples 2 --min-accuracy 0 \
  --accept-no-gain --accept-underpowered
check "$bin" patch "$probe" "$w/cert.gguf" --method rope-pi --factor 2 --to gguf --lengths 512 --samples 2 --min-accuracy 0 \
  --accept-no-gain --accept-underpowered
"$py" - "$w" <<'PY' && ok || bad "patched GGUF keys"
import sys, json, hashlib, gguf_py as g
w = sys.argv[1]
_, kv, _, _, _ = g.read(f"{w}/rp.gguf")
assert kv["llama.rope.scaling.type"] == "linear" and kv["llama.rope.scaling.factor"] == 2.0
assert kv["llama.rope.scaling.original_context_length"] == 256
assert kv["ctxpatch.method"] == "rope-pi" and kv["ctxpatch.fidelity"] == "native-config" and not kv["ctxpatch.certified"]
_, kv, _, _, _ = g.read(f"{w}/tp.gguf")
assert kv["ctxpatch.fidelity"] == "exact-weights" and "llama.rope.scaling.type" not in kv
_, kv, _, _, _ = g.read(f"{w}/lm.gguf")
assert kv["ctxpatch.fidelity"] == "ctxpatch-metadata" and json.loads(kv["ctxpatch.rule"])
_, kv, _, _, _ = g.read(f"{w}/cert.gguf")
assert kv["ctxpatch.certified"] is True
assert hashlib.sha256(kv["ctxpatch.certificate"].encode()).hexdigest() == kv["ctxpatch.certificate_sha256"]
print("patched GGUF keys: rope scaling native, temperature baked, lm-infinite metadata, certificate digest checks")
PY

# --- refused inputs leave nothing
"$bin" convert "$src/examples/probe-models/fire-probe" "$w/fire.gguf" --to gguf >/dev/null 2>&1 && bad "FIRE exported" || ok
"$bin" convert "$stories" "$w/bad.gguf" --to gguf --dtype q4_0 >/dev/null 2>&1 && bad "--dtype q4_0 accepted" || ok
"$bin" patch "$probe" "$w/fail.gguf" --method rope-pi --factor 2 --to gguf --lengths 256 --samples 2 >/dev/null 2>&1 &&
  bad "a failing verdict wrote a GGUF" || ok
sum=$(sha256sum <"$w/s.gguf")
"$bin" convert "$probe" "$w/s.gguf" --to gguf >/dev/null 2>&1 && bad "replaced an existing OUT without --force" || ok
check test "$(sha256sum <"$w/s.gguf")" = "$sum"
check test -z "$(ls -A "$w" | grep -E '^\.|fire\.gguf|bad\.gguf|ex\.gguf|fail\.gguf|bake')"

# --- the engine on the written files (ctxpatch reads what it wrote)
prompt=$("$py" -c "import random; r=random.Random(7); print(','.join(['2']+[str(r.randrange(3,559)) for _ in range(299)]))")
fwd() { "$bin" forward "$1" --ids "$prompt" --out "$2" --threads 1 >/dev/null; }
check fwd "$probe" "$w/e_r.bin"; check fwd "$w/r.gguf" "$w/e_rg.bin"
check fwd "$w/rp" "$w/e_rp.bin"; check fwd "$w/rp.gguf" "$w/e_rpg.bin"
check fwd "$w/tp" "$w/e_tp.bin"; check fwd "$w/tp.gguf" "$w/e_tpg.bin"
check fwd "$w/lm" "$w/e_lm.bin"; check fwd "$w/lm.gguf" "$w/e_lmg.bin"
"$py" - "$w" <<'PY' && ok || bad "engine on written GGUF files"
import sys, numpy as np
w = sys.argv[1]
ld = lambda n: np.fromfile(f"{w}/{n}.bin", "<f4")
for a, b in (("e_r", "e_rg"), ("e_rp", "e_rpg"), ("e_tp", "e_tpg"), ("e_lm", "e_lmg")):
    d = np.abs(ld(a) - ld(b)).max()
    assert d < 1e-4, (a, b, d)
assert np.abs(ld("e_r") - ld("e_lm")).max() > 1e-2  # the metadata rule is applied from the GGUF
print("engine: GGUF files give the HF folders' logits (lm-infinite's rule read from ctxpatch.rule)")
PY

if [ "$lc" = 1 ]; then
  llamacpp() { node "$w/run.mjs" "$@"; }
  "$bin" forward "$w/s.gguf" --ids 1 --generate 200 --threads 1 >"$w/g_s.txt" && ok || bad "forward s.gguf"
  "$bin" forward "$w/s_q8_0.gguf" --ids 1 --generate 30 --threads 1 >"$w/g_s8.txt" && ok || bad "forward q8_0"
  "$bin" forward "$w/sp.gguf" --ids 1 --generate 100 --threads 1 >"$w/g_sp.txt" && ok || bad "forward sp.gguf"
  llamacpp "$w/sp.gguf" 100 1 1 >"$w/lc_sp.json" && ok || bad "llama.cpp sp.gguf"
  llamacpp "$w/s.gguf" 200 1 1 >"$w/lc_s.json" && ok || bad "llama.cpp s.gguf"
  llamacpp "$w/s_q8_0.gguf" 30 1 1 >"$w/lc_s8.json" && ok || bad "llama.cpp s_q8_0.gguf"
  for f in r rp tp; do llamacpp "$w/$f.gguf" 20 "$prompt" 1 >"$w/lc_$f.json" && ok || bad "llama.cpp $f.gguf"; done
  "$py" - "$w" <<'PY' && ok || bad "llama.cpp on written GGUF files"
import sys, json, numpy as np
w = sys.argv[1]
ids = lambda n: [int(x) for x in open(f"{w}/{n}.txt").read().strip().split(",")]
assert json.load(open(f"{w}/lc_s.json"))["greedy"] == ids("g_s") and len(ids("g_s")) == 200
assert json.load(open(f"{w}/lc_s8.json"))["greedy"] == ids("g_s8")
sp = json.load(open(f"{w}/lc_sp.json"))["greedy"]
assert sp == ids("g_sp") and sp != ids("g_s")[:100]  # stories260K rope-pi x2: same in both, changed
ld = lambda n: np.fromfile(f"{w}/{n}.bin", "<f4").reshape(300, -1)
diffs = {}
for f, eng in (("r", "e_r"), ("rp", "e_rp"), ("tp", "e_tp")):
    lc = np.array(json.load(open(f"{w}/lc_{f}.json"))["logits"], np.float64)
    diffs[f] = np.abs(lc - ld(eng)).max()
    assert lc.shape == (300, 559) and diffs[f] < 1e-3, (f, diffs[f])
moved = np.abs(ld("e_r") - ld("e_rp")).max(), np.abs(ld("e_r") - ld("e_tp")).max()
assert min(moved) > 0.1, moved  # the patches change the output by far more than the tolerance
print(f"llama.cpp: stories260K greedy 200 (F32) and 30 (Q8_0) equal; rope-probe logits max|diff| "
      f"{diffs['r']:.1e}, rope-pi x2 {diffs['rp']:.1e}, tau 1.3 {diffs['tp']:.1e} over 300x559 "
      f"(the patches move them by {moved[0]:.2f}, {moved[1]:.2f})")
PY
fi
finish
