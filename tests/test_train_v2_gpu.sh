#!/usr/bin/env bash
# lab/train_v2_gpu.sh, the script that trained the v2 probes inside one lent GPU
# call, run on the CPU with a tiny budget: each variant gets a step count from its calibration
# (at least 500, at most the planned count), a run the budget cuts is saved and its train_log.json
# says so (steps < planned, --time-limit in the command), a variant whose calibration fails is
# reported and the others go on, and PACK holds one tarball per family without the .bin copy.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
lab=$src/lab
text=$CTXPATCH_FIXTURES/third_party/text/tinystories_val_1000_eot.txt
[ -f "$text" ] || { echo "SKIP: $text is missing (the TinyStories fixture)"; exit 77; }
"$py" -c "import torch" 2>/dev/null || { echo "SKIP: $py has no torch (Debian python3-torch)"; exit 77; }
export FIXTURES=$CTXPATCH_FIXTURES PYTHON=$py CAL=4
cat >"$work/variants.txt" <<'EOF'
alibi-tiny alibi-probe 600 --v2 --batch 4
rope-bad rope-probe 600 --v2 --size 16,1,3,32
EOF
check bash "$lab/train_v2_gpu.sh" "$work/out" 3 0 "$work/variants.txt" >"$work/log" 2>&1 || cat "$work/log"
PACK=$work/pack
grep -q '^alibi-tiny alibi-probe 500 ' "$work/out/plan.txt" && ok || bad "plan: $(cat "$work/out/plan.txt")"
grep -q '^rope-bad calibration failed' "$work/out/plan.txt" && ok || bad "a failed calibration is not reported"
[ ! -d "$work/out/rope-bad" ] && ok || bad "the failed variant was trained"
"$py" - "$work/out/alibi-tiny/train_log.json" <<'EOF' && ok || bad "train_log of the cut run"
import json, sys
t = json.load(open(sys.argv[1]))
print("steps %d of %d" % (t["steps"], t["steps_planned"]))
sys.exit(0 if t["steps_planned"] == 500 and 0 < t["steps"] < 500 and "--time-limit 3" in t["command"]
         and "--stop-after %d" % t["steps"] in t["replay"] else 1)
EOF
# the pack, from the same outputs (the script packs after training and at the end)
head -1 "$work/variants.txt" >"$work/one.txt"
PACK=$PACK bash "$lab/train_v2_gpu.sh" "$work/out2" 1 0 "$work/one.txt" >"$work/log2" 2>&1
check test -s "$PACK/alibi.tgz"
check test -s "$PACK/logs.tgz"
tar -tzf "$PACK/alibi.tgz" >"$work/list" 2>/dev/null
grep -q '^alibi-tiny/model.safetensors$' "$work/list" && ok || bad "alibi.tgz lacks the weights: $(cat "$work/list")"
grep -q '\.bin$' "$work/list" && bad "alibi.tgz holds the .bin copy" || ok
finish
