#!/usr/bin/env bash
# Real-size checkpoints on the CPU engine (issue #19; results in docs/perf.md "Real-size
# checkpoints"): synthetic Llama-shaped BF16 checkpoints made by bench/make_llama_bf16.py.
#
# usage: bench/bench_bigw.sh WORK SECTION...     (WORK: a folder with room for the checkpoints)
#   verify  1B: peak RSS and wall time of `verify --baseline` (passkey, 1 depth, 1 sample, so one
#           prompt per side) at VERIFY_LEN tokens (default 4096); with OLD_BIN (a build of the
#           engine that widens every weight to float32) the same at OLD_LEN (default 512)
#   speed   1B: prefill and decode tokens/s of `ctxpatch forward --generate` at 1 and 2 threads,
#           PyTorch eager (float32 weights) and llama.cpp (node-llama-cpp, the model converted to
#           GGUF bf16) on the same PROMPT-token prompt (default 512) and NEW tokens (default 17)
#   patch   1B: peak RSS and wall time of `patch --method temperature --tau 1.2` certified on
#           passkey at PATCH_LEN tokens (default 128; 1 depth, 1 sample): original and baked side
#           by side; with OLD_BIN the same with the old build
#   big7b   7B: the verify run of `verify` at BIG_LEN tokens (default 256), RSS and time; the
#           13.5 GB checkpoint is deleted afterwards
#   quant   1B as a Q8_0 GGUF (`convert --to gguf --dtype q8_0`): peak RSS of `verify --baseline`
#           (passkey, 1 depth, 1 sample) at QUANT_LEN tokens (default 512) against the GGUF's size
#           and the weights' float32 size; with OLD_BIN (a build that dequantises GGUF quants to
#           float32 at open) the same. Memory only (no wall column)
#   kern16  issue 34's 16-bit kernels: the "mid" model (1B's matrices, 4 layers; bench/make_llama_bf16.py)
#           as BF16 and as F16: prefill and decode tokens/s and peak RSS of `forward --generate`
#           (2 threads, PROMPT tokens (default 128), NEW new (default 17); as `speed`) with the
#           16-bit kernels and with CTXPATCH_WEIGHTS=f32 (every product through widened float32
#           tiles, as before), ROUNDS rounds (default 3) of the two interleaved, medians; rates from
#           wall and from CPU time (user + sys, steadier on a shared machine); then llama.cpp (its
#           own wall timing) on the model converted to GGUF of the same dtype
#   gguf1b  issue 34 at 1B: the llama3.2-1b model (bench/make_llama_bf16.py) as GGUF bf16 and q8_0
#           (DTYPES, default "bf16 q8_0"), with GPT-2's byte-level BPE tokenizer.json padded to its
#           vocabulary (Llama 3's tokenizer.json is written as no_vocab, which llama.cpp cannot run;
#           the prompt is token ids either way); on each GGUF, ctxpatch `forward --generate`
#           (2 threads, PROMPT tokens (default 64), NEW new (default 9)) with the direct kernels and
#           with CTXPATCH_WEIGHTS=f32 (widened tiles), and llama.cpp (bench/bigw_llamacpp.mjs) on the
#           same GGUF, ids and threads, ROUNDS rounds (default 2) interleaved, medians. Every engine is
#           timed the same way as whole processes: prefill = P / (c(P, 1) - c(1, 1)), decode
#           = (N-1) / (c(P, N) - c(P, 1)) with c the CPU time (user + sys) of the process; llama.cpp's
#           own wall timing of its forward is printed too, labelled (its threads spin while they
#           wait, so its CPU time counts that), and ctxpatch's rates from whole-process wall times
#           (noisy: one round gave a negative decode rate). Load average at the start and end of
#           each row. ENGINES (default "16 f32 llama.cpp") picks the engines; "old" is OLD_BIN (a
#           build before a change) with the direct kernels. THREADS (default "2"; issue 34's prefill
#           bench: "1 2") the thread counts, each its own rows, every engine at the same count
#   logits  d_model 64, vocab 256000: peak RSS of `verify --probe ppl` at LOGITS_LEN tokens
#           (default 32768, one window); with OLD_BIN also the old build at OLD_LOGITS_LEN (4096)
# Every row also gives the load average when it started (the machine is shared).
#   CTXPATCH_BIN (default build/ctxpatch), CTXPATCH_PYTHON (default /usr/bin/python3),
#   CTXPATCH_NODE_MODULES (default tests/runtimes/node_modules), TOKENIZER (a Llama
#   tokenizer.model; default ../shared/fixtures/tokenizers/llama2/tokenizer.model)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=$here/../scripts/py   # $CTXPATCH_PYTHON or /usr/bin/python3, python/ on its path
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
tok=${TOKENIZER:-$src/../shared/fixtures/tokenizers/llama2/tokenizer.model}
work=${1:?usage: bench_bigw.sh WORK SECTION...}
shift
[ -x "$bin" ] || { echo "bench_bigw: $bin is not built (set CTXPATCH_BIN)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_bigw: needs GNU time (/usr/bin/time -v)" >&2; exit 2; }
[ -f "$tok" ] || { echo "bench_bigw: no tokenizer.model at $tok (set TOKENIZER)" >&2; exit 2; }
mkdir -p "$work"

