#!/usr/bin/env bash
# ctxpatch batch (docs/batch.md) over two probe models: --validate, a run with refusals and errors
# counted apart, kill -9 mid-batch then a re-run that redoes nothing finished, a re-run that skips
# every done job, --status from the outputs alone (done, refused, error, stale, pending), and
# three shards as separate processes whose union is the whole recipe with no job twice, and an
# "onnx" job (patch --to onnx) whose artifact passes `ctxpatch check`, and the sequential design
# (verify.sequential or a method's) in the jobs' digests.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

pm=$src/examples/probe-models
for m in rope-probe t5-probe; do
  [ -f "$pm/$m/model.safetensors" ] || { echo "SKIP: $pm/$m is absent"; exit 77; }
done
# 2 inputs x 3 methods x 2 target lengths = 12 jobs: 8 certified, 2 refused certifications
# (rope-pi on the rope model loses to the original), 2 errors (rope-pi does not fit T5).
recipe() { # recipe FILE OUTDIR
  cat >"$1" <<EOF
{
  "recipe_version": 1,
  "inputs": ["$pm/rope-probe", "$pm/t5-*"],
  "methods": [
    {"name": "lmi", "method": "lm-infinite", "options": {"n-global": 10, "n-local": 256, "for": "ctxpatch"}},
    {"name": "t09", "method": "temperature", "options": {"tau": 0.9}},
    {"name": "pi2", "method": "rope-pi", "options": {"factor": 2}}
  ],
  "target_lengths": [512, 768],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:3", "samples": 1, "threads": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "$2", "name": "{input}/{method}-{target}"}
}
EOF
}
R=$work/recipe.json
recipe "$R" out
# field FILE.json EXPR: a Python expression over the report `r`
field() { "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

# 1. --validate: 12 jobs, and refusals of a bad recipe (exit 125, one line naming the key).
"$bin" batch "$R" --validate --json >"$work/v.json" && ok || bad "--validate exit"
[ "$(field "$work/v.json" "len(r['jobs'])")" = 12 ] && ok || bad "--validate: not 12 jobs"
bad_recipe() { # bad_recipe NAME SED-EXPR EXPECTED-MESSAGE
  sed "$2" "$R" >"$work/bad.json"
  "$bin" batch "$work/bad.json" --validate >/dev/null 2>"$work/bad.err"
  local s=$?
  [ $s -eq 125 ] && grep -q "$3" "$work/bad.err" && ok || { bad "$1: exit $s"; cat "$work/bad.err"; }
}
bad_recipe "unknown key" 's/"verify"/"verfy"/' "unknown key 'verfy'"
bad_recipe "unknown format" 's/"target_lengths"/"formats": ["ggml"], "target_lengths"/' "or \"gguf\""
bad_recipe "glob matching nothing" 's/t5-\*/nothing-*/' "matches nothing"
bad_recipe "name collision" 's#{input}/{method}-{target}#{method}-{target}#' "two jobs write"
bad_recipe "reserved option" 's/"tau": 0.9/"threads": 2/' "batch sets it"
bad_recipe "dot name" 's#{input}/{method}-{target}#.#' "output.name: '.' has a '.' or empty path step"
bad_recipe "batch's own suffix" 's#{input}/{method}-{target}#{input}/{method}-{target}.batch-claim.json#' \
  "ends in '.batch-claim.json', the name of batch's own files"
bad_recipe "dot step" 's#{input}/{method}-{target}#{input}/./{method}-{target}#' "has a '.' or empty path step"
bad_recipe "name too long for its temporaries" "s#{input}/{method}-{target}#{input}/{method}-{target}-$(printf 'n%.0s' $(seq 220))#" \
  "output.name: .*: a name of 2[0-9][0-9] bytes: its temporary"
"$bin" batch "$R" --shard 3/3 --validate >/dev/null 2>&1; [ $? -eq 125 ] && ok || bad "--shard 3/3 accepted"
# verify.baseline_cache (patch --baseline-cache for every job) is not in the jobs' digests: where the
# original's side is kept changes no output. With no_verify it is refused.
sed 's/"verify": {/"verify": {"baseline_cache": "bcache", /' "$R" >"$work/bc.json"
"$bin" batch "$work/bc.json" --validate --json >"$work/vbc.json" \
  && [ "$(field "$work/v.json" "[j['digest'] for j in r['jobs']]")" = "$(field "$work/vbc.json" "[j['digest'] for j in r['jobs']]")" ] \
  && ok || bad "verify.baseline_cache changed the digests"
bad_recipe "baseline cache without certification" 's/"verify": {/"verify": {"baseline_cache": "bcache", "no_verify": true, /' \
  "verify.baseline_cache: the jobs certify nothing"

# 2. kill -9 mid-batch, then a re-run that finishes the rest with nothing finished redone.
(cd "$work" && exec "$bin" batch recipe.json --jobs 1 >/dev/null 2>&1) &
pid=$!
# The kill comes once 3 jobs are stamped and the job in flight has written into its temporary
# folder, so its watchdog runs (patch starts it right after making the folder: a kill between the
# two leaves the folder to the next run's sweep, and a kill soon after a job starts hit that window
# under load). Polled with no deadline of its own: a loaded machine only makes it wait longer.
while kill -0 $pid 2>/dev/null; do
  [ "$(find "$work/out" -name ctxpatch-batch.json 2>/dev/null | wc -l)" -ge 3 ] &&
    [ -n "$(find "$work/out" -mindepth 3 -path '*/.*tmp-*/*' -print -quit 2>/dev/null)" ] && break
  sleep 0.05
done
kill -9 $pid; wait $pid 2>/dev/null
# patch's watchdog (a process of its own, woken by the killed job's end) removes the in-flight
# temporary folder: waited for, not assumed done after a fixed sleep (0.5 s failed under load);
# the 60 s bound only stops a watchdog that never acts from hanging the test.
tmps() { find "$work/out" -name '.*tmp-*'; }
for _ in $(seq 1200); do [ -z "$(tmps)" ] && break; sleep 0.05; done
find "$work/out" -name ctxpatch-batch.json -printf '%h %i %T@\n' | sort >"$work/before"
n_before=$(wc -l <"$work/before")
[ "$n_before" -ge 3 ] && [ "$n_before" -lt 8 ] && ok || bad "kill -9 came at $n_before finished jobs (want 3..7)"
[ -z "$(tmps)" ] && ok || bad "temporary folder left after kill -9: $(tmps)"
(cd "$work" && "$bin" batch recipe.json --jobs 2 --json >"$work/r1.json"); s=$?
[ $s -eq 4 ] && ok || bad "run after kill: exit $s, want 4 (job errors; 2 refused + 2 errors)"
"$py" - "$work/r1.json" "$work/before" "$work/out" <<'EOF' && ok || bad "re-run after kill -9"
import json, os, sys
r = json.load(open(sys.argv[1]))
before = {l.split()[0]: l.split()[1:] for l in open(sys.argv[2])}
state = {os.path.join(sys.argv[3], j["name"]): j["state"] for j in r["jobs"]}
for d in before: assert state[d] == "skipped", (d, state[d])           # nothing finished redone
assert sorted(r["summary"][k] for k in ("done", "skipped")) and r["summary"]["done"] + r["summary"]["skipped"] == 8, r["summary"]
assert r["summary"]["refused"] == 2 and r["summary"]["error"] == 2, r["summary"]
for j in r["jobs"]:
    if j["state"] == "refused": assert "regression" in j["message"] and "pi2" in j["name"], j
    if j["state"] == "error": assert "CP_EPATCH_FAMILY" in j["message"] and j["name"].startswith("t5-probe/pi2"), j
EOF
find "$work/out" -name ctxpatch-batch.json -printf '%h %i %T@\n' | sort >"$work/after1"
join "$work/before" "$work/after1" | awk '$2 != $4 || $3 != $5' | grep >/dev/null . && bad "a stamp of a finished job was rewritten" || ok

# 3. Every artifact passes `ctxpatch check`; a re-run skips every done job and retries no refusal.
for d in $(find "$work/out" -name ctxpatch-batch.json -printf '%h\n'); do
  "$bin" check "$d" >/dev/null && ok || bad "check $d"
done
# What the re-run did is counted, not timed (a 5 s bound failed under load): it starts a child only
# for the 2 errors (retried by design), each of which opens its OUT.batch.log with O_TRUNC and
# replaces its OUT.batch-failed.json; every other file under out/ keeps its inode, size and mtime,
# and no file appears or goes.
snapshot() { find "$work/out" -type f -printf '%P %i %s %T@\n' | sort; }
snapshot >"$work/tree1"
grep -q "^rope-probe/pi2-512.batch.log " "$work/tree1" && ok || bad "no recorded refusal's log among the files watched"
sleep 1.1 # a file system with 1 s timestamps still shows a rewrite
(cd "$work" && "$bin" batch recipe.json --jobs 2 --json >"$work/r2.json"); s=$?
[ $s -eq 4 ] && ok || bad "all-done re-run: exit $s"
[ "$(field "$work/r2.json" "[r['summary'][k] for k in ('skipped','done','refused','error')]")" = "[8, 0, 2, 2]" ] \
  && ok || bad "all-done re-run: $(field "$work/r2.json" "r['summary']")"
ran=$(field "$work/r2.json" "' '.join(sorted(j['name'] for j in r['jobs'] if j['seconds'] > 0))")
[ "$ran" = "t5-probe/pi2-512 t5-probe/pi2-768" ] && ok \
  || bad "all-done re-run started children for: '$ran' (want the 2 errors)"
touched=$(snapshot | diff "$work/tree1" - | sed -n 's/^[<>] \([^ ]*\) .*/\1/p' | sort -u | tr '\n' ' ')
want=""; for t in 512 768; do want+="t5-probe/pi2-$t.batch-failed.json t5-probe/pi2-$t.batch.log "; done
[ "$touched" = "$want" ] && ok || bad "all-done re-run touched: $touched(want only the 2 errors' records)"
find "$work/out" -name ctxpatch-batch.json -printf '%h %i %T@\n' | sort | cmp -s - "$work/after1" && ok || bad "a re-run rewrote a stamp"

# 4. --status from the outputs alone: done / refused / error, then stale and pending.
"$bin" batch "$R" --status --json >"$work/s1.json" && ok || bad "--status exit"
[ "$(field "$work/s1.json" "[r['summary'][k] for k in ('done','refused','error','stale','pending')]")" = "[8, 2, 2, 0, 0]" ] \
  && ok || bad "--status: $(field "$work/s1.json" "r['summary']")"
rm "$work/out/rope-probe/lmi-512/ctxpatch-batch.json"      # partial: no stamp
echo "x" >>"$work/out/t5-probe/t09-768/SHA256SUMS"        # not what the stamp recorded
rm -r "$work/out/t5-probe/lmi-768"                         # gone
"$bin" batch "$R" --status --json >"$work/s2.json"
[ "$(field "$work/s2.json" "[r['summary'][k] for k in ('done','stale','pending')]")" = "[5, 2, 1]" ] && ok \
  || bad "--status after tampering: $(field "$work/s2.json" "r['summary']")"
(cd "$work" && "$bin" batch recipe.json --jobs 2 --json >"$work/r3.json")
[ "$(field "$work/r3.json" "sorted(j['name'] for j in r['jobs'] if j['state'] == 'done')")" = \
  "['rope-probe/lmi-512', 't5-probe/lmi-768', 't5-probe/t09-768']" ] && ok || bad "stale/pending redo: $(field "$work/r3.json" "r['summary']")"
"$bin" check "$work/out/t5-probe/t09-768" >/dev/null && ok || bad "redone stale artifact fails check"

# 5. Three shards as separate processes: the union is the recipe, no job twice, balanced.
recipe "$work/sharded.json" shards
for i in 0 1 2; do
  (cd "$work" && "$bin" batch sharded.json --shard $i/3 --json >"$work/shard$i.json") &
done
wait
"$py" - "$work"/shard{0,1,2}.json "$work/v.json" <<'EOF' && ok || bad "shards"
import json, sys
reps = [json.load(open(p)) for p in sys.argv[1:4]]
every = sorted(j["name"] for j in json.load(open(sys.argv[4]))["jobs"])
ran = [j["name"] for r in reps for j in r["jobs"] if j["state"] in ("done", "refused", "error")]
assert sorted(ran) == every, (sorted(ran), every)       # union = all, none twice
assert [len(r["jobs"]) for r in reps] == [4, 4, 4], [len(r["jobs"]) for r in reps]
EOF
"$bin" batch "$work/sharded.json" --status --json >"$work/s3.json"
[ "$(field "$work/s3.json" "[r['summary'][k] for k in ('done','refused','error','pending')]")" = "[8, 2, 2, 0]" ] && ok \
  || bad "--status after shards: $(field "$work/s3.json" "r['summary']")"

# 6. One ONNX job (the "onnx" format row): rope-pi 1.001 certifies on the rope model; the
# artifact is the ONNX layout and passes check with the batch stamp beside it.
cat >"$work/onnx.json" <<EOF
{
  "recipe_version": 1,
  "methods": [{"name": "pi", "method": "rope-pi", "options": {"factor": 1.001}}],
  "jobs": [{"input": "$pm/rope-probe", "method": "pi", "target_length": 512, "format": "onnx"}],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:3", "samples": 1, "threads": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "$work/onnx-out"}
}
EOF
"$bin" batch "$work/onnx.json" --json >"$work/o.json" && ok || { bad "onnx batch exit"; cat "$work/o.json"; }
od=$work/onnx-out/rope-probe-pi-512-onnx
[ "$(field "$work/o.json" "[j['state'] for j in r['jobs']]")" = "['done']" ] && [ -f "$od/onnx/model.onnx" ] \
  && [ ! -e "$od/model.safetensors" ] && ok || { bad "onnx job: $(cat "$work/o.json")"; ls -R "$od"; }
"$bin" check "$od" >"$work/oc.out" && grep -q "pass (onnx" "$work/oc.out" && ok || { bad "onnx batch artifact fails check"; cat "$work/oc.out"; }
# 7. The sequential design is part of a job's digest (docs/batch.md): two methods differing only in
# it are two jobs with two digests, the sequential one's certificate records its design and
# `check --rerun` reproduces it; the recipe switched to `verify.sequential` finds both artifacts
# stale (the fixed one was made with another design, the sequential one with --looks 4, not the
# default); `sequential` given by both verify and a method is refused when the recipe is loaded.
seqrecipe() { # seqrecipe FILE VERIFY-EXTRA METHOD-OPTIONS
  cat >"$1" <<EOF
{
  "recipe_version": 1,
  "methods": [{"name": "t09", "method": "temperature", "options": {"tau": 0.9}},
              {"name": "t09s", "method": "temperature", "options": {"tau": 0.9 $3}}],
  "jobs": [{"input": "$pm/rope-probe", "method": "t09", "target_length": 512},
           {"input": "$pm/rope-probe", "method": "t09s", "target_length": 512}],
  "verify": {"probes": "passkey", "lengths": [256], "depths": "0:1:4", "samples": 4, "threads": 1,
             "accept_no_gain": true, "accept_underpowered": true $2},
  "output": {"dir": "$work/seq-out"}
}
EOF
}
seqrecipe "$work/seq.json" "" ', "sequential": true, "looks": 4'
"$bin" batch "$work/seq.json" --validate --json >"$work/sv.json" && ok || bad "sequential recipe: --validate"
[ "$(field "$work/sv.json" "len(set(j['digest'] for j in r['jobs']))")" = 2 ] && ok || bad "the designs share a digest"
"$bin" batch "$work/seq.json" --json >"$work/sr.json" && ok || bad "sequential recipe: run: $(cat "$work/sr.json")"
sd=$work/seq-out/rope-probe-t09s-512-safetensors
"$py" - "$sd/certificate.json" "$work/seq-out/rope-probe-t09-512-safetensors/certificate.json" <<'EOF' && ok \
  || bad "batch certificates' designs"
import json, sys
s, f = (json.load(open(p)) for p in sys.argv[1:])
q = s["statistics"]["sequential"]
assert q["looks_every"] == 4 and q["prompts_max"] == 16 and q["prompts_used"] <= 16, q
assert "sequential" not in f["statistics"] and f["results"]["comparison"]["passkey"][0]["pairs"] == 16
EOF
"$bin" check "$sd" --rerun >"$work/src.txt" 2>&1 && grep -q "re-run: 1 cells equal" "$work/src.txt" && ok \
  || bad "check --rerun of a batch's sequential artifact: $(cat "$work/src.txt")"
seqrecipe "$work/seq2.json" ', "sequential": true' ''
"$bin" batch "$work/seq2.json" --status --json >"$work/ss.json"
[ "$(field "$work/ss.json" "sorted((j['name'], j['state']) for j in r['jobs'])")" = \
  "[('rope-probe-t09-512-safetensors', 'stale'), ('rope-probe-t09s-512-safetensors', 'stale')]" ] && ok \
  || bad "switching the design: $(field "$work/ss.json" "r['jobs']")"
seqrecipe "$work/seq3.json" ', "sequential": true' ', "sequential": true'
"$bin" batch "$work/seq3.json" --validate >/dev/null 2>"$work/s3.err"; s=$?
[ $s -eq 125 ] && grep -q "methods\[1\].options.sequential: .*verify" "$work/s3.err" && ok \
  || bad "sequential twice: exit $s $(cat "$work/s3.err")"
finish
