#!/usr/bin/env bash
# kill -9 harness: N random SIGKILLs spread over `convert` (single file, sharded, --force onto an
# existing OUT) and `patch` (certified with --verify, --no-verify, --force onto an existing OUT).
# After each kill OUT must be absent, the old OUT unchanged, or complete (sha256sum -c SHA256SUMS
# passes inside); then the same command runs to completion, and afterwards no temporary of OUT
# may remain (the run's sweep removes those of the killed process).
# usage: bench/kill9.sh N [SIZE_MB (default 300)] [WORKDIR]
#   env CTXPATCH_BIN (default build/ctxpatch), CTXPATCH_SOURCE_DIR (default this checkout),
#   KILL9_SECONDS (stop early after this many seconds, still printing the counts)
# Prints per-scenario and total counts and a final "N passed, M failed" line.
set -uo pipefail
n=${1:?usage: kill9.sh N [SIZE_MB] [WORKDIR]}
size=${2:-300}
src=${CTXPATCH_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=${CTXPATCH_PYTHON:-python3}
if [ -n "${3:-}" ]; then work=$3; mkdir -p "$work"; else work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
t5=$src/examples/probe-models/t5-probe
[ -f "$t5/model.safetensors" ] || { echo "SKIP: $t5 is absent"; exit 77; }

[ -f "$work/m/model.safetensors" ] || "$py" "$src/bench/make_random_llama.py" "$work/m" "$size" 1 || exit 1
shard=$(( $(stat -c %s "$work/m/model.safetensors") / 4 + 1 ))
vopts=(--verify passkey --lengths 128 --depths 0.5 --samples 1 --accept-no-gain --accept-underpowered --threads 1)
# name|command (OUT is the last folder argument, $work/out)
scenarios=(
  "convert|$bin convert $work/m $work/out --to safetensors"
  "convert-sharded|$bin convert $work/m $work/out --to safetensors --shard-size $shard"
  "convert-force|$bin convert $work/m $work/out --to safetensors --shard-size $shard --force"
  "patch-verify|$bin patch $t5 $work/out --method temperature --tau 1.05 ${vopts[*]}"
  "patch-no-verify|$bin patch $t5 $work/out --method temperature --tau 1.05 --no-verify"
  "patch-force|$bin patch $t5 $work/out --method temperature --tau 1.05 ${vopts[*]} --force"
)
out=$work/out
temps() { find "$work" -maxdepth 1 -name '.out.tmp-*' | wc -l; }
complete() { [ -f "$1/SHA256SUMS" ] && (cd "$1" && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1); }

# The "old" OUT of the --force scenarios: a complete earlier output with other contents.
rm -rf "$work/old-convert" "$work/old-patch" "$work/out"
"$bin" convert "$work/m" "$work/old-convert" --to safetensors >/dev/null || exit 1
"$bin" patch "$t5" "$work/old-patch" --method temperature --tau 1.2 --no-verify >/dev/null || exit 1

passed=0; failed=0; kills=0; leaked=0; leaks=0; left=0
declare -A absent old new dur
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
# Each scenario's duration bounds its random kill times.
for s in "${scenarios[@]}"; do
  name=${s%%|*}; cmd=${s#*|}
  rm -rf "$out"; [[ $name == *force ]] && cp -a "$work/old-${name%%-*}" "$out"
  t0=$(date +%s%N); $cmd >/dev/null 2>&1 || { echo "FAIL: $name does not run: $cmd"; exit 1; }
  dur[$name]=$(( ($(date +%s%N) - t0) / 1000 ))
  absent[$name]=0; old[$name]=0; new[$name]=0
done

for ((i = 0; i < n; i++)); do
  if [ -n "${KILL9_SECONDS:-}" ] && [ "$SECONDS" -ge "$KILL9_SECONDS" ]; then echo "stopped after ${SECONDS}s"; break; fi
  s=${scenarios[RANDOM % ${#scenarios[@]}]}
  name=${s%%|*}; cmd=${s#*|}
  rm -rf "$out"
  oldref=
  if [[ $name == *force ]]; then oldref=$work/old-${name%%-*}; cp -a "$oldref" "$out"; fi
  delay=$(( (RANDOM * 32768 + RANDOM) % (dur[$name] * 11 / 10 + 1) ))
  $cmd >/dev/null 2>&1 &
  pid=$!
  sleep "$(printf '%d.%06d' $((delay / 1000000)) $((delay % 1000000)))"
  kill -9 "$pid" 2>/dev/null && kills=$((kills+1))
  wait "$pid" 2>/dev/null
  # patch's watchdog removes its temporary asynchronously; give it a moment
  [[ $name == patch* ]] && sleep 0.2
  if [ ! -e "$out" ]; then absent[$name]=$((absent[$name]+1))
  elif [ -n "$oldref" ] && cmp -s "$oldref/SHA256SUMS" "$out/SHA256SUMS" && complete "$out"; then old[$name]=$((old[$name]+1))
  elif complete "$out"; then new[$name]=$((new[$name]+1))
  else bad "$name: OUT is neither absent, old nor complete after a kill at ${delay}us"; continue; fi
  t=$(temps); if [ "$t" -gt 0 ]; then leaked=$((leaked+1)); leaks=$((leaks+t)); fi
  # the next run sweeps what the killed one left
  [[ $name == *force ]] || rm -rf "$out"
  if ! $cmd >/dev/null 2>"$work/err"; then bad "$name: the run after the kill failed: $(head -c 300 "$work/err")"; continue; fi
  t=$(temps)
  if [ "$t" -ne 0 ] || ! complete "$out"; then
    left=$((left+t)); bad "$name: after the next run: $t temporaries, complete=$(complete "$out" && echo yes || echo no)"
    find "$work" -maxdepth 1 -name '.out.tmp-*' -exec rm -rf {} +
    continue
  fi
  passed=$((passed+1))
done

echo "size: $(stat -c %s "$work/m/model.safetensors") bytes of weights; kills: $kills of $i runs"
for s in "${scenarios[@]}"; do
  name=${s%%|*}
  echo "  $name (runs in ${dur[$name]} us): absent ${absent[$name]}, old ${old[$name]}, new ${new[$name]}"
done
echo "leaks after the kill: $leaks temporaries in $leaked runs; left after the next run's sweep: $left"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
