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
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/qwen3" qwen3
back_to_safetensors "$w/qwen3.gguf" "$w/qwen3_sf"
"$py" - "$w" <<'PY' && ok || bad "qwen3 GGUF names, keys and rows"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
st = g.st_f32
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
prompt=$(random_ids 11 300)
same_logits "$prompt" "$w/e_hf.bin" "$w/qwen3" "$w/e_gguf.bin" "$w/qwen3.gguf" "$w/e_sf.bin" "$w/qwen3_sf"
engine_logits "$w/e_t.bin" "$w/qwen3" "$prompt" --rule "$w/t.json"
llamacpp_vs_engine qwen3 "$w/qwen3.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json" 1e-4 20
# the baked temperature: llama.cpp on the patched GGUF == the engine with the rule, != without it
llamacpp_vs_engine "qwen3 tau 0.8" "$w/q3t.gguf" "$prompt" "$w/e_t.bin" "$w/lct.json"
if [ "$lc" = 1 ]; then
  "$py" - "$w" <<'PY' && ok || bad "the tau 0.8 rule changes the engine's logits"
import sys, numpy as np
w = sys.argv[1]
e = np.fromfile(f"{w}/e_gguf.bin", "<f4").reshape(300, -1)
et = np.fromfile(f"{w}/e_t.bin", "<f4").reshape(300, -1)
assert np.abs(et - e).max() > 1e-2 * np.abs(e).max(), np.abs(et - e).max()
PY
  # Mistral with an explicit head_dim (32, hidden 64 / 4 heads): llama.cpp needs value_length as
  # well as key_length (without it: "tensor 'blk.0.attn_v.weight' has wrong shape")
  family_gguf "$w/mis" mistral_hd
  short=$(cut -d, -f1-100 <<<"$prompt")
  engine_logits "$w/e_mis.bin" "$w/mis" "$short"
  llamacpp_vs_engine "mistral head_dim 32" "$w/mis.gguf" "$short" "$w/e_mis.bin" "$w/lcm.json"
fi
finish
