#!/usr/bin/env bash
# GGUF for llama.cpp's gptneox, bloom and mpt architectures (issue #15), proven in llama.cpp
# (node-llama-cpp 3.22.1, tests/gguf/llamacpp_run.mjs, F32 K/V cache):
#   - examples/probe-models/alibi-probe (BLOOM, trained) and tiny random GPT-NeoX (parallel
#     residual, rotary_pct 0.25; sequential, rotary_pct 0.5) and MPT (no biases, clip_qkv 0.5) folders
#     written by tests/gguf/make_random_family.py -> `convert --to gguf`: tensor names and keys as
#     llama.cpp's converter writes them, attn_qkv rows = numpy's reorder of HF's (the converter's
#     reshape(H, 3, dh, D) + cat), BLOOM's tied head written as output.weight;
#   - llama.cpp's logits on a 300-token prompt (past the 256 training length) == `ctxpatch forward`
#     on the same file: max |diff| <= 1e-3 x max |logit| (llama.cpp's
#     GELU is an f16 lookup table of the tanh form; measured 3.3e-4 relative at most), argmax equal
#     wherever the engine's top-2 margin exceeds twice that difference (all but near-ties of random
#     weights), and greedy tokens equal (20, or up to llama.cpp's stop at the end-of-text id);
#   - GGUF -> safetensors (HF names, HF row order: equal to the source folder's tensors) -> GGUF:
#     tensor-identical, architecture keys equal;
#   - patches: rope-pi x2 on GPT-NeoX is gptneox.rope.scaling.*, tau 1.3 is baked into the q rows of
#     attn_qkv exactly (k, v rows untouched); llama.cpp == engine on both; alibi-pi and lm-infinite
#     stay ctxpatch.* metadata (applied by `ctxpatch forward`, refused by --require exact);
#   - refused: FIRE (no llama.cpp architecture), a GPT-NeoX without attention biases; nothing is
#     left behind. (T5 and GPT-2: tests/test_gguf_t5_llamacpp.sh, tests/test_gguf_gpt2.sh.)
# llama.cpp parts skip (the rest still runs) when node-llama-cpp is not in $CTXPATCH_NODE_MODULES
# (default tests/runtimes/node_modules); the test needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"
cp -r "$src/examples/probe-models/alibi-probe" "$w/bloom"
rm -f "$w/bloom/pytorch_model.bin" # one weights file: the folder's safetensors
for k in gpt_neox gpt_neox_seq mpt; do check "$py" "$src/tests/gguf/make_random_family.py" "$w/$k" $k; done
models="bloom gpt_neox gpt_neox_seq mpt"
for k in $models; do check "$bin" convert "$w/$k" "$w/$k.gguf" --to gguf; done

# --- names, keys and row order against llama.cpp's converter, recomputed in numpy
"$py" - "$w" <<'PY' && ok || bad "GGUF tensors and keys of the fused families"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
def st(folder):
    raw = open(f"{folder}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
            for k, e in hdr.items() if k != "__metadata__"}
