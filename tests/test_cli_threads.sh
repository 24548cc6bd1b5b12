#!/usr/bin/env bash
# Default thread counts follow the CPUs the process may use (issue 33, item 17): the affinity
# mask (taskset, a cgroup cpuset, Slurm's binding) and SLURM_CPUS_PER_TASK when smaller, not the
# machine's cores; `batch --threads T` overrides the recipe. Observed through the thread count a
# certificate records (run.threads), so nothing here reads a clock.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

model=$src/examples/probe-models/rope-probe
[ -f "$model/model.safetensors" ] || { echo "SKIP: $model is absent"; exit 77; }
command -v taskset >/dev/null || { echo "SKIP: taskset (util-linux) is absent"; exit 77; }
cpus=$(nproc) # the affinity mask's CPUs, as the default should count them
vopts="--probe passkey --lengths 256 --depths 0:1:2 --samples 1"
threads() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['run']['threads'])" "$1"; }

# certify NAME [ENV...] -- [PREFIX...]: verify with the default thread count, print run.threads.
certify() {
  local name=$1
  shift
  env "$@" "$bin" verify "$model" $vopts --certificate "$work/$name.json" >"$work/$name.log" 2>&1 \
    || { echo "verify failed:" >&2; cat "$work/$name.log" >&2; return 1; }
  threads "$work/$name.json"
}
t=$(certify plain) && [ "$t" = "$cpus" ] && ok || bad "default: run.threads '$t', expected nproc $cpus"
t=$(certify slurm1 SLURM_CPUS_PER_TASK=1) && [ "$t" = 1 ] && ok || bad "SLURM_CPUS_PER_TASK=1: run.threads '$t'"
t=$(certify slurm_big SLURM_CPUS_PER_TASK=4096) && [ "$t" = "$cpus" ] && ok \
  || bad "SLURM_CPUS_PER_TASK above the mask must not raise it: run.threads '$t'"
t=$(certify slurm_junk SLURM_CPUS_PER_TASK=2x) && [ "$t" = "$cpus" ] && ok || bad "a malformed SLURM_CPUS_PER_TASK is ignored: '$t'"
if [ "$cpus" -ge 2 ]; then
  taskset -c 0 "$bin" verify "$model" $vopts --certificate "$work/mask.json" >"$work/mask.log" 2>&1 \
    && [ "$(threads "$work/mask.json")" = 1 ] && ok || { bad "taskset -c 0: run.threads, expected 1"; cat "$work/mask.log"; }
else
  echo "note: one CPU: the affinity-mask case cannot differ from the default"
fi

# batch: --threads T reaches every child; without it, SLURM_CPUS_PER_TASK bounds the split.
cat >"$work/recipe.json" <<EOF
{
  "recipe_version": 1,
  "inputs": ["$model"],
  "methods": [{"name": "t09", "method": "temperature", "options": {"tau": 0.9}}],
  "target_lengths": [512],
  "verify": {"probes": "passkey", "lengths": [256], "depths": "0:1:2", "samples": 1, "accept_no_gain": true,
             "accept_underpowered": true},
  "output": {"dir": "out", "name": "{input}-{method}"}
}
EOF
cert=$work/out/rope-probe-t09/certificate.json
(cd "$work" && "$bin" batch recipe.json --threads 1 >"$work/b1.log" 2>&1) && [ "$(threads "$cert")" = 1 ] && ok \
  || { bad "batch --threads 1"; cat "$work/b1.log"; }
rm -rf "$work/out"
(cd "$work" && SLURM_CPUS_PER_TASK=1 "$bin" batch recipe.json >"$work/b2.log" 2>&1) && [ "$(threads "$cert")" = 1 ] && ok \
  || { bad "batch under SLURM_CPUS_PER_TASK=1"; cat "$work/b2.log"; }
"$bin" batch "$work/recipe.json" --threads 0 2>"$work/b3.err"; [ $? -eq 125 ] && ok || bad "batch --threads 0: usage error"
finish
