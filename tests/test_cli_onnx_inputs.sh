#!/usr/bin/env bash
# Issue 33 item 2: every file a command reads is an input no output may be or replace, not only
# the path given: a graph's external data file, the tokenizer found beside it, the other graph of
# a T5 pair (base/paths.c, cp_input_note / cp_input_check_output). Each refusal exits 1 with
# CP_EOVERLAP naming OUT, and leaves every input byte for byte as it was:
#   forward g/model.onnx --out g/model.onnx.data, verify g/model.onnx --certificate TOKENIZER,
#   forward encoder_model.onnx --out decoder_model_merged.onnx (and the decoder's data file),
#   patch IN.onnx OUT.onnx --force where OUT is IN's data file (named *.onnx), and OUT in another
#   folder named like IN's data file (nothing written there either).
# A control: the same commands with an output elsewhere succeed.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

pm=$src/examples/probe-models
[ -f "$pm/rope-probe/model.safetensors" ] && [ -f "$pm/t5-probe/model.safetensors" ] \
  || { echo "SKIP: the probe models are absent"; exit 77; }
"$py" -c "import onnx" 2>/dev/null || { echo "SKIP: $py has no onnx module (Debian python3-onnx)"; exit 77; }

cd "$work" || exit 1
"$bin" convert "$pm/rope-probe" exp --to onnx --external-threshold 4K >/dev/null || { bad "convert rope-probe"; finish; exit; }
"$bin" convert "$pm/t5-probe" t5 --to onnx --external-threshold 4K >/dev/null || { bad "convert t5-probe"; finish; exit; }
# A graph whose data file is named like a graph (w.onnx), as onnx.save_model lets anyone write.
mkdir -p g other
"$py" - exp/onnx/model.onnx g/model.onnx <<'EOF' || bad "python3-onnx re-save"
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.save_model(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True, location="w.onnx",
                size_threshold=1024)
EOF
[ -f g/w.onnx ] && ok || bad "g/w.onnx was not written"

sums() { find exp t5 g other -type f | sort | xargs sha256sum; }
# refused NAME CMD...: exit 1, CP_EOVERLAP, and no file of any input (or of other/) changed or added.
refused() {
  local name=$1 s
  shift
  sums >before
  "$@" >out.txt 2>&1
  s=$?
  sums >after
  if [ $s -eq 1 ] && grep -q "CP_EOVERLAP" out.txt && cmp -s before after; then ok; else
    bad "$name: exit $s: $(head -c 300 out.txt)"
    diff before after | head -5
  fi
}

ids=(--ids 1,2,3)
V=(--probe passkey --lengths 256 --depths 0.5 --samples 1 --threads 1)
refused "forward --out the graph's data file" "$bin" forward exp/onnx/model.onnx "${ids[@]}" --out exp/onnx/model.onnx.data
refused "forward --stats the graph's data file" "$bin" forward exp/onnx/model.onnx "${ids[@]}" --out logits.bin \
  --stats exp/onnx/model.onnx.data
refused "verify --certificate the tokenizer" "$bin" verify exp/onnx/model.onnx "${V[@]}" --certificate exp/tokenizer.json
refused "forward T5 encoder --out the decoder graph" "$bin" forward t5/onnx/encoder_model.onnx "${ids[@]}" \
  --decoder-ids 0 --out t5/onnx/decoder_model_merged.onnx
refused "forward T5 decoder --out the decoder's data" "$bin" forward t5/onnx/decoder_model_merged.onnx "${ids[@]}" \
  --decoder-ids 0 --out t5/onnx/decoder_model_merged.onnx.data
refused "patch --force OUT = IN's data file" "$bin" patch g/model.onnx g/w.onnx --method temperature --tau 0.9 \
  --no-verify --force
refused "patch --to gguf OUT = the graph's data file" "$bin" patch exp/onnx/model.onnx exp/onnx/model.onnx.data --to gguf \
  --method temperature --tau 0.9 --no-verify --force
refused "patch OUT in another folder named like IN's data file" "$bin" patch g/model.onnx other/w.onnx \
  --method temperature --tau 0.9 --no-verify
grep -q "name OUT otherwise" out.txt && ok || bad "the refusal does not say why: $(cat out.txt)"

# Controls: the same commands with outputs that are no input succeed.
"$bin" forward exp/onnx/model.onnx "${ids[@]}" --out logits.bin >out.txt 2>&1 && [ -s logits.bin ] && ok \
  || bad "forward --out logits.bin: $(head -c 300 out.txt)"
"$bin" forward t5/onnx/encoder_model.onnx "${ids[@]}" --decoder-ids 0 --out t5.bin >out.txt 2>&1 && ok \
  || bad "forward T5 --out t5.bin: $(head -c 300 out.txt)"
"$bin" verify exp/onnx/model.onnx "${V[@]}" --certificate cert.json >out.txt 2>&1 && [ -s cert.json ] && ok \
  || bad "verify --certificate cert.json: $(head -c 300 out.txt)"
"$bin" patch g/model.onnx other/p.onnx --method temperature --tau 0.9 --no-verify >out.txt 2>&1 \
  && [ -f other/p.onnx ] && cmp -s g/w.onnx other/w.onnx && ok || bad "patch into other/p.onnx: $(head -c 300 out.txt)"
finish
