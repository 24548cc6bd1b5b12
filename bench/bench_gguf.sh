#!/usr/bin/env bash
# `ctxpatch forward` prefill vs llama.cpp (node-llama-cpp 3.22.1's prebuilt CPU binding) on the same
# F32 GGUF files, same thread count, prompt lengths 512..4096, side by side in one run: stories260K
# (the real TinyStories model) and a synthetic larger Llama (bench/make_random_llama.py, exported
# with `ctxpatch convert --to gguf`). Prints a Markdown table for docs/perf.md ("GGUF").
#
# ctxpatch: wall time of `forward FILE --ids @L --out /dev/null` minus that of a 1-token prompt
# (model load and start-up), best of REPEATS. llama.cpp: time of evaluating the L ids in one batch
# in a fresh context (model loaded once), best of REPEATS. Both in float32 (F32 K/V cache).
#
# usage: bench/bench_gguf.sh [THREADS]           (default 2)
#   CTXPATCH_BIN, CTXPATCH_FIXTURES (default ../shared/fixtures), CTXPATCH_NODE_MODULES (node-llama-cpp),
#   LENGTHS (default "512 1024 2048 4096"), SIZE_MB (synthetic model, default 20), REPEATS (default 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=/usr/bin/python3
fx=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
threads=${1:-2}
lengths=${LENGTHS:-"512 1024 2048 4096"}
repeats=${REPEATS:-3}
[ -x "$bin" ] || { echo "bench_gguf: $bin is not built (set CTXPATCH_BIN)" >&2; exit 2; }
[ -d "$nm/node-llama-cpp" ] || { echo "bench_gguf: node-llama-cpp not in $nm (set CTXPATCH_NODE_MODULES)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here/gguf_prefill.mjs" "$work/run.mjs"; ln -s "$nm" "$work/node_modules"
"$py" "$here/make_random_llama.py" "$work/rand" "${SIZE_MB:-20}" >/dev/null
# A byte-level BPE tokenizer.json (256 byte pieces, no merges) so the GGUF has a gpt2 vocabulary
# (padded to 4096 by the exporter): node-llama-cpp needs one to load a model.
"$py" - "$work/rand/tokenizer.json" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
json.dump({"model": {"type": "BPE", "vocab": vocab, "merges": []}, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
           "added_tokens": []}, open(sys.argv[1], "w"))
PY
"$bin" convert "$work/rand" "$work/rand.gguf" --to gguf >/dev/null
models="stories260K:$fx/third_party/stories260K/stories260K.gguf:512 synthetic:$work/rand.gguf:4096"

secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); "$py" -c "print($t1 - $t0)"; }
best() { local b=1e9 s; for _ in $(seq "$repeats"); do s=$(secs "$@"); b=$("$py" -c "print(min($b, $s))"); done; echo "$b"; }

echo "| model | params | tokens | threads | ctxpatch tokens/s | llama.cpp tokens/s | llama.cpp / ctxpatch |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for m in $models; do
  IFS=: read -r name file vocab <<<"$m"
  params=$("$bin" inspect "$file" | sed -n 's/.*(\([0-9]*\) parameters.*/\1/p')
  lc=$(node "$work/run.mjs" "$file" "$threads" "$vocab" "$repeats" "$(echo $lengths | tr ' ' ',')")
  echo 1 >"$work/ids1"
  base=$(best "$bin" forward "$file" --ids @"$work/ids1" --threads "$threads" --out /dev/null)
  for L in $lengths; do
    "$py" -c "import random; r=random.Random($L); print(','.join(['1']+[str(r.randrange(3,$vocab)) for _ in range($L-1)]))" >"$work/ids"
    t=$(best "$bin" forward "$file" --ids @"$work/ids" --threads "$threads" --out /dev/null)
    "$py" - "$name" "$params" "$L" "$threads" "$t" "$base" "$lc" <<'PY'
import json, sys
name, params, L, threads, t, base, lc = sys.argv[1:]
ours = int(L) / max(float(t) - float(base), 1e-9)
theirs = int(L) / json.loads(lc)[L]
print(f"| {name} | {int(params)/1e6:.2f}M | {L} | {threads} | {ours:.0f} | {theirs:.0f} | {theirs/ours:.2f} |")
PY
  done
done
echo
echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
