#!/usr/bin/env bash
# OLMo 2 (issue 31): a tiny random Olmo2ForCausalLM folder (tests/gguf/make_random_family.py olmo2:
# no pre-norms, post-attention and post-FFN norms on the module outputs, q_norm / k_norm over the
# whole q and k projections, GQA 4/2, untied head) read and run by the engine, written as llama.cpp's
# `olmo2` architecture and proven in llama.cpp (node-llama-cpp):
#   - tensors as llama.cpp's LLM_ARCH_OLMO2 loads them: attn_q_norm [D], attn_k_norm [Hkv*dh],
#     post_attention_norm, post_ffw_norm, no attn_norm / ffn_norm; q/k rows as stored (NEOX rope);
#   - `ctxpatch forward` on the GGUF == on the HF folder == on the GGUF read back as safetensors;
#   - llama.cpp's logits at 41 and 300 tokens (300 past the 256 training length) == the engine's,
#     max |diff| <= 1e-4 x max |logit| (SiLU and RMSNorm in f32), greedy tokens equal;
#   - `patch --method temperature --tau 0.8 --to gguf` (tau baked into the q_norm weights) run by
#     llama.cpp == `forward --rule {"temperature": 0.8}` on the folder, within the same tolerance;
#   - rope_scaling linear (factor 2, as Llama's) written as olmo2.rope.scaling.* and run by llama.cpp
#     at 300 tokens == the engine on the folder, within the same tolerance;
#   - a head width other than hidden / heads refused for GGUF with one line, nothing written;
#   - a per-head (Qwen3-shaped) q_norm [dh] refused at load, naming the tensor and both shapes;
#   - `inspect` says olmo2 and its norms.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/ol" olmo2
back_to_safetensors "$w/ol.gguf" "$w/ol_sf"
"$py" - "$w" <<'PY' && ok || bad "olmo2 GGUF tensors and config back"
import sys, json, gguf_py as g
w = sys.argv[1]
_, kv, _, t, order = g.read(f"{w}/ol.gguf")
assert kv["general.architecture"] == "olmo2", kv["general.architecture"]
assert kv["olmo2.block_count"] == 2 and kv["olmo2.attention.head_count_kv"] == 2 and "output.weight" in t
assert abs(kv["olmo2.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
names = set(t)
for i in range(2):
    for n in ("attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm", "attn_q", "ffn_gate"):
        assert f"blk.{i}.{n}.weight" in names, n
    assert f"blk.{i}.attn_norm.weight" not in names and f"blk.{i}.ffn_norm.weight" not in names
cfg = json.load(open(f"{w}/ol_sf/config.json"))
assert cfg["model_type"] == "olmo2" and cfg["architectures"] == ["Olmo2ForCausalLM"], cfg
print("olmo2 GGUF: whole q/k norms, post norms only, untied head; read back as model_type olmo2")
PY
"$bin" inspect "$w/ol.gguf" >"$w/inspect.txt" 2>&1 && ok || bad "inspect ol.gguf"
grep -q "model_type olmo2, Olmo2ForCausalLM" "$w/inspect.txt" &&
  grep -q "q/k norm over the whole projection" "$w/inspect.txt" &&
  grep -q "olmo2:         no pre-norms" "$w/inspect.txt" && ok || bad "inspect: $(cat "$w/inspect.txt")"
# llama.cpp's olmo2 takes the head width as hidden / heads: another head_dim is refused, nothing written
mkdir -p "$w/hd" && ln -sf "$w/ol/model.safetensors" "$w/hd/model.safetensors"
"$py" -c "import json,sys; c=json.load(open(sys.argv[1])); c['head_dim']=32; json.dump(c, open(sys.argv[2],'w'))" \
  "$w/ol/config.json" "$w/hd/config.json"
out=$("$bin" convert "$w/hd" "$w/hd.gguf" --to gguf 2>&1)
[ $? != 0 ] && [ ! -e "$w/hd.gguf" ] && [[ $out == *"llama.cpp's olmo2 takes the head width as hidden_size / num_attention_heads"* ]] &&
  ok || bad "head_dim 32 to gguf: $out"
# a Qwen3-shaped q_norm (one head's width) in an olmo2 folder: refused naming the tensor
mkdir -p "$w/ph" && cp "$w/ol/config.json" "$w/ph/"
"$py" - "$w/ol/model.safetensors" "$w/ph/model.safetensors" <<'PY' || bad "per-head q_norm folder"
import json, struct, sys, numpy as np, make_random_family as M
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, data = json.loads(b[8:8 + n]), b[8 + n:]
t = {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], "<f4").reshape(v["shape"])
     for k, v in h.items() if k != "__metadata__"}
t["model.layers.1.self_attn.q_norm.weight"] = t["model.layers.1.self_attn.q_norm.weight"][:16]
M.write_safetensors(sys.argv[2], t)
PY
out=$("$bin" forward "$w/ph" --ids 2,3,4 --out "$w/ph.bin" 2>&1)
[ $? != 0 ] && [ ! -e "$w/ph.bin" ] &&
  [[ $out == *"tensor 'model.layers.1.self_attn.q_norm.weight' has shape [16], expected [64]" ]] && ok ||
  bad "per-head q_norm: $out"
prompt=$(random_ids 17 300)
short=$(cut -d, -f1-41 <<<"$prompt")
same_logits "$prompt" "$w/e_hf.bin" "$w/ol" "$w/e_gguf.bin" "$w/ol.gguf" "$w/e_sf.bin" "$w/ol_sf"
engine_logits "$w/e41.bin" "$w/ol.gguf" "$short"
# a temperature baked into the q norms (docs/patching.md), written as GGUF: llama.cpp runs it unchanged
check "$bin" patch "$w/ol" "$w/olt.gguf" --method temperature --tau 0.8 --no-verify --to gguf
echo '{"temperature": 0.8}' >"$w/t.json"
engine_logits "$w/e_t.bin" "$w/ol" "$short" --rule "$w/t.json"
# linear rope_scaling (Olmo2RotaryEmbedding through ROPE_INIT_FUNCTIONS, as Llama's)
mkdir -p "$w/lin" && ln -sf "$w/ol/model.safetensors" "$w/lin/model.safetensors" && cp "$w/ol/tokenizer.json" "$w/lin/"
"$py" -c "import json,sys; c=json.load(open(sys.argv[1])); c['rope_scaling']={'type':'linear','factor':2.0}; json.dump(c, open(sys.argv[2],'w'))" \
  "$w/ol/config.json" "$w/lin/config.json"
check "$bin" convert "$w/lin" "$w/lin.gguf" --to gguf
engine_logits "$w/e_lin.bin" "$w/lin" "$prompt"
"$py" -c "import sys, numpy as np; a, b = (np.fromfile(f, '<f4') for f in sys.argv[1:]); assert np.abs(a - b).max() > 1e-2 * np.abs(b).max()" \
  "$w/e_lin.bin" "$w/e_hf.bin" && ok || bad "linear rope_scaling does not move the engine's logits"
llamacpp_vs_engine olmo2 "$w/ol.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json" 1e-4 20
llamacpp_vs_engine "olmo2 41" "$w/ol.gguf" "$short" "$w/e41.bin" "$w/lc41.json"
llamacpp_vs_engine "olmo2 tau 0.8" "$w/olt.gguf" "$short" "$w/e_t.bin" "$w/lct.json"
llamacpp_vs_engine "olmo2 linear x2" "$w/lin.gguf" "$prompt" "$w/e_lin.bin" "$w/lclin.json"
finish
