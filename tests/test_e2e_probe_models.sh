#!/usr/bin/env bash
# End to end on every probe model with its seed's method: patch (calibrate where needed), certify
# against the original, write only on a pass, and `ctxpatch verify OUT` reproduces the
# certificate. Accuracy is not asserted here (docs/results.md records it): the pipeline is.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
models=$src/examples/probe-models
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
[ -f "$models/t5-probe/model.safetensors" ] || { echo "SKIP: probe models absent"; exit 77; }

probes=(--probe passkey --lengths 256,1024 --depths 0:1:3 --samples 1 --seed 5)
run() { # run NAME FIDELITY METHOD...
  local name=$1 fidelity=$2; shift 2
  local out=$work/$name
  "$bin" patch "$models/$name" "$out" "$@" --verify passkey --lengths 256,1024 --depths 0:1:3 --samples 1 \
    --seed 5 --threads 2 --accept-no-gain --accept-underpowered >"$work/$name.log" 2>&1
  local rc=$?
  grep -q "fidelity: $fidelity" "$work/$name.log" && ok || bad "$name: fidelity is not $fidelity"
  if [ $rc = 0 ]; then
    [ -f "$out/certificate.json" ] && [ -f "$out/report.html" ] && ok || bad "$name: certified OUT incomplete"
    (cd "$out" && sha256sum --quiet -c SHA256SUMS) && ok || bad "$name: SHA256SUMS"
    "$bin" verify "$out" "${probes[@]}" --threads 2 --certificate "$work/$name.re.json" >/dev/null && ok || bad "$name: re-verify"
    "$py" - "$out/certificate.json" "$work/$name.re.json" <<'PY' && ok || bad "$name: re-verify differs from the certificate"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["verdict"]["result"] == "pass"
assert a["results"]["patched"]["passkey"] == b["results"]["patched"]["passkey"], (a["results"], b["results"])
PY
  elif [ $rc = 1 ] && grep -q "certification failed" "$work/$name.log"; then
    [ ! -e "$out" ] && [ -z "$(ls -A "$work" | grep "^\.$name" || true)" ] && ok || bad "$name: refused patch left files"
  else
    bad "$name: patch exited $rc: $(tail -3 "$work/$name.log")"
  fi
}

run t5-probe exact-weights --method temperature --calibrate pmax --target-len 1024
run alibi-probe ctxpatch-metadata --method alibi-pi --dynamic --for ctxpatch
run rope-probe ctxpatch-metadata --method lm-infinite --for ctxpatch
run fire-probe exact-weights --method fire-threshold --threshold 512

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
