#!/usr/bin/env bash
# Conversion throughput and peak memory against the hash-bound limit, side by side in one run on
# the same input, warm page cache: `cp`, `openssl dgst -sha256` (the limit: every output byte is
# hashed for SHA256SUMS), `cp` + `sync FILE` (the durability convert gets from fsync), `ctxpatch
# convert` to one safetensors file, to 2 shards with --threads 1 and 2, to GGUF (f16) and to ONNX
# (fp16, external data), and the PyTorch route (Debian's torch: torch.load, then every tensor
# written out as safetensors and fsync'd; no hash). Commands take turns, REPEATS rounds; the table
# gives the median wall time, input bytes / time, the median CPU time (user + sys, all threads:
# steadier than wall time on a loaded machine), the largest peak RSS, and t(dgst) / t.
# Then, when BIG_GB > 0 and the disk has room, a 7B-sized BF16 safetensors input (written tensor
# by tensor by make_big_checkpoint.py) through dgst and convert once each: RSS must stay flat.
# BEFORE_BIN=path/to/older/ctxpatch adds its GGUF f16 and ONNX fp16 conversions as rows of the
# same table, taking turns with the others (before and after side by side in one run).
# The generated inputs are deleted at the end unless KEEP_INPUT=1.
# usage: bench/bench_convert.sh [WORKDIR] [SIZE_GB]     (needs ~4x SIZE_GB of free disk)
#   REPEATS (default 3), BIG_GB (default 14; 0 skips; needs 3x BIG_GB + 3 GB free), BEFORE_BIN,
#   ONLY (labels to run, e.g. "convert_gguf convert_onnx before_gguf before_onnx"; dgst always runs)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/ctxpatch-bench}
size=${2:-2.2}
repeats=${REPEATS:-3}
big=${BIG_GB:-14}
bin=$PWD/build/ctxpatch
py=/usr/bin/python3
[ -x "$bin" ] || { echo "bench_convert: $bin is not built" >&2; exit 2; }
mkdir -p "$work/in"
in=$work/in/pytorch_model.bin
[ -f "$in" ] || "$py" bench/make_big_checkpoint.py "$in" "$size"
bytes=$(stat -c %s "$in")
shard=$((bytes / 10 * 6)) # 2 shards: the planner starts the second before the first passes 60%

cat >"$work/torch_route.py" <<'PY'
import json, os, struct, sys
import torch
sd = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
names = sorted(sd)
header, off = {"__metadata__": {"format": "pt"}}, 0
for k in names:
    n = sd[k].numel() * sd[k].element_size()
    header[k] = {"dtype": "F16", "shape": list(sd[k].shape), "data_offsets": [off, off + n]}
    off += n
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for k in names:
        f.write(sd[k].contiguous().view(-1).view(torch.uint8).numpy().data)
    f.flush()
    os.fsync(f.fileno())
PY

labels=(cp dgst cp_sync convert_1file convert_2shards_t1 convert_2shards_t2 convert_gguf convert_onnx torch_route)
cmds=(
  "cp $in $work/out.bin"
  "openssl dgst -sha256 $in"
  "cp $in $work/out.bin && sync $work/out.bin"
  "$bin convert $work/in $work/out --to safetensors"
  "$bin convert $work/in $work/out --to safetensors --shard-size $shard --threads 1"
  "$bin convert $work/in $work/out --to safetensors --shard-size $shard --threads 2"
  "$bin convert $work/in $work/out.gguf --to gguf --dtype f16"
  "$bin convert $work/in $work/out --to onnx --dtype fp16"
  "$py $work/torch_route.py $in $work/out.bin"
)
descr=(
  "\`cp\`"
  "\`openssl dgst -sha256\` (the limit)"
  "\`cp\` + \`sync FILE\`"
  "\`convert --to safetensors\` (1 file)"
  "\`convert\`, 2 shards, \`--threads 1\`"
  "\`convert\`, 2 shards, \`--threads 2\`"
  "\`convert --to gguf --dtype f16\`"
  "\`convert --to onnx --dtype fp16\` (external data)"
  "PyTorch: \`torch.load\` + write tensors + fsync"
)
if [ -n "${BEFORE_BIN:-}" ]; then
  [ -x "$BEFORE_BIN" ] || { echo "bench_convert: BEFORE_BIN $BEFORE_BIN is not executable" >&2; exit 2; }
  labels+=(before_gguf before_onnx)
  cmds+=("$BEFORE_BIN convert $work/in $work/out.gguf --to gguf --dtype f16"
    "$BEFORE_BIN convert $work/in $work/out --to onnx --dtype fp16")
  descr+=("before: \`convert --to gguf --dtype f16\`" "before: \`convert --to onnx --dtype fp16\`")
