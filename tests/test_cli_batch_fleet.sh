#!/usr/bin/env bash
# ctxpatch batch on a cluster (issue 33, items 15, 16, 18, 19; docs/batch.md): --shard slurm / k8s
# from the scheduler's variables (1-based, one-index and stepped arrays), the exit status of each
# outcome, --accept-refused, per-job progress in a task log that is not a terminal, SIGTERM that
# abandons or finishes the job in flight, a job claimed by another process (skipped as held, nothing
# false written), and temporaries a killed process tree left (named by --status, swept by the next
# claim whatever the job's state; another host's only on its dead owner record). Each check is
# ordered by events (a file appearing, a process ending), never by a clock.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

pm=$src/examples/probe-models
for m in rope-probe t5-probe; do
  [ -f "$pm/$m/model.safetensors" ] || { echo "SKIP: $pm/$m is absent"; exit 77; }
done
field() { "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }
# recipe FILE OUTDIR INPUTS METHODS TARGETS
recipe() {
  cat >"$1" <<EOF
{
  "recipe_version": 1,
  "inputs": [$3],
  "methods": [$4],
  "target_lengths": [$5],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:3", "samples": 1, "threads": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "$2", "name": "{input}-{method}-{target}"}
}
EOF
}
T09='{"name": "t09", "method": "temperature", "options": {"tau": 0.9}}'
T08='{"name": "t08", "method": "temperature", "options": {"tau": 0.8}}'
T07='{"name": "t07", "method": "temperature", "options": {"tau": 0.7}}'
PI2='{"name": "pi2", "method": "rope-pi", "options": {"factor": 2}}'
ROPE="\"$pm/rope-probe\""
T5="\"$pm/t5-probe\""

# 1. --shard slurm / k8s (item 18): validated slices, their union the recipe, none twice.
recipe "$work/many.json" "$work/many" "$ROPE, $T5" "$T09, $T08, $PI2" "512, 768"  # 12 jobs
names() { "$bin" batch "$work/many.json" --validate --json "$@" | "$py" -c "import json,sys; print(' '.join(j['name'] for j in json.load(sys.stdin)['jobs']))"; }
all=$(names | tr ' ' '\n' | sort)
slices() { # slices ID... with the array's variables already exported: every task's slice, joined
  for id in "$@"; do SLURM_ARRAY_TASK_ID=$id names --shard slurm || echo "FAILED-$id"; done | tr ' ' '\n' | sed '/^$/d' | sort
}
[ "$(export SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=1 SLURM_ARRAY_TASK_COUNT=1; slices 1)" = "$all" ] && ok \
  || bad "--array=1 (one-index resubmit): not the whole recipe"
[ "$(export SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=4 SLURM_ARRAY_TASK_COUNT=4; slices 1 2 3 4)" = "$all" ] && ok \
  || bad "--array=1-4 (1-based): union of the 4 tasks is not the recipe once"
[ "$(export SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=6 SLURM_ARRAY_TASK_STEP=3 SLURM_ARRAY_TASK_COUNT=3; slices 0 3 6)" = "$all" ] \
  && ok || bad "--array=0-6:3 (stepped): union is not the recipe once"
n=$(SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=4 names --shard slurm | wc -w)
[ "$n" = 3 ] && ok || bad "--array=1-4, last task: $n jobs, want 3"
usage() { # usage NAME EXPECTED-MESSAGE ENV... -- ARGS...: exit 125 with the message
  local name=$1 want=$2 envs=()
  shift 2
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env -u SLURM_ARRAY_TASK_ID -u JOB_COMPLETION_INDEX "${envs[@]}" "$bin" batch "$work/many.json" --validate "$@" \
    >/dev/null 2>"$work/usage.err"
  local s=$?
  [ $s -eq 125 ] && grep -q -- "$want" "$work/usage.err" && ok || { bad "$name: exit $s"; cat "$work/usage.err"; }
}
usage "slurm outside an array" "SLURM_ARRAY_TASK_ID is not set" -- --shard slurm
usage "slurm index list" "is a list, not a range" SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=6 \
  SLURM_ARRAY_TASK_COUNT=3 -- --shard slurm
usage "slurm junk id" "is not a non-negative integer" SLURM_ARRAY_TASK_ID=1x SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=3 -- --shard slurm
usage "k8s without a count" "needs --shard-count" JOB_COMPLETION_INDEX=0 -- --shard k8s
usage "k8s index past the count" "is not below --shard-count 3" JOB_COMPLETION_INDEX=3 -- --shard k8s --shard-count 3
usage "shard-count with I/N" "is for --shard k8s" -- --shard 0/2 --shard-count 2
k8s=$(for i in 0 1 2; do JOB_COMPLETION_INDEX=$i names --shard k8s --shard-count 3; done | tr ' ' '\n' | sed '/^$/d' | sort)
[ "$k8s" = "$all" ] && ok || bad "k8s indices 0..2 of 3: union is not the recipe once"

# 2. Exit status per outcome (item 19; a work-budget refusal is a refusal, item 9), progress lines in a
# task log that is a file.
recipe "$work/ok.json" "$work/ok" "$ROPE" "$T09, $T08" "512"                  # 2 certified
recipe "$work/refused.json" "$work/refused" "$ROPE" "$T09, $PI2" "512"        # 1 certified, 1 refused
recipe "$work/errors.json" "$work/errors" "$T5" "$PI2" "512"                  # 1 error (rope-pi on T5)
touch "$work/afile"
recipe "$work/batcherr.json" "$work/afile/out" "$ROPE" "$T09" "512"           # OUT under a regular file
run_exit() { (cd "$work" && "$bin" batch "$@" >"$work/run.out" 2>"$work/run.err"); echo $?; }
# The ok batch runs with its task log in a file; the first job's line must be there before the
# second job starts (today's block-buffered or terminal-only output shows nothing until the end).
(cd "$work" && exec "$bin" batch ok.json >"$work/task.log" 2>&1) &
pid=$!
second=$work/ok/rope-probe-t09-512.batch.log # jobs run in name order: t08 first, then t09
while kill -0 $pid 2>/dev/null && [ ! -e "$second" ]; do sleep 0.05; done
grep -q "^\[1/2\] done *rope-probe-t08-512" "$work/task.log" && ok \
  || { bad "the task log lacks the first job's line once the second started"; cat "$work/task.log"; }
wait $pid
[ $? -eq 0 ] && ok || bad "all done: exit not 0"
[ "$(run_exit refused.json)" = 3 ] && ok || bad "a recorded refusal: exit not 3"
[ "$(run_exit refused.json)" = 3 ] && ok || bad "re-run with a recorded refusal: exit not 3"
[ "$(run_exit refused.json --accept-refused)" = 0 ] && ok || bad "--accept-refused: exit not 0"
[ "$(run_exit errors.json)" = 4 ] && ok || bad "a job error: exit not 4"
# a job whose plan is over verify.work_budget is refused before any work, like a failed verdict:
# recorded "refused" (exit 3), not "error" (before: "error", exit 4)
recipe "$work/budget.json" "$work/budget" "$ROPE" "$T09" "512"
sed -i 's/"threads": 1,/"threads": 1, "work_budget": 1000,/' "$work/budget.json"
[ "$(run_exit budget.json)" = 3 ] && ok || { bad "a job over the work budget: exit not 3"; cat "$work/run.err"; }
rec=$work/budget/rope-probe-t09-512.batch-failed.json
[ "$(field "$rec" "r['state'] + ' ' + str('CP_EVERIFY_WORK' in r['message'])")" = "refused True" ] && ok \
  || bad "work budget record: $(cat "$rec")"
[ "$(run_exit batcherr.json)" = 1 ] && grep -q "afile" "$work/run.err" && ok || { bad "batch-level error: exit not 1"; cat "$work/run.err"; }

# 3. SIGTERM (item 19): abandon (default) or finish the job in flight, say which, exit 143.
recipe "$work/sig.json" "$work/sig" "$ROPE" "$T09, $T08, $T07" "512"           # 3 jobs, one at a time
in_flight() { [ -n "$(find "$work/sig" -maxdepth 1 -name '.*tmp-*' -print -quit 2>/dev/null)" ]; }
signal_run() { # signal_run JSON ARGS...: SIGTERM once the first job writes its temporary
  local out=$1
  shift
  (cd "$work" && exec "$bin" batch sig.json --json "$@" >"$out" 2>"$out.err") &
  local p=$!
  while kill -0 $p 2>/dev/null && ! in_flight; do sleep 0.02; done
  kill -TERM $p
  wait $p
}
signal_run "$work/abandon.json"; s=$?
[ $s -eq 143 ] && grep -q "abandoning" "$work/abandon.json.err" && ok || { bad "SIGTERM abandon: exit $s"; cat "$work/abandon.json.err"; }
"$py" - "$work/abandon.json" <<'EOF' && ok || bad "SIGTERM abandon: report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["stopped_by"] and r["exit_status"] == 143, r
st = [j["state"] for j in r["jobs"]]
assert "error" not in st and "refused" not in st, st           # nothing recorded against a job
assert any("abandoned" in j["message"] for j in r["jobs"]), r["jobs"]
assert "not started" in r["jobs"][-1]["message"], r["jobs"][-1]
EOF
[ -z "$(find "$work/sig" -name '.*tmp-*' -o -name '*.batch-failed.json' -o -name '*.batch-claim.json')" ] && ok \
  || bad "SIGTERM abandon left: $(find "$work/sig" -name '.*')"
rm -rf "$work/sig"
signal_run "$work/finish.json" --on-signal finish; s=$?
[ $s -eq 143 ] && grep -q "finishing" "$work/finish.json.err" && ok || { bad "SIGTERM finish: exit $s"; cat "$work/finish.json.err"; }
[ "$(field "$work/finish.json" "[j['state'] for j in r['jobs']][0]")" = done ] \
  && [ "$(field "$work/finish.json" "'not started' in r['jobs'][-1]['message']")" = True ] && ok \
  || bad "SIGTERM finish: $(cat "$work/finish.json")"

# A second signal abandons what --on-signal finish was finishing (its child ignores SIGTERM: killed).
rm -rf "$work/sig"
(cd "$work" && exec "$bin" batch sig.json --json --on-signal finish >"$work/twice.json" 2>"$work/twice.err") &
p=$!
while kill -0 $p 2>/dev/null && ! in_flight; do sleep 0.02; done
kill -TERM $p
while kill -0 $p 2>/dev/null && ! grep >/dev/null finishing "$work/twice.err"; do sleep 0.02; done
flying=no; in_flight && flying=yes
kill -TERM $p
wait $p; s=$?
[ $s -eq 143 ] && grep >/dev/null "abandoning" "$work/twice.err" && ok || { bad "second SIGTERM: exit $s"; cat "$work/twice.err"; }
if [ $flying = yes ]; then
  [ "$(field "$work/twice.json" "r['jobs'][0]['state']")" = pending ] && ok || bad "second SIGTERM: the job in flight was not abandoned"
fi
[ -z "$(find "$work/sig" -name '.*tmp-*' -o -name '*.batch-failed.json' -o -name '*.batch-claim.json')" ] && ok \
  || bad "second SIGTERM left: $(find "$work/sig" -name '.*')"

# The child signalled on its own (a scancel signals every process of the job, the child's end may
# be seen first): abandoned and left pending, not a job error.
rm -rf "$work/sig"
(cd "$work" && exec "$bin" batch sig.json --json >"$work/child.json" 2>"$work/child.err") &
p=$!
while kill -0 $p 2>/dev/null && ! in_flight; do sleep 0.02; done
child=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['child'])" "$work"/sig/*.batch-claim.json)
kill -TERM "$child"
while kill -0 $p 2>/dev/null && ! grep >/dev/null '^\[1/3\]' "$work/child.err"; do sleep 0.02; done
kill -TERM $p
wait $p
grep >/dev/null '^\[1/3\] abandoned' "$work/child.err" && [ "$(field "$work/child.json" "r['jobs'][0]['state']")" = pending ] && ok \
  || { bad "a child ended by SIGTERM is reported as an error"; cat "$work/child.err"; }

