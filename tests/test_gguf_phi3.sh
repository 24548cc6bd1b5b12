#!/usr/bin/env bash
# Phi-3 (issue 31): tiny random Phi3ForCausalLM folders (tests/gguf/make_random_family.py phi3: fused
# qkv_proj with GQA 4/2 and gate_up_proj, partial_rotary_factor 0.5, untied head; phi3_tied: tied head,
# whole-head rotary, sliding_window = max_position_embeddings) read and run by the engine, written as
# llama.cpp's `phi3` architecture and proven in llama.cpp (node-llama-cpp 3.22.1):
#   - names and keys as convert_hf_to_gguf.py's Phi3MiniModel writes them: attn_qkv (q | k | v rows, not
#     permuted: llama.cpp rotates halves as HF does), ffn_up holding gate | up [2 d_ff], no ffn_gate,
#     rope.dimension_count = the rotated dims (8 of 16), no output.weight when tied;
#   - `ctxpatch forward` on the GGUF == on the HF folder; GGUF -> safetensors equal to the source
#     tensors, config.json back as phi3 with partial_rotary_factor 0.5;
#   - llama.cpp's logits == the engine's at 41 and 300 tokens (past the 256 training length), max
#     |diff| <= 1e-4 x max |logit| (SiLU and RMSNorm in f32), greedy tokens equal on the 300;
#   - `patch --method temperature --tau 0.8` (q rows of qkv_proj / attn_qkv divided) == the rule, in
#     the engine and in llama.cpp; rope-pi refused (Phi3Config accepts no 'linear' rope_scaling);
#   - a certified temperature patch (passkey probes) written and passing `check`;
#   - longrope written as llama.cpp's rope_factors_long / rope_factors_short (+ attn_factor, original
#     length), read back, and equal to llama.cpp where its n_ctx picks the list the sequence picks;
#   - a GGUF with only one longrope tensor, or a sliding window below the context length, refused
#     with one line naming the tensor or key.
#   - a folder with a sliding window below the context length refused by --to gguf (llama.cpp's
#     phi3 runs none).
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
# folders not named phi3: llama.cpp sets token attributes of "</s>" etc. by name on a model whose
# general.name (the folder) contains "phi3" / "phi-3", and fails on a vocabulary without them
check "$py" "$src/tests/gguf/make_random_family.py" "$w/tiny" phi3
check "$py" "$src/tests/gguf/make_random_family.py" "$w/tinyt" phi3_tied 2
check "$bin" convert "$w/tiny" "$w/phi3.gguf" --to gguf
check "$bin" convert "$w/tinyt" "$w/phi3t.gguf" --to gguf
back_to_safetensors "$w/phi3.gguf" "$w/phi3_sf"
"$py" - "$w" <<'PY' && ok || bad "phi3 GGUF names, keys and rows"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
st = g.st_f32
hf, back = st(f"{w}/tiny/model.safetensors"), st(f"{w}/phi3_sf/model.safetensors")
_, kv, _, t, order = g.read(f"{w}/phi3.gguf")
assert kv["general.architecture"] == "phi3", kv["general.architecture"]
for key, v in {"phi3.block_count": 2, "phi3.embedding_length": 64, "phi3.attention.head_count": 4,
               "phi3.attention.head_count_kv": 2, "phi3.rope.dimension_count": 8,
               "phi3.context_length": 256, "phi3.feed_forward_length": 256}.items():
    assert kv[key] == v, (key, kv.get(key))