fi

# ONLY="dgst convert_gguf ...": run only the rows with these labels (the limit, dgst, always).
if [ -n "${ONLY:-}" ]; then
  keep_l=() keep_c=() keep_d=()
  for i in "${!labels[@]}"; do
    case " dgst $ONLY " in *" ${labels[$i]} "*) keep_l+=("${labels[$i]}") keep_c+=("${cmds[$i]}") keep_d+=("${descr[$i]}") ;; esac
  done
  labels=("${keep_l[@]}") cmds=("${keep_c[@]}") descr=("${keep_d[@]}")
fi

clean() { rm -rf "$work/out" "$work/out.bin" "$work/out.gguf"; sync; }
# run LABEL CMD: appends "LABEL SECONDS PEAK_KB" to $work/times
run() {
  clean
  cat "$in" >/dev/null # warm: every contender reads from the page cache
  /usr/bin/time -f "%e %M %U %S" -o "$work/t1" bash -c "$2" >/dev/null
  echo "$1 $(cat "$work/t1")" >>"$work/times"
}

: >"$work/times"
echo "input: $bytes bytes; machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
  "$(awk -F: '/model name/ {print $2; exit}' /proc/cpuinfo | sed 's/^ *//'), $(df -T "$work" | awk 'NR==2 {print $2}') on $(df "$work" | awk 'NR==2 {print $1}')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < repeats; r++)); do
  for i in "${!labels[@]}"; do run "${labels[$i]}" "${cmds[$i]}"; done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
clean
"$bin" convert "$work/in" "$work/out" --to safetensors --shard-size $shard --json | grep -o '"shards":[0-9]*'
clean

median() { grep "^$1 " "$work/times" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
median_cpu() { grep "^$1 " "$work/times" | awk '{print $4 + $5}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
peak() { grep "^$1 " "$work/times" | awk 'BEGIN {m=0} $3>m {m=$3} END {print m}'; }
limit=$(median dgst)
echo
echo "| command | time (s, median of $repeats) | GB/s | CPU (s) | peak RSS (MB) | t(dgst) / t |"
echo "|---|---:|---:|---:|---:|---:|"
for i in "${!labels[@]}"; do
  t=$(median "${labels[$i]}")
  awk -v d="${descr[$i]}" -v t="$t" -v b="$bytes" -v m="$(peak "${labels[$i]}")" -v l="$limit" \
    -v c="$(median_cpu "${labels[$i]}")" \
    'BEGIN {printf "| %s | %.2f | %.2f | %.2f | %.0f | %.2f |\n", d, t, b / t / 1e9, c, m / 1024, l / t}'
done

# The 7B-sized case: only with room for the input, the output and slack.
free_gb=$(df -BG --output=avail "$work" | tail -1 | tr -dc 0-9)
if awk -v b="$big" -v f="$free_gb" 'BEGIN {exit !(b > 0 && f > 3 * b + 3)}'; then
  mkdir -p "$work/big"
  bigin=$work/big/model.safetensors
  [ -f "$bigin" ] || "$py" bench/make_big_checkpoint.py "$bigin" "$big" >/dev/null
  bb=$(stat -c %s "$bigin")
  echo
  echo "7B-sized input: $bb bytes BF16 safetensors; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "| command | time (s) | GB/s | peak RSS (MB) |"
  echo "|---|---:|---:|---:|"
  for pair in "dgst|openssl dgst -sha256 $bigin" "convert|$bin convert $work/big $work/out --to safetensors"; do
    clean
    /usr/bin/time -f "%e %M" -o "$work/t1" bash -c "${pair#*|}" >/dev/null
    read -r t m <"$work/t1"
    awk -v d="${pair%%|*}" -v t="$t" -v b="$bb" -v m="$m" 'BEGIN {printf "| %s | %.1f | %.2f | %.0f |\n", d, t, b / t / 1e9, m / 1024}'
  done
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  clean
  rm -rf "$work/big"
else
  echo "(7B-sized case skipped: BIG_GB=$big, ${free_gb} GB free)"
fi
[ "${KEEP_INPUT:-0}" = 1 ] || rm -rf "$work/in" "$work/torch_route.py" "$work/times" "$work/t1"
