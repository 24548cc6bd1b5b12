#!/usr/bin/env bash
# A plain-op Llama recovered by its pattern, and a certified rewrite of that third-party graph
# (issue 14; import/onnx/onnx_pattern_llama.c; docs/onnx.md "Recovering third-party graphs").
# tests/onnx/make_torch_llama.py exports with Debian's torch.onnx (opset 17, anonymous
# `onnx::MatMul_N` weights, no ctxpatch metadata) HF's Llama forward on:
#   - examples/probe-models/rope-probe (trained, 4 heads = kv heads, theta 10000, with a tokenizer)
#   - tests/goldens/engine/models/llama (random, GQA: 4 heads over 2 kv heads)
# and checks:
#   - onnxruntime-node on each graph vs `ctxpatch forward` on the same .onnx (the engine on the
#     recovered model): max|a-b|/max|b| <= 1e-4;
#   - forward on the recovered rope-probe vs forward on the rope-probe folder: <= 1e-5 (theta is
#     fitted to the graph's float32 inv_freq, 10000 within 1e-6);
#   - inspect --json: family llama, naming pattern, the provenance of each hyper-parameter;
#   - refusals with the exact node: the cos/sin cache spelling (transformers 4.30), an inv_freq
#     entry 1% off (not theta^(-2j/d) frequencies), lm-infinite's Lambda on the rotary graph;
#   - the certified rewrite: `patch graph.onnx OUT.onnx --method temperature --tau 0.9 --verify
#     passkey --lengths 256,512` with rope-probe's tokenizer.json beside the graph certifies and
#     writes OUT with ctxpatch.certified true, `check OUT.onnx` passes, and onnxruntime on OUT
#     equals `forward --rule` on the recovered model (1e-4, 300 tokens: past the 256 the probe
#     was trained at) and differs from the identity.
# Skips (77) without torch, python3-onnx or onnxruntime-node.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/onnx/env.sh"
onnx_env onnxruntime-node
"$py" -c "import torch" 2> /dev/null || { echo "SKIP: $py has no torch (Debian python3-torch)"; exit 77; }

rp=$src/examples/probe-models/rope-probe
gq=$src/tests/goldens/engine/models/llama

# compare NAME A.f32 B.f32 VOCAB TOL
compare() {
  local out
  out=$("$py" "$t/compare_logits.py" "$2" "$3" --vocab "$4" --tol "$5" --label "$1" 2>&1) && ok || bad "$out"
  echo "$out"
}

mkdir -p "$work/rp"
"$py" "$t/make_torch_llama.py" "$rp" "$work/rp/model.onnx" --check 2> "$work/exp.log" || bad "export rope-probe: $(tail -1 "$work/exp.log")"
"$py" "$t/make_torch_llama.py" "$gq" "$work/gq.onnx" 2> "$work/exp.log" || bad "export golden llama: $(tail -1 "$work/exp.log")"
"$py" "$t/make_torch_llama.py" "$rp" "$work/cache.onnx" --rope cache 2> "$work/exp.log" || bad "export cache: $(tail -1 "$work/exp.log")"

# --- onnxruntime on the graph vs the engine on the recovered model
rids=$("$py" -c "print(','.join(str((i * 37 + 5) % 559) for i in range(64)))")
gids=$("$py" -c "print(','.join(str((i * 37 + 5) % 96) for i in range(48)))")
for c in "rp/model.onnx 559 $rids" "gq.onnx 96 $gids"; do
  set -- $c
  node "$t/ort_recover.mjs" "$work/$1" --ids "$3" --mode pass --out "$work/$1.ort.f32" > /dev/null 2> "$work/ort.log" &&
    "$bin" forward "$work/$1" --ids "$3" --threads 2 --out "$work/$1.eng.f32" 2> "$work/err" &&
    compare "torch.onnx llama $1 (pattern) onnxruntime vs engine" "$work/$1.ort.f32" "$work/$1.eng.f32" "$2" 1e-4 ||
    bad "$1: $(tail -1 "$work/ort.log") $(head -1 "$work/err")"
done
"$bin" forward "$rp" --ids "$rids" --threads 2 --out "$work/folder.f32" 2> "$work/err" &&
  compare "recovered rope-probe vs the rope-probe folder (engine both)" "$work/rp/model.onnx.eng.f32" "$work/folder.f32" 559 1e-5 ||
  bad "forward on the folder: $(head -1 "$work/err")"

# --- inspect --json: what was recovered and where from
for c in "rp/model.onnx 4 4 16 256" "gq.onnx 4 2 8 64"; do
  set -- $c
  "$bin" inspect "$work/$1" --json > "$work/i.json" 2> "$work/err" || { bad "inspect $1: $(head -1 "$work/err")"; continue; }
  "$py" - "$work/i.json" "$2" "$3" "$4" "$5" <<'EOF' && ok || bad "inspect --json $1"