load() { cut -d' ' -f1 /proc/loadavg; }
# rss FILE: peak RSS in MiB from a `time -v` report; wall FILE: elapsed seconds
rss() { "$py" -c "import re,sys; print('%.0f' % (int(re.search(r'Maximum resident set size \(kbytes\): (\d+)', open(sys.argv[1]).read()).group(1)) / 1024))" "$1"; }
wall() { "$py" -c "import re,sys; t=re.search(r'Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)', open(sys.argv[1]).read()).group(1).split(':'); print('%.1f' % sum(float(x) * 60 ** i for i, x in enumerate(reversed(t))))" "$1"; }
cpu() { "$py" -c "import re,sys; s=open(sys.argv[1]).read(); print('%.2f' % sum(float(re.search(k + r' time \(seconds\): (\S+)', s).group(1)) for k in ('User', 'System')))" "$1"; }
size_mib() { "$py" -c "import os,sys; print('%.0f' % (os.path.getsize(sys.argv[1]) / 2**20))" "$1"; }
model() { # model PRESET DIR [DTYPE]: the checkpoint, made once, with the tokenizer beside it
  [ -f "$2/model.safetensors" ] || "$py" "$here/make_llama_bf16.py" "$2" "$1" 0 "${3:-bf16}"
  cp "$tok" "$2/tokenizer.model"
}
ids() { "$py" -c "import random; random.seed($2); print(','.join(str(random.randrange(3, 32000)) for _ in range($1)))"; }

verify_row() { # verify_row LABEL BIN MODEL LEN
  local l0; l0=$(load)
  /usr/bin/time -v "$2" verify "$3" --baseline --probe passkey --lengths "$4" --depths 0.5 --samples 1 \
    --no-stats --threads 2 >"$work/v.out" 2>"$work/v.time" || { cat "$work/v.out" "$work/v.time" >&2; return 1; }
  echo "| $1 | $4 | $(size_mib "$3/model.safetensors") | $(rss "$work/v.time") | $(wall "$work/v.time") | $l0 |"
}