# A claim path that is not a regular file (a FIFO): a batch-level error naming it, no hang.
recipe "$work/fifo.json" "$work/fifo" "$ROPE" "$T09" "512"
mkdir -p "$work/fifo" && mkfifo "$work/fifo/rope-probe-t09-512.batch-claim.json"
[ "$(run_exit fifo.json)" = 1 ] && grep >/dev/null "batch-claim.json: the claim is not a regular file" "$work/run.err" && ok \
  || { bad "FIFO claim"; cat "$work/run.err"; }

# 4. A job another process holds (item 15): skipped as held, exit 5; no log, record or stamp
# written for it, and its holder's log untouched.
recipe "$work/held.json" "$work/held" "$ROPE" "$T09, $T08" "512"
mkdir -p "$work/held"
echo "the holder's log" >"$work/held/rope-probe-t09-512.batch.log"
host=$(hostname | tr -cd 'A-Za-z0-9_.' | cut -c1-32); host=${host:-_} # as temporaries carry it
"$py" - "$work/held/rope-probe-t09-512.batch-claim.json" "$work/held.ready" "$host" <<'EOF' &
import fcntl, os, sys, time
f = open(sys.argv[1], "w")
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a POSIX lock: it conflicts with batch's OFD lock
f.write('{"claim_version": 1, "host": "%s", "pid": %d, "child": 0}\n' % (sys.argv[3], os.getpid())); f.flush()
open(sys.argv[2], "w").close()
time.sleep(600)
EOF
holder=$!
while [ ! -e "$work/held.ready" ]; do kill -0 $holder 2>/dev/null || break; sleep 0.02; done
[ "$(run_exit held.json --json)" = 5 ] && ok || { bad "a held job: exit not 5"; cat "$work/run.err"; }
[ "$(field "$work/run.out" "[(j['name'], j['state']) for j in r['jobs']]")" = \
  "[('rope-probe-t08-512', 'done'), ('rope-probe-t09-512', 'held')]" ] && ok || bad "held: $(cat "$work/run.out")"
