#!/usr/bin/env bash
# Granite (issue 31): a tiny random GraniteForCausalLM folder (tests/gguf/make_random_family.py
# granite: the Llama body, GQA 4/2, tied head, embedding_multiplier 6, residual_multiplier 0.25,
# attention_multiplier 0.375, logits_scaling 3) read and run by the engine, written as llama.cpp's
# `granite` architecture and proven in llama.cpp (node-llama-cpp 3.22.1):
#   - keys as llama.cpp's converter writes them (GraniteModel): granite.embedding_scale,
#     residual_scale, attention.scale, logit_scale; q/k rows permuted as llama's (NORM rope);
#   - `ctxpatch forward` on the GGUF == on the HF folder == on the GGUF read back as safetensors
#     (config.json says granite with the four multipliers);
#   - llama.cpp's logits at 41 and 300 tokens (300 past the 256 training length) == the engine's,
#     max |diff| <= 1e-4 x max |logit| (SiLU and RMSNorm in f32), greedy tokens equal;
#   - each multiplier matters: the engine's logits move when any one is reset to 1;
#   - `patch --method temperature --tau 0.8 --to gguf` (tau baked into attn_q) run by llama.cpp ==
#     `forward --rule {"temperature": 0.8}` on the folder, within the same tolerance;
#   - `inspect` says granite and the multipliers.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/gr" granite
back_to_safetensors "$w/gr.gguf" "$w/gr_sf"
"$py" - "$w" <<'PY' && ok || bad "granite GGUF keys and config back"
import sys, json, gguf_py as g
w = sys.argv[1]
_, kv, _, t, order = g.read(f"{w}/gr.gguf")
assert kv["general.architecture"] == "granite", kv["general.architecture"]
for key, v in {"granite.embedding_scale": 6.0, "granite.residual_scale": 0.25, "granite.attention.scale": 0.375,
               "granite.logit_scale": 3.0}.items():
    assert abs(kv[key] - v) < 1e-7, (key, kv.get(key))
assert kv["granite.block_count"] == 2 and kv["granite.attention.head_count_kv"] == 2 and "output.weight" not in t
cfg = json.load(open(f"{w}/gr_sf/config.json"))
assert cfg["model_type"] == "granite" and cfg["embedding_multiplier"] == 6 and cfg["logits_scaling"] == 3, cfg
print("granite GGUF: the four multiplier keys, tied head; read back as model_type granite")
PY
"$bin" inspect "$w/gr.gguf" >"$w/inspect.txt" 2>&1 && ok || bad "inspect gr.gguf"
grep -q "model_type granite, GraniteForCausalLM" "$w/inspect.txt" &&
  grep -q "granite:       embedding x 6, residual x 0.25, attention scale 0.375, logits / 3" "$w/inspect.txt" && ok ||
  bad "inspect: $(cat "$w/inspect.txt")"
prompt=$(random_ids 13 300)
short=$(cut -d, -f1-41 <<<"$prompt")
same_logits "$prompt" "$w/e_hf.bin" "$w/gr" "$w/e_gguf.bin" "$w/gr.gguf" "$w/e_sf.bin" "$w/gr_sf"
engine_logits "$w/e41.bin" "$w/gr.gguf" "$short"
# a temperature baked into q_proj (docs/patching.md), written as GGUF: llama.cpp runs it unchanged
check "$bin" patch "$w/gr" "$w/grt.gguf" --method temperature --tau 0.8 --no-verify --to gguf
echo '{"temperature": 0.8}' >"$w/t.json"
engine_logits "$w/e_t.bin" "$w/gr" "$short" --rule "$w/t.json"
# each multiplier reset to 1 in turn moves the logits (so none of them is silently ignored)
for k in embedding_multiplier residual_multiplier attention_multiplier logits_scaling; do
  mkdir -p "$w/no_$k" && ln -sf "$w/gr/model.safetensors" "$w/no_$k/model.safetensors"
  "$py" -c "import json,sys; c=json.load(open(sys.argv[1])); c[sys.argv[3]]=1.0; json.dump(c, open(sys.argv[2],'w'))" \
    "$w/gr/config.json" "$w/no_$k/config.json" "$k"
  engine_logits "$w/e_no_$k.bin" "$w/no_$k" "$short"
done
"$py" - "$w" <<'PY' && ok || bad "each granite multiplier changes the logits"
import sys, numpy as np
w = sys.argv[1]
e = np.fromfile(f"{w}/e41.bin", "<f4")
for k in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
    d = np.abs(np.fromfile(f"{w}/e_no_{k}.bin", "<f4") - e).max()
    assert d > 1e-2 * np.abs(e).max(), (k, d)
PY
llamacpp_vs_engine granite "$w/gr.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json" 1e-4 20
llamacpp_vs_engine "granite 41" "$w/gr.gguf" "$short" "$w/e41.bin" "$w/lc41.json"
llamacpp_vs_engine "granite tau 0.8" "$w/grt.gguf" "$short" "$w/e_t.bin" "$w/lct.json"
finish