for section in "$@"; do
  case $section in
  verify)
    model 1b "$work/m1b"
    echo "| build | tokens | checkpoint MiB | peak RSS MiB | wall s | load |"
    echo "|---|---:|---:|---:|---:|---:|"
    verify_row "stored BF16 (this)" "$bin" "$work/m1b" "${VERIFY_LEN:-4096}"
    [ -z "${OLD_BIN:-}" ] || verify_row "float32 copy (before)" "$OLD_BIN" "$work/m1b" "${OLD_LEN:-512}"
    [ -z "${OLD_BIN:-}" ] || verify_row "stored BF16 (this)" "$bin" "$work/m1b" "${OLD_LEN:-512}"
    ;;
  speed)
    model 1b "$work/m1b"
    P=${PROMPT:-512} N=${NEW:-17}
    ids "$P" 11 >"$work/ids"
    ids 1 11 >"$work/ids1"
    echo "| engine | threads | prompt | prefill tokens/s | decode tokens/s | peak RSS MiB | load |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for T in 1 2; do
      # prefill = P / (t(P tokens, 1 new) - t(1 token, 1 new)); decode = (N-1) / (t(P, N) - t(P, 1))
      local_l0=$(load)
      declare -A t=()
      for run in "ids1 1" "ids 1" "ids $N"; do
        set -- $run
        /usr/bin/time -v "$bin" forward "$work/m1b" --ids @"$work/$1" --generate "$2" --threads "$T" \
          >"$work/f.out" 2>"$work/f.time"
        t["$1 $2"]=$(wall "$work/f.time")
      done
      "$py" -c "import sys; a,b,c,P,N=map(float,sys.argv[1:]); print('| ctxpatch forward --generate | $T | %d | %.1f | %.2f | $(rss "$work/f.time") | $local_l0 |' % (P, P/(b-a), (N-1)/(c-b)))" \
        "${t[ids1 1]}" "${t[ids 1]}" "${t[ids $N]}" "$P" "$N"
      unset t
    done
    l0=$(load)
    /usr/bin/time -v "$py" "$here/bigw_torch.py" "$work/m1b" --ids "$work/ids" --threads 2 --new "$N" \
      >"$work/t.json" 2>"$work/t.time"
    "$py" -c "import json; r=json.load(open('$work/t.json')); print('| PyTorch %s eager (float32 weights) | 2 | %d | %.1f | %.2f | $(rss "$work/t.time") | $l0 |' % (__import__('torch').__version__, r['prompt'], r['prefill_tokens_per_s'], r['decode_tokens_per_s']))"
    if [ -d "$nm/node-llama-cpp" ]; then
      [ -f "$work/m1b.gguf" ] || "$bin" convert "$work/m1b" "$work/m1b.gguf" --to gguf --dtype bf16 >/dev/null
      mkdir -p "$work/js" && cp "$here/bigw_llamacpp.mjs" "$work/js/run.mjs" && ln -sfn "$nm" "$work/js/node_modules"
      l0=$(load)
      /usr/bin/time -v node "$work/js/run.mjs" "$work/m1b.gguf" 2 "$work/ids" "$N" >"$work/l.json" 2>"$work/l.time"
      "$py" -c "import json; r=json.load(open('$work/l.json')); print('| llama.cpp (node-llama-cpp, GGUF bf16) | 2 | %d | %.1f | %.2f | $(rss "$work/l.time") | $l0 |' % (r['prompt'], r['prompt']/r['prefill_s'], (r['new']-1)/r['decode_s']))"
    fi
    ;;
  kern16)
    P=${PROMPT:-128} N=${NEW:-17} R=${ROUNDS:-3}
    ids "$P" 11 >"$work/ids"
    ids 1 11 >"$work/ids1"
    echo "| model | products | threads | prompt | prefill tokens/s | decode tokens/s | prefill tokens/CPU-s | decode tokens/CPU-s | peak RSS MiB | load |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for dt in bf16 f16; do
      model mid "$work/mid_$dt" "$dt"
      : >"$work/k16.times"
      l0=$(load)
      for round in $(seq "$R"); do
        for run in "ids1 1" "ids 1" "ids $N"; do
          set -- $run
          for w in f32 16; do
            CTXPATCH_WEIGHTS=$w /usr/bin/time -v "$bin" forward "$work/mid_$dt" --ids @"$work/$1" --generate "$2" \
              --threads 2 >"$work/f.out" 2>"$work/f.time" || { cat "$work/f.time" >&2; exit 1; }
            echo "$w $1 $2 $(wall "$work/f.time") $(cpu "$work/f.time") $(rss "$work/f.time")" >>"$work/k16.times"
          done
        done
      done
      # medians over the rounds; prefill = P / (t(P, 1) - t(1, 1)), decode = (N-1) / (t(P, N) - t(P, 1))
      "$py" - "$work/k16.times" "$P" "$N" "$dt" "$l0" "$(load)" <<'PY'