grep -q "held by pid $holder on $host" "$work/run.err" && ok || { bad "held: the line does not name the holder"; cat "$work/run.err"; }
[ "$(cat "$work/held/rope-probe-t09-512.batch.log")" = "the holder's log" ] && ok || bad "held: the holder's log was touched"
[ ! -e "$work/held/rope-probe-t09-512.batch-failed.json" ] && [ ! -e "$work/held/rope-probe-t09-512" ] && ok \
  || bad "held: something was written for the held job"
"$bin" batch "$work/held.json" --status --json >"$work/hs.json"
[ "$(field "$work/hs.json" "r['summary']['held']")" = 1 ] && ok || bad "--status: the held job is not held"
kill $holder; wait $holder 2>/dev/null
[ "$(run_exit held.json)" = 0 ] && ok || bad "after the holder ended (its claim left behind): exit not 0"

# Two processes at once on one output folder: each job done once, no failure record, every log whole.
recipe "$work/two.json" "$work/two" "$ROPE, $T5" "$T09, $T08" "512, 768"          # 8 jobs
(cd "$work" && "$bin" batch two.json --json >"$work/two1.json" 2>/dev/null) &
(cd "$work" && "$bin" batch two.json --json >"$work/two2.json" 2>/dev/null) &
wait
"$py" - "$work/two1.json" "$work/two2.json" <<'EOF' && ok || bad "two processes at once"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
done = sorted(j["name"] for r in (a, b) for j in r["jobs"] if j["state"] == "done")
names = sorted(j["name"] for j in a["jobs"])
assert done == names, (done, names)  # every job made once, by one of them
for r in (a, b):
    for j in r["jobs"]:
        assert j["state"] in ("done", "skipped", "held"), j
