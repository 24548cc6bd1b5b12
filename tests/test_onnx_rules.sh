#!/usr/bin/env bash
# Every attention rule as ONNX graph nodes (export/onnx/onnx_attention.c), proven in onnxruntime:
# for each decoder-only engine golden model (tests/goldens/engine/models: BLOOM, MPT, Llama GQA,
# Llama with RoPE PI, GPT-NeoX, FIRE per-layer and shared, FIRE with two hidden layers) x every
# rule kind that applies,
# `convert --to onnx --rule` then onnxruntime-node (tests/onnx/ort_run.mjs) gives the logits of
# `ctxpatch forward --rule` (the C engine, the reference) at twice the training length, in one
# pass and through the KV cache (prefill, then one token per step), within max|a-b| / max|b| <=
# 1e-4, and greedy decoding of 32 tokens through the cache gives `forward --generate`'s tokens.
# Top-k with rows "decode" is checked in one pass and by generation only: through the cache each
# step's last row is a decode row (the engine's generate does the same), while `forward` of the
# whole prompt gives top-k to its last row alone, so a prompt fed in pieces differs by design.
# Dynamic ALiBi likewise: F = max(1, T / train_len) takes T from the keys of the current pass
# (prompt plus cache, as BTLM and the engine do), so a prefill of 30 rows sees F(30), not F(48).
# Also: python3-onnx's checker accepts every graph, the kv_cache metadata says
# which keys present.* holds, and a rule changes the ONNX logits (the check can fail).
# Prints one "FAMILY RULE: one-pass rel_err ... split ... generate ..." line per case.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/onnx/env.sh"
onnx_env onnxruntime-node
models=$src/tests/goldens/engine/models
ort=$src/tests/onnx/ort_run.mjs
cmp=$src/tests/onnx/compare_logits.py
ids=$(seq -s, 1 48 | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), ($i*7+3)%96}') # 48 = 2 x 24
split=30

# layers MODEL: the decoder depth from config.json
layers() {
  "$py" -c "import json,sys; c=json.load(open(sys.argv[1])); print(next(c[k] for k in ('num_hidden_layers','n_layer','n_layers') if k in c))" \
    "$models/$1/config.json"
}

# one MODEL NAME RULE_JSON [nosplit]: the engine's side now (export, reference logits, greedy
# tokens); onnxruntime runs every case's graph afterwards in one process (ort_run.mjs --jobs), and
# one compare_logits.py --pairs reads them all (node's and numpy's start paid once, not per case).
cases=()
one() {
  local model=$1 name=$2 rule=$3 mode=${4:-}
  local dir=$work/$model.$name ref=$work/$model.$name.ref
  echo "$rule" > "$dir.json"
  if ! "$bin" convert "$models/$model" "$dir" --to onnx --rule "$dir.json" >/dev/null; then
    bad "$model $name: export"; return
  fi
  "$bin" forward "$models/$model" --ids "$ids" --rule "$dir.json" --out "$ref" >/dev/null || { bad "$model $name: forward"; return; }
  "$bin" forward "$models/$model" --ids "$ids" --rule "$dir.json" --generate 32 > "$dir.want" || { bad "$model $name: generate"; return; }
  local split_args=""
  [ "$mode" = nosplit ] || split_args="--split $split --split-out $dir.split"
  echo "$dir --ids $ids --out $dir.ort $split_args --generate 32 --generate-out $dir.got" >> "$work/jobs"
  echo "$dir.ort $ref 96 $model $name one-pass" >> "$work/pairs"
  [ "$mode" = nosplit ] || echo "$dir.split $ref 96 $model $name split $split" >> "$work/pairs"
  cases+=("$model $name $mode")
}

# judge: every case's onnxruntime logits and tokens against the engine's
judge() {
  node "$ort" --jobs "$work/jobs" 2> "$work/jobs.err" || bad "ort_run --jobs: $(head -3 "$work/jobs.err" | tr '\n' ' ')"
  "$py" "$cmp" --pairs "$work/pairs" > "$work/pairs.out"
  local c model name mode line1 line2 got want
  for c in "${cases[@]}"; do
    read -r model name mode <<< "$c"
    line1=$(awk -v p="$model $name one-pass: " 'index($0, p) == 1' "$work/pairs.out")
    case "$line1" in *") ok "*) ok ;; *) bad "$model $name: ${line1:-no one-pass result}" ;; esac
    line2="split: skipped (see the top)"
    if [ "$mode" != nosplit ]; then
      line2=$(awk -v p="$model $name split $split: " 'index($0, p) == 1' "$work/pairs.out")
      case "$line2" in *") ok "*) ok ;; *) bad "$model $name: ${line2:-no split result}" ;; esac
    fi
    want=$(cat "$work/$model.$name.want"); got=$(cat "$work/$model.$name.got" 2>/dev/null)
    [ "$got" = "$want" ] && ok || bad "$model $name: greedy tokens: onnxruntime $got, engine $want"
    echo "$model $name: ${line1%% (*} | ${line2%% (*} | generate 32 $([ "$got" = "$want" ] && echo equal || echo DIFFER)"
  done
}

