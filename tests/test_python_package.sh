#!/usr/bin/env bash
# The Python side's one bootstrap (python/README.md): no script edits sys.path (python/ctxpatch_ref
# is reached through PYTHONPATH, set by the tests' environment or by scripts/py), scripts/py makes
# the package importable from any folder with no PYTHONPATH of its own, and every script that
# imports the package compiles.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
cd "$src"
hits=$(grep -rnE 'sys\.path\.(insert|append)|sys\.path *\+?=' --include='*.py' python lab bench tests examples scripts \
  2>/dev/null | grep -v '/node_modules/')
[ -z "$hits" ] && ok || bad "sys.path edited (use PYTHONPATH / scripts/py): $hits"
# stdlib-only modules through the wrapper, from another folder, without the tests' PYTHONPATH
(cd "$work" && env -u PYTHONPATH CTXPATCH_PYTHON="$py" "$src/scripts/py" -c \
  "from ctxpatch_ref import bpe, data; import sys; print(bpe.__file__); sys.exit(not data.passkey)") >"$work/where" 2>&1 \
  && ok || bad "scripts/py cannot import ctxpatch_ref: $(cat "$work/where")"
grep -F "$src/python/ctxpatch_ref/bpe.py" "$work/where" >/dev/null && ok || bad "imported from elsewhere: $(cat "$work/where")"
# every user of the package compiles (syntax and names are checked when the tests that run them run)
users=$(grep -rlE '^(from|import) ctxpatch_ref' --include='*.py' python lab bench tests examples 2>/dev/null)
[ -n "$users" ] && ok || bad "no script imports ctxpatch_ref"
for f in $users; do
  "$py" -c "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')" "$f" && ok || bad "$f does not compile"
done
finish
