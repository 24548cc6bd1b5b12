#!/usr/bin/env bash
# ONNX exports run in onnxruntime (issue 13, "Proof in real runtimes"): for every model in
# tests/goldens/engine/models x every rule kind that applies to it, `ctxpatch convert --to onnx
# --rule R` is checked by python3-onnx's checker (full_check=True: the models are tiny, shape
# inference is quick), run in onnxruntime-node (tests/onnx/ort_run.mjs) in one pass and through
# the KV cache (prefill of half, then one token per step), and both logits arrays must equal
# `ctxpatch forward --rule R` within max|a-b|/max|b| <= 1e-4 at 2x the model's training length
# (capped at 96 tokens; learned-position models at ltrain - 31, so 32 generated tokens fit); greedy decoding of 32 tokens through onnxruntime's cache must give
# `ctxpatch forward --generate 32`'s tokens. A case the exporter refuses with "not yet" or
# "unsupported" is a SKIP with its message, not a pass. Prints a table (model x rule: pass / FAIL /
# skip, max rel err); fails if any case fails. Skips (77) without the npm runtimes or before the
# exporter exists. The cache comparison is skipped, with its reason in the table, for the two rules
# whose logits depend on how the prompt is cut into passes (split_caveat below). Timing: the
# table's footer says how long the matrix took.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/onnx/env.sh"
onnx_env onnxruntime-node
"$bin" convert --help 2>&1 | grep >/dev/null -- "onnx" ||
  { echo "SKIP: this ctxpatch has no 'convert --to onnx' yet ($("$bin" convert x y --to onnx 2>&1 | head -1))"; exit 77; }
models=${CTXPATCH_ONNX_MODELS:-$src/tests/goldens/engine/models}   # test_onnx_toy points it at toy models
tol=${CTXPATCH_ONNX_TOL:-1e-4}
start=$SECONDS
table=$work/table.txt
: > "$table"

# model facts as shell assignments: kind (decoder|t5), pos (alibi|rope|fire|t5|learned), ltrain, vocab,
# layers, start (T5 decoder start id)
facts() {
  "$py" - "$1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t5 = bool(c.get("is_encoder_decoder"))
mt = c.get("model_type", "")
if t5: pos = "t5"
elif mt == "bloom" or (mt == "mpt" and c.get("attn_config", {}).get("alibi", True)): pos = "alibi"
elif mt == "ctxpatch_fire": pos = "fire"
elif mt == "gpt2": pos = "learned"
else: pos = "rope"
# T5 configs state no training length: the golden models were made at 24 like the others
lt = next((c[k] for k in ("n_positions", "max_position_embeddings", "max_seq_len", "seq_length") if k in c), 24)
layers = next(c[k] for k in ("num_hidden_layers", "n_layer", "n_layers", "num_layers") if k in c)
print(f"kind={'t5' if t5 else 'decoder'} pos={pos} ltrain={lt} vocab={c['vocab_size']} layers={layers} "
      f"start={c.get('decoder_start_token_id', 0)}")
PY
}

ceil8() { [ "$pos" = learned ] || printf ', "distance_ceiling": 8'; }

# rule NAME -> JSON on stdout, or nothing when NAME does not apply to the model ($pos, $layers, $ltrain)
rule() {
  case $1 in
    identity) echo '{}' ;;
    temperature) echo '{"temperature": 0.8}' ;;
    per_layer) seq 0 $((layers - 1)) | awk '{printf "%s%.2f", (NR>1?", ":"{\"temperature\": ["), 1 - 0.1 * $1} END {print "]}"}' ;;
    schedule) echo '{"temperature_schedule": {"points": [[8, 1.0], [32, 0.8], [96, 0.7]]}}' ;;
    t5_scope_all) [ "$kind" = t5 ] && echo '{"temperature": [0.9, 0.8], "temperature_scope": "all"}' ;;
    t5_schedule_all) [ "$kind" = t5 ] && echo '{"temperature_schedule": {"points": [[8, 1.0], [32, 0.8], [96, 0.7]]}, "temperature_scope": "all"}' ;;
    alibi_static) [ "$pos" = alibi ] && echo '{"alibi_scale": {"mode": "static", "factor": 2.0}}' ;;
    alibi_dynamic) [ "$pos" = alibi ] && echo "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": $ltrain}" ;;
    alibi_progressive) [ "$pos" = alibi ] && echo "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": $ltrain}" ;;
    # learned absolute positions (GPT-2) refuse a distance ceiling: the Lambda mask alone
    lambda) echo "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 8}$(ceil8)}" ;;
    top_k) echo "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 8}$(ceil8), \"top_k\": {\"k\": 2}}" ;;
    top_k_all) echo "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 8}$(ceil8), \"top_k\": {\"k\": 2, \"rows\": \"all\"}}" ;;
    fire_threshold) [ "$pos" = fire ] && echo "{\"fire_threshold\": $((2 * ltrain))}" ;;
    rope_pi) [ "$pos" = rope ] && echo '{}' ;;   # with a copy of the model whose config says linear 2
  esac
  return 0
}
rules=(identity temperature per_layer schedule t5_scope_all t5_schedule_all alibi_static alibi_dynamic alibi_progressive lambda top_k
  top_k_all fire_threshold rope_pi)

