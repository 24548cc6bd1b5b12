#!/usr/bin/env bash
# ctxpatch batch wall time (docs/perf.md, "batch"): a 24-job recipe over the four probe models
# (lm-infinite and two temperatures x target lengths 512 and 768, passkey at 256 and 512, one
# sample per depth, 3 depths) at --jobs 1 and --jobs 2 into fresh output folders, then a re-run
# of the --jobs 2 recipe with every job done.
#   bash bench/bench_batch.sh [BUILD_DIR] [WORKDIR]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$src/build}/ctxpatch
work=${2:-$(mktemp -d)}
mkdir -p "$work"
pm=$src/examples/probe-models
for jobs in 1 2; do
  cat >"$work/recipe-$jobs.json" <<JSON
{
  "recipe_version": 1,
  "inputs": ["$pm/*-probe"],
  "methods": [
    {"name": "lmi", "method": "lm-infinite", "options": {"n-global": 10, "n-local": 256}},
    {"name": "t090", "method": "temperature", "options": {"tau": 0.9}},
    {"name": "t095", "method": "temperature", "options": {"tau": 0.95}}
  ],
  "target_lengths": [512, 768],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:3", "samples": 1},
  "output": {"dir": "out-$jobs"}
}
JSON
  rm -rf "$work/out-$jobs"
done
"$bin" batch "$work/recipe-1.json" --validate | tail -1
time_it() { # label, command...: wall seconds of one run
  local t0 t1 s
  t0=$(date +%s%N)
  set +e; "${@:2}" >"$work/$1.out" 2>&1; s=$?; set -e
  t1=$(date +%s%N)
  printf '%-28s %8.2f s  exit %d  %s\n' "$1" "$(( (t1 - t0) / 1000000 ))e-3" "$s" "$(tail -1 "$work/$1.out")"
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
time_it "jobs-1" "$bin" batch "$work/recipe-1.json" --jobs 1
time_it "jobs-2" "$bin" batch "$work/recipe-2.json" --jobs 2
time_it "jobs-2-all-done-rerun" "$bin" batch "$work/recipe-2.json" --jobs 2
