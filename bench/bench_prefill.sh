#!/usr/bin/env bash
# CPU engine prefill vs the PyTorch reference on a tiny random Llama-layout model
# (d_model 64, 2 layers, 4 heads, vocab 64): prefill tokens/s and peak RSS at 1K, 4K and 16K
# tokens with the same thread count, plus the engine under a Lambda rule. Prints a Markdown table
# for docs/perf.md ("CPU engine prefill").
#
# usage: bench/bench_prefill.sh [THREADS]        (default 2)
#   CTXPATCH_BIN     ctxpatch binary (default build/ctxpatch)
#   CTXPATCH_PYTHON  Python with torch (default /usr/bin/python3)
#   LENGTHS          token counts (default "1024 4096 16384")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=$here/../scripts/py   # $CTXPATCH_PYTHON or /usr/bin/python3, python/ on its path
threads=${1:-2}
lengths=${LENGTHS:-"1024 4096 16384"}
[ -x "$bin" ] || { echo "bench_prefill: $bin is not built (set CTXPATCH_BIN)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_prefill: needs GNU time (/usr/bin/time -v)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$here/prefill_torch.py" make-model "$work/model"
echo '{"lambda_mask": {"n_global": 4, "n_local": 256}}' >"$work/lambda.json"

# row ENGINE TOKENS TIMEFILE SECONDS WALL REL_DIFF: one table row (peak RSS from `time -v`)
row() {
  "$py" - "$@" "$threads" <<'PY'
import re, sys
engine, tokens, tfile, secs, wall, diff, threads = sys.argv[1:8]
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(tfile).read()).group(1)) / 1024
print("| %s | %s | %s | %.0f | %.3f | %.0f | %s |" % (tokens, engine, threads, int(tokens) / float(secs),
                                                    float(wall), rss, diff))
PY
}
# timed REPORT STDOUT CMD...: runs CMD under `time -v` (report in REPORT, its output in STDOUT);
# prints its wall seconds
timed() {
  local report=$1 stdout=$2 t0 t1
  shift 2
  t0=$(date +%s.%N)
  /usr/bin/time -v "$@" 2>"$report" >"$stdout"
  t1=$(date +%s.%N)
  "$py" -c "print($t1 - $t0)"
}

echo "| tokens | engine | threads | prefill tokens/s | wall s | peak RSS MiB | max rel. diff of logits |"
echo "|---:|---|---:|---:|---:|---:|---|"
for L in $lengths; do
  "$py" -c "import random; random.seed($L); print(','.join(str(random.randrange(64)) for _ in range($L)))" >"$work/ids"
  cw=$(timed "$work/c.time" /dev/null "$bin" forward "$work/model" --ids @"$work/ids" --threads "$threads" --out "$work/c.bin")
  clw=$(timed "$work/cl.time" /dev/null "$bin" forward "$work/model" --ids @"$work/ids" --threads "$threads" \
    --rule "$work/lambda.json" --out "$work/cl.bin")
  tw=$(timed "$work/t.time" "$work/t.json" "$py" "$here/prefill_torch.py" run "$work/model" --ids "$work/ids" \
    --threads "$threads" --out "$work/t.bin")
  tsecs=$("$py" -c "import json; print(json.load(open('$work/t.json'))['seconds'])")
  diff=$("$py" -c "
import numpy as np
a = np.fromfile('$work/c.bin', '<f4'); b = np.fromfile('$work/t.bin', '<f4')
print('%.1e' % (np.abs(a - b).max() / np.abs(b).max()))")
  row "ctxpatch (identity)" "$L" "$work/c.time" "$cw" "$cw" "$diff"
  row "ctxpatch (Lambda 4/256)" "$L" "$work/cl.time" "$clw" "$clw" "-"
  row "PyTorch $("$py" -c 'import torch; print(torch.__version__)') eager" "$L" "$work/t.time" "$tsecs" "$tw" \
    "reference"
done
echo
echo "ctxpatch tokens/s: whole process (start, load, prefill, write logits); PyTorch tokens/s: the"
echo "forward alone (after a warm-up; Python start-up and loading excluded). Wall s: whole process."
