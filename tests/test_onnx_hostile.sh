#!/usr/bin/env bash
# The hostile ONNX corpus (tests/onnx/make_onnx_cases.py) through `ctxpatch inspect`: each case is
# refused with exit 1, one line naming its code and its exact reason (or read, for the cases marked
# OK), never a crash or a hang; under strace (when it works here) no case touches anything in the
# corpus's outside/ folder that the hostile models point at, and every data file is opened with
# O_NOFOLLOW. Then every fixture graph of ../shared/fixtures/third_party/onnxruntime*,
# onnx-node-tests is read, and test_arbitrary_external_file.onnx (external data at
# ../../../../../../../etc/passwd) is refused without touching /etc/passwd.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR; fx=$CTXPATCH_FIXTURES/third_party
"$py" -c "import onnx, numpy" 2>/dev/null || { echo "SKIP: $py lacks onnx/numpy (Debian python3-onnx)"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
"$py" "$src/tests/onnx/make_onnx_cases.py" "$work/c" >/dev/null || { echo "FAIL: make_onnx_cases.py"; exit 1; }
tracing=0
strace -f -o /dev/null true 2>/dev/null && tracing=1
[ $tracing = 1 ] || echo "note: strace unusable here; the outside/ FIFO still proves no blocking open"

# expect CODE SUBSTRING MODEL: CODE OK means it must read.
expect() {
  local code=$1 sub=$2 model=$3
  timeout 30 "$bin" inspect "$model" >"$work/out" 2>"$work/err"; local rc=$?
  if [ "$code" = OK ]; then
    [ $rc = 0 ] && ok || bad "$model: expected to read (rc=$rc): $(cat "$work/err")"
  elif [ $rc = 1 ] && grep -qF -- "error $code:" "$work/err" && grep -qF -- "$sub" "$work/err" \
       && [ "$(wc -l <"$work/err")" = 1 ]; then ok
  else bad "$model: expected $code /$sub/ (rc=$rc): $(cat "$work/err")"; fi
}

# traced MODEL NEEDLE: under strace, no file syscall names NEEDLE; data files opened O_NOFOLLOW.
traced() {
  [ $tracing = 1 ] || return 0
  timeout 30 strace -f -e trace=%file -o "$work/trace" "$bin" inspect "$1" >/dev/null 2>&1
  if grep -q -- "$2" "$work/trace"; then bad "$1: touched $2: $(grep -- "$2" "$work/trace" | head -2)"; else ok; fi
  # Every openat relative to the model's folder descriptor (the data files) carries O_NOFOLLOW.
  if grep -E 'openat\([0-9]+, "' "$work/trace" | grep -v O_NOFOLLOW >/dev/null; then
    bad "$1: an external open without O_NOFOLLOW: $(grep -E 'openat\([0-9]+, "' "$work/trace" | grep -v O_NOFOLLOW | head -1)"
  else ok; fi
}

n=0
while IFS=$'\t' read -r name code sub; do
  expect "$code" "$sub" "$work/c/hostile/$name/model.onnx"
  case $name in ext_*) traced "$work/c/hostile/$name/model.onnx" outside ;; esac
  n=$((n+1))
done <"$work/c/hostile/cases.tsv"
[ $n -ge 50 ] && ok || bad "only $n hostile cases"
# The FIFO outside was never opened for reading (a blocking open would have hung above; a writer
# finds no reader: ENXIO).
[ -p "$work/c/outside/fifo" ] && ok || bad "outside/fifo is gone"
"$py" -c "import os,sys; os.open(sys.argv[1], os.O_WRONLY|os.O_NONBLOCK)" "$work/c/outside/fifo" 2>/dev/null \
  && bad "outside/fifo has a reader" || ok
# require nothing of the good models but that they read
expect OK "" "$work/c/good/structure.onnx"
expect OK "" "$work/c/good/elements/model.onnx"

if [ -d "$fx" ]; then
  evil=$fx/onnxruntime/external-data/test_arbitrary_external_file.onnx
  expect CP_EONNX_EXTERNAL "initializer 'evil_weights': external location '../../../../../../../etc/passwd' has a '..' component" "$evil"
  traced "$evil" passwd
  count=0
  while IFS= read -r f; do
    [ "$f" = "$evil" ] && continue
    expect OK "" "$f"; count=$((count+1))
  done < <(find "$fx"/onnxruntime* "$fx"/onnx-node-tests -name '*.onnx' | sort)
  [ $count -ge 40 ] && ok || bad "only $count fixture graphs found"
else
  echo "note: $fx absent: fixture graphs not read"
fi
echo "$passed passed, $failed failed"
[ $failed = 0 ]