def reorder(x, H):  # convert_hf_to_gguf.py BloomModel / GPTNeoXModel: [H, 3, dh, ...] -> q | k | v
    y = x.reshape(H, 3, x.shape[0] // H // 3, *x.shape[1:])
    return np.concatenate([y[:, i].reshape(-1, *x.shape[1:]) for i in range(3)])
spec = {  # arch, HF prefix, qkv name, reordered, keys expected
    "bloom": ("bloom", "transformer.h.{}.", "self_attention.query_key_value", True,
              {"bloom.context_length": 256, "bloom.feed_forward_length": 256, "bloom.attention.head_count_kv": 4}),
    "gpt_neox": ("gptneox", "gpt_neox.layers.{}.", "attention.query_key_value", True,
                 {"gptneox.rope.dimension_count": 4, "gptneox.use_parallel_residual": True, "gptneox.rope.freq_base": 10000.0}),
    "gpt_neox_seq": ("gptneox", "gpt_neox.layers.{}.", "attention.query_key_value", True,
                     {"gptneox.rope.dimension_count": 8, "gptneox.use_parallel_residual": False, "gptneox.rope.freq_base": 500.0}),
    "mpt": ("mpt", "transformer.blocks.{}.", "attn.Wqkv", False,
            {"mpt.attention.max_alibi_bias": 8.0, "mpt.attention.clamp_kqv": 0.5, "mpt.context_length": 256}),
}
for k, (arch, pre, qkv, re, keys) in spec.items():
    hf, cfg = st(f"{w}/{k}"), json.load(open(f"{w}/{k}/config.json"))
    _, kv, _, t, order = g.read(f"{w}/{k}.gguf")
    assert kv["general.architecture"] == arch and kv[f"{arch}.embedding_length"] == 64 and kv[f"{arch}.attention.head_count"] == 4
    for key, v in keys.items():
        assert abs(kv[key] - v) < 1e-6 if isinstance(v, float) else kv[key] == v, (k, key, kv.get(key))
    assert abs(kv[f"{arch}.attention.layer_norm_epsilon"] - 1e-5) < 1e-9 and kv["tokenizer.ggml.model"] == "gpt2"
    L = sum(1 for n in order if n.endswith("attn_qkv.weight"))
    for l in range(L):
        for s in ("weight", "bias"):
            src = pre.format(l) + qkv + "." + s
            if src not in hf:
                assert f"blk.{l}.attn_qkv.{s}" not in t, (k, s)
                continue
            want = reorder(hf[src], 4) if re else hf[src]
            assert np.array_equal(g.f32(t[f"blk.{l}.attn_qkv.{s}"]).reshape(-1), want.reshape(-1)), (k, l, s)
    emb = [v for n, v in hf.items() if n.endswith(("word_embeddings.weight", "embed_in.weight", "wte.weight"))][0]
    assert np.array_equal(g.f32(t["token_embd.weight"]).reshape(-1), emb.reshape(-1))
    if k == "bloom":  # tied head written as output.weight, as llama.cpp's converter does; embedding norm kept
        assert np.array_equal(g.f32(t["output.weight"]).reshape(-1), emb.reshape(-1)) and "token_embd_norm.bias" in t
    if k == "mpt":  # tied, no biases: llama.cpp duplicates token_embd itself
        assert "output.weight" not in t and not any(n.endswith(".bias") for n in t)
print("GGUF names/keys of bloom, gptneox (x2), mpt as llama.cpp's converter writes them; attn_qkv reordered")
PY

# --- engine on the files; round trip GGUF -> safetensors -> GGUF
prompt=$("$py" -c "import random; r=random.Random(7); print(','.join(['2']+[str(r.randrange(3,559)) for _ in range(299)]))")
fwd() { "$bin" forward "$1" --ids "$prompt" --out "$2" --threads 1 >/dev/null; }
for k in $models; do
  check fwd "$w/$k.gguf" "$w/e_$k.bin"
  check "$bin" convert "$w/$k.gguf" "$w/${k}_sf" --to safetensors
  check "$bin" convert "$w/${k}_sf" "$w/${k}_rt.gguf" --to gguf
done
check "$bin" inspect "$w/gpt_neox.gguf" --json >"$w/inspect.json"
"$py" - "$w" $models <<'PY' && ok || bad "round trip and HF order"
import sys, json, struct, numpy as np, gguf_py as g
w, models = sys.argv[1], sys.argv[2:]
def st(folder):
    raw = open(f"{folder}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
    return {k: raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]] for k, e in hdr.items() if k != "__metadata__"}
for k in models:
    _, kv, _, t, order = g.read(f"{w}/{k}.gguf")
    _, kv2, _, t2, order2 = g.read(f"{w}/{k}_rt.gguf")
    assert order == order2 and all(t[n] == t2[n] for n in t), k
    arch = kv["general.architecture"]
    assert all(kv2[x] == kv[x] for x in kv if x.startswith(arch + ".")), k
    a, b = st(f"{w}/{k}"), st(f"{w}/{k}_sf")  # back in HF's names and row order
    assert all(a[n] == b[n] for n in a), k
    assert set(b) - set(a) <= {"lm_head.weight"}, (k, set(b) - set(a))
    assert json.load(open(f"{w}/{k}_sf/config.json"))["model_type"] == k.replace("_seq", "")
d = json.load(open(f"{w}/inspect.json"))
assert "gptneox.context_length" in json.dumps(d) and "gpt_neox" in json.dumps(d)
print("round trip tensor-identical for", " ".join(models), "; safetensors equal to the source folders")
PY

# --- patches
nv="--no-verify"
bl="$w/bloom"
check "$bin" patch "$w/gpt_neox" "$w/n_rp.gguf" --method rope-pi --factor 2 --to gguf $nv
check "$bin" patch "$w/gpt_neox" "$w/n_tp.gguf" --method temperature --tau 1.3 --to gguf $nv
check "$bin" patch "$bl" "$w/b_ap.gguf" --method alibi-pi --factor 2 --to gguf --for ctxpatch $nv
check "$bin" patch "$w/mpt" "$w/m_lm.gguf" --method lm-infinite --n-global 4 --n-local 64 --to gguf --for ctxpatch $nv
"$bin" patch "$bl" "$w/b_ex.gguf" --method alibi-pi --factor 2 --to gguf --require exact --for ctxpatch $nv >/dev/null 2>&1 &&
  bad "--require exact accepted alibi-pi" || ok
