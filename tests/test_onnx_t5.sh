#!/usr/bin/env bash
# T5 as ONNX (export/onnx/onnx_t5.c, issue 13): `convert --to onnx` of the T5 engine goldens
# (relu and gated-gelu FFNs) and the t5-probe writes onnx/encoder_model.onnx +
# onnx/decoder_model_merged.onnx that Debian's python3-onnx checker accepts; onnxruntime-node's
# logits (tests/onnx/ort_run.mjs) equal `ctxpatch forward` (max|a-b|/max|b| <= 1e-4) past the
# training length (and past relative_attention_max_distance), in one pass and with the decoder
# tokens one at a time through the cache; greedy decoding of 32 tokens through the cache gives
# `ctxpatch forward --generate 32`'s tokens; the merged decoder ignores its pasts when
# use_cache_branch is false; the export is deterministic; and transformers.js loads the exported
# t5-probe folder from local files and generates the passkey answer, token for token as ctxpatch.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
[ -d "$nm/onnxruntime-node" ] && command -v node >/dev/null ||
  { echo "SKIP: onnxruntime-node not installed in $nm (run scripts/install-test-runtimes.sh; needs npm)"; exit 77; }
"$py" -c "import onnx, numpy" 2>/dev/null || { echo "SKIP: $py lacks onnx/numpy (Debian python3-onnx)"; exit 77; }
export CTXPATCH_NODE_MODULES=$nm
t=$src/tests/onnx
seqids() { "$py" -c "import sys; n, v, a, b = map(int, sys.argv[1:]); print(','.join(str((i * a + b) % v) for i in range(n)))" "$@"; }

t5case() { # t5case MODEL_DIR ENC_LEN DEC_LEN
  local model=$1 n_enc=$2 n_dec=$3 name out
  name=$(basename "$model")
  out=$work/$name
  local vocab
  vocab=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json")
  check "$bin" convert "$model" "$out" --to onnx >/dev/null
  check "$bin" convert "$model" "$out.again" --to onnx >/dev/null
  check cmp "$out/SHA256SUMS" "$out.again/SHA256SUMS"
  check "$py" -c "import onnx, sys; [onnx.checker.check_model(p, full_check=True) for p in sys.argv[1:]]" \
    "$out/onnx/encoder_model.onnx" "$out/onnx/decoder_model_merged.onnx"
  local ids dec
  ids=$(seqids "$n_enc" "$vocab" 37 5)
  dec=0,$(seqids $((n_dec - 1)) "$vocab" 11 3)
  "$bin" forward "$model" --ids "$ids" --decoder-ids "$dec" --out "$work/$name.ref" || { bad "$name: forward"; return; }
  node "$t/ort_run.mjs" "$out" --ids "$ids" --decoder-ids "$dec" --out "$work/$name.ort" &&
    check "$py" "$t/compare_logits.py" "$work/$name.ort" "$work/$name.ref" --vocab "$vocab" --label "$name enc $n_enc one pass" ||
    bad "$name: ort_run one pass"
  node "$t/ort_run.mjs" "$out" --ids "$ids" --decoder-ids "$dec" --split 1 --out "$work/$name.split" &&
    check "$py" "$t/compare_logits.py" "$work/$name.split" "$work/$name.ref" --vocab "$vocab" --label "$name cache, one token a step" ||
    bad "$name: ort_run through the cache"
  # the comparison sees the attention: the engine under another rule gives other logits
  echo '{"temperature": 0.5, "temperature_scope": "all"}' > "$work/hot.json"
  "$bin" forward "$model" --ids "$ids" --decoder-ids "$dec" --rule "$work/hot.json" --out "$work/$name.hot" &&
    { "$py" "$t/compare_logits.py" "$work/$name.ort" "$work/$name.hot" --vocab "$vocab" --label "$name vs tau 0.5" >/dev/null
      [ $? = 1 ] && ok || bad "$name: compare_logits accepted the logits of another rule"; }
  local want got
  want=$("$bin" forward "$model" --ids "$ids" --generate 32 | tail -n 1)
  got=$(node "$t/ort_run.mjs" "$out" --ids "$ids" --generate 32)
  echo "$name generate 32: ort $got / engine $want"
  [ -n "$got" ] && [ "$got" = "$want" ] && [ "$(tr , '\n' <<<"$got" | sort -u | wc -l)" -ge 3 ] && ok ||
    bad "$name: greedy tokens through the cache differ from the engine's (or are degenerate)"
  check node "$t/t5_dummy_past.mjs" "$out" --ids "$(seqids 19 "$vocab" 7 2)" --decoder-ids 0,5,9
}

models=$src/tests/goldens/engine/models
t5case "$models/t5_relu" 96 48     # relative_attention_max_distance 20
t5case "$models/t5_gated" 96 48
probe=$src/examples/probe-models/t5-probe
t5case "$probe" 512 160            # 2x n_positions 256; decoder past max_distance 128

# transformers.js: the exported probe folder loads from local files and answers the passkey
if [ -d "$nm/@huggingface/transformers" ]; then
  for len in 256 512; do
    key=$("$py" - "$src/examples/probe-models" "$len" "$work/p$len" <<'PY'
import random, sys
from ctxpatch_ref import bpe, data
tok = bpe.Tokenizer(sys.argv[1] + "/t5-probe/tokenizer.json")
s = data.passkey(random.Random(int(sys.argv[2])), int(sys.argv[2]), tok.encode, depth=0.5)
open(sys.argv[3] + ".txt", "w").write(s["prompt"])
open(sys.argv[3] + ".ids", "w").write(",".join(map(str, tok.encode(s["prompt"]))))
print(s["key"])
PY
) || { bad "passkey prompt $len"; continue; }
    res=$(node "$t/t5_tjs_generate.mjs" "$work/t5-probe" --prompt-file "$work/p$len.txt" --max-new-tokens 10) ||
      { bad "transformers.js generate at $len"; continue; }
    want=$("$bin" forward "$probe" --ids "@$work/p$len.ids" --generate 10 --stop-at-eos | tail -n 1)
    echo "transformers.js passkey $len tokens: key $key, generated $(sed -n 3p <<<"$res") (ids $(sed -n 2p <<<"$res"); ctxpatch $want)"
    check test "$(sed -n 1p <<<"$res")" = "$(cat "$work/p$len.ids")"   # same tokenizer ids
    check test "$(sed -n 2p <<<"$res")" = "$want"                       # same tokens as the engine
    [ "$len" = 256 ] && check grep -q "\" $key\"" <<<"$(sed -n 3p <<<"$res")"  # the answer, at the training length
  done
else
  echo "transformers.js not installed in $nm: its checks are skipped"
fi
finish
