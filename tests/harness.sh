# Shell test harness (the shell side of tests/test.h), sourced by tests/test_*.sh:
#   . "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
# Gives $bin (the CLI), $src, $py (stdlib Python), $work (a temporary folder removed on exit),
# ok / bad MESSAGE / check CMD... counters, and finish, which prints "N passed, M failed" and
# sets the exit status.
set -uo pipefail
bin=$CTXPATCH_BIN; src=$CTXPATCH_SOURCE_DIR
py=/usr/bin/python3; [ -x "$py" ] || py=python3
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
check() { if "$@"; then ok; else bad "$*"; fi; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; }
# need_onnxruntime: exits 77 (skip) unless node and onnxruntime-node (in $CTXPATCH_NODE_MODULES,
# else tests/runtimes/node_modules from scripts/install-test-runtimes.sh) and the stdlib Python's
# numpy are there; exports CTXPATCH_NODE_MODULES for tests/onnx/*.mjs.
need_onnxruntime() {
  local nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
  [ -d "$nm/onnxruntime-node" ] && command -v node >/dev/null ||
    { echo "SKIP: onnxruntime-node not installed in $nm (run scripts/install-test-runtimes.sh; needs npm)"; exit 77; }
  "$py" -c "import numpy" 2>/dev/null || { echo "SKIP: $py lacks numpy"; exit 77; }
  export CTXPATCH_NODE_MODULES=$nm
}
