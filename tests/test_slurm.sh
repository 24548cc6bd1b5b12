#!/usr/bin/env bash
# ctxpatch batch under a real Slurm (issue 33, "Fleets"; docs/batch.md, "Slurm"): Debian's
# slurm-wlm daemons, slurmctld and slurmd, started here on one node with a private configuration
# (auth/none, ports of our own, state in the test's folder) and stopped at the end. Covers a 1-based
# array through sbatch (--shard slurm), a scancel mid-job and a resubmit that redoes only what is
# left, two arrays at once on one output folder (each job made once, nothing false recorded), and a
# SIGKILL of a job's whole process group (as the OOM killer does to a job's cgroup) whose temporary
# the next claim sweeps, and an afterok dependency that fires after a recorded refusal with
# --accept-refused. Skips (77) where slurm-wlm is absent, the user is not root, or the daemons do not
# start. Waits are bounded loops on events (a job leaving the queue, a file appearing).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

for p in slurmctld slurmd sbatch squeue scancel scontrol sinfo; do
  command -v $p >/dev/null || { echo "SKIP: $p is absent (Debian: apt-get install slurmctld slurmd slurm-client)"; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: slurmd runs jobs only as root"; exit 77; }
pm=$src/examples/probe-models
[ -f "$pm/rope-probe/model.safetensors" ] || { echo "SKIP: $pm/rope-probe is absent"; exit 77; }

# --- the cluster: one node, private ports and state --------------------------------------------
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
S=$work/slurm
mkdir -p "$S/state" "$S/spool" "$work/logs"
export SLURM_CONF=$S/slurm.conf
# CPUs=8 on a smaller machine (config_overrides): four 1-CPU tasks run at once, as on a real node.
cat >"$SLURM_CONF" <<EOF
ClusterName=ctxpatch$$
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=10
MinJobAge=600
NodeName=ctxnode NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=ctx Nodes=ctxnode Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -f "$SLURM_CONF" >"$S/slurmctld.out" 2>&1 &
ctld=$!
slurmd -D -N ctxnode -f "$SLURM_CONF" >"$S/slurmd.out" 2>&1 &
sd=$!
stop_daemons() {
  scancel --full --signal=KILL --partition=ctx >/dev/null 2>&1
  kill $sd $ctld 2>/dev/null
  wait $sd $ctld 2>/dev/null
  rm -rf "$work"
}
trap stop_daemons EXIT
alive() { kill -0 $ctld 2>/dev/null && kill -0 $sd 2>/dev/null; }
# (every client call under `timeout`: with no controller, sinfo and squeue retry for long)
node() { timeout 15 sinfo -h -o %T 2>&1; }
for _ in $(seq 300); do alive && [ "$(node)" = idle ] && break; alive || break; sleep 0.1; done
if ! alive || [ "$(node)" != idle ]; then
  echo "SKIP: slurmctld and slurmd did not start (node: '$(node)')"
  tail -5 "$S/slurmctld.log" "$S/slurmd.log" 2>/dev/null
  exit 77
fi

# --- the work: 6 jobs of about a second each --------------------------------------------------
recipe() { # recipe FILE OUTDIR
  cat >"$1" <<EOF
{
  "recipe_version": 1,
  "inputs": ["$pm/rope-probe"],
  "methods": [
    {"name": "t09", "method": "temperature", "options": {"tau": 0.9}},
    {"name": "t08", "method": "temperature", "options": {"tau": 0.8}},
    {"name": "t07", "method": "temperature", "options": {"tau": 0.7}}
  ],
  "target_lengths": [512, 768],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:3", "samples": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "$2", "name": "{input}-{method}-{target}"}
}
EOF
}
cat >"$work/job.sh" <<EOF
#!/bin/bash
#SBATCH --cpus-per-task=1
exec "$bin" batch "\$1" --shard slurm --threads 1
EOF
submit() { # submit ARRAY RECIPE: the array's job id
  sbatch --parsable --array="$1" -o "$work/logs/%A-%a.out" "$work/job.sh" "$2" | cut -d';' -f1
}
wait_gone() { # wait_gone JOBID...: until none is in the queue (bounded: a stuck daemon fails, not hangs)
  for _ in $(seq 1200); do
    alive || { bad "a Slurm daemon died: $(tail -3 "$S/slurmctld.log" "$S/slurmd.log")"; return 1; }
    local q
    q=$(timeout 15 squeue -h -j "$(echo "$@" | tr ' ' ,)" 2>/dev/null)
    [ $? -ne 124 ] && [ -z "$q" ] && return 0
    sleep 0.25
  done
  bad "jobs $* still queued: $(timeout 15 squeue)"
  return 1
}
exit_codes() { # exit_codes JOBID: "TASK:CODE" per task, sorted
  scontrol -o show job "$1" | sed -n 's/.*ArrayTaskId=\([0-9]*\) .*ExitCode=\([0-9]*\):\([0-9]*\).*/\1:\2:\3/p' | sort -n | tr '\n' ' '
}
status() { "$bin" batch "$1" --status --json >"$work/st.json" && "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$work/st.json"; }
leftovers() { find "$1" -name '.*tmp-*' -o -name '*.batch-claim.json' -o -name '*.batch-failed.json'; }

# 1. A 1-based array of 3 tasks: each its slice, every job done, exit 0 each, progress in the logs.
recipe "$work/a.json" "$work/a"
id=$(submit 1-3 "$work/a.json")
wait_gone "$id"
[ "$(exit_codes "$id")" = "1:0:0 2:0:0 3:0:0 " ] && ok || { bad "array 1-3: exit codes $(exit_codes "$id")"; cat "$work"/logs/"$id"-*.out; }
[ "$(status "$work/a.json" "r['summary']['done']")" = 6 ] && ok || bad "array 1-3: $(cat "$work/st.json")"
[ "$(cat "$work"/logs/"$id"-*.out | grep -c '^\[[0-9]/2\] done ')" = 6 ] && ok || bad "array 1-3: 6 progress lines expected in the task logs"
[ -z "$(leftovers "$work/a")" ] && ok || bad "array 1-3 left: $(leftovers "$work/a")"

# 2. scancel while jobs run (SIGTERM, then SIGKILL after KillWait), then a resubmit that finishes.
recipe "$work/c.json" "$work/c"
id=$(submit 0-1 "$work/c.json")
for _ in $(seq 1200); do
  [ "$(find "$work/c" -name ctxpatch-batch.json 2>/dev/null | wc -l)" -ge 1 ] &&
    [ -n "$(find "$work/c" -maxdepth 1 -name '.*tmp-*' -print -quit 2>/dev/null)" ] && break
  sleep 0.05
done
scancel "$id"
wait_gone "$id"
find "$work/c" -name ctxpatch-batch.json -printf '%h %i %T@\n' | sort >"$work/c.before"
n=$(wc -l <"$work/c.before")
[ "$n" -ge 1 ] && [ "$n" -lt 6 ] && ok || bad "scancel came at $n done jobs (want 1..5)"
cat "$work"/logs/"$id"-*.out | grep >/dev/null "abandoning" && ok || { bad "scancel: no task said it abandons its job"; cat "$work"/logs/"$id"-*.out; }
# the child the scancel also signalled is abandoned, not reported as a job error
cat "$work"/logs/"$id"-*.out | grep >/dev/null '^\[[0-9]*/[0-9]*\] error' && bad "scancel: a job reported as an error" || ok
[ -z "$(leftovers "$work/c")" ] && ok || bad "scancel left: $(leftovers "$work/c")"
[ "$(status "$work/c.json" "[r['summary'][k] for k in ('done', 'error', 'refused')]")" = "[$n, 0, 0]" ] && ok \
  || bad "after scancel: $(cat "$work/st.json")"
id=$(submit 0-1 "$work/c.json")
wait_gone "$id"
[ "$(exit_codes "$id")" = "0:0:0 1:0:0 " ] && ok || bad "resubmit: exit codes $(exit_codes "$id")"
[ "$(status "$work/c.json" "r['summary']['done']")" = 6 ] && ok || bad "resubmit: $(cat "$work/st.json")"
find "$work/c" -name ctxpatch-batch.json -printf '%h %i %T@\n' | sort | join "$work/c.before" - | awk '$2 != $4 || $3 != $5' \
  | grep >/dev/null . && bad "resubmit redid a job done before the scancel" || ok

# 3. Two arrays at once on one output folder (a double sbatch): four tasks run together, two on
# each slice; every job made once, no false failure record, no "done" twice, every log whole.
recipe "$work/d.json" "$work/d"
id1=$(submit 0-1 "$work/d.json")
id2=$(submit 0-1 "$work/d.json")
wait_gone "$id1" "$id2"
codes="$(exit_codes "$id1")$(exit_codes "$id2")"
[ -z "$(echo "$codes" | tr ' ' '\n' | grep -v '^$' | grep -v ':[05]:0$')" ] && ok || bad "two arrays: exit codes $codes (want 0 or 5, held)"
done_lines=$(cat "$work"/logs/"$id1"-*.out "$work"/logs/"$id2"-*.out | sed -n 's/^\[[0-9]*\/[0-9]*\] done *\([^ ]*\) .*/\1/p' | sort)
[ "$done_lines" = "$(status "$work/d.json" "'\n'.join(sorted(j['name'] for j in r['jobs']))")" ] && ok \
  || bad "two arrays: jobs made (want each once): $done_lines"
[ "$(status "$work/d.json" "r['summary']['done']")" = 6 ] && ok || bad "two arrays: $(cat "$work/st.json")"
[ -z "$(leftovers "$work/d")" ] && ok || bad "two arrays left: $(leftovers "$work/d")"
for l in "$work"/d/*.batch.log; do grep -q "certified" "$l" || { bad "$l: not a whole log"; cat "$l"; }; done

# 4. SIGKILL of the job's whole process tree (an OOM kill of its cgroup, a lost node): the
# temporary stays, --status names it, the resubmit sweeps it and finishes.
recipe "$work/k.json" "$work/k"
id=$(submit 0 "$work/k.json")
for _ in $(seq 1200); do
  [ -n "$(find "$work/k" -mindepth 2 -path '*/.*tmp-*/*' -print -quit 2>/dev/null)" ] && break
  sleep 0.02
done
# scancel --signal=KILL is a cancel (SIGTERM first, which batch handles cleanly): the OOM killer
# is not. The job's processes share the process group slurmstepd made (proctrack/pgid); the batch
# process's pid is in its claim's owner record.
pid=$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$work"/k/*.batch-claim.json)
pgid=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f3) # /proc/PID/stat: state ppid pgrp after the name
[ -n "$pgid" ] && [ "$pgid" -gt 1 ] && kill -KILL -- -"$pgid" && ok || bad "no process group for the job's batch process '$pid'"
wait_gone "$id"
[ "$(scontrol -o show job "$id" | grep -o 'JobState=[A-Z]*')" = JobState=FAILED ] && ok || bad "tree SIGKILL: $(scontrol -o show job "$id")"
tmp=$(find "$work/k" -maxdepth 1 -name '.*tmp-*')
[ -n "$tmp" ] && ok || bad "the tree SIGKILL left no temporary (the scenario did not happen)"
[ "$(status "$work/k.json" "[t['owner'] for j in r['jobs'] for t in j['temporaries']]")" = "['stale']" ] && ok \
  || bad "--status after the tree SIGKILL: $(cat "$work/st.json")"
id=$(submit 0 "$work/k.json")
wait_gone "$id"
[ "$(exit_codes "$id")" = "0:0:0 " ] && ok || bad "resubmit after SIGKILL: exit codes $(exit_codes "$id")"
[ "$(status "$work/k.json" "r['summary']['done']")" = 6 ] && [ -z "$(leftovers "$work/k")" ] && ok \
  || bad "resubmit after SIGKILL: $(leftovers "$work/k") $(cat "$work/st.json")"
# 5. afterok after a recorded refusal: the task exits 3 without --accept-refused, 0 with it, and
# then the dependent job runs.
cat >"$work/r.json" <<EOF
{
  "recipe_version": 1,
  "inputs": ["$pm/rope-probe"],
  "methods": [{"name": "t09", "method": "temperature", "options": {"tau": 0.9}},
              {"name": "pi2", "method": "rope-pi", "options": {"factor": 2}}],
  "target_lengths": [512],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:3", "samples": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "$work/r"}
}
EOF
id=$(submit 0 "$work/r.json")
wait_gone "$id"
[ "$(exit_codes "$id")" = "0:3:0 " ] && ok || bad "a recorded refusal: exit codes $(exit_codes "$id") (want 3)"
sed -i 's/--threads 1$/--threads 1 --accept-refused/' "$work/job.sh"
id=$(submit 0 "$work/r.json")
dep=$(sbatch --parsable --dependency=afterok:"$id" -o "$work/logs/dep.out" --wrap "touch $work/dependent-ran" | cut -d';' -f1)
wait_gone "$id" "$dep"
[ "$(exit_codes "$id")" = "0:0:0 " ] && [ -e "$work/dependent-ran" ] && ok \
  || bad "--accept-refused: exit codes $(exit_codes "$id"), afterok job: $(scontrol -o show job "$dep" | grep -o 'JobState=[A-Z]* Reason=[^ ]*')"
finish