import statistics, sys
rows, P, N, dt, l0, l1 = open(sys.argv[1]).read().split("\n"), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
t = {}
for r in rows:
    if r:
        w, f, n, wall, cpu, rss = r.split()
        t.setdefault((w, f, n), []).append((float(wall), float(cpu), int(rss)))
for w, label in (("f32", "widened tiles (CTXPATCH_WEIGHTS=f32)"), ("16", "16-bit kernels")):
    med = lambda key, i: statistics.median(x[i] for x in t[(w,) + key])
    a, b, c = ("ids1", "1"), ("ids", "1"), ("ids", str(N))
    rate = lambda i: (P / (med(b, i) - med(a, i)), (N - 1) / (med(c, i) - med(b, i)))
    (pw, dw), (pc, dc) = rate(0), rate(1)
    rss = max(x[2] for k, v in t.items() if k[0] == w for x in v)
    print("| mid %s | %s | 2 | %d | %.1f | %.2f | %.1f | %.2f | %d | %s-%s |" % (dt, label, P, pw, dw, pc, dc, rss, l0, l1))
PY
      if [ -d "$nm/node-llama-cpp" ]; then
        [ -f "$work/mid_$dt.gguf" ] || "$bin" convert "$work/mid_$dt" "$work/mid_$dt.gguf" --to gguf --dtype "$dt" >/dev/null
        mkdir -p "$work/js" && cp "$here/bigw_llamacpp.mjs" "$work/js/run.mjs" && ln -sfn "$nm" "$work/js/node_modules"
        l0=$(load)
        /usr/bin/time -v node "$work/js/run.mjs" "$work/mid_$dt.gguf" 2 "$work/ids" "$N" >"$work/l.json" 2>"$work/l.time"
        "$py" -c "import json; r=json.load(open('$work/l.json')); print('| mid $dt | llama.cpp (node-llama-cpp, GGUF $dt) | 2 | %d | %.1f | %.2f | - | - | $(rss "$work/l.time") | $l0 |' % (r['prompt'], r['prompt']/r['prefill_s'], (r['new']-1)/r['decode_s']))"
      fi
    done
    ;;
  patch)
    model 1b "$work/m1b"
    echo "| build | tokens | checkpoint MiB | peak RSS MiB | wall s | load |"
    echo "|---|---:|---:|---:|---:|---:|"
    for pair in "stored BF16, shared (this):$bin" ${OLD_BIN:+"float32 copies (before):$OLD_BIN"}; do
      IFS=: read -r label b <<<"$pair"
      rm -rf "$work/patched"
      l0=$(load)
      # one prompt certifies nothing (inconclusive): binaries with the verdicts are told to write anyway
      accept=()
      case "$("$b" patch --help 2>&1)" in *--accept-underpowered*) accept=(--accept-no-gain --accept-underpowered) ;; esac
      /usr/bin/time -v "$b" patch "$work/m1b" "$work/patched" --method temperature --tau 1.2 --verify passkey \
        --lengths "${PATCH_LEN:-128}" --depths 0.5 --samples 1 "${accept[@]}" --threads 2 >"$work/pa.out" 2>"$work/pa.time" ||
        { cat "$work/pa.out" "$work/pa.time" >&2; exit 1; }
      echo "| $label | ${PATCH_LEN:-128} | $(size_mib "$work/m1b/model.safetensors") | $(rss "$work/pa.time") | $(wall "$work/pa.time") | $l0 |"
    done
    rm -rf "$work/patched"
    ;;
  big7b)
    [ "$(df -Pk "$work" | awk 'NR==2 {print $4}')" -gt 16000000 ] || { echo "bench_bigw: big7b needs 16 GB free in $work" >&2; exit 2; }
    model 7b "$work/m7b"
    echo "| build | tokens | checkpoint MiB | peak RSS MiB | wall s | load |"
    echo "|---|---:|---:|---:|---:|---:|"
    verify_row "stored BF16, 7B shape" "$bin" "$work/m7b" "${BIG_LEN:-256}"
    rm -rf "$work/m7b"
    ;;
  gguf1b)
    P=${PROMPT:-64} N=${NEW:-9} R=${ROUNDS:-2}
    m=$work/l32
    [ -f "$m/model.safetensors" ] || "$py" "$here/make_llama_bf16.py" "$m" llama3.2-1b 0 bf16
    cp "$src/../shared/fixtures/tokenizers/gpt2/tokenizer.json" "$m/tokenizer.json"
    "$py" -c "import random; random.seed(11); print(','.join(str(random.randrange(3, 128000)) for _ in range($P)))" >"$work/ids"
    echo 128000 >"$work/ids1"
    mkdir -p "$work/js" && cp "$here/bigw_llamacpp.mjs" "$work/js/run.mjs" && ln -sfn "$nm" "$work/js/node_modules"
    echo "| model | engine | threads | prompt | prefill tokens/CPU-s | decode tokens/CPU-s | CPU s: P tokens, 1 new | CPU s: 1 token, 1 new | peak RSS MiB | load |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for dt in ${DTYPES:-bf16 q8_0}; do
      g=$work/l32.$dt.gguf
      [ -f "$g" ] || "$bin" convert "$m" "$g" --to gguf --dtype "$dt" >/dev/null
      for T in ${THREADS:-2}; do
      : >"$work/g.times"
      l0=$(load)
      for round in $(seq "$R"); do
        for run in "ids1 1" "ids 1" "ids $N"; do
          set -- $run
          for eng in ${ENGINES:-16 f32 llama.cpp}; do
            if [ "$eng" = llama.cpp ]; then
              [ -d "$nm/node-llama-cpp" ] || continue
              /usr/bin/time -v node "$work/js/run.mjs" "$g" "$T" "$work/$1" "$2" >"$work/l.json" 2>"$work/f.time" ||
                { cat "$work/f.time" >&2; exit 1; }
              own=$("$py" -c "import json; r=json.load(open('$work/l.json')); print(r['prefill_s'], r['decode_s'])")
            else
              b=$bin w=$eng
              [ "$eng" != old ] || { b=${OLD_BIN:?ENGINES=old needs OLD_BIN}; w=16; }
              CTXPATCH_WEIGHTS=$w /usr/bin/time -v "$b" forward "$g" --ids @"$work/$1" --generate "$2" \
                --threads "$T" >"$work/f.out" 2>"$work/f.time" || { cat "$work/f.time" >&2; exit 1; }
              own="$(wall "$work/f.time") -"
            fi
            echo "$eng $1 $2 $(cpu "$work/f.time") $(rss "$work/f.time") $own" >>"$work/g.times"
          done
        done
      done
      "$py" - "$work/g.times" "$P" "$N" "$dt" "$l0" "$(load)" "$T" <<'PY'
