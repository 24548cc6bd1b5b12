#!/usr/bin/env bash
# The single-file conversion against its hash-bound limit, in interleaved pairs: each round runs
# `openssl dgst -sha256 IN` and then `ctxpatch convert DIR OUT --to safetensors` (SHA256SUMS
# included), each after removing the output, `sync` and reading the input once (warm page cache),
# and prints both wall times, convert's CPU (user + sys, all threads) and peak RSS, t(dgst) / t for
# the pair, and the 1-minute load. A pair runs within ~3 s, so on a machine whose load comes in
# bursts the per-pair ratio is steadier than a ratio of two blocks of runs (hyperfine runs each
# command's runs back to back, not interleaved).
# usage: bench/bench_convert_pairs.sh [WORKDIR] [ROUNDS]   (WORKDIR/in as bench_convert.sh makes it)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/ctxpatch-bench}
rounds=${2:-7}
bin=$PWD/build/ctxpatch
in=$work/in/pytorch_model.bin
[ -x "$bin" ] || { echo "bench_convert_pairs: $bin is not built" >&2; exit 2; }
[ -f "$in" ] || { echo "bench_convert_pairs: $in is missing (run bench/bench_convert.sh $work first)" >&2; exit 2; }
out=$work/out
prep() { rm -rf "$out"; sync; cat "$in" >/dev/null; }
echo "input: $(stat -c %s "$in") bytes; $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/pairs"
for ((r = 0; r < rounds; r++)); do
  prep
  /usr/bin/time -f "%e" -o "$work/t1" openssl dgst -sha256 "$in" >/dev/null
  prep
  /usr/bin/time -f "%e %U %S %M" -o "$work/t2" "$bin" convert "$work/in" "$out" --to safetensors >/dev/null
  read -r a <"$work/t1"
  read -r b bu bs bm <"$work/t2"
  awk -v a="$a" -v b="$b" -v c="$(awk -v u="$bu" -v s="$bs" 'BEGIN {print u + s}')" -v m="$bm" \
    -v l="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN {printf "dgst %.2f s | convert %.2f s, CPU %.2f s, RSS %.0f MB | t(dgst)/t %.2f | load1 %s\n", a, b, c, m / 1024, a / b, l}' |
    tee -a "$work/pairs"
done
rm -rf "$out"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "median t(dgst)/t: $(awk '{print $(NF - 3)}' "$work/pairs" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')"
