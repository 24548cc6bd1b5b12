#!/bin/bash
# Trains the v2 probe variants side by side on one lent GPU inside one bounded call, then
# evaluates each (issue 18). A lease is short and cannot be retried, so the script sizes every
# run to the time it has: a short calibration (all variants at once, full-length prompts, as
# contended as the real runs) gives each variant's seconds per step, and each run gets the most
# steps (in 500s, up to its planned count) that fit FIT (0.85) of the training budget; train.py records the
# exact command, so a run is replayable on any machine.
#
#   lab/train_v2_gpu.sh OUTDIR [TRAIN_S] [EVAL_S] [VARIANTS]
#
# VARIANTS: a file of lines `name model planned_steps train.py options...` (default below).
# Writes OUTDIR/<name>/ (the checkpoint, train.out, eval-<L>.json) and OUTDIR/plan.txt; with
# PACK=DIR, also DIR/<family>.tgz (checkpoints without the .bin copy) and DIR/logs.tgz, after the
# training and again at the end, so a call cut during the evaluation still returns the models.
# FIXTURES must point at the shared fixtures (the text task reads TinyStories there).
set -u
out=${1:?usage: train_v2_gpu.sh OUTDIR [TRAIN_S] [EVAL_S] [VARIANTS]}
train_s=${2:-330}
eval_s=${3:-120}
variants=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
export CTXPATCH_PYTHON=${PYTHON:-python3}
py=$here/../scripts/py   # $PYTHON with python/ (ctxpatch_ref) on its path
mkdir -p "$out"
if [ -z "$variants" ]; then
  variants=$out/variants.txt
  cat >"$variants" <<'EOF'
rope-v2 rope-probe 6000 --v2
rope-b64 rope-probe 10000 --v2 --batch 64
rope-big rope-probe 12000 --v2 --batch 64 --size 128,4,4,512
alibi-v2 alibi-probe 6000 --v2
alibi-b64 alibi-probe 10000 --v2 --batch 64
alibi-big alibi-probe 12000 --v2 --batch 64 --size 128,4,4,512
t5-v2 t5-probe 6000 --v2 --mix 0.4,0.5,0.1
t5-b64 t5-probe 10000 --v2 --mix 0.4,0.5,0.1 --batch 64
fire-b64 fire-probe 10000 --v2 --fire-paper --batch 64
fire-big fire-probe 12000 --v2 --fire-paper --batch 64 --size 128,4,4,512
EOF
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1
cal=${CAL:-40}

# 1. calibration: every variant at once, prompts at full length (no curriculum: the slowest steps)
while read -r name model planned opts; do
  [ -n "$name" ] || continue
  $py "$here/train.py" --model "$model" $opts --curriculum 0 --steps "$planned" --stop-after $cal \
    --out "$out/cal/$name" >"$out/cal-$name.out" 2>&1 &
done <"$variants"
wait
: >"$out/plan.txt"
while read -r name model planned opts; do
  [ -n "$name" ] || continue
  # seconds per step from the log lines "step 0 ... Xs" and "step cal-1 ... Ys" (0.1 s resolution:
  # a variant too fast to measure gets its planned steps)
  per=$(awk '/^step /{t[n++]=$NF+0} END{if(n>=2) printf "%.5f", (t[n-1]-t[0])/'$((cal - 1))'; else print "x"}' \
        "$out/cal-$name.out" | tr -d s)
  if [ "$per" = x ]; then
    echo "$name calibration failed: $(tail -1 "$out/cal-$name.out")" | tee -a "$out/plan.txt"
    continue
  fi
  steps=$(awk -v b="$train_s" -v p="$per" -v m="$planned" -v f="${FIT:-0.85}" \
          'BEGIN{s=(p>0)?int(f*b/p/500)*500:m; if(s>m)s=m; if(s<500)s=500; print s}')
  echo "$name $model $steps $per $opts" | tee -a "$out/plan.txt"
done <"$variants"

# 2. training, side by side; --time-limit only as a guard (a cut run records its steps)
while read -r name model steps per opts; do
  case $name in *calibration*) continue;; esac
  $py "$here/train.py" --model "$model" $opts --steps "$steps" --time-limit "$train_s" \
    --out "$out/$name" >"$out/$name.train.out" 2>&1 &
done < <(grep -v 'calibration failed' "$out/plan.txt")
wait

pack() {
  [ -n "${PACK:-}" ] || return 0
  mkdir -p "$PACK"
  for fam in rope alibi t5 fire; do
    ls -d "$out/$fam"-*/ >/dev/null 2>&1 || continue
    tar -C "$out" --exclude='*.bin' -czf "$PACK/$fam.tgz.tmp" $(cd "$out" && ls -d "$fam"-*/) &&
      mv "$PACK/$fam.tgz.tmp" "$PACK/$fam.tgz"
  done
  tar -C "$out" -czf "$PACK/logs.tgz.tmp" plan.txt $(cd "$out" && ls *.out) && mv "$PACK/logs.tgz.tmp" "$PACK/logs.tgz"
}
pack

# 3. evaluation: each length its own file, so a cut leaves the lengths done
deadline=$(( $(date +%s) + eval_s ))
while read -r name model steps per opts; do
  [ -f "$out/$name/model.safetensors" ] || continue
  (
    for L in 256 512 1024 2048; do
      left=$(( deadline - $(date +%s) ))
      [ $left -gt 5 ] || break
      timeout $left $py "$here/evaluate.py" --model "$model" --dir "$out/$name" --n 50 --lengths $L \
        --threads 1 --out "$out/$name/eval-$L.json" >>"$out/$name.eval.out" 2>&1 || break
    done
  ) &
done < <(grep -v 'calibration failed' "$out/plan.txt")
wait
pack
echo done