import statistics, sys
rows, P, N, dt, l0, l1, T = open(sys.argv[1]).read().split("\n"), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
t = {}
for r in rows:
    if r:
        e, f, n, cpu, rss, pre, dec = r.split()
        t.setdefault((e, f, n), []).append((float(cpu), int(rss), pre, dec))
labels = (("16", "ctxpatch, direct kernels"), ("old", "ctxpatch before (OLD_BIN)"),
          ("f32", "ctxpatch, widened tiles (CTXPATCH_WEIGHTS=f32)"), ("llama.cpp", "llama.cpp (node-llama-cpp)"))
for e, label in labels:
    if (e, "ids", "1") not in t:
        continue
    med = lambda f, n: statistics.median(x[0] for x in t[(e, f, n)])
    a, b, c = med("ids1", "1"), med("ids", "1"), med("ids", str(N))
    rss = max(x[1] for k, v in t.items() if k[0] == e for x in v)
    print("| %s | %s | %s | %d | %.1f | %.2f | %.2f | %.2f | %d | %s-%s |" % (dt, label, T, P, P / (b - a), (N - 1) / (c - b), b, a, rss, l0, l1))
    if e != "llama.cpp":  # whole-process wall times, the same differences
        wm = lambda f, n: statistics.median(float(x[2]) for x in t[(e, f, n)])
        wa, wb, wc = wm("ids1", "1"), wm("ids", "1"), wm("ids", str(N))
        print("| %s | %s, wall | %s | %d | %.1f tokens/s | %.2f tokens/s | - | - | - | %s-%s |" % (dt, label, T, P, P / (wb - wa), (N - 1) / (wc - wb), l0, l1))
    if e == "llama.cpp":  # its own timing of the forward: time to the first token, then N-1 steps
        pre = statistics.median(float(x[2]) for x in t[(e, "ids", str(N))])
        dec = statistics.median(float(x[3]) for x in t[(e, "ids", str(N))])
        print("| %s | llama.cpp, its own wall timing | %s | %d | %.1f tokens/s | %.2f tokens/s | - | - | - | %s-%s |" % (dt, T, P, P / pre, (N - 1) / dec, l0, l1))
