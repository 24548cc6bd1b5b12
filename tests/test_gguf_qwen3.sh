#!/usr/bin/env bash
# Qwen3 (issue 31): a tiny random Qwen3ForCausalLM folder (tests/gguf/make_random_family.py qwen3:
# per-head q/k RMSNorm, head_dim 32 where hidden / heads is 16, GQA 4/2, tied head, no biases)
# read and run by the engine, written as llama.cpp's `qwen3` architecture and proven in llama.cpp
# (node-llama-cpp 3.22.1):
#   - names and keys as llama.cpp's converter writes them (Qwen3Model, a Qwen2Model: q/k rows NOT
#     permuted, llama.cpp rotates halves as HF does; blk.N.attn_q_norm / attn_k_norm [head_dim];
#     attention.key_length / value_length 32; no output.weight for the tied head);
#   - `ctxpatch forward` on the GGUF == on the HF folder (the reader maps it back), GGUF ->
#     safetensors equal to the source tensors;
#   - llama.cpp's logits on a 300-token prompt (past the 256 training length) == the engine's,
#     max |diff| <= 1e-4 x max |logit| (SiLU and RMSNorm in f32: no lookup table as for GELU),
#     greedy tokens equal;
#   - `inspect` on the GGUF says qwen3, head_dim 32, the per-head norm;
#   - `patch --method temperature --tau 0.8 --to gguf` (tau baked into attn_q_norm) run by
#     llama.cpp == `forward --rule {"temperature": 0.8}` on the folder, within the same tolerance;
#   - a Mistral with explicit head_dim (make_random_family.py mistral_hd) runs in llama.cpp.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"
check "$py" "$src/tests/gguf/make_random_family.py" "$w/qwen3" qwen3
check "$bin" convert "$w/qwen3" "$w/qwen3.gguf" --to gguf
check "$bin" convert "$w/qwen3.gguf" "$w/qwen3_sf" --to safetensors
"$py" - "$w" <<'PY' && ok || bad "qwen3 GGUF names, keys and rows"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
def st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
            for k, e in hdr.items() if k != "__metadata__"}
hf, back = st(f"{w}/qwen3/model.safetensors"), st(f"{w}/qwen3_sf/model.safetensors")
_, kv, _, t, order = g.read(f"{w}/qwen3.gguf")
assert kv["general.architecture"] == "qwen3", kv["general.architecture"]
for key, v in {"qwen3.block_count": 2, "qwen3.embedding_length": 64, "qwen3.attention.head_count": 4,
               "qwen3.attention.head_count_kv": 2, "qwen3.attention.key_length": 32,
               "qwen3.attention.value_length": 32, "qwen3.rope.dimension_count": 32,
               "qwen3.context_length": 256, "qwen3.feed_forward_length": 256}.items():
    assert kv[key] == v, (key, kv.get(key))
