#!/usr/bin/env bash
# The bundled probe models (examples/probe-models, v1 and v2/): `ctxpatch inspect` names the right family and
# `ctxpatch forward` reproduces the PyTorch reference's logits (golden/ written by check.py from
# python/ctxpatch_ref/torchref) to max|a-b|/max|b| <= 1e-4; the ALiBi probe's PyTorch zip copy too.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
pm=$src/examples/probe-models
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0; seen=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }

# stdlib-only comparison of two float32 little-endian files
cmp_f32() {
  "$py" - "$1" "$2" <<'EOF'
import struct, sys
a = open(sys.argv[1], "rb").read(); b = open(sys.argv[2], "rb").read()
if len(a) != len(b) or not a:
    print("size %d != golden %d" % (len(a), len(b))); sys.exit(1)
n = len(a) // 4
x = struct.unpack("<%df" % n, a); y = struct.unpack("<%df" % n, b)
den = max(abs(v) for v in y)
err = max(abs(p - q) for p, q in zip(x, y)) / den
print("rel err %.2e" % err)
sys.exit(0 if err <= 1e-4 else 1)
EOF
}

for spec in t5-probe:t5 alibi-probe:bloom rope-probe:llama fire-probe:fire \
            v2/t5-probe:t5 v2/alibi-probe:bloom v2/rope-probe:llama v2/fire-probe:fire; do
  rel=${spec%%:*}; fam=${spec##*:}; m=$pm/$rel; g=$m/golden; name=${rel//\//-}
  if [ ! -f "$g/logits.f32" ]; then
    # a folder not trained yet is skipped; committed weights without their golden are a failure
    [ -f "$m/model.safetensors" ] && bad "$name: weights without golden/ (run check.py --golden)" \
      || echo "note: $name has no golden (not trained yet)"
    continue
  fi
  seen=$((seen+1))
  if "$bin" inspect "$m" --json >"$work/$name.json"; then ok; else bad "$name: inspect exit $?"; fi
  grep -Eq "\"family\":[[:space:]]*\"$fam\"" "$work/$name.json" && ok || bad "$name: family is not $fam"
  dec=()
  [ -f "$g/decoder_ids.txt" ] && dec=(--decoder-ids "@$g/decoder_ids.txt")
  if "$bin" forward "$m" --ids "@$g/ids.txt" "${dec[@]}" --threads 2 --out "$work/$name.f32"; then
    ok
    cmp_f32 "$work/$name.f32" "$g/logits.f32" && ok || bad "$name: logits differ from the PyTorch reference"
  else
    bad "$name: forward exit $?"
  fi
  if [ -f "$m/pytorch_model.bin" ]; then
    # the PyTorch zip copy alone (a folder holding only it and the config)
    mkdir -p "$work/$name-bin"
    cp "$m/config.json" "$m/pytorch_model.bin" "$work/$name-bin/"
    "$bin" inspect "$work/$name-bin" --json >"$work/$name-bin.json" && grep -Eq '"format":[[:space:]]*"pytorch-zip"' "$work/$name-bin.json" \
      && ok || bad "$name: pytorch_model.bin copy not read as pytorch-zip"
    "$bin" forward "$work/$name-bin" --ids "@$g/ids.txt" --threads 2 --out "$work/$name-bin.f32" \
      && cmp_f32 "$work/$name-bin.f32" "$g/logits.f32" && ok || bad "$name: pytorch_model.bin logits differ"
  fi
done
[ "$seen" -gt 0 ] || { echo "SKIP: no probe model with a golden under $pm"; exit 77; }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
