#!/usr/bin/env bash
# Under `set -o pipefail`, `cmd | grep -q PATTERN` fails at random: grep exits at the first match,
# cmd then dies of SIGPIPE while still writing, and the pipeline reports cmd's failure. That made
# test_install fail about once in eight parallel runs. Every shell script of the project pipes into
# `grep >/dev/null` instead; this test keeps it so.
src=${CTXPATCH_SOURCE_DIR:?}
hits=$(grep -nE '\|[[:space:]]*grep[[:space:]]+(-[a-zA-Z]*q|--quiet)' "$src"/tests/*.sh "$src"/tests/*/*.sh \
  "$src"/scripts/*.sh "$src"/bench/*.sh "$src"/lab/*.sh "$src"/.ci/run 2>/dev/null | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#')
if [ -n "$hits" ]; then
  echo "FAIL: a pipe into grep -q (flaky under pipefail; use grep >/dev/null):"
  echo "$hits"
  exit 1
fi
echo "ok: no pipe into grep -q"