import json, sys
r = json.load(open(sys.argv[1]))["recovered"]
H, Hkv, dh, ff = map(int, sys.argv[2:6])
assert (r["family"], r["naming"], r["norm"], r["activation"]) == ("llama", "pattern", "rms", "silu"), r
assert (r["n_heads"], r["n_kv_heads"], r["d_head"], r["d_ff"], r["n_layers"]) == (H, Hkv, dh, ff, 3), r
assert abs(r["rope_theta"] / 10000 - 1) < 1e-6 and abs(r["norm_eps"] / 1e-6 - 1) < 1e-6 and abs(r["attn_scale"] * dh ** 0.5 - 1) < 1e-6, r
keys = ["vocab_size", "hidden_size", "rms_norm_eps", "rope_theta", "num_attention_heads", "num_key_value_heads",
        "head_dim", "hidden_act", "intermediate_size", "lm_head", "num_hidden_layers", "max_position_embeddings",
        "positions", "tie_word_embeddings"]
missing = [k for k in keys if k not in r["provenance"]]
assert not missing, missing
assert r["provenance"]["rope_theta"].startswith("fitted to inv_freq constant"), r["provenance"]["rope_theta"]
EOF
done

# --- refusals, each naming the node
refuse() { # FILE MESSAGE-AFTER-PATH
  "$bin" forward "$1" --ids 1,2 --out "$work/never.f32" 2> "$work/err" && { bad "$1 accepted"; return; }
  check grep -qxF "ctxpatch: error CP_EONNX_RECOVER: $1: $2" "$work/err"
  [ -e "$work/never.f32" ] && bad "$1: output written" || ok
}
refuse "$work/cache.onnx" \
  "node '/layers.0/Mul' (Mul): its rotation factor comes from no Cos / Sin node (a cos/sin cache is not supported)"
"$py" - "$work/rp/model.onnx" "$work/freq.onnx" <<'EOF' || bad "make freq.onnx"
import sys, onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
for n in m.graph.node:  # the inv_freq constant [1, 8, 1]: one frequency 1% off
    if n.op_type == "Constant" and n.attribute[0].t.dims == [1, 8, 1]:
        a = numpy_helper.to_array(n.attribute[0].t).copy()
        a[0, 3, 0] *= 1.01
        n.attribute[0].t.CopyFrom(numpy_helper.from_array(a, n.attribute[0].t.name))
        break
else:
    sys.exit("no inv_freq constant")
onnx.save(m, sys.argv[2])
EOF
refuse "$work/freq.onnx" \
  "node '/rotary/Concat_1' (Concat): its angles do not come from theta^(-2j/d_head) frequencies (scaled or other RoPE)"

# --- the certified rewrite of the third-party graph (rope-probe's tokenizer beside it)
cp "$rp/tokenizer.json" "$work/rp/"
"$bin" patch "$work/rp/model.onnx" "$work/out.onnx" --method temperature --tau 0.9 --verify passkey \
  --lengths 256,512 --samples 4 --threads 2 --accept-no-gain --accept-underpowered > "$work/patch.txt" 2> "$work/err" || bad "patch: $(head -1 "$work/err")"
cat "$work/patch.txt"
check grep -q "^verdict: pass" "$work/patch.txt"
"$py" -c "
import onnx, sys
p = {e.key: e.value for e in onnx.load(sys.argv[1]).metadata_props}
assert p['ctxpatch.certified'] == 'true' and p['ctxpatch.fidelity'] == 'graph-rewrite', p
assert p['ctxpatch.rule'] == '{\"temperature\":0.9}', p['ctxpatch.rule']
" "$work/out.onnx" && ok || bad "out.onnx metadata"
"$bin" check "$work/out.onnx" > "$work/check.txt" 2>&1 && check grep -q ": pass " "$work/check.txt" || bad "check: $(cat "$work/check.txt")"
echo '{"temperature":0.9}' > "$work/rule.json"
lids=$("$py" -c "print(','.join(str((i * 37 + 5) % 559) for i in range(300)))")
node "$t/ort_recover.mjs" "$work/out.onnx" --ids "$lids" --mode pass --out "$work/out.ort.f32" > /dev/null 2> "$work/ort.log" &&
  "$bin" forward "$work/rp/model.onnx" --rule "$work/rule.json" --ids "$lids" --threads 2 --out "$work/rule.f32" 2> "$work/err" &&
  "$bin" forward "$work/rp/model.onnx" --ids "$lids" --threads 2 --out "$work/id.f32" 2>> "$work/err" &&
  compare "rewritten graph (onnxruntime) vs forward --rule on the recovered model" "$work/out.ort.f32" "$work/rule.f32" 559 1e-4 ||
  bad "rewrite run: $(tail -1 "$work/ort.log") $(head -1 "$work/err")"
"$py" "$t/compare_logits.py" "$work/out.ort.f32" "$work/id.f32" --vocab 559 --tol 1e-2 > /dev/null 2>&1 &&
  bad "the rewrite equals the identity" || ok
# Lambda on a rotary graph stays refused (the rotation is computed before the attention site)
"$bin" patch "$work/rp/model.onnx" "$work/lm.onnx" --method lm-infinite --n-local 64 --no-verify 2> "$work/err" &&
  bad "lm-infinite on the rotary graph accepted" ||
  check grep -qxF "ctxpatch: error CP_EONNX_SITE: $work/rp/model.onnx: node '/rotary/Cos' (Cos): lambda_mask implies a distance ceiling of 64 on RoPE, and the rotation is computed before the attention site: not expressible here" "$work/err"
[ -e "$work/lm.onnx" ] && bad "lm.onnx written" || ok

finish
