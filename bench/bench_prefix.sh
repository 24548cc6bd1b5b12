#!/usr/bin/env bash
# Shared prefixes in the probes (issue 34): `ctxpatch verify --baseline` with the four retrieval
# probes at the default depths (0:1:10) and samples (40 prompts a probe and length) on a probe
# model under its rule, and on a larger random Llama-layout model (bench/make_random_llama.py, F16
# weights, the probe tokenizer), each run twice: as it runs now (each prompt continues from the rows
# it shares with the previous prompt of its length) and with --no-shared-prefix (each prompt
# alone). Prints a Markdown table for docs/perf.md ("Shared prefixes"): wall time, tokens processed
# (run.tokens), prompt rows reused (run.tokens_reused), and whether the two certificates agree on
# everything but the run block (they must: the logits are bit-identical).
#
# usage: bench/bench_prefix.sh [THREADS]      (default 2)
#   CTXPATCH_BIN  ctxpatch binary (default build/ctxpatch)
#   LENGTHS       probe lengths (default "256,1024")
#   RANDOM_MB     size of the random model (default 40)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=$here/../scripts/py
threads=${1:-2}
lengths=${LENGTHS:-256,1024}
[ -x "$bin" ] || { echo "bench_prefix: $bin is not built (set CTXPATCH_BIN)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$here/make_random_llama.py" "$work/random" "${RANDOM_MB:-40}" >/dev/null
cp "$src/examples/probe-models/tokenizer.json" "$work/random/"
echo '{"lambda_mask": {"n_global": 10, "n_local": 256}, "distance_ceiling": 256}' >"$work/lminf.json"
echo '{}' >"$work/identity.json"

# run NAME MODEL RULE: both modes, one table row each
run() {
  local name=$1 model=$2 rule=$3 mode
  for mode in shared alone; do
    local extra=()
    [ "$mode" = alone ] && extra=(--no-shared-prefix)
    local t0 t1
    t0=$(date +%s.%N)
    "$bin" verify "$model" --rule "$rule" --baseline --probe passkey,lines,needle,multikey --lengths "$lengths" \
      --threads "$threads" --no-stats --certificate "$work/$name.$mode.json" "${extra[@]}" >/dev/null
    t1=$(date +%s.%N)
    echo "$t0 $t1" >"$work/$name.$mode.t"
  done
  "$py" - "$name" "$work/$name.shared.json" "$work/$name.alone.json" "$work/$name.shared.t" "$work/$name.alone.t" \
    "$threads" <<'PY'
import json, sys
name, cs, ca, ts, ta, threads = sys.argv[1:7]
s, a = json.load(open(cs)), json.load(open(ca))
wall = lambda f: (lambda t: float(t[1]) - float(t[0]))(open(f).read().split())
same = {k: v for k, v in s.items() if k != "run"} == {k: v for k, v in a.items() if k != "run"}
ws, wa = wall(ts), wall(ta)
for mode, c, w in (("shared", s, ws), ("alone", a, wa)):
    r = c["run"]
    print("| %s | %s | %s | %.1f | %d | %d | %s |" % (name, mode, threads, w, r["tokens"], r.get("tokens_reused", 0),
          ("%.2fx" % (wa / ws)) if mode == "shared" else ("same results: %s" % ("yes" if same else "NO"))))
PY
}

echo "| model | prompts | threads | wall s | run.tokens | run.tokens_reused | |"
echo "|---|---|---:|---:|---:|---:|---|"
run "rope-probe, LM-Infinite" "$src/examples/probe-models/rope-probe" "$work/lminf.json"
run "rope-probe, identity" "$src/examples/probe-models/rope-probe" "$work/identity.json"
run "random Llama ${RANDOM_MB:-40} MB F16, identity" "$work/random" "$work/identity.json"