# Rules whose logits, by their definition, depend on how the prompt is cut into passes
# (docs/onnx.md, "Rules and the cache"): the split comparison is skipped for them (the one-pass
# logits and greedy generation through the cache are still compared). top_k with the default
# "decode" rows gives top-k to the last row of each pass, so the first half's last row gets it
# too (top_k_all is compared through the cache); dynamic ALiBi's F = max(1, T / train_len) uses
# the keys of the pass, fewer in the first half.
split_caveat() {
  case $1 in
    top_k) echo "top-k decode rows are per pass" ;;
    alibi_dynamic) echo "dynamic ALiBi F is per pass" ;;
  esac
}

row() { printf '%-12s %-18s %-5s %s\n' "$@" >> "$table"; }

# case MODEL_DIR NAME RULE_NAME
run_case() {
  local m=$1 name=$2 r=$3 c=$work/$2.$3
  mkdir -p "$c"
  rule "$r" > "$c/rule.json"
  [ -s "$c/rule.json" ] || return 0
  if [ "$r" = rope_pi ]; then   # RoPE PI is a config field: a copy of the folder with linear 2
    cp -r "$m" "$c/model"
    "$py" - "$c/model/config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["rope_scaling"] = {"type": "linear", "factor": 2.0}
json.dump(c, open(p, "w"), indent=2)
PY
    m=$c/model
  fi
  if ! "$bin" convert "$m" "$c/onnx-out" --to onnx --rule "$c/rule.json" > "$c/convert.log" 2>&1; then
    if grep -qiE "not yet|unsupported" "$c/convert.log"; then
      row "$name" "$r" skip "$(head -1 "$c/convert.log")"
    else
      bad "$name $r: convert: $(head -3 "$c/convert.log")"; row "$name" "$r" FAIL "convert: $(head -1 "$c/convert.log")"
    fi
    return 0
  fi
  # python3-onnx's checker runs on a copy (onnx 1.12's full_check on a path writes the inferred
  # shapes back into the file, which raced onnxruntime loading it), all cases in one process
  # afterwards, beside onnxruntime's one process for every case (ort_run.mjs --jobs) and one
  # compare_logits.py --pairs: node's, onnxruntime's and numpy's start paid once, not per case.
  cp -r "$c/onnx-out" "$c/checker-copy"
  local n=$(( 2 * ltrain < 96 ? 2 * ltrain : 96 )) ids dec="" split
  # a learned position table has no row past ltrain: the prompt and 32 generated tokens fit in it
  [ "$pos" = learned ] && n=$(( ltrain - 31 ))
  ids=$(seq 0 $((n - 1)) | awk -v v="$vocab" '{printf "%s%d", (NR>1?",":""), 4 + ($1 * 37 + 11) % (v - 4)}')
  if [ "$kind" = t5 ]; then   # the encoder reads the long input; the decoder 16 tokens after its start
    dec="--decoder-ids $start,$(seq 1 15 | awk -v v="$vocab" '{printf "%s%d", (NR>1?",":""), 4 + ($1 * 13 + 5) % (v - 4)}')"
    split=8
  else
    split=$((n / 2))
  fi
  # shellcheck disable=SC2086 # $dec is empty or two words
  "$bin" forward "$m" --ids "$ids" $dec --rule "$c/rule.json" --threads 2 --out "$c/engine.f32" \
    --generate 32 > "$c/want" 2> "$c/forward.log" || { bad "$name $r: forward: $(head -1 "$c/forward.log")"; row "$name" "$r" FAIL forward; return 0; }
  echo "$c/onnx-out --ids $ids $dec --out $c/ort.f32 --split $split --split-out $c/ort_split.f32 --generate 32 --generate-out $c/got" >> "$work/jobs"
  echo "$c/ort.f32 $c/engine.f32 $vocab $name $r" >> "$work/pairs"
  [ -n "$(split_caveat "$r")" ] || echo "$c/ort_split.f32 $c/engine.f32 $vocab $name $r cache" >> "$work/pairs"
  cases+=("$name $r $n")
}