PY
      done
    done
    ;;
  logits)
    model tiny-256k "$work/m256k"
    "$py" -c "
import random
random.seed(3)
w = ['river', 'stone', 'light', 'house', 'under', 'seven', 'quiet', 'paper', 'green', 'north', 'metal', 'cloud']
print(' '.join(random.choice(w) for _ in range(60000)))" >"$work/corpus.txt"
    echo "| build | tokens | vocab | peak RSS MiB | wall s | load |"
    echo "|---|---:|---:|---:|---:|---:|"
    for pair in "this:$bin:${LOGITS_LEN:-32768}" ${OLD_BIN:+"before:$OLD_BIN:${OLD_LOGITS_LEN:-4096}"} \
                ${OLD_BIN:+"this:$bin:${OLD_LOGITS_LEN:-4096}"}; do
      IFS=: read -r label b L <<<"$pair"
      l0=$(load)
      /usr/bin/time -v "$b" verify "$work/m256k" --probe ppl --corpus "$work/corpus.txt" --ppl-windows 1 \
        --lengths "$L" --no-stats --threads 2 >"$work/p.out" 2>"$work/p.time" || { cat "$work/p.out" "$work/p.time" >&2; exit 1; }
      echo "| $label | $L | 256000 | $(rss "$work/p.time") | $(wall "$work/p.time") | $l0 |"
    done
    ;;
  quant)
    # memory only: the 1B model as a Q8_0 GGUF (ctxpatch convert --dtype q8_0), verify --baseline
    model 1b "$work/m1b"
    [ -f "$work/m1b.q8_0.gguf" ] || "$bin" convert "$work/m1b" "$work/m1b.q8_0.gguf" --to gguf --dtype q8_0 >/dev/null
    f32=$("$py" -c "import os,sys; print('%.0f' % (os.path.getsize(sys.argv[1]) * 2 / 2**20))" "$work/m1b/model.safetensors")
    echo "| build | tokens | GGUF Q8_0 MiB | weights as float32 MiB | peak RSS MiB | load |"
    echo "|---|---:|---:|---:|---:|---:|"
    for pair in "Q8_0 blocks kept (this):$bin" ${OLD_BIN:+"dequantised at open (before):$OLD_BIN"}; do
      IFS=: read -r label b <<<"$pair"
      l0=$(load)
      /usr/bin/time -v "$b" verify "$work/m1b.q8_0.gguf" --baseline --probe passkey --lengths "${QUANT_LEN:-512}" \
        --depths 0.5 --samples 1 --no-stats --threads 2 >"$work/q.out" 2>"$work/q.time" ||
        { cat "$work/q.out" "$work/q.time" >&2; exit 1; }
      echo "| $label | ${QUANT_LEN:-512} | $(size_mib "$work/m1b.q8_0.gguf") | $f32 | $(rss "$work/q.time") | $l0 |"
    done
    ;;
  *) echo "bench_bigw: unknown section '$section'" >&2; exit 2 ;;
  esac
done
