# Sourced by the ONNX runtime tests after tests/harness.sh: `onnx_env PACKAGE` skips (77) unless
# the npm test runtimes (scripts/install-test-runtimes.sh) hold PACKAGE and $py has Debian's
# python3-onnx and numpy; then exports CTXPATCH_NODE_MODULES and sets $t (tests/onnx).
onnx_env() {
  local nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
  [ -d "$nm/$1" ] && command -v node >/dev/null ||
    { echo "SKIP: $1 not installed in $nm (run scripts/install-test-runtimes.sh; needs npm)"; exit 77; }
  "$py" -c "import onnx, numpy" 2>/dev/null || { echo "SKIP: $py lacks onnx/numpy (Debian python3-onnx)"; exit 77; }
  export CTXPATCH_NODE_MODULES=$nm
  t=$src/tests/onnx
}
