#!/usr/bin/env bash
# The runtime drivers on toy graphs made here (tests/onnx/make_toy_graph.py, Debian's python3-onnx)
# in the layouts the exporter writes: onnxruntime's logits (tests/onnx/ort_run.mjs) in one pass
# and through the KV cache (prefill + single steps) equal a numpy evaluation of the same toy
# model, and greedy decoding through the cache gives numpy's tokens, for the decoder-only graph
# (GQA, positions from position_ids) and the T5 pair (encoder + Optimum's merged decoder with
# use_cache_branch). This proves the runner's cache handling before the exporter lands.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/onnx/env.sh"
onnx_env onnxruntime-node
ids=$(seq -s, 1 2 35 | tr -d '\n' | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), $i % 24}')   # 18 ids

toy() { # toy KIND IDS DECODER_IDS SPLITS...
  local kind=$1 ids=$2 dec=$3; shift 3
  local m=$work/$kind decarg=()
  [ -n "$dec" ] && decarg=(--decoder-ids "$dec")
  check "$py" "$t/make_toy_graph.py" "$m" --kind "$kind"
  local want_gen
  want_gen=$("$py" "$t/make_toy_graph.py" "$m" --reference --ids "$ids" "${decarg[@]}" --out "$work/$kind.ref" --generate 24) ||
    { bad "$kind: numpy reference"; return; }
  local got_gen
  got_gen=$(node "$t/ort_run.mjs" "$m" --ids "$ids" "${decarg[@]}" --out "$work/$kind.ort" --generate 24) ||
    { bad "$kind: ort_run"; return; }
  check "$py" "$t/compare_logits.py" "$work/$kind.ort" "$work/$kind.ref" --vocab 24 --label "$kind one pass"
  for n in "$@"; do
    node "$t/ort_run.mjs" "$m" --ids "$ids" "${decarg[@]}" --split "$n" --out "$work/$kind.split$n" &&
      check "$py" "$t/compare_logits.py" "$work/$kind.split$n" "$work/$kind.ref" --vocab 24 --label "$kind split $n" ||
      bad "$kind: split $n"
  done
  echo "$kind generate: ort $got_gen / numpy $want_gen"
  [ "$got_gen" = "$want_gen" ] && [ "$(tr , '\n' <<<"$got_gen" | sort -u | wc -l)" -gt 3 ] && ok ||
    bad "$kind: greedy tokens through the cache differ from numpy's (or are degenerate)"
}

toy decoder "$ids" "" 1 7 17
toy t5 "$ids" "0,5,9,2,11,3,8,1,4,20" 1 4 9
# the comparison passes on equal runs and fails on another model's logits of the same shape
"$py" "$t/compare_logits.py" "$work/decoder.ort" "$work/decoder.split7" --vocab 24 --label self >/dev/null && ok || bad "self-compare"
head -c $((24 * 4 * 10)) "$work/decoder.ort" > "$work/decoder.head"
"$py" "$t/compare_logits.py" "$work/decoder.head" "$work/t5.ref" --vocab 24 --label cross >/dev/null
[ $? = 1 ] && ok || bad "compare_logits accepted logits of a different model"
# the checker accepts the toy graphs (full_check: shape inference included)
check "$py" -c "import onnx, sys; [onnx.checker.check_model(p, full_check=True) for p in sys.argv[1:]]" \
  "$work/decoder/onnx/model.onnx" "$work/t5/onnx/encoder_model.onnx" "$work/t5/onnx/decoder_model_merged.onnx"
# --bench prints a rate per length
out=$(node "$t/ort_run.mjs" "$work/decoder" --bench --lengths 8,32 --repeat 1)
echo "$out"
check grep -q "^bench len=32 prefill_s=.* tokens_per_s=" <<<"$out"
# The matrix driver (test_onnx_runtime.sh) end to end on the toy models, with a stand-in ctxpatch
# whose `convert --to onnx` writes the toy graphs (and refuses top_k as "not yet supported") and
# whose `forward` is the numpy reference: every case passes or is reported as a skip.
mkdir -p "$work/models" "$work/fakebin" "$work/cache"
cp -r "$work/decoder" "$work/models/toy_decoder"; cp -r "$work/t5" "$work/models/toy_t5"
cat > "$work/fakebin/ctxpatch" <<FAKE
#!/usr/bin/env bash
set -e
case "\$1 \$2" in "convert --help") echo "--to safetensors|onnx"; exit 0 ;; esac
cmd=\$1 m=\$2; shift 2
if [ "\$cmd" = convert ]; then   # the toy model folders hold their graphs already
  out=\$1; shift; rule=\$(sed -n 's/.*--rule \\([^ ]*\\).*/\\1/p' <<<"\$*")
  grep -q top_k "\$rule" && { echo "ctxpatch: error CP_EUNSUPPORTED: onnx: top_k not yet supported"; exit 1; }
  exec cp -r "\$m" "\$out"
fi
args=(); while [ \$# -gt 0 ]; do case \$1 in --rule|--threads) shift 2 ;; --out) out=\$2; shift 2 ;; *) args+=("\$1"); shift ;; esac; done
key=$work/cache/\$(echo "\$(basename "\$m") \${args[*]}" | md5sum | cut -c1-16)   # rules are ignored: one reference per input
[ -f "\$key.f32" ] || "$py" "$t/make_toy_graph.py" "\$m" --reference "\${args[@]}" --out "\$key.f32" > "\$key.txt"
cp "\$key.f32" "\$out"; cat "\$key.txt"
FAKE
chmod +x "$work/fakebin/ctxpatch"
out=$(CTXPATCH_BIN=$work/fakebin/ctxpatch CTXPATCH_ONNX_MODELS=$work/models bash "$src/tests/test_onnx_runtime.sh" 2>&1)
rc=$?
echo "$out" | sed -n '/^model /,$p'
[ $rc = 0 ] && ok || bad "test_onnx_runtime.sh on the toy models exited $rc: $(tail -5 <<<"$out")"
check grep -qE "^toy_decoder +lambda +pass +rel [0-9.e-]+ / cache [0-9.e-]+; n=16" <<<"$out"
check grep -qE "^toy_t5 +schedule +pass" <<<"$out"
check grep -qE "^toy_decoder +top_k +skip +ctxpatch: error CP_EUNSUPPORTED: onnx: top_k not yet" <<<"$out"
check test "$(grep -cE "^toy_(decoder|t5) " <<<"$out")" = 17   # rope_pi is not a T5 case, t5_* only T5 ones
finish