assert abs(kv["phi3.rope.freq_base"] - 1e4) < 1e-3 and abs(kv["phi3.attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-12
assert "output.weight" in t and not any(k.endswith(".bias") or "ffn_gate" in k for k in t), sorted(t)
for l in range(2):
    for gn, hn in (("attn_qkv", "self_attn.qkv_proj"), ("ffn_up", "mlp.gate_up_proj"), ("attn_output", "self_attn.o_proj")):
        a = g.f32(t[f"blk.{l}.{gn}.weight"]).reshape(-1)
        assert np.array_equal(a, hf[f"model.layers.{l}.{hn}.weight"].reshape(-1)), (l, gn)
assert sorted(back) == sorted(hf), sorted(set(back) ^ set(hf))
assert all(np.array_equal(back[k], hf[k]) for k in hf)
cfg = json.load(open(f"{w}/phi3_sf/config.json"))
assert cfg["model_type"] == "phi3" and cfg["partial_rotary_factor"] == 0.5, cfg
_, kv, _, t, _ = g.read(f"{w}/phi3t.gguf")
assert "output.weight" not in t and kv["phi3.rope.dimension_count"] == 16
print("phi3 GGUF: arch keys, 8 rotated dims, fused attn_qkv and ffn_up as HF's, no gate; safetensors back equal")
PY
prompt=$(random_ids 11 300)
short=$(cut -d, -f1-41 <<<"$prompt")
same_logits "$prompt" "$w/e_hf.bin" "$w/tiny" "$w/e_gguf.bin" "$w/phi3.gguf" "$w/e_sf.bin" "$w/phi3_sf"
engine_logits "$w/e_t.bin" "$w/phi3t.gguf" "$short"
# refusals: longrope's factor tensor, a window below the context length (the tied GGUF rewritten with
# ggml's layout by tests/gguf/make_gguf_cases.py's helpers, read by gguf_py)
"$py" - "$w" <<'PY' && ok || bad "write the refused phi3 GGUFs"
import sys, struct, gguf_py as g, make_gguf_cases as mk
w = sys.argv[1]
_, kv, types, t, order = g.read(f"{w}/phi3t.gguf")
def write(path, extra_kv=(), extra_tensors=()):
    kvs = [mk.kv(k, types[k], (v[1], v[0]) if types[k] == mk.ARR else v) for k, v in kv.items()
           if k != "general.alignment"] + [mk.kv(*x) for x in extra_kv]
    ts = [(n, t[n][1], {0: "F32", 1: "F16"}[t[n][0]], t[n][2]) for n in order] + list(extra_tensors)
    open(path, "wb").write(mk.gguf(kvs, ts))
write(f"{w}/lr1.gguf", extra_tensors=[("rope_factors_long.weight", [8], "F32", struct.pack("<8f", *[1.0] * 8))])
write(f"{w}/sw.gguf", extra_kv=[("phi3.attention.sliding_window", mk.U32, 128)])
write(f"{w}/same.gguf")
PY
engine_logits "$w/e_same.bin" "$w/same.gguf" "$short"
check cmp "$w/e_t.bin" "$w/e_same.bin"
for case in "lr1|CP_ECFG_POSITION: $w/lr1.gguf: tensor 'rope_factors_long.weight' without 'rope_factors_short.weight'" \
            "sw|CP_ECFG_FIELD: $w/sw.gguf: key 'phi3.attention.sliding_window': 128 is below the context length 256: llama.cpp's phi3 ignores it where transformers slides (which model the file means is unclear)"; do
  name=${case%%|*}
  "$bin" forward "$w/$name.gguf" --ids "$short" --out "$w/$name.bin" >/dev/null 2>"$w/$name.err"
  [ $? -ne 0 ] && [ ! -e "$w/$name.bin" ] && [ "$(cat "$w/$name.err")" = "ctxpatch: error ${case#*|}" ] && ok ||
    bad "refused phi3 GGUF ($name): $(cat "$w/$name.err")"
done
# longrope (Phi-3-mini-128k, Phi-3.5): max 1024 over the original 256 (factor 4, attention factor
# sqrt(1 + ln 4 / ln 256)); the engine runs it with the table of each call's length
# (tests/goldens/engine phi3_longrope*), ONNX refuses it with one line (the graph holds one table),
# GGUF carries it as llama.cpp's rope_factors_long / rope_factors_short and reads it back
cp -r "$w/tiny" "$w/lr"
"$py" - "$w/lr/config.json" <<'PY' && ok || bad "longrope config"
import json, sys
c = json.load(open(sys.argv[1]))
c.update(max_position_embeddings=1024, rope_scaling={"type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6],
                                                     "long_factor": [1.0, 2.5, 6.0, 12.0]})
json.dump(c, open(sys.argv[1], "w"))
PY
engine_logits "$w/e_lr.bin" "$w/lr" "$short"
engine_logits "$w/e_lr300.bin" "$w/lr" "$prompt"
"$bin" convert "$w/lr" "$w/lr_onnx" --to onnx >/dev/null 2>"$w/lro.err"
[ $? -ne 0 ] && [ ! -e "$w/lr_onnx" ] && [ "$(cat "$w/lro.err")" = "ctxpatch: error CP_EUNSUPPORTED: onnx export: key 'rope_scaling.type': 'longrope' is not written as ONNX (its RoPE frequencies change with the sequence length of each call; the graph holds one table)" ] &&
  ok || bad "longrope --to onnx: $(cat "$w/lro.err")"
# llama.cpp's context shift re-rotates cached keys with one table: not emulated under longrope
"$bin" verify "$w/lr" --probe passkey --lengths 128 --samples 1 --depths 0.5 --context-shift 96 >/dev/null 2>"$w/lrs.err"
[ $? -eq 1 ] && [ "$(wc -l <"$w/lrs.err")" -eq 1 ] && [ "$(cat "$w/lrs.err")" = "ctxpatch: error CP_EUNSUPPORTED: engine: llama.cpp's context shift is not emulated under longrope RoPE scaling" ] &&
  ok || bad "context shift under longrope: $(cat "$w/lrs.err")"
check "$bin" convert "$w/lr" "$w/lr.gguf" --to gguf
back_to_safetensors "$w/lr.gguf" "$w/lr_sf"
engine_logits "$w/e_lrg.bin" "$w/lr.gguf" "$short"
engine_logits "$w/e_lrg300.bin" "$w/lr.gguf" "$prompt"
engine_logits "$w/e_lrsf300.bin" "$w/lr_sf" "$prompt"
# float32 factors and attention factor in the GGUF: within 1e-6 of the config's doubles
check "$py" "$src/tests/onnx/compare_logits.py" "$w/e_lrg.bin" "$w/e_lr.bin" --vocab 559 --tol 1e-6 --label "longrope GGUF 41"
check "$py" "$src/tests/onnx/compare_logits.py" "$w/e_lrg300.bin" "$w/e_lr300.bin" --vocab 559 --tol 1e-6 --label "longrope GGUF 300"
check "$py" "$src/tests/onnx/compare_logits.py" "$w/e_lrsf300.bin" "$w/e_lr300.bin" --vocab 559 --tol 1e-6 --label "longrope GGUF -> sf"
# the lists matter: the unscaled model is far (so llama.cpp's match below is the longrope one)
"$py" "$src/tests/onnx/compare_logits.py" "$w/e_lr300.bin" "$w/e_hf.bin" --vocab 559 --tol 1e-2 >/dev/null &&
  bad "longrope leaves the 300-token logits within 1e-2 of the unscaled model" || ok
"$py" - "$w" <<'PY' && ok || bad "longrope GGUF tensors and keys"
import sys, json, math, numpy as np, gguf_py as g
w = sys.argv[1]
_, kv, _, t, _ = g.read(f"{w}/lr.gguf")
assert list(g.f32(t["rope_factors_long.weight"])) == [1.0, 2.5, 6.0, 12.0], g.f32(t["rope_factors_long.weight"])
assert np.allclose(g.f32(t["rope_factors_short.weight"]), [1.0, 1.1, 1.3, 1.6], rtol=1e-7)
assert kv["phi3.rope.scaling.original_context_length"] == 256 and kv["phi3.context_length"] == 1024, kv
assert abs(kv["phi3.rope.scaling.attn_factor"] - math.sqrt(1 + math.log(4) / math.log(256))) < 1e-7
c = json.load(open(f"{w}/lr_sf/config.json"))
assert c["rope_scaling"]["type"] == "longrope" and c["original_max_position_embeddings"] == 256, c
print("longrope GGUF: rope_factors_long/short, attn_factor %.7f, original 256; read back as longrope"
      % kv["phi3.rope.scaling.attn_factor"])
PY
# a sliding window below the context length (Phi-3-mini-4k's 2047 of 4096): llama.cpp's phi3 drops it
# (full attention), so --to gguf refuses it naming the key, nothing written
cp -r "$w/tiny" "$w/swin"
sed -i 's/"sliding_window": null/"sliding_window": 128/' "$w/swin/config.json"
"$bin" convert "$w/swin" "$w/swin.gguf" --to gguf >/dev/null 2>"$w/swin.err"
[ $? -ne 0 ] && [ ! -e "$w/swin.gguf" ] && [ "$(cat "$w/swin.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/swin: key 'sliding_window': 128 is below the context length 256, but llama.cpp's phi3 runs no sliding window (it would attend to keys beyond it); use --to onnx" ] &&
  ok || bad "phi3 window --to gguf: $(cat "$w/swin.err")"
# patches: a temperature baked into the q rows of qkv_proj (folder) and of attn_qkv (GGUF) equals the
# rule; rope-pi refused (Phi3Config raises on a 'linear' rope_scaling), nothing written
echo '{"temperature": 0.8}' >"$w/t.json"
check "$bin" patch "$w/tiny" "$w/pt" --method temperature --tau 0.8 --no-verify
check "$bin" patch "$w/tiny" "$w/pt.gguf" --method temperature --tau 0.8 --no-verify --to gguf
engine_logits "$w/e_rule.bin" "$w/tiny" "$short" --rule "$w/t.json"
engine_logits "$w/e_pt.bin" "$w/pt" "$short"
check "$py" "$src/tests/onnx/compare_logits.py" "$w/e_pt.bin" "$w/e_rule.bin" --vocab 559 --label "phi3 baked tau"
engine_logits "$w/e_id.bin" "$w/tiny" "$short"
"$py" "$src/tests/onnx/compare_logits.py" "$w/e_id.bin" "$w/e_rule.bin" --vocab 559 --tol 1e-2 >/dev/null &&
  bad "tau 0.8 leaves the logits within 1e-2" || ok
"$bin" patch "$w/tiny" "$w/pr" --method rope-pi --factor 2 --no-verify >/dev/null 2>"$w/pr.err"
[ $? -ne 0 ] && [ ! -e "$w/pr" ] && [ "$(cat "$w/pr.err")" = "ctxpatch: error CP_EARG: $w/tiny/config.json: key 'rope_scaling.type': rope-pi would write 'linear', which transformers' Phi3Config refuses (default or longrope only); use a temperature or lm-infinite patch" ] &&
  ok || bad "rope-pi on phi3: $(cat "$w/pr.err")"
# the pipeline: a certified patch (passkey at 128 and 320 tokens; random weights pass only as "no
# drop": the run must complete and write), then check on it
check "$bin" patch "$w/tiny" "$w/pv" --method temperature --tau 0.9 --verify passkey --lengths 128,320 --samples 2 \
  --depths 0:1:2 --threads 1 --accept-no-gain --accept-underpowered
check "$bin" check "$w/pv"
"$py" -c "import json,sys; c=json.load(open(sys.argv[1])); assert c['model']['family'] == 'phi3', c['model']" \
  "$w/pv/certificate.json" && ok || bad "certificate family"
llamacpp_vs_engine "phi3 tau 0.8 baked in attn_qkv" "$w/pt.gguf" "$short" "$w/e_rule.bin" "$w/lcpt.json"
llamacpp_vs_engine phi3 "$w/phi3.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json" 1e-4 20
llamacpp_vs_engine "phi3 tied, 41 tokens" "$w/phi3t.gguf" "$short" "$w/e_t.bin" "$w/lct.json"
if [ "$lc" = 1 ]; then
  # longrope: llama.cpp picks the list by its context size (n_ctx_seq > original 256: long), transformers
  # and the engine by the sequence (> 256: long). Equal where both pick the same list: 300 tokens in a
  # context of 512 (long), 41 in a context of 256 (short); 41 in 512 is llama.cpp's long list against
  # the engine's short one, which must differ (docs/gguf.md states it)
  llamacpp_vs_engine "phi3 longrope, 300 tokens, n_ctx 512 (long)" "$w/lr.gguf" "$prompt" "$w/e_lrg300.bin" \
    "$w/lclr300.json"
  LLAMACPP_CTX=256 llamacpp_vs_engine "phi3 longrope, 41 tokens, n_ctx 256 (short)" "$w/lr.gguf" "$short" \
    "$w/e_lrg.bin" "$w/lclr41.json"
  node "$w/run.mjs" "$w/lr.gguf" 0 "$short" 1 >"$w/lclr41x.json" && ok || bad "llama.cpp lr.gguf 41 in 512"
  "$py" "$src/tests/gguf/llamacpp_compare.py" "phi3 longrope, 41 tokens, n_ctx 512" "$w/lclr41x.json" "$w/e_lrg.bin" \
    41 559 >/dev/null 2>&1 && bad "llama.cpp's long list at n_ctx 512 matches the engine's short one at 41" || ok
fi
finish
