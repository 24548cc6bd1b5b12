#!/usr/bin/env bash
# ONNX export cost (issue 13): `ctxpatch convert --to onnx` of a synthetic 1B-parameter Llama
# (bench/make_random_llama.py: F16 safetensors, ~2 GB) with external data, against the size of
# the weights and against `convert --to safetensors` of the same input, in one run: wall time and
# peak RSS (/usr/bin/time -v) of each, the output sizes, and the load average before and after
# (the machine may be shared). The checkpoint and the outputs are deleted at the end.
# --external-threshold 64K: this checkpoint's 256x256 attention matrices (256 KiB) stay inline under
# the 1 MiB default and 1265 layers of them put the model proto over protobuf's 2 GiB limit.
# usage: bench/bench_onnx_export.sh [WORKDIR] [SIZE_MB]   (needs ~4x SIZE_MB x 2 of free disk)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/ctxpatch-bench-onnx}
size=${2:-2000}
bin=./build/ctxpatch
[ -x "$bin" ] || bash scripts/build.sh build
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
/usr/bin/python3 bench/make_random_llama.py "$work/in" "$size"
bytes=$(stat -c %s "$work/in/model.safetensors")
params=$(/usr/bin/python3 -c "import json,struct,sys
f=open(sys.argv[1],'rb'); n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n))
import math; print(sum(math.prod(v['shape']) for k,v in h.items() if k!='__metadata__'))" "$work/in/model.safetensors")
cat "$work/in/model.safetensors" >/dev/null # warm the cache for both contenders
echo "machine: $(nproc) cores, $(grep MemTotal /proc/meminfo | awk '{printf "%.0f GiB", $2/1048576}'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "input: $params parameters, $bytes bytes (F16 safetensors)"
run() { # run NAME CMD...: wall seconds, peak RSS, output bytes
  local name=$1; shift
  rm -rf "$work/out"
  /usr/bin/time -v "$@" >/dev/null 2>"$work/time.txt" || { echo "$name: FAILED"; grep -v '^\s' "$work/time.txt"; exit 1; }
  local wall rss out
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; print s}' "$work/time.txt")
  rss=$(awk '/Maximum resident/ {printf "%.0f", $6/1024}' "$work/time.txt")
  out=$(du -sb "$work/out" | cut -f1)
  echo "$name: ${wall} s wall, ${rss} MiB peak RSS, output $out bytes"
}
run "convert --to safetensors" "$bin" convert "$work/in" "$work/out" --to safetensors
run "convert --to onnx (fp32)" "$bin" convert "$work/in" "$work/out" --to onnx --external-threshold 64K
ls -l "$work/out/onnx"
run "convert --to onnx --dtype fp16" "$bin" convert "$work/in" "$work/out" --to onnx --dtype fp16 --external-threshold 64K
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
