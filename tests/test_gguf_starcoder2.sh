#!/usr/bin/env bash
# StarCoder2 (issue 31): a tiny random Starcoder2ForCausalLM folder (tests/gguf/make_random_family.py
# starcoder2: LayerNorms with bias, biased q/k/v/o and c_fc -> gelu tanh -> c_proj, GQA 4/2, tied
# head, no window) read and run by the engine, written as llama.cpp's `starcoder2` architecture
# (convert_hf_to_gguf.py StarCoder2Model; src/llama-model.cpp LLM_ARCH_STARCODER2) and proven in
# llama.cpp (node-llama-cpp 3.22.1):
#   - keys and tensors as llama.cpp's converter writes them: starcoder2.attention.layer_norm_epsilon,
#     head_count_kv 2, every bias, q/k rows in HF's order (NEOX rope), no output.weight (tied);
#   - `ctxpatch forward` on the GGUF == on the HF folder == on the GGUF read back as safetensors;
#   - llama.cpp's logits at 41 and 300 tokens (300 past the 256 training length) == the engine's,
#     max |diff| <= 1e-3 x max |logit| (ggml's GELU runs through an f16 table, as for gemma), greedy
#     tokens equal; a temperature baked into attn_q likewise;
#   - refused in one line, nothing written: a window below the context length (llama.cpp's
#     starcoder2 reads no window key and would attend past it), use_bias false (its biases are
#     required tensors, src/models/starcoder2.cpp), heads other than D / H, exact GELU;
#   - `inspect` says starcoder2, and the window (64 on both layers) of a folder that has one.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/sc" starcoder2
back_to_safetensors "$w/sc.gguf" "$w/sc_sf"
"$py" - "$w" <<'PY' && ok || bad "starcoder2 GGUF keys, tensors and config back"
import sys, json, gguf_py as g
w = sys.argv[1]
_, kv, _, t, order = g.read(f"{w}/sc.gguf")
assert kv["general.architecture"] == "starcoder2", kv["general.architecture"]
assert abs(kv["starcoder2.attention.layer_norm_epsilon"] - 1e-5) < 1e-10
assert kv["starcoder2.block_count"] == 2 and kv["starcoder2.attention.head_count_kv"] == 2
assert abs(kv["starcoder2.rope.freq_base"] - 100000) < 1e-3 and "output.weight" not in t
for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_up", "ffn_down"):
    assert f"blk.1.{n}.weight" in t and f"blk.1.{n}.bias" in t, n
assert "output_norm.bias" in t
cfg = json.load(open(f"{w}/sc_sf/config.json"))
assert cfg["model_type"] == "starcoder2" and cfg["use_bias"] is True and cfg["num_key_value_heads"] == 2, cfg
assert cfg["tie_word_embeddings"] is True and abs(cfg["norm_epsilon"] - 1e-5) < 1e-10, cfg
print("starcoder2 GGUF: keys, every bias, tied head; read back as model_type starcoder2")
PY
"$bin" inspect "$w/sc.gguf" >"$w/inspect.txt" 2>&1 && ok || bad "inspect sc.gguf"
[[ $(cat "$w/inspect.txt") == *"model_type starcoder2, Starcoder2ForCausalLM"* ]] && ok || bad "inspect: $(cat "$w/inspect.txt")"
# refusals: one line naming the key, nothing written
refuse() { # NAME KEY VALUE MESSAGE-PART
  mkdir -p "$w/$1" && ln -sf "$w/sc/model.safetensors" "$w/$1/model.safetensors"
  "$py" -c "import json,sys; c=json.load(open(sys.argv[1])); c[sys.argv[3]]=json.loads(sys.argv[4]); json.dump(c, open(sys.argv[2],'w'))" \
    "$w/sc/config.json" "$w/$1/config.json" "$2" "$3"
  "$bin" convert "$w/$1" "$w/$1.gguf" --to gguf >"$w/$1.out" 2>"$w/$1.err"
  rc=$?
  [ $rc != 0 ] && [ ! -e "$w/$1.gguf" ] && [ "$(wc -l <"$w/$1.err")" = 1 ] && [[ $(cat "$w/$1.err") == *"$4"* ]] && ok ||
    bad "$1: exit $rc: $(cat "$w/$1.err")"
}
refuse win sliding_window 64 "key 'sliding_window': 64 is below the context length 256"
refuse nobias use_bias false "key 'use_bias': false"
refuse exact hidden_act '"gelu"' "key 'hidden_act': 'gelu'"
refuse hd head_dim 32 "key 'head_dim': 32 x 4 heads is not the width 64"
# inspect states the window of the folder that GGUF refused (every layer, Starcoder2Model)
"$bin" inspect "$w/win" >"$w/inspect_win.txt" 2>&1 && [[ $(cat "$w/inspect_win.txt") == *"window:        64 keys on 2 of 2 layers"* ]] &&
  ok || bad "inspect win: $(cat "$w/inspect_win.txt")"
prompt=$(random_ids 17 300)
short=$(cut -d, -f1-41 <<<"$prompt")
same_logits "$prompt" "$w/e_hf.bin" "$w/sc" "$w/e_gguf.bin" "$w/sc.gguf" "$w/e_sf.bin" "$w/sc_sf"
engine_logits "$w/e41.bin" "$w/sc.gguf" "$short"
# a temperature baked into q_proj (weight and bias), written as GGUF: llama.cpp runs it unchanged
check "$bin" patch "$w/sc" "$w/sct.gguf" --method temperature --tau 0.8 --no-verify --to gguf
echo '{"temperature": 0.8}' >"$w/t.json"
engine_logits "$w/e_t.bin" "$w/sc" "$short" --rule "$w/t.json"
# llama.cpp within 1e-3 of max |logit|: ggml's f16 GELU table (lab/gemma_gelu_table.py)
llamacpp_vs_engine "starcoder2, 300 tokens" "$w/sc.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json" 1e-3 20
llamacpp_vs_engine "starcoder2, 41 tokens" "$w/sc.gguf" "$short" "$w/e41.bin" "$w/lc41.json" 1e-3
llamacpp_vs_engine "starcoder2 tau 0.8" "$w/sct.gguf" "$short" "$w/e_t.bin" "$w/lct.json" 1e-3
finish
