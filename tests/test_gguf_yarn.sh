#!/usr/bin/env bash
# YaRN in GGUF (issue 31): a tiny random Qwen3ForCausalLM with rope_scaling yarn
# (tests/gguf/make_random_family.py qwen3_yarn: factor 8 over an original 64, rope_theta 1e4) written
# as llama.cpp's keys, read back, and proven in llama.cpp (node-llama-cpp 3.22.1):
#   - qwen3.rope.scaling.type "yarn", .factor 8, .original_context_length 64, and no attn_factor or
#     yarn_* key (the default attention factor 0.1 ln 8 + 1 is ggml's own);
#   - GGUF -> safetensors gives the rope_scaling back; `forward` on the GGUF == on the HF folder;
#   - llama.cpp's logits on a 364-token prompt (300 past the original 64) == the engine's within
#     1e-4 x max |logit|, while the same weights without the scaling are far from them;
#   - on the llama architecture (make_random_family.py llama3's weights, q/k rows permuted, yarn
#     x8 over 64 instead of llama3), an explicit attention_factor becomes rope.scaling.attn_factor
#     (the key llama.cpp's llama reads; its converter's yarn_attn_factor is not read there) and
#     llama.cpp agrees again, while the default attention factor is far;
#   - what llama.cpp cannot run is refused in one exact line: beta_fast other than 32, truncate
#     false where it moves the ramp, dynamic NTK, a --train-len that moves the yarn model's length;
#     a GGUF whose yarn_beta_fast key llama.cpp would ignore is refused on reading.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/y" qwen3_yarn
back_to_safetensors "$w/y.gguf" "$w/y_sf"
"$py" - "$w" <<'PY' && ok || bad "yarn GGUF keys"
import sys, json, gguf_py as g
w = sys.argv[1]
_, kv, _, t, _ = g.read(f"{w}/y.gguf")
assert kv["qwen3.rope.scaling.type"] == "yarn" and kv["qwen3.rope.scaling.factor"] == 8.0, kv
assert kv["qwen3.rope.scaling.original_context_length"] == 64 and kv["qwen3.context_length"] == 512, kv
assert sorted(k for k in kv if ".rope.scaling." in k) == ["qwen3.rope.scaling.factor",
       "qwen3.rope.scaling.original_context_length", "qwen3.rope.scaling.type"], kv
back = json.load(open(f"{w}/y_sf/config.json"))["rope_scaling"]
assert back == {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}, back
print("yarn GGUF keys written and read back:", back)
PY
prompt=$(random_ids 17 364)
same_logits "$prompt" "$w/e_hf.bin" "$w/y" "$w/e_gguf.bin" "$w/y.gguf"
# the same weights without the scaling; a llama with yarn and an explicit attention factor
edit() { # DIR NEW_DIR PYTHON_STATEMENT_ON_c
  mkdir -p "$2" && cp "$1/model.safetensors" "$1/tokenizer.json" "$2/"
  "$py" -c "import json,sys; c=json.load(open(sys.argv[1])); $3; json.dump(c, open(sys.argv[2],'w'))" \
    "$1/config.json" "$2/config.json"
}
edit "$w/y" "$w/plain" "del c['rope_scaling']"
check "$py" "$src/tests/gguf/make_random_family.py" "$w/l3" llama3
edit "$w/l3" "$w/att" "c['max_position_embeddings'] = 512; c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 8.0, 'original_max_position_embeddings': 64, 'attention_factor': 1.5}"
engine_logits "$w/e_plain.bin" "$w/plain" "$prompt"
check "$bin" convert "$w/att" "$w/att.gguf" --to gguf
engine_logits "$w/e_att.bin" "$w/att" "$prompt"
edit "$w/att" "$w/att1" "del c['rope_scaling']['attention_factor']"
engine_logits "$w/e_att1.bin" "$w/att1" "$prompt"
"$py" - "$w" <<'PY' && ok || bad "attention_factor as attn_factor"
import sys, math, gguf_py as g
kv = g.read(f"{sys.argv[1]}/att.gguf")[1]
want = 1.5 / (0.1 * math.log(8) + 1)
assert abs(kv["llama.rope.scaling.attn_factor"] - want) < 1e-6 * want, kv
assert kv["llama.rope.scaling.type"] == "yarn" and "rope_freqs.weight" not in g.read(f"{sys.argv[1]}/att.gguf")[3]
assert not any("yarn_" in k for k in kv), kv
PY
back_to_safetensors "$w/att.gguf" "$w/att_sf"
"$py" -c "import json,sys; s=json.load(open(sys.argv[1]))['rope_scaling']; assert abs(s.pop('attention_factor') - 1.5) < 1e-6 and s == {'rope_type': 'yarn', 'factor': 8, 'original_max_position_embeddings': 64}, s" \
  "$w/att_sf/config.json" && ok || bad "attention_factor read back"
