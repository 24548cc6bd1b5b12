#!/usr/bin/env bash
# What each attention rule costs as ONNX graph nodes: for the probe models (examples/probe-models:
# rope-probe, alibi-probe, fire-probe; trained at 256 tokens) and each rule that applies, the
# wall time of `ctxpatch convert --to onnx --rule`, the graph's size, onnxruntime-node's prefill
# tokens/s (tests/onnx/ort_run.mjs --bench: one pass with an empty cache, best of R after a
# warm-up) at each length, and max |ORT - engine| / max |engine| of the logits against
# `ctxpatch forward --rule` at the first length. Prints a Markdown table for docs/perf.md
# ("ONNX rule cost").
#
# usage: bench/bench_onnx_rules.sh [THREADS]        (default 2)
#   CTXPATCH_BIN           ctxpatch binary (default build/ctxpatch)
#   CTXPATCH_NODE_MODULES  node_modules with onnxruntime-node (default tests/runtimes/node_modules)
#   LENGTHS                prefill lengths (default "512 2048": 2x and 8x the training length)
#   REPEAT                 timed runs per length (default 3)
#   MODELS                 probe folders (default "rope-probe alibi-probe fire-probe")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=/usr/bin/python3
threads=${1:-2}
lengths=${LENGTHS:-"512 2048"}
repeat=${REPEAT:-3}
models=${MODELS:-"rope-probe alibi-probe fire-probe"}
export CTXPATCH_NODE_MODULES=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
[ -x "$bin" ] || { echo "bench_onnx_rules: $bin is not built (set CTXPATCH_BIN)" >&2; exit 2; }
[ -d "$CTXPATCH_NODE_MODULES/onnxruntime-node" ] ||
  { echo "bench_onnx_rules: no onnxruntime-node in $CTXPATCH_NODE_MODULES (scripts/install-test-runtimes.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
first=${lengths%% *}
# the --bench ids (ort_run.mjs: i*7+3 mod vocab), for the accuracy column at the first length
ids() { "$py" -c "import json,sys; v=json.load(open(sys.argv[1]))['vocab_size']; print(','.join(str((i*7+3)%v) for i in range(int(sys.argv[2]))))" "$1/config.json" "$2"; }

# rules MODEL: "name<TAB>json" lines of the rules that apply to the model
rules() {
  printf '%s\t%s\n' identity '{}' temperature '{"temperature": 0.8}' \
    schedule '{"temperature_schedule": {"points": [[256, 1.0], [1024, 0.8], [2048, 0.7]]}}' \
    lambda '{"lambda_mask": {"n_global": 10, "n_local": 256}}' \
    top_k_decode '{"lambda_mask": {"n_global": 10, "n_local": 256}, "top_k": {"k": 5}}' \
    top_k_all '{"lambda_mask": {"n_global": 10, "n_local": 256}, "top_k": {"k": 5, "rows": "all"}}'
  case $1 in
    alibi-probe) printf '%s\t%s\n' alibi_static '{"alibi_scale": {"mode": "static", "factor": 4}}' \
                   alibi_dynamic '{"alibi_scale": {"mode": "dynamic"}}' \
                   alibi_progressive '{"alibi_scale": {"mode": "progressive"}}' ;;
    fire-probe) printf '%s\t%s\n' fire_threshold '{"fire_threshold": 1024}' ;;
  esac
}

hdr="| model | rule | export s | model.onnx KiB | nodes |"
sep="|---|---|---:|---:|---:|"
for L in $lengths; do hdr="$hdr ORT tok/s @$L |"; sep="$sep---:|"; done
echo "$hdr rel. err @$first |"
echo "$sep---:|"
for model in $models; do
  m=$src/examples/probe-models/$model
  ids "$m" "$first" > "$work/ids"
  while IFS=$'\t' read -r name rule; do
    out=$work/$model.$name
    echo "$rule" > "$out.json"
    t0=$(date +%s.%N)
    "$bin" convert "$m" "$out" --to onnx --rule "$out.json" >/dev/null
    t1=$(date +%s.%N)
    kib=$(( $(stat -c %s "$out/onnx/model.onnx") / 1024 ))
    nodes=$("$py" -c "import onnx,sys; print(len(onnx.load(sys.argv[1], load_external_data=False).graph.node))" \
      "$out/onnx/model.onnx" 2>/dev/null || echo "-")
    rates=$(node "$src/tests/onnx/ort_run.mjs" "$out" --bench --lengths "${lengths// /,}" --repeat "$repeat" \
      --threads "$threads" 2>/dev/null | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' | tr '\n' ' ')
    "$bin" forward "$m" --ids @"$work/ids" --rule "$out.json" --threads "$threads" --out "$out.ref" >/dev/null
    node "$src/tests/onnx/ort_run.mjs" "$out" --ids "$(cat "$work/ids")" --threads "$threads" --out "$out.ort" 2>/dev/null
    v=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$m/config.json")
    err=$("$py" "$src/tests/onnx/compare_logits.py" "$out.ort" "$out.ref" --vocab "$v" | sed -n 's/.*rel_err=\([^ ]*\).*/\1/p')
    row="| $model | $name | $("$py" -c "print('%.2f' % ($t1 - $t0))") | $kib | $nodes |"
    for r in $rates; do row="$row ${r%.*} |"; done
    echo "$row $err |"
  done < <(rules "$model")
done