# judge: every case's checker verdict, logits (one pass, and through the cache) and greedy tokens
judge() {
  [ ${#cases[@]} -gt 0 ] || return 0
  "$py" - "$work" "${cases[@]}" > "$work/checker.out" 2>&1 <<'PY' &
import glob, onnx, sys
work = sys.argv[1]
for case in sys.argv[2:]:
    name, rule, _ = case.split(" ")
    copy = f"{work}/{name}.{rule}/checker-copy"
    try:
        paths = sorted(glob.glob(copy + "/onnx/*.onnx"))
        assert paths, "no .onnx files in " + copy + "/onnx"
        for p in paths:
            onnx.checker.check_model(p, full_check=True)
        print(f"{name} {rule}: checker ok")
    except Exception as e:  # one case's refusal must not hide the others'
        print(f"{name} {rule}: checker FAIL {str(e).splitlines()[0] if str(e) else type(e).__name__}")
PY
  local checker=$!
  node "$t/ort_run.mjs" --jobs "$work/jobs" 2> "$work/ort.log" || true
  "$py" "$t/compare_logits.py" --pairs "$work/pairs" --tol "$tol" > "$work/pairs.out" 2>&1
  wait $checker || bad "onnx checker: $(tail -1 "$work/checker.out")"
  local case name r n fails line cache caveat got want
  for case in "${cases[@]}"; do
    read -r name r n <<< "$case"
    local c=$work/$name.$r
    fails=0
    line=$(awk -v p="$name $r: " 'index($0, p) == 1' "$work/pairs.out")
    case "$line" in *") ok "*) ok ;; *) bad "${line:-$name $r: no result from onnxruntime: $(grep -F "$c/" "$work/ort.log" | head -1)}"; fails=$((fails+1)) ;; esac
    caveat=$(split_caveat "$r")
    cache="skipped ($caveat)"
    if [ -z "$caveat" ]; then
      cache=$(awk -v p="$name $r cache: " 'index($0, p) == 1' "$work/pairs.out")
      case "$cache" in *") ok "*) ok ;; *) bad "${cache:-$name $r cache: no result}"; fails=$((fails+1)) ;; esac
      cache=$(sed -n 's/.*rel_err=\([^ ]*\).*/\1/p' <<<"$cache")
    fi
    want=$(cat "$c/want"); got=$(cat "$c/got" 2>/dev/null)
    [ "$got" = "$want" ] && ok || { bad "$name $r: greedy tokens: onnxruntime $got, engine $want"; fails=$((fails+1)); }
    if grep -qxF "$name $r: checker ok" "$work/checker.out"; then ok; else
      bad "$name $r: onnx checker: $(grep -F "$name $r: checker" "$work/checker.out" | head -1)"; fails=$((fails+1))
    fi
    row "$name" "$r" "$([ $fails = 0 ] && echo pass || echo FAIL)" "rel $(sed -n 's/.*rel_err=\([^ ]*\).*/\1/p' <<<"$line" | head -1) / cache ${cache:-?}; n=$n"
  done
}

cases=()
for m in "$models"/*/; do
  m=${m%/}; name=$(basename "$m")
  # phi3_300 is phi3's 300-token engine golden; its graph is phi3's (the matrix runs that one)
  [ "$name" = phi3_300 ] && continue
  eval "$(facts "$m")"
  # to spare CI time, a few rules on some models: the sliding-window goldens (Mistral, Qwen2,
  # Phi-3): the window as mask nodes, alone and intersected with the Lambda mask and its top-k
  # candidates on every row (the other rules are the family's); Gemma: the embedding scale and
  # (1 + w) norms (gemma); the sliding layers, post norms and soft-caps under a temperature and
  # under Lambda + top-k, whose masks meet the window (gemma2, window 16 of 64 tokens);
  # layer_types' other pattern (gemma2_types)
  case $name in
    starcoder2_swa) continue ;; # starcoder2's graph at 300 tokens: the 41-token golden below runs it
    # starcoder2: LayerNorms with bias, biased q/k/v/o and the GELU MLP, every layer sliding (window
    # 16 of 41 tokens): the window alone and intersected with the Lambda mask (the other rules'
    # nodes are the llama golden's)
    starcoder2) mrules=(identity lambda) ;;
    *_swa) mrules=(identity top_k_all) ;;
    granite_300) continue ;; # likewise granite's
    # granite's graph is llama's plus its multipliers (Mul nodes): the identity and a temperature
    # show them; every rule's nodes are the llama golden's, which the matrix runs
    granite) mrules=(identity temperature) ;;
    olmo2_300) continue ;; # olmo2's graph at 300 tokens: the olmo2 cases show its nodes
    # olmo2's graph is llama's without pre-norms, with RMSNorm nodes on the whole q and k rows and on
    # each module's output: the identity and a temperature (divided after the q norm) show them
    olmo2) mrules=(identity temperature) ;;
    gemma) mrules=(identity) ;;
    gemma2) mrules=(temperature top_k_all) ;;
    gemma2_types) mrules=(lambda) ;;
    # Gemma 3: q/k norms (1 + w) and two RoPE tables (the sliding layers' at rope_local_base_freq,
    # the full layer's at rope_theta with linear 8), under a temperature and Lambda + ceiling
    # (gemma3: layers 0, 1 slide with window 16); layer_types and the final soft-cap (gemma3_41)
    gemma3) mrules=(temperature lambda) ;;
    gemma3_41) mrules=(identity) ;;
    *) mrules=("${rules[@]}") ;;
  esac
  for r in "${mrules[@]}"; do run_case "$m" "$name" "$r"; done
done
judge

echo
printf '%-12s %-18s %-5s %s\n' model rule result "max|a-b|/max|b| one pass / through the cache"
sort -s -k1,1 "$table"   # skips were written during the loop, the rest by judge
echo "matrix: $((SECONDS - start)) s, tolerance $tol, greedy 32 tokens"
finish
