#!/usr/bin/env bash
# Issue 33 item 3: batch never writes into its inputs (cli/batch_apart.c). A recipe whose outputs,
# logs or failure records would be, hold or lie inside an input, or match an "inputs" glob (or
# have a folder that does: the outputs would be inputs of the next run) is refused when loaded:
# `--validate` and a run both exit 125 with one line (CP_EOVERLAP) naming output.dir, and the run
# writes nothing, in the input or anywhere. Cases: output.dir = an input folder, the same through
# a symlink, output.dir inside a glob's folder (models/patched with models/*), output.dir = the
# glob's folder (outputs named like matches), an explicit jobs list. Controls: the same inputs
# with the outputs beside them validate.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

pm=$src/examples/probe-models
[ -f "$pm/rope-probe/model.safetensors" ] || { echo "SKIP: $pm/rope-probe is absent"; exit 77; }
cd "$work" || exit 1
mkdir models
cp -r "$pm/rope-probe" models/rope
ln -s models/rope link

recipe() { # recipe FILE INPUTS-JSON OUTPUT-DIR
  cat >"$1" <<EOF
{
  "recipe_version": 1,
  "inputs": $2,
  "methods": [{"name": "t09", "method": "temperature", "options": {"tau": 0.9}}],
  "target_lengths": [512],
  "verify": {"no_verify": true, "threads": 1},
  "output": {"dir": "$3"}
}
EOF
}
snapshot() { find . -path ./snap -prune -o -print | sort | grep -v '^\./r\.json$\|^\./err$\|^\./snap'; }

# refused NAME INPUTS-JSON OUTPUT-DIR: --validate and a run refuse (125, CP_EOVERLAP, output.dir)
# and nothing is written.
refused() {
  recipe r.json "$2" "$3"
  snapshot >snap.before
  "$bin" batch r.json --validate >/dev/null 2>err
  local s=$?
  [ $s -eq 125 ] && grep -q "CP_EOVERLAP.*output.dir" err && ok || { bad "$1: --validate exit $s: $(head -c 300 err)"; }
  "$bin" batch r.json --jobs 1 >/dev/null 2>err
  s=$?
  snapshot >snap.after
  [ $s -eq 125 ] && cmp -s snap.before snap.after && ok \
    || { bad "$1: run exit $s: $(head -c 200 err)"; diff snap.before snap.after | head -5; }
}

refused "output.dir = the input folder" '["models/rope"]' "models/rope"
refused "output.dir = the input folder through a symlink" '["models/rope"]' "link"
refused "output.dir inside the input folder" '["models/rope"]' "models/rope/out"
refused "output.dir inside a glob's folder" '["models/*"]' "models/patched"
refused "output.dir = the glob's folder" '["models/*"]' "models"
mkdir -p out/old-512 && echo '{}' >out/old-512/config.json
refused "a glob matching the outputs by name" '["models/rope", "out/*-512"]' "out"
# An explicit list: the input named by "jobs".
cat >r.json <<EOF
{"recipe_version": 1, "methods": [{"name": "t09", "method": "temperature", "options": {"tau": 0.9}}],
 "jobs": [{"input": "models/rope", "method": "t09", "target_length": 512}],
 "verify": {"no_verify": true}, "output": {"dir": "models/rope"}}
EOF
"$bin" batch r.json --validate >/dev/null 2>err; s=$?
[ $s -eq 125 ] && grep -q "CP_EOVERLAP" err && ok || bad "explicit jobs into the input: exit $s: $(head -c 300 err)"

# Controls: outputs beside the inputs are fine, glob or not.
recipe r.json '["models/*"]' "out"
"$bin" batch r.json --validate >/dev/null 2>err && ok || bad "models/* into out: $(head -c 300 err)"
recipe r.json '["models/rope"]' "models-out"
"$bin" batch r.json --validate >/dev/null 2>err && ok || bad "models/rope into models-out: $(head -c 300 err)"
finish
