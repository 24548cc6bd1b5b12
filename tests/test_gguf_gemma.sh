#!/usr/bin/env bash
# Gemma and Gemma 2 (issue 31): tiny random folders (tests/gguf/make_random_family.py gemma: 2 layers,
# head_dim 32 on hidden 64, GQA 4/2, tied; gemma2: 3 layers, layers 0 and 2 slide with window 32,
# soft-caps 1.5 / 10, query_pre_attn_scalar = head_dim) written as llama.cpp's `gemma` / `gemma2`
# architectures and proven in llama.cpp (node-llama-cpp 3.22.1):
#   - names and keys as convert_hf_to_gguf.py's GemmaModel / Gemma2Model write them: every norm
#     stored as 1 + w (float32), Gemma 2's post_attention_norm / ffn_norm (pre_feedforward) /
#     post_ffw_norm, key_length / value_length 32, the soft-caps and the window; no output.weight;
#   - `ctxpatch forward` on the GGUF == on the folder == on GGUF -> safetensors (norms back as the
#     stored value - 1: w up to the rounding of w + 1, 1 + it the stored value exactly; config.json back with the window, the caps and query_pre_attn_scalar), bit for bit;
#   - llama.cpp's logits == the engine's at 300 tokens (gemma2: past the window, which moves the
#     engine's logits by 7.2 when removed) and 41 (gemma), max |diff| <= 1e-3 x max |logit|: ggml's
#     GELU is an f16 lookup table (measured 2.5e-4 and 3.2e-5; lab/gemma_gelu_table.py: the PyTorch
#     reference with that table is 4x and 18x closer to llama.cpp), greedy tokens equal;
#   - `patch --method temperature --tau 0.8 --to gguf` (q_proj / attn_q divided, before the soft-cap
#     as decision 17 puts tau) == the rule, in the engine and in llama.cpp;
#   - refused with one line naming the key, nothing written: what llama.cpp would run otherwise
#     (another query_pre_attn_scalar, other sliding layers, no attention soft-cap, an untied head),
#     and reading a gemma2 GGUF with a sliding_window_pattern key.
# Gemma 3 (gemma3_text as llama.cpp's `gemma3`; make_random_family.py gemma3: 6 layers, 0-4 sliding
# with window 32 at base 10000, layer 5 full at rope_theta 1e5 with linear scaling 8, q/k norms):
#   - attn_q_norm / attn_k_norm stored as 1 + w too (Gemma3Model adds 1 to every norm), rope.freq_base_swa,
#     rope.scaling linear 8, no soft-cap keys; forward on the GGUF == the folder (300 tokens) == GGUF ->
#     safetensors (41);
#   - llama.cpp's logits within 1e-3 of the engine's max |logit| at 300 tokens (past the 256 training
#     length and the window) and 41, and with a temperature baked into q_norm (measured 5.4e-5, 4.9e-5,
#     4.7e-5: the GELU table as above). Each piece moves the engine's logits by far more than that at
#     300 tokens (max |logit| 76): the linear scaling of layer 5 by 3.5, the window by 11.9, a local
#     base of 1e5 in place of 1e4 by 5.7;
#   - refused naming the key: layer_types llama.cpp's pattern 6 does not give, another
#     rope_local_base_freq, a final soft-cap, another query_pre_attn_scalar; reading a gemma3 GGUF
#     with a sliding_window_pattern key.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/g2" gemma2
family_gguf "$w/g1" gemma 2
back_to_safetensors "$w/g2.gguf" "$w/g2_sf"
"$py" - "$w" <<'PY' && ok || bad "gemma GGUF names, keys and norms"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
st = g.st_f32
for kind, layers in (("g2", 3), ("g1", 2)):
    hf = st(f"{w}/{kind}/model.safetensors")
    _, kv, _, t, _ = g.read(f"{w}/{kind}.gguf")
    arch = "gemma2" if kind == "g2" else "gemma"
    assert kv["general.architecture"] == arch, kv["general.architecture"]
    want = {"block_count": layers, "embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 2,
            "attention.key_length": 32, "attention.value_length": 32, "rope.dimension_count": 32,
            "context_length": 256, "feed_forward_length": 256}
    if kind == "g2":
        want.update({"attention.sliding_window": 32, "attn_logit_softcapping": 1.5, "final_logit_softcapping": 10.0})
    for key, v in want.items():
        assert kv[f"{arch}.{key}"] == v, (key, kv.get(f"{arch}.{key}"))
    assert "output.weight" not in t and not any(k.endswith(".bias") for k in t), sorted(t)
    norms = {"attn_norm": "input_layernorm"}
    norms.update({"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                  "post_ffw_norm": "post_feedforward_layernorm"} if kind == "g2" else {"ffn_norm": "post_attention_layernorm"})
    one = np.float32(1)
    for l in range(layers):
        for gn, hn in norms.items():
            assert np.array_equal(g.f32(t[f"blk.{l}.{gn}.weight"]), hf[f"model.layers.{l}.{hn}.weight"] + one), (l, gn)
        assert np.array_equal(g.f32(t[f"blk.{l}.attn_q.weight"]).reshape(-1), hf[f"model.layers.{l}.self_attn.q_proj.weight"].reshape(-1))
    assert np.array_equal(g.f32(t["output_norm.weight"]), hf["model.norm.weight"] + one)
back = st(f"{w}/g2_sf/model.safetensors")
hf = st(f"{w}/g2/model.safetensors")
# norms back as (1 + w) - 1: exact from the stored value (Sterbenz), w up to the rounding of w + 1
assert sorted(back) == sorted(hf) and all(np.array_equal(back[k], hf[k]) for k in hf if back[k].ndim == 2)
assert all(np.array_equal(back[k] + one, hf[k] + one) and np.abs(back[k] - hf[k]).max() <= 2 ** -24
           for k in hf if back[k].ndim == 1), "norms back"
cfg = json.load(open(f"{w}/g2_sf/config.json"))
assert (cfg["model_type"], cfg["sliding_window"], cfg["query_pre_attn_scalar"], cfg["attn_logit_softcapping"],
        cfg["final_logit_softcapping"]) == ("gemma2", 32, 32, 1.5, 10), cfg
print("gemma/gemma2 GGUF: arch keys, norms 1 + w, post norms, no output; safetensors back equal")
PY
prompt=$(random_ids 11 300)
short=$(cut -d, -f1-41 <<<"$prompt")
same_logits "$prompt" "$w/e_hf.bin" "$w/g2" "$w/e_gguf.bin" "$w/g2.gguf" "$w/e_sf.bin" "$w/g2_sf"
same_logits "$short" "$w/e_g1hf.bin" "$w/g1" "$w/e_g1.bin" "$w/g1.gguf"
# refusals before anything is written: what llama.cpp's gemma2 would run differently
for case in "qpas|{\"query_pre_attn_scalar\": 64}|key 'query_pre_attn_scalar': 64, but llama.cpp's gemma2 scales by 1/sqrt(32) (head_dim)" \
            "types|{\"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\"]}|key 'layer_types[0]': 'full_attention', but llama.cpp's gemma2 slides the even layers only" \
            "cap|{\"attn_logit_softcapping\": null}|key 'attn_logit_softcapping': null, but llama.cpp's gemma2 always soft-caps (50 and 30 without a key)" \
            "tied|{\"tie_word_embeddings\": false}|key 'tie_word_embeddings': false, but llama.cpp's gemma2 runs the embedding as its head"; do
  IFS='|' read -r name upd msg <<<"$case"
  cp -r "$w/g2" "$w/r_$name"
  "$py" -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c.update(json.loads(sys.argv[2])); json.dump(c, open(p, 'w'))" \
    "$w/r_$name/config.json" "$upd"
  "$bin" convert "$w/r_$name" "$w/r_$name.gguf" --to gguf >/dev/null 2>"$w/r_$name.err"
  [ $? -ne 0 ] && [ ! -e "$w/r_$name.gguf" ] && [ "$(cat "$w/r_$name.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/r_$name: $msg" ] &&
    ok || bad "refused gemma2 ($name): $(cat "$w/r_$name.err")"
done
"$py" - "$w" <<'PY' && ok || bad "write the pattern GGUF"
import sys, gguf_py as g, make_gguf_cases as mk
w = sys.argv[1]
_, kv, types, t, order = g.read(f"{w}/g2.gguf")
kvs = [mk.kv(k, types[k], (v[1], v[0]) if types[k] == mk.ARR else v) for k, v in kv.items() if k != "general.alignment"]
kvs.append(mk.kv("gemma2.attention.sliding_window_pattern", mk.U32, 3))
ts = [(n, t[n][1], {0: "F32", 1: "F16"}[t[n][0]], t[n][2]) for n in order]
open(f"{w}/pat.gguf", "wb").write(mk.gguf(kvs, ts))
PY
"$bin" forward "$w/pat.gguf" --ids "$short" --out "$w/pat.bin" >/dev/null 2>"$w/pat.err"
[ $? -ne 0 ] && [ ! -e "$w/pat.bin" ] && [ "$(cat "$w/pat.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/pat.gguf: key 'gemma2.attention.sliding_window_pattern' is not read (gemma2's even layers slide, with the one RoPE base)" ] &&
  ok || bad "pattern GGUF: $(cat "$w/pat.err")"
# a temperature baked into q_proj (attn_q), before the soft-cap as the rule puts it
echo '{"temperature": 0.8}' >"$w/t.json"
check "$bin" patch "$w/g2" "$w/pt.gguf" --method temperature --tau 0.8 --no-verify --to gguf
engine_logits "$w/e_rule.bin" "$w/g2" "$short" --rule "$w/t.json"
engine_logits "$w/e_pt.bin" "$w/pt.gguf" "$short"
check "$py" "$src/tests/onnx/compare_logits.py" "$w/e_pt.bin" "$w/e_rule.bin" --vocab 559 --label "gemma2 baked tau"
# Gemma 3
family_gguf "$w/g3" gemma3
back_to_safetensors "$w/g3.gguf" "$w/g3_sf"
"$py" - "$w" <<'PY' && ok || bad "gemma3 GGUF names, keys and norms"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
raw = open(f"{w}/g3/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
hf = {k: np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
      for k, e in hdr.items() if k != "__metadata__"}
_, kv, _, t, _ = g.read(f"{w}/g3.gguf")
assert kv["general.architecture"] == "gemma3", kv["general.architecture"]
want = {"block_count": 6, "attention.key_length": 32, "attention.sliding_window": 32, "rope.freq_base": 100000.0,
        "rope.freq_base_swa": 10000.0, "rope.scaling.type": "linear", "rope.scaling.factor": 8.0}
for key, v in want.items():
    assert kv[f"gemma3.{key}"] == v, (key, kv.get(f"gemma3.{key}"))
assert not any("softcapping" in k or "sliding_window_pattern" in k for k in kv), sorted(kv)
one = np.float32(1)
for l in range(6):
    for gn, hn in (("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm"),
                   ("post_ffw_norm", "post_feedforward_layernorm")):
        assert np.array_equal(g.f32(t[f"blk.{l}.{gn}.weight"]), hf[f"model.layers.{l}.{hn}.weight"] + one), (l, gn)
cfg = json.load(open(f"{w}/g3_sf/config.json"))
assert (cfg["model_type"], cfg["sliding_window"], cfg["sliding_window_pattern"], cfg["rope_local_base_freq"],
        cfg["rope_scaling"]["factor"]) == ("gemma3_text", 32, 6, 10000, 8), cfg
print("gemma3 GGUF: arch keys, q/k norms 1 + w, no soft-cap keys; config back")
PY
engine_logits "$w/e3_hf.bin" "$w/g3" "$prompt"
engine_logits "$w/e3_gguf.bin" "$w/g3.gguf" "$prompt"
check cmp "$w/e3_hf.bin" "$w/e3_gguf.bin"
engine_logits "$w/e3_short.bin" "$w/g3.gguf" "$short"
engine_logits "$w/e3_sf.bin" "$w/g3_sf" "$short"
check cmp "$w/e3_short.bin" "$w/e3_sf.bin"
check "$bin" patch "$w/g3" "$w/pt3.gguf" --method temperature --tau 0.8 --no-verify --to gguf
engine_logits "$w/e3_rule.bin" "$w/g3" "$short" --rule "$w/t.json"
engine_logits "$w/e3_pt.bin" "$w/pt3.gguf" "$short"
check "$py" "$src/tests/onnx/compare_logits.py" "$w/e3_pt.bin" "$w/e3_rule.bin" --vocab 559 --label "gemma3 baked tau"
for case in "types|{\"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"full_attention\"]}|key 'layer_types[1]': 'full_attention', but llama.cpp's gemma3 slides layer il when il % 6 < 5 (sliding_window_pattern 6)" \
            "base|{\"rope_local_base_freq\": 20000.0}|key 'rope_local_base_freq': 20000, but llama.cpp's gemma3 rotates its sliding layers at base 10000" \
            "cap|{\"final_logit_softcapping\": 30.0}|key 'final_logit_softcapping': 30, but llama.cpp's gemma3 applies it in some versions only (Gemma3TextConfig's default is null)" \
            "qpas|{\"query_pre_attn_scalar\": 64}|key 'query_pre_attn_scalar': 64, but llama.cpp's gemma3 scales by 1/sqrt(32) (head_dim)"; do
  IFS='|' read -r name upd msg <<<"$case"
  cp -r "$w/g3" "$w/r3_$name"
  "$py" -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c.update(json.loads(sys.argv[2])); json.dump(c, open(p, 'w'))" \
    "$w/r3_$name/config.json" "$upd"
  "$bin" convert "$w/r3_$name" "$w/r3_$name.gguf" --to gguf >/dev/null 2>"$w/r3_$name.err"
  [ $? -ne 0 ] && [ ! -e "$w/r3_$name.gguf" ] && [ "$(cat "$w/r3_$name.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/r3_$name: $msg" ] &&
    ok || bad "refused gemma3 ($name): $(cat "$w/r3_$name.err")"
done
"$py" - "$w" <<'PY' && ok || bad "write the gemma3 pattern GGUF"
import sys, gguf_py as g, make_gguf_cases as mk
w = sys.argv[1]
_, kv, types, t, order = g.read(f"{w}/g3.gguf")
kvs = [mk.kv(k, types[k], (v[1], v[0]) if types[k] == mk.ARR else v) for k, v in kv.items() if k != "general.alignment"]
kvs.append(mk.kv("gemma3.attention.sliding_window_pattern", mk.U32, 3))
ts = [(n, t[n][1], {0: "F32", 1: "F16"}[t[n][0]], t[n][2]) for n in order]
open(f"{w}/pat3.gguf", "wb").write(mk.gguf(kvs, ts))
PY
"$bin" forward "$w/pat3.gguf" --ids "$short" --out "$w/pat3.bin" >/dev/null 2>"$w/pat3.err"
[ $? -ne 0 ] && [ ! -e "$w/pat3.bin" ] && [ "$(cat "$w/pat3.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/pat3.gguf: key 'gemma3.attention.sliding_window_pattern' is not read (gemma3: every sixth layer full, no soft-cap)" ] &&
  ok || bad "gemma3 pattern GGUF: $(cat "$w/pat3.err")"
llamacpp_vs_engine "gemma3, 300 tokens" "$w/g3.gguf" "$prompt" "$w/e3_gguf.bin" "$w/lc3.json" 1e-3 20
llamacpp_vs_engine "gemma3, 41 tokens" "$w/g3.gguf" "$short" "$w/e3_short.bin" "$w/lc3s.json" 1e-3
llamacpp_vs_engine "gemma3 tau 0.8 in attn_q_norm" "$w/pt3.gguf" "$short" "$w/e3_rule.bin" "$w/lc3pt.json" 1e-3
llamacpp_vs_engine "gemma2, 300 tokens" "$w/g2.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json" 1e-3 20
llamacpp_vs_engine "gemma, 41 tokens" "$w/g1.gguf" "$short" "$w/e_g1.bin" "$w/lc1.json" 1e-3
llamacpp_vs_engine "gemma2 tau 0.8 in attn_q" "$w/pt.gguf" "$short" "$w/e_rule.bin" "$w/lcpt.json" 1e-3
# rope-pi (linear, factor 2) as gemma2.rope.scaling.* keys, which llama.cpp's gemma2 applies as it
# applies them to llama: llama.cpp on the patched GGUF == the engine on it at 300 tokens (past the
# window), and far from the unpatched model's logits
check "$bin" patch "$w/g2" "$w/pi.gguf" --method rope-pi --factor 2 --no-verify --to gguf
engine_logits "$w/e_pi.bin" "$w/pi.gguf" "$prompt"
llamacpp_vs_engine "gemma2 rope-pi x2, 300 tokens" "$w/pi.gguf" "$prompt" "$w/e_pi.bin" "$w/lcpi.json" 1e-3
if [ "$lc" = 1 ]; then
  "$py" - "$w" <<'PY' && ok || bad "rope-pi: llama.cpp's logits far from the unpatched model's"
import sys, json, numpy as np
w = sys.argv[1]
lc = np.array(json.load(open(f"{w}/lcpi.json"))["logits"], np.float64)
e, plain = (np.fromfile(f"{w}/{n}.bin", "<f4").reshape(300, -1) for n in ("e_pi", "e_gguf"))
d, dp = np.abs(lc - e).max(), np.abs(lc - plain).max()
assert dp > 100 * d, (dp, d)
print(f"gemma2 rope-pi: llama.cpp {d:.2e} from the engine on the patched file, {dp:.2e} from the unpatched model")
PY
fi
# rope-pi on Gemma 3 (decision 19: the full layers' linear factor, 8 here, times 2; the sliding
# layers' local base untouched), written as gemma3.rope.scaling.* which llama.cpp's gemma3 applies
# to its full layers only: llama.cpp == the engine at 300 tokens, and moved from the unpatched model
check "$bin" patch "$w/g3" "$w/pi3.gguf" --method rope-pi --factor 2 --no-verify --to gguf
engine_logits "$w/e3_pi.bin" "$w/pi3.gguf" "$prompt"
llamacpp_vs_engine "gemma3 rope-pi x2, 300 tokens" "$w/pi3.gguf" "$prompt" "$w/e3_pi.bin" "$w/lc3pi.json" 1e-3
if [ "$lc" = 1 ]; then
  "$py" - "$w" <<'PY' && ok || bad "gemma3 rope-pi: llama.cpp's logits not moved from the unpatched model's"
import sys, json, numpy as np
w = sys.argv[1]
lc = np.array(json.load(open(f"{w}/lc3pi.json"))["logits"], np.float64)
e, plain = (np.fromfile(f"{w}/{n}.bin", "<f4").reshape(300, -1) for n in ("e3_pi", "e3_gguf"))
d, dp = np.abs(lc - e).max(), np.abs(lc - plain).max()
assert dp > 100 * d, (dp, d)
print(f"gemma3 rope-pi: llama.cpp {d:.2e} from the engine on the patched file, {dp:.2e} from the unpatched model")
PY
fi
finish
