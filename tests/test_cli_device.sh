#!/usr/bin/env bash
# --device cpu|cuda on forward, calibrate, verify, patch and batch (issue 20): one parser, and
# before any work a one-line refusal with exit 2 when the build has no CUDA or no device is
# present (batch: its usage status 125); --device cpu is the default engine. The CUDA engine's
# results are checked without a GPU by test_cuda_engine_emulated.
set -euo pipefail
bin=$CTXPATCH_BIN; src=$CTXPATCH_SOURCE_DIR
m=$src/examples/probe-models/rope-probe
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }

if grep -q "cuda=on" <<<"$("$bin" --version)"; then
  want="no CUDA device present"   # the CUDA build on a machine without a device (CI)
else
  want="this build has no CUDA (configure with -DCTXPATCH_CUDA=ON)"
fi

# run WANT_STATUS CMD...: status, one stderr line naming --device cuda, nothing on stdout
expect() {
  local status=$1; shift
  local rc=0
  "$@" >"$work/out" 2>"$work/err" || rc=$?
  if [ "$rc" -ne "$status" ]; then bad "exit $rc (want $status): $*"; cat "$work/err"; return; fi
  if [ "$(wc -l <"$work/err")" -ne 1 ] || ! grep -q -- "--device" "$work/err" || [ -s "$work/out" ]; then
    bad "not one line on stderr: $*"; cat "$work/err"; return
  fi
  ok
}

if grep -q "no CUDA device present" <<<"$want" && "$bin" forward "$m" --ids 1,2 --device cuda --out "$work/x" \
    >/dev/null 2>&1; then
  echo "SKIP: a CUDA device is present here; the refusals below are for machines without one"
  exit 77
fi

expect 2 "$bin" forward "$m" --ids 1,2,3 --device cuda --out "$work/l.bin"
grep -q -- "$want" "$work/err" && ok || bad "forward: message '$(cat "$work/err")'"
[ ! -e "$work/l.bin" ] && ok || bad "forward wrote its output"
expect 2 "$bin" calibrate "$m" --method pmax --lengths 128 --device cuda
grep -q -- "$want" "$work/err" && ok || bad "calibrate message"
expect 2 "$bin" verify "$m" --probe passkey --lengths 64 --device cuda
grep -q -- "$want" "$work/err" && ok || bad "verify message"
expect 2 "$bin" patch "$m" "$work/out-model" --method temperature --tau 0.9 --no-verify --device cuda
grep -q -- "$want" "$work/err" && ok || bad "patch message"
[ ! -e "$work/out-model" ] && ok || bad "patch wrote its output"
echo '{"inputs": ["x"], "methods": [{"method": "temperature", "tau": 0.9}], "output": {"dir": "o"}}' >"$work/r.json"
expect 125 "$bin" batch "$work/r.json" --device cuda
grep -q -- "$want" "$work/err" && ok || bad "batch message"

# one parser: anything but cpu or cuda is a usage error naming the option
bad_device() {
  local rc=0
  "$@" --device gpu >/dev/null 2>"$work/err" || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "--device expects cpu or cuda, got 'gpu'" "$work/err"; then ok
  else bad "$* --device gpu: exit $rc: $(cat "$work/err")"; fi
}
bad_device "$bin" forward "$m" --ids 1 --out "$work/g.bin"
bad_device "$bin" calibrate "$m" --method pmax --lengths 128
bad_device "$bin" verify "$m" --probe passkey --lengths 64
bad_device "$bin" patch "$m" "$work/g" --method temperature --tau 0.9

# --device cpu is the default engine: identical logits
"$bin" forward "$m" --ids 5,9,13,2,7 --threads 1 --out "$work/a.bin"
"$bin" forward "$m" --ids 5,9,13,2,7 --threads 1 --device cpu --out "$work/b.bin"
cmp -s "$work/a.bin" "$work/b.bin" && ok || bad "--device cpu changes the logits"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
