#!/usr/bin/env bash
# The device kit's run (issue 32; docs/cuda.md, "The device kit"). On a lent GPU machine, in one
# call, after scripts/device-pack.sh has packed device/ here:
#   device run: command "bash scripts/device-check.sh", carry ["device"], timeout_s 600
# Writes $OUT/device-report.json (scripts/device-report.py turns it into docs/cuda.md's table),
# $OUT/device-check.log, and what the steps bring back ($OUT/hf-goldens.npz, bench JSON). The run
# is time-boxed: it checks its own clock, gives each step at most what is left, and records a
# step that no longer fits as skipped, so that the report always comes back.
#
#   --dry-run     the same steps with --device cpu and short lengths (CI: tests/test_device_kit.sh)
#   --budget S    seconds for the whole run (default 540: a 600 s call with room to write back)
#   --bin DIR     take ctxpatch, tests/test_cuda_consistency and bench_attention_cuda from a build
#                 folder instead of the bundle
# Steps, in order of value: 0 environment; 1 the CUDA consistency test (CPU kernel vs device
# kernel, every rule); 2 the engine goldens on both devices, then verify passkey on the probe
# models (device at 4K/16K/32K, CPU at 4K); 3 Hugging Face transformers against ctxpatch on the
# tiny models and on ctxpatch artifacts; 4 the attention benchmark against SDPA/FlexAttention;
# 5 a Llama-3.2-1B-shaped synthetic model made on the spot, verify at 16K-128K (dry run: a tiny one).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dry=0
budget=540
bindir=""
while [ $# -gt 0 ]; do
  case $1 in
  --dry-run) dry=1; shift ;;
  --budget) budget=$2; shift 2 ;;
  --bin) bindir=$2; shift 2 ;;
  *) echo "device-check: unknown option '$1'" >&2; exit 2 ;;
  esac
done
start=$SECONDS
OUT=${OUT:-$root/device/out}
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$OUT/device-check.log
: >"$log"
steps=$tmp/steps.jsonl
: >"$steps"
py=python3 # the device's has numpy, torch and transformers; Debian's has numpy here
"$py" -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
say() { echo "device-check: $*" | tee -a "$log" >&2; }
left() { echo $((budget - (SECONDS - start))); }

# record NAME STATUS SECONDS [DETAIL_JSON_FILE]: one line of the report's "steps".
record() {
  "$py" - "$1" "$2" "$3" "${4:-}" >>"$steps" <<'EOF'
import json, sys
name, status, secs, detail = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
d = None
if detail:
    try:
        d = json.load(open(detail))
    except Exception:
        d = {"output_tail": open(detail, errors="replace").read()[-2000:]}
print(json.dumps({"step": name, "status": status, "seconds": secs, "detail": d}))
EOF
  say "$1: $2 (${3} s)"
}

# step NAME NEED_SECONDS CMD...: runs CMD with what is left of the budget (less 20 s to write the
# report), its stdout as the step's detail; exit 0 pass, 77 skipped, 124 out of time, else fail.
step() {
  local name=$1 need=$2 t0=$SECONDS rc
  shift 2
  if [ "$(left)" -lt $((need + 20)) ]; then
    echo "{\"reason\": \"needs ~${need} s, $(left) s left\"}" >"$tmp/$name.json"
    record "$name" skipped 0 "$tmp/$name.json"
    return
  fi
  # timeout runs programs, not shell functions: a function step runs in a child bash that gets
  # its definition (the variables it reads are exported below; step_seconds is its time box).
  export step_seconds=$(($(left) - 20))
  if declare -F "$1" >/dev/null; then
    timeout --kill-after=5 $(($(left) - 20)) bash -c "$(declare -f "$1"); $1" >"$tmp/$name.json" 2>>"$log"
  else
    timeout --kill-after=5 $(($(left) - 20)) "$@" >"$tmp/$name.json" 2>>"$log"
  fi
  rc=$?
  case $rc in
  0) record "$name" pass $((SECONDS - t0)) "$tmp/$name.json" ;;
  77) record "$name" skipped $((SECONDS - t0)) "$tmp/$name.json" ;;
  124 | 137) record "$name" out-of-time $((SECONDS - t0)) "$tmp/$name.json" ;;
  *) record "$name" fail $((SECONDS - t0)) "$tmp/$name.json" ;;
  esac
}