for f in n_rp n_tp b_ap m_lm; do check fwd "$w/$f.gguf" "$w/e_$f.bin"; done
"$py" - "$w" <<'PY' && ok || bad "patched fused-family GGUF files"
import sys, json, numpy as np, gguf_py as g
w = sys.argv[1]
_, kv, _, t0, _ = g.read(f"{w}/gpt_neox.gguf")
_, kv, _, t, _ = g.read(f"{w}/n_rp.gguf")
assert kv["gptneox.rope.scaling.type"] == "linear" and kv["gptneox.rope.scaling.factor"] == 2.0
assert kv["gptneox.rope.scaling.original_context_length"] == 256 and kv["ctxpatch.fidelity"] == "native-config"
_, kv, _, t, _ = g.read(f"{w}/n_tp.gguf")
assert kv["ctxpatch.fidelity"] == "exact-weights" and "gptneox.rope.scaling.type" not in kv
for l in range(2):
    for s, n in (("weight", 64 * 64), ("bias", 64)):
        a, b = g.f32(t0[f"blk.{l}.attn_qkv.{s}"]).reshape(-1), g.f32(t[f"blk.{l}.attn_qkv.{s}"]).reshape(-1)
        assert np.allclose(b[:n], a[:n] / np.float32(1.3), rtol=1e-6, atol=0) and np.array_equal(a[n:], b[n:]), (l, s)
for f in ("b_ap", "m_lm"):
    _, kv, _, _, _ = g.read(f"{w}/{f}.gguf")
    assert kv["ctxpatch.fidelity"] == "ctxpatch-metadata" and json.loads(kv["ctxpatch.rule"]), f
ld = lambda n: np.fromfile(f"{w}/e_{n}.bin", "<f4").reshape(300, -1)
moved = {f: np.abs(ld(f) - ld(b)).max() for f, b in (("n_rp", "gpt_neox"), ("n_tp", "gpt_neox"), ("b_ap", "bloom"), ("m_lm", "mpt"))}
assert min(moved.values()) > 0.05, moved  # each patch changes the engine's output on its file
print("patches: rope-pi native, tau baked into attn_qkv's q rows, alibi-pi / lm-infinite metadata applied by ctxpatch;",
      "moved", {k: round(float(v), 2) for k, v in moved.items()})
PY

# --- refused inputs leave nothing
"$bin" convert "$src/examples/probe-models/fire-probe" "$w/fire.gguf" --to gguf 2>"$w/fire.err" && bad "FIRE exported" || ok
check grep -q "no llama.cpp architecture" "$w/fire.err"
mkdir "$w/nb" && cp "$w/gpt_neox/model.safetensors" "$w/gpt_neox/tokenizer.json" "$w/nb/" &&
  "$py" -c "import json,sys; c=json.load(open(sys.argv[1])); c['attention_bias']=False; json.dump(c, open(sys.argv[2],'w'))" \
    "$w/gpt_neox/config.json" "$w/nb/config.json"
"$bin" convert "$w/nb" "$w/nb.gguf" --to gguf >/dev/null 2>&1 && bad "gpt-neox without biases exported" || ok
check test -z "$(ls -A "$w" | grep -E '^\.|fire\.gguf|nb\.gguf|b_ex\.gguf|bake')"

if [ "$lc" = 1 ]; then
  for f in $models n_rp n_tp; do node "$w/run.mjs" "$w/$f.gguf" 20 "$prompt" 1 >"$w/lc_$f.json" && ok || bad "llama.cpp $f.gguf"; done
  for k in $models; do "$bin" forward "$w/$k.gguf" --ids "$prompt" --generate 20 --threads 1 >"$w/g_$k.txt" && ok || bad "generate $k"; done
  "$py" - "$w" $models <<'PY' && ok || bad "llama.cpp == engine on the fused-family files"
import sys, json, numpy as np
w, models = sys.argv[1], sys.argv[2:]
ld = lambda n: np.fromfile(f"{w}/e_{n}.bin", "<f4").reshape(300, -1)
out = []
for f in models + ["n_rp", "n_tp"]:
    res = json.load(open(f"{w}/lc_{f}.json"))
    lc, e = np.array(res["logits"], np.float64), ld(f)
    d, scale = np.abs(lc - e).max(), np.abs(e).max()
    top2 = np.sort(e, 1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 2 * d  # positions whose winner no difference of size d can flip
    assert lc.shape == (300, 559) and d <= 1e-3 * scale, (f, d, scale)
    assert (lc.argmax(1) == e.argmax(1))[clear].all() and clear.sum() >= 290, (f, clear.sum())
    if f in models:  # llama.cpp's generator stops at the end-of-text id (1), the engine does not
        eng, n = [int(x) for x in open(f"{w}/g_{f}.txt").read().strip().split(",")], len(res["greedy"])
        assert n > 0 and res["greedy"] == eng[:n] and (n == 20 or eng[n] == 1), (f, res["greedy"], eng)
    out.append(f"{f} {d:.1e} ({d / scale:.0e} of {scale:.1f})")
print("llama.cpp logits == engine (max |diff|, relative):", "; ".join(out), "; greedy tokens equal")
PY
fi
finish