llamacpp_vs_engine yarn "$w/y.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json"
llamacpp_vs_engine yarn_attention_factor "$w/att.gguf" "$prompt" "$w/e_att.bin" "$w/lc_att.json"
if [ "$lc" = 1 ]; then
  "$py" - "$w" <<'PY' && ok || bad "llama.cpp's logits far from those without the scaling or the attention factor"
import sys, json, numpy as np
w = sys.argv[1]
for run, mine, other, what in (("lc", "gguf", "plain", "without the scaling"),
                               ("lc_att", "att", "att1", "with the default attention factor")):
    lc = np.array(json.load(open(f"{w}/{run}.json"))["logits"], np.float64)
    e = np.fromfile(f"{w}/e_{mine}.bin", "<f4").reshape(364, -1)
    o = np.fromfile(f"{w}/e_{other}.bin", "<f4").reshape(364, -1)
    d, do = np.abs(lc - e).max(), np.abs(lc - o).max()
    assert do > 100 * d and do > 1e-3 * np.abs(e).max(), (run, do, d)
    print(f"{run}: the model {what} is {do:.2e} from llama.cpp's logits (the one run {d:.2e})")
PY
fi
# What llama.cpp cannot run: refused in one exact line, nothing written.
edit "$w/y" "$w/beta" "c['rope_scaling']['beta_fast'] = 16"
edit "$w/y" "$w/trunc" "c['rope_scaling']['truncate'] = False"
edit "$w/y" "$w/dyn" "c['rope_scaling'] = {'rope_type': 'dynamic', 'factor': 2.0}"
for case in "beta|key 'rope_scaling.beta_fast': 16, but llama.cpp's qwen3 runs YaRN with beta_fast 32 and beta_slow 1 (it reads no yarn_beta key)" \
            "trunc|key 'rope_scaling.truncate': false, but llama.cpp always truncates YaRN's correction range, which moves pair 1's frequency by 0.0537 of it" \
            "dyn|key 'rope_scaling.type': 'dynamic' has no GGUF form (llama.cpp has no dynamic NTK scaling)"; do
  name=${case%%|*}
  "$bin" convert "$w/$name" "$w/$name.gguf" --to gguf >/dev/null 2>"$w/$name.err"
  [ $? -ne 0 ] && [ ! -e "$w/$name.gguf" ] &&
    [ "$(cat "$w/$name.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/$name: ${case#*|}" ] && ok ||
    bad "$name refused: $(cat "$w/$name.err")"
done
"$bin" convert "$w/y" "$w/tl.gguf" --to gguf --train-len 1024 >/dev/null 2>"$w/tl.err"
[ $? -ne 0 ] && [ ! -e "$w/tl.gguf" ] && [ "$(cat "$w/tl.err")" = "ctxpatch: error CP_EARG: $w/y: --train-len 1024: \
the yarn scaling is defined over max_position_embeddings 512 (original 64); another training length would change it" ] &&
  ok || bad "--train-len on yarn: $(cat "$w/tl.err")"
# A GGUF with a yarn_beta_fast key, which llama.cpp's qwen3 does not read: which was meant? Refused.
"$py" - "$w" <<'PY' && ok || bad "GGUF with yarn_beta_fast"
import sys, gguf_py as g, make_gguf_cases as m
w = sys.argv[1]
open(f"{w}/beta_key.gguf", "wb").write(m.rewrite(g.read(f"{w}/y.gguf"),
     lambda kl: kl.append(("qwen3.rope.scaling.yarn_beta_fast", m.F32, 16.0))))
PY
"$bin" inspect "$w/beta_key.gguf" >/dev/null 2>"$w/beta_key.err"
[ $? -ne 0 ] && [ "$(cat "$w/beta_key.err")" = "ctxpatch: error CP_ECFG_POSITION: $w/beta_key.gguf: key 'qwen3.rope.scaling.yarn_beta_fast' is 16, but llama.cpp's qwen3 does not read it and runs 32" ] && ok ||
  bad "yarn_beta_fast GGUF: $(cat "$w/beta_key.err")"
finish