write_report() {
  "$py" - "$steps" "$OUT/device-report.json" "$dry" "$budget" $((SECONDS - start)) \
    "$(git rev-parse --short HEAD 2>/dev/null || cat device/pack.json 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin)["commit"])' 2>/dev/null || echo unknown)" <<'EOF'
import json, os, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
report = {"kit_version": 1, "commit": sys.argv[6], "dry_run": sys.argv[3] == "1", "budget_s": int(sys.argv[4]),
          "elapsed_s": int(sys.argv[5]), "steps": steps,
          "passed": sum(s["status"] == "pass" for s in steps), "failed": sum(s["status"] == "fail" for s in steps)}
tmp = sys.argv[2] + ".tmp"
with open(tmp, "w") as f:
    json.dump(report, f, indent=1)
os.replace(tmp, sys.argv[2])
EOF
}
trap 'write_report; rm -rf "$tmp"' EXIT

# ---- the binaries: the bundle (unpacked once), or a build folder
if [ -n "$bindir" ]; then
  ctx=$bindir/ctxpatch cons=$bindir/tests/test_cuda_consistency bench=$bindir/bench_attention_cuda
else
  kit=$root/device/bundle
  if [ -f "$root/device/bundle.tar.xz" ] && [ ! -x "$kit/bin/ctxpatch" ]; then
    kit=/tmp/ctxpatch-kit/bundle
    [ -x "$kit/bin/ctxpatch" ] || { mkdir -p /tmp/ctxpatch-kit && tar -C /tmp/ctxpatch-kit -xJf "$root/device/bundle.tar.xz"; }
  fi
  ctx=$kit/bin/ctxpatch cons=$kit/bin/test_cuda_consistency bench=$kit/bin/bench_attention_cuda
fi
[ -x "$ctx" ] || { say "no ctxpatch at $ctx: run scripts/device-pack.sh first (or give --bin)"; exit 2; }

