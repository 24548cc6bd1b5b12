#!/usr/bin/env bash
# Conversion throughput and peak memory: `ctxpatch convert` of a synthetic 2 GB+ pytorch_model.bin
# against `cp` of the same bytes (and `cp` + `sync FILE`, the same durability as convert's
# fsync), in the same run, warm page cache for all.
# usage: bench/bench_convert.sh [WORKDIR] [SIZE_GB]   (needs ~3x SIZE_GB of free disk)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/ctxpatch-bench}
size=${2:-2.2}
bin=./build/ctxpatch
[ -x "$bin" ] || bash scripts/build.sh build
mkdir -p "$work/in"
[ -f "$work/in/pytorch_model.bin" ] || /usr/bin/python3 bench/make_big_checkpoint.py "$work/in/pytorch_model.bin" "$size"
bytes=$(stat -c %s "$work/in/pytorch_model.bin")
cat "$work/in/pytorch_model.bin" >/dev/null # warm the cache for both contenders
echo "input: $bytes bytes; machine: $(nproc) cores, $(grep MemTotal /proc/meminfo | awk '{print $2/1048576 " GiB"}')"
hyperfine --warmup 1 --runs 3 --export-markdown "$work/hyperfine.md" \
  --prepare "rm -rf $work/out $work/copy.bin; sync" \
  "cp $work/in/pytorch_model.bin $work/copy.bin" \
  "cp $work/in/pytorch_model.bin $work/copy.bin && sync $work/copy.bin" \
  "$bin convert $work/in $work/out --to safetensors"
cat "$work/hyperfine.md"
for cmd in "cp $work/in/pytorch_model.bin $work/copy.bin" "$bin convert $work/in $work/out --to safetensors"; do
  rm -rf "$work/out" "$work/copy.bin"
  /usr/bin/time -v $cmd 2>"$work/time.txt" >/dev/null
  echo "$(grep 'Maximum resident' "$work/time.txt" | awk '{print $6}') KB peak RSS: $cmd"
done
rm -rf "$work/out" "$work/copy.bin"
