#!/usr/bin/env bash
# ctxpatch batch with the "gguf" format (docs/batch.md): two jobs on the llama-family rope-probe
# write OUT.gguf files with their stamps beside them (OUT.gguf.batch.json); a re-run skips both,
# --status reports them done, and a deleted GGUF reads as pending (a changed one as stale) and is
# redone by the next run. A gguf job on a model without a llama.cpp architecture is recorded as an error.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

pm=$src/examples/probe-models
for m in rope-probe fire-probe; do
  [ -f "$pm/$m/model.safetensors" ] || { echo "SKIP: $pm/$m is absent"; exit 77; }
done
field() { "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }
R=$work/gguf.json
cat >"$R" <<EOF
{
  "recipe_version": 1,
  "inputs": ["$pm/rope-probe"],
  "methods": [
    {"name": "pi", "method": "rope-pi", "options": {"factor": 1.001}},
    {"name": "lmi", "method": "lm-infinite", "options": {"n-global": 10, "n-local": 256, "for": "ctxpatch"}}
  ],
  "target_lengths": [512],
  "formats": ["gguf"],
  "verify": {"probes": "passkey", "lengths": [256], "depths": "0:1:2", "samples": 1, "threads": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "out"}
}
EOF
o=$work/out
# 1. --validate: the names carry the .gguf suffix the template lacks.
"$bin" batch "$R" --validate --json >"$work/v.json" && ok || bad "--validate exit"
[ "$(field "$work/v.json" "sorted(j['name'] for j in r['jobs'])")" = "['rope-probe-lmi-512.gguf', 'rope-probe-pi-512.gguf']" ] \
  && ok || bad "--validate names: $(cat "$work/v.json")"

# 2. Run: two GGUF files (magic "GGUF"), each with its stamp beside it naming the file's SHA-256.
"$bin" batch "$R" --json >"$work/r1.json" && ok || { bad "run exit $?"; cat "$work/r1.json" "$o"/*.batch.log; }
[ "$(field "$work/r1.json" "[j['state'] for j in r['jobs']]")" = "['done', 'done']" ] && ok || bad "run: $(cat "$work/r1.json")"
for n in pi lmi; do
  g=$o/rope-probe-$n-512.gguf
  [ "$(head -c 4 "$g" 2>/dev/null)" = GGUF ] && ok || bad "$g: not a GGUF file"
  want=$(sha256sum "$g" | cut -d' ' -f1)
  [ "$(field "$g.batch.json" "r['gguf_sha256']")" = "$want" ] && ok || bad "$g.batch.json: not the file's SHA-256"
  [ -f "$g.report.html" ] && ok || bad "$g: no report beside it"
done
[ -z "$(find "$o" -name '*.bake*' -o -name 'ctxpatch-batch.json' -o -name '*.batch-failed.json')" ] && ok \
  || bad "left behind: $(find "$o")"

# 3. A re-run skips both (stamps untouched); --status reports both done.
stamp_before=$(sha256sum "$o"/*.batch.json)
"$bin" batch "$R" --json >"$work/r2.json" && ok || bad "re-run exit"
[ "$(field "$work/r2.json" "[j['state'] for j in r['jobs']]")" = "['skipped', 'skipped']" ] && ok || bad "re-run: $(cat "$work/r2.json")"
[ "$(sha256sum "$o"/*.batch.json)" = "$stamp_before" ] && ok || bad "re-run touched the stamps"
"$bin" batch "$R" --status --json >"$work/s1.json" && ok || bad "--status exit"
[ "$(field "$work/s1.json" "[r['summary'][k] for k in ('done','pending','stale')]")" = "[2, 0, 0]" ] && ok \
  || bad "--status: $(cat "$work/s1.json")"

# 4. Deleting one GGUF makes it pending, changing the other makes it stale; a run redoes both.
rm "$o/rope-probe-lmi-512.gguf"
printf x >>"$o/rope-probe-pi-512.gguf"
"$bin" batch "$R" --status --json >"$work/s2.json"
[ "$(field "$work/s2.json" "sorted((j['name'], j['state']) for j in r['jobs'])")" = \
  "[('rope-probe-lmi-512.gguf', 'pending'), ('rope-probe-pi-512.gguf', 'stale')]" ] && ok || bad "--status after rm: $(cat "$work/s2.json")"
"$bin" batch "$R" --json >"$work/r3.json" && ok || bad "redo exit"
"$bin" batch "$R" --status --json >"$work/s3.json"
[ "$(field "$work/s3.json" "r['summary']['done']")" = 2 ] && ok || bad "--status after redo: $(cat "$work/s3.json")"

# 5. gguf of a FIRE model (no llama.cpp architecture): patch refuses the family (lm-infinite;
# rope-pi fails earlier, no RoPE); both jobs are errors, with the reason recorded and no file written.
sed "s#$pm/rope-probe#$pm/fire-probe#; s#\"out\"#\"fireout\"#" "$R" >"$work/fire.json"
"$bin" batch "$work/fire.json" --json >"$work/firer.json"
[ $? -eq 4 ] && ok || bad "fire gguf: exit not 4 (job errors)"
grep "no llama.cpp architecture" "$work/fireout/fire-probe-lmi-512.gguf.batch-failed.json" >/dev/null && ok \
  || bad "fire gguf: no failure record naming the family"
[ -z "$(find "$work/fireout" -name "*.gguf")" ] && ok || bad "fire gguf: a file was written"
finish