# rules every family takes
common() {
  local model=$1 n; n=$(layers "$model")
  local per sched_l
  per=$("$py" -c "import sys; n=int(sys.argv[1]); print([round(1 - 0.1 * l, 2) for l in range(n)])" "$n")
  sched_l=$("$py" -c "import sys; n=int(sys.argv[1]); print([[12, [1.0] * n], [24, [0.9 - 0.05 * l for l in range(n)]], [48, [0.7 + 0.05 * l for l in range(n)]]])" "$n")
  one "$model" identity '{}'
  one "$model" temperature '{"temperature": 0.8}'
  one "$model" per_layer "{\"temperature\": $per}"
  one "$model" schedule '{"temperature_schedule": {"points": [[12, 1.0], [24, 0.9], [40, 0.7]]}}'
  one "$model" schedule_layers "{\"temperature_schedule\": {\"points\": $sched_l}}"
  one "$model" lambda_ceiling '{"lambda_mask": {"n_global": 2, "n_local": 8}}'
  one "$model" ceiling '{"distance_ceiling": 10}'
  one "$model" top_k '{"lambda_mask": {"n_global": 2, "n_local": 8}, "top_k": {"k": 3, "from_layer": 1, "distance": 6}}' nosplit
  one "$model" top_k_all '{"lambda_mask": {"n_global": 3, "n_local": 6}, "distance_ceiling": 9, "top_k": {"k": 4, "rows": "all"}}'
  one "$model" all_schedule '{"temperature_schedule": {"points": [[24, 1.0], [48, 0.8]]}, "lambda_mask": {"n_global": 1, "n_local": 10}, "top_k": {"k": 2, "rows": "all"}}'
}

for model in llama llama_rope2 gpt_neox bloom mpt fire fire_shared fire2; do
  [ -f "$models/$model/config.json" ] || { bad "$model: no golden model"; continue; }
  common "$model"
done
for model in bloom mpt; do
  one "$model" alibi_static '{"alibi_scale": {"mode": "static", "factor": 2.0}}'
  one "$model" alibi_dynamic '{"alibi_scale": {"mode": "dynamic"}}' nosplit
  one "$model" alibi_progressive '{"alibi_scale": {"mode": "progressive"}, "train_len": 16}'
  one "$model" alibi_progressive_lambda_topk '{"alibi_scale": {"mode": "progressive"}, "lambda_mask": {"n_global": 2, "n_local": 8}, "top_k": {"k": 3}}' nosplit
  one "$model" alibi_dynamic_ceiling '{"alibi_scale": {"mode": "dynamic"}, "distance_ceiling": 12, "temperature": 0.9}' nosplit
done
for model in fire fire_shared fire2 fire2_shared; do
  one "$model" fire_threshold '{"fire_threshold": 12}'
  one "$model" fire_threshold_lambda_topk '{"fire_threshold": 40, "lambda_mask": {"n_global": 2, "n_local": 8}, "top_k": {"k": 3, "rows": "all"}}'
done

judge

# the metadata names what the cache holds
"$py" - "$work/llama.identity/onnx/model.onnx" "$work/llama.top_k/onnx/model.onnx" <<'EOF' && ok || bad "ctxpatch.kv_cache metadata"
import sys
try:
    import onnx
except ImportError:
    sys.exit(0)
want = ["rotated", "unrotated"]
for path, w in zip(sys.argv[1:], want):
    meta = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
    if meta.get("ctxpatch.kv_cache") != w:
        sys.exit(f"{path}: ctxpatch.kv_cache {meta.get('ctxpatch.kv_cache')!r}, want {w!r}")
EOF
# python3-onnx's checker (shape inference included) accepts every exported graph
"$py" - "$work"/*/onnx/model.onnx <<'EOF' && ok || bad "onnx.checker refused an exported graph"
import sys
try:
    import onnx
except ImportError:
    print("onnx checker: python3-onnx missing, not run")
    sys.exit(0)
for p in sys.argv[1:]:
    onnx.checker.check_model(p, full_check=True)
print(f"onnx checker: {len(sys.argv) - 1} graphs accepted (onnx {onnx.__version__})")
EOF
# a rule's graph differs from the identity's: the comparison can fail
"$py" "$cmp" "$work/llama.lambda_ceiling.ort" "$work/llama.identity.ref" --vocab 96 >/dev/null
[ $? = 1 ] && ok || bad "the Lambda graph's logits equal the identity's"
# top-k acts (on the last row) and the graph computes it: its logits are not the Lambda mask's
"$py" "$cmp" "$work/llama.top_k.ort" "$work/llama.lambda_ceiling.ref" --vocab 96 >/dev/null
[ $? = 1 ] && ok || bad "the top-k graph's logits equal the Lambda mask's"
finish