# ---- CUDA's libraries from the image (the bundle leaves cuBLAS and the driver to it)
if [ "$dry" = 0 ]; then
  for d in $(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 /{print $NF}' | xargs -r -n1 dirname) \
    /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
    $("$py" -c 'import glob, os, nvidia; print(" ".join(sorted({os.path.dirname(p) for r in nvidia.__path__ for p in glob.glob(r + "/**/libcublas.so.13", recursive=True)})))' 2>/dev/null); do
    [ -e "$d/libcublas.so.13" ] && { export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; }
  done
fi
dev=cuda
[ "$dry" = 1 ] && dev=cpu
export CTXPATCH_SOURCE_DIR=$root
export ctx cons bench dev dry py tmp log OUT

# ---- 0. environment
env_json() {
  "$py" - "$ctx" "$dry" <<'EOF'
import json, platform, shutil, subprocess, sys
def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        return "unavailable: %s" % type(e).__name__
d = {"ctxpatch": run(sys.argv[1], "--version"), "kernel": platform.release(), "python": platform.python_version(),
     "libc": run("ldd", "--version").splitlines()[0] if shutil.which("ldd") else "?",
     "missing_libraries": [l.split()[0] for l in run("ldd", sys.argv[1]).splitlines() if "not found" in l]}
if shutil.which("nvidia-smi"):
    d["gpu"] = run("nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader")
elif sys.argv[2] == "0":
    d["gpu"] = "nvidia-smi not found"
print(json.dumps(d))
sys.exit(1 if d["missing_libraries"] else 0)
EOF
}
step environment 5 env_json

# ---- 1. the attention kernel on the device against the CPU kernel, every rule
consistency() {
  [ -x "$cons" ] || { echo '{"reason": "test_cuda_consistency not packed"}'; return 77; }
  "$cons" >"$tmp/cons.out" 2>&1
  local rc=$?
  "$py" -c 'import json,sys; t=open(sys.argv[1],errors="replace").read(); print(json.dumps({"exit": int(sys.argv[2]), "output_tail": t[-3000:]}))' "$tmp/cons.out" $rc
  return $rc
}
step cuda_consistency 30 consistency

# ---- 2. the engine goldens on both devices; verify passkey on the probe models
devices=cpu,$dev
[ "$dry" = 1 ] && devices=cpu
step engine_goldens 60 "$py" scripts/device/engine_goldens.py --bin "$ctx" --devices "$devices"

passkey() {
  local long=4096,16384,32768 short=4096 samples="--samples 2 --depths 0:1:5" m name rc=0
  [ "$dry" = 1 ] && long=256,512 short=256
  echo '{"rows": ['
  local sep=""
  for m in rope alibi fire t5; do
    name=examples/probe-models/$m-probe
    "$ctx" verify "$name" --probe passkey --lengths "$long" $samples --device "$dev" --json >"$tmp/v_$m.dev.json" 2>>"$log" || rc=1
    "$ctx" verify "$name" --probe passkey --lengths "$short" $samples --device cpu --json >"$tmp/v_$m.cpu.json" 2>>"$log" || rc=1
    "$py" - "$m" "$tmp/v_$m.dev.json" "$tmp/v_$m.cpu.json" "$sep" <<'EOF' || rc=1
import json, sys
m, a, b, sep = sys.argv[1:5]
def acc(path):
    try:
        c = json.load(open(path))
    except Exception as e:
        return None, {"error": "no certificate: %s" % type(e).__name__}
    rows = {str(r["length"]): {"accuracy": r["accuracy"], "correct_by_depth": r["correct_by_depth"]}
            for r in c.get("results", {}).get("patched", {}).get("passkey", [])}
    return c.get("run", {}).get("device"), rows
dd, da = acc(a)
cd, ca = acc(b)
same = bool(ca) and all(da.get(k) == v for k, v in ca.items())
print(sep + json.dumps({"model": m, "device": dd, "accuracy": da, "cpu_accuracy": ca, "same_at_cpu_lengths": same}))
sys.exit(0 if same else 1)
EOF
    sep=","
  done
  echo ']}'
  return $rc
}
step verify_passkey 120 passkey

# ---- 3. Hugging Face transformers itself against ctxpatch
hf() {
  local art=$tmp/artifacts names=() m
  mkdir -p "$art"
  for m in tests/goldens/engine/models/* examples/probe-models/*-probe; do
    case $m in *fire*) continue ;; esac # FIRE is ctxpatch's own family: transformers has none
    names+=("$(basename "$m")=$m")
  done
  "$ctx" patch examples/probe-models/rope-probe "$art/rope-pi" --method rope-pi --factor 2 --no-verify >>"$log" 2>&1 \
    && names+=("artifact-rope-pi=$art/rope-pi")
  "$ctx" patch examples/probe-models/rope-probe "$art/temperature" --method temperature --tau 0.8 --no-verify >>"$log" 2>&1 \
    && names+=("artifact-temperature=$art/temperature")
  "$py" scripts/device/hf_compare.py --bin "$ctx" --save "$OUT/hf-goldens.npz" "${names[@]}"
  local rc=$?
  [ -s "$OUT/hf-goldens.npz" ] || [ $rc -ne 0 ] || return 77 # skipped: no transformers here
  return $rc
}
step transformers 60 hf

# ---- 4. the attention benchmark (device only)
attention_bench() {
  [ "$dry" = 1 ] && { echo '{"reason": "needs a GPU"}'; return 77; }
  [ -x "$bench" ] || { echo '{"reason": "bench_attention_cuda not packed"}'; return 77; }
  "$py" bench/bench_attention_cuda.py --driver "$bench" --json "$OUT/bench-attention.json" >"$tmp/bench.md" 2>>"$log"
  local rc=$?
  "$py" -c 'import json,sys; print(json.dumps({"table": open(sys.argv[1]).read()[-6000:]}))' "$tmp/bench.md"
  return $rc
}
step attention_bench 120 attention_bench

# ---- 5. the 1B-shaped model (bench/make_llama_bf16.py llama3.2-1b, made here: 2.5 GB does not travel)
big_model() {
  local tok=$root/device/share/llama-3.2-tokenizer.json.gz preset=llama3.2-1b lens=16384,32768,65536,131072
  [ -f "$tok" ] || tok=$root/../shared/fixtures/tokenizers/modern/llama3/llama-3.2/tokenizer.json.gz
  [ -f "$tok" ] || { echo '{"reason": "no Llama 3.2 tokenizer.json.gz (scripts/device-pack.sh packs it)"}'; return 77; }
  [ "$dry" = 1 ] && preset=tiny-llama3 lens=256
  mkdir -p "$tmp/big"
  "$py" scripts/device/big_model.py --bin "$ctx" --tokenizer "$tok" --work "$tmp/big" --device "$dev" \
    --preset "$preset" --lengths "$lens" --deadline $((step_seconds - 10))
}
export root
step big_model 90 big_model
say "done in $((SECONDS - start)) s of $budget; report: $OUT/device-report.json"