EOF
[ -z "$(find "$work/two" -name '*.batch-failed.json' -o -name '*.batch-claim.json' -o -name '.*tmp-*')" ] && ok \
  || bad "two processes left: $(find "$work/two" -name '*.batch-*.json' -o -name '.*tmp-*')"
for l in "$work"/two/*.batch.log; do grep -q "certified" "$l" || { bad "$l: not a whole log"; cat "$l"; }; done

# 5. Temporaries a SIGKILL of the whole process tree left (item 16).
recipe "$work/kill.json" "$work/kill" "$ROPE" "$T09" "512"
(cd "$work" && exec setsid "$bin" batch kill.json >/dev/null 2>&1) &
pid=$!
while kill -0 $pid 2>/dev/null && [ -z "$(find "$work/kill" -mindepth 2 -path '*/.*tmp-*/*' -print -quit 2>/dev/null)" ]; do
  sleep 0.02
done
kill -9 -- -$pid; wait $pid 2>/dev/null
tmp=$(find "$work/kill" -maxdepth 1 -name '.*tmp-*')
[ -n "$tmp" ] && ok || bad "the tree kill left no temporary (the scenario did not happen)"
"$bin" batch "$work/kill.json" --status --json >"$work/ks.json"
[ "$(field "$work/ks.json" "[(t['path'], t['owner']) for t in r['jobs'][0]['temporaries']]")" = "[('$tmp', 'stale')]" ] && ok \
  || bad "--status does not name the stale temporary: $(cat "$work/ks.json")"
"$bin" batch "$work/kill.json" --status | grep >/dev/null "temporary $tmp (pid .*: stale)" && ok || bad "--status table: no temporary line"
[ "$(run_exit kill.json)" = 0 ] && [ ! -e "$tmp" ] && ok || bad "re-run after the tree kill: temporary left or not done"
# A done job keeps no temporary: one planted beside it (a dead owner on this host) goes.
dead=$(sh -c 'echo $$')
mkdir "$work/kill/.rope-probe-t09-512.tmp-$dead-$host-AbCdEf"
[ "$(run_exit kill.json --json)" = 0 ] && [ "$(field "$work/run.out" "r['jobs'][0]['state']")" = skipped ] && ok || bad "done job re-run"
[ ! -e "$work/kill/.rope-probe-t09-512.tmp-$dead-$host-AbCdEf" ] && ok || bad "a done job's stale temporary was kept"
# Another host's: stale only when its owner record is over; a fresh heartbeat holds the job.
claim=$work/kill/rope-probe-t09-512.batch-claim.json
mkdir "$work/kill/.rope-probe-t09-512.tmp-4242-otherhost-AbCdEf" "$work/kill/.rope-probe-t09-512.tmp-77-thirdhost-AbCdEf"
echo '{"claim_version": 1, "host": "otherhost", "pid": 999999, "start": "", "child": 4242}' >"$claim"
# (the job is done: skipped, as done, while the claim lives; its temporaries kept)
[ "$(run_exit kill.json --json)" = 0 ] && [ "$(field "$work/run.out" "r['jobs'][0]['state']")" = skipped ] \
  && [ -e "$work/kill/.rope-probe-t09-512.tmp-4242-otherhost-AbCdEf" ] && ok \
  || bad "another host's live claim (fresh heartbeat) was not honoured"
touch -d '-1 hour' "$claim"
"$bin" batch "$work/kill.json" --status --json >"$work/ks2.json"
[ "$(field "$work/ks2.json" "sorted(t['owner'] for t in r['jobs'][0]['temporaries'])")" = "['stale', 'unknown owner']" ] && ok \
  || bad "--status with another host's temporaries: $(cat "$work/ks2.json")"
[ "$(run_exit kill.json)" = 0 ] && ok || bad "a dead claim of another host: not taken over"
[ ! -e "$work/kill/.rope-probe-t09-512.tmp-4242-otherhost-AbCdEf" ] && [ -e "$work/kill/.rope-probe-t09-512.tmp-77-thirdhost-AbCdEf" ] \
  && [ ! -e "$claim" ] && ok || bad "sweep: the dead owner's temporary must go, the unknown host's stay: $(ls -a "$work/kill")"
finish