assert abs(kv["qwen3.rope.freq_base"] - 1e6) < 1 and abs(kv["qwen3.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
assert "output.weight" not in t
for l in range(2):
    for r in ("q", "k", "v", "output"):
        a = g.f32(t[f"blk.{l}.attn_{r}.weight"]).reshape(-1)
        assert np.array_equal(a, hf[f"model.layers.{l}.self_attn.{'o' if r == 'output' else r}_proj.weight"].reshape(-1)), (l, r)
        assert f"blk.{l}.attn_{r}.bias" not in t
    for r in ("q", "k"):
        a = g.f32(t[f"blk.{l}.attn_{r}_norm.weight"])
        assert a.shape == (32,) and np.array_equal(a, hf[f"model.layers.{l}.self_attn.{r}_norm.weight"]), (l, r)
assert sorted(back) == sorted(hf), sorted(set(back) ^ set(hf))
assert all(np.array_equal(back[k], hf[k]) for k in hf)
cfg = json.load(open(f"{w}/qwen3_sf/config.json"))
assert cfg["model_type"] == "qwen3" and cfg["head_dim"] == 32, cfg
print("qwen3 GGUF: arch keys, head_dim 32, q/k rows in HF order, q/k norms, tied head; safetensors back equal")
PY
"$bin" inspect "$w/qwen3.gguf" >"$w/inspect.txt" 2>&1 && ok || bad "inspect qwen3.gguf"
grep -q "model_type qwen3, Qwen3ForCausalLM" "$w/inspect.txt" && grep -q "d_head 32" "$w/inspect.txt" &&
  grep -q "per-head q/k norm" "$w/inspect.txt" && ok || bad "inspect: $(cat "$w/inspect.txt")"
# a temperature baked into q_norm (docs/patching.md), written as GGUF: llama.cpp runs it unchanged
check "$bin" patch "$w/qwen3" "$w/q3t.gguf" --method temperature --tau 0.8 --no-verify --to gguf
echo '{"temperature": 0.8}' >"$w/t.json"
prompt=$("$py" -c "import random; r=random.Random(11); print(','.join(['2']+[str(r.randrange(3,559)) for _ in range(299)]))")
check "$bin" forward "$w/qwen3" --ids "$prompt" --out "$w/e_hf.bin" --threads 1
check "$bin" forward "$w/qwen3.gguf" --ids "$prompt" --out "$w/e_gguf.bin" --threads 1
check "$bin" forward "$w/qwen3_sf" --ids "$prompt" --out "$w/e_sf.bin" --threads 1
check cmp "$w/e_hf.bin" "$w/e_gguf.bin"
check cmp "$w/e_hf.bin" "$w/e_sf.bin"
check "$bin" forward "$w/qwen3" --ids "$prompt" --rule "$w/t.json" --out "$w/e_t.bin" --threads 1
if [ "$lc" = 1 ]; then
  node "$w/run.mjs" "$w/qwen3.gguf" 20 "$prompt" 1 >"$w/lc.json" && ok || bad "llama.cpp qwen3.gguf"
  node "$w/run.mjs" "$w/q3t.gguf" 0 "$prompt" 1 >"$w/lct.json" && ok || bad "llama.cpp q3t.gguf"
  "$bin" forward "$w/qwen3.gguf" --ids "$prompt" --generate 20 --threads 1 >"$w/g.txt" && ok || bad "generate"
  check "$py" "$src/tests/gguf/llamacpp_compare.py" qwen3 "$w/lc.json" "$w/e_gguf.bin" 300 559 "$w/g.txt"
  # the baked temperature: llama.cpp on the patched GGUF == the engine with the rule, != without it
  check "$py" "$src/tests/gguf/llamacpp_compare.py" "qwen3 tau 0.8" "$w/lct.json" "$w/e_t.bin" 300 559
  "$py" - "$w" <<'PY' && ok || bad "the tau 0.8 rule changes the engine's logits"
import sys, numpy as np
w = sys.argv[1]
e = np.fromfile(f"{w}/e_gguf.bin", "<f4").reshape(300, -1)
et = np.fromfile(f"{w}/e_t.bin", "<f4").reshape(300, -1)
assert np.abs(et - e).max() > 1e-2 * np.abs(e).max(), np.abs(et - e).max()
PY
  # Mistral with an explicit head_dim (32, hidden 64 / 4 heads): llama.cpp needs value_length as
  # well as key_length (without it: "tensor 'blk.0.attn_v.weight' has wrong shape")
  check "$py" "$src/tests/gguf/make_random_family.py" "$w/mis" mistral_hd
  check "$bin" convert "$w/mis" "$w/mis.gguf" --to gguf
  short=$(cut -d, -f1-100 <<<"$prompt")
  check "$bin" forward "$w/mis" --ids "$short" --out "$w/e_mis.bin" --threads 1
  node "$w/run.mjs" "$w/mis.gguf" 0 "$short" 1 >"$w/lcm.json" && ok || bad "llama.cpp mis.gguf"
  "$py" - "$w" <<'PY' && ok || bad "llama.cpp == engine on mistral with head_dim"
import sys, json, numpy as np
w = sys.argv[1]
lc = np.array(json.load(open(f"{w}/lcm.json"))["logits"], np.float64)
e = np.fromfile(f"{w}/e_mis.bin", "<f4").reshape(lc.shape[0], -1)
d = np.abs(lc - e).max()
assert d <= 1e-4 * np.abs(e).max(), d
print(f"llama.cpp mistral head_dim 32 == engine: max |diff| {d:.2e} over {lc.shape[0]} tokens")
PY
fi
finish
