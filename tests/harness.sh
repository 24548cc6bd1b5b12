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
