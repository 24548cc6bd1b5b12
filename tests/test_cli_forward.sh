#!/usr/bin/env bash
# ctxpatch forward end to end on the engine goldens (PyTorch reference, tests/goldens/engine).
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
g=$src/tests/goldens/engine
[ -f "$g/MANIFEST.json" ] || { echo "SKIP: $g/MANIFEST.json is absent"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
check() { if "$@"; then ok; else bad "$*"; fi; }
chk=$src/tests/cli_forward_check.py

"$bin" forward --help | grep >/dev/null -- "--decoder-ids" && ok || bad "forward --help"

# decoder-only with a rule file, logits and stats
c=$g/cases/llama__combo.safetensors
ids=$("$py" "$chk" ids "$c" input_ids)
echo '{"temperature": 0.9, "lambda_mask": {"n_global": 2, "n_local": 8}, "top_k": {"k": 3, "rows": "all"}}' >"$work/rule.json"
check "$bin" forward "$g/models/llama" --ids "$ids" --rule "$work/rule.json" --threads 2 \
  --out "$work/l.bin" --stats "$work/l.json"
check "$py" "$chk" logits "$c" "$work/l.bin"
check "$py" "$chk" stats "$c" "$work/l.json"

# T5 with decoder ids
c=$g/cases/t5_gated__temp_all.safetensors
echo '{"temperature": 0.8, "temperature_scope": "all"}' >"$work/t5.json"
check "$bin" forward "$g/models/t5_gated" --ids "$("$py" "$chk" ids "$c" input_ids)" \
  --decoder-ids "$("$py" "$chk" ids "$c" decoder_input_ids)" --rule "$work/t5.json" --out "$work/t.bin" \
  --stats "$work/t.json"
check "$py" "$chk" logits "$c" "$work/t.bin"
check "$py" "$chk" stats "$c" "$work/t.json"

# greedy generation (this model folder holds a PyTorch zip checkpoint)
c=$g/cases/gpt_neox__gen_identity.safetensors
gen=$("$bin" forward "$g/models/gpt_neox" --ids "$("$py" "$chk" ids "$c" input_ids)" --generate 8) && ok || bad "generate"
check "$py" "$chk" generated "$c" "$gen"
# --step-logits: the logits each token was chosen from; their argmax is the PyTorch golden's
# continuation, and the first row is the last row of the prompt's one-pass logits
p=$("$py" "$chk" ids "$c" input_ids)
"$bin" forward "$g/models/gpt_neox" --ids "$p" --generate 8 --step-logits "$work/steps.bin" >/dev/null &&
  "$bin" forward "$g/models/gpt_neox" --ids "$p" --out "$work/prompt.bin" && "$py" - "$work/steps.bin" "$work/prompt.bin" "$gen" <<'PYEOF' && ok || bad "--step-logits"
import sys
import numpy as np
steps, prompt = np.fromfile(sys.argv[1], "<f4"), np.fromfile(sys.argv[2], "<f4")
gen = [int(t) for t in sys.argv[3].split(",")]
steps = steps.reshape(len(gen), -1)
assert list(steps.argmax(axis=1)) == gen, (list(steps.argmax(axis=1)), gen)
last = prompt.reshape(-1, steps.shape[1])[-1]
assert np.abs(steps[0] - last).max() <= 1e-5 * np.abs(last).max(), np.abs(steps[0] - last).max()
PYEOF
"$bin" forward "$g/models/gpt_neox" --ids 1,2 --out "$work/x.bin" --step-logits "$work/s2.bin" 2>/dev/null
[ $? -eq 2 ] && [ ! -e "$work/s2.bin" ] && ok || bad "--step-logits without --generate is a usage error"

# temperature_schedule from a rule file on every family (tau(T) per row; generation with a cache)
n_sched=0
for c in "$g"/cases/*__*sched*.safetensors; do
  name=$(basename "$c" .safetensors); model=${name%%__*}
  "$py" "$chk" rule "$c" >"$work/sched.json"
  args=(--ids "$("$py" "$chk" ids "$c" input_ids)" --rule "$work/sched.json" --threads 2)
  case $model in t5*) args+=(--decoder-ids "$("$py" "$chk" ids "$c" decoder_input_ids)") ;; esac
  if [[ $name == *__gen_* ]]; then
    gen=$("$bin" forward "$g/models/$model" "${args[@]}" --generate 8) && ok || bad "$name: generate"
    check "$py" "$chk" generated "$c" "$gen"
  else
    check "$bin" forward "$g/models/$model" "${args[@]}" --out "$work/s.bin" --stats "$work/s.json"
    check "$py" "$chk" logits "$c" "$work/s.bin"
    check "$py" "$chk" stats "$c" "$work/s.json"
  fi
  n_sched=$((n_sched+1))
done
[ "$n_sched" -ge 14 ] && ok || bad "only $n_sched schedule cases"

# refusals: one line, exit 1, nothing written
for bad_ids in "1,2,96" "" "1,,2" "1,-2" "x"; do
  "$bin" forward "$g/models/llama" --ids "$bad_ids" --out "$work/bad.bin" 2>"$work/err"; rc=$?
  [ "$rc" -eq 1 ] && ok || bad "ids '$bad_ids': exit $rc"
  grep -q "CP_EMODEL_INPUT" "$work/err" && [ "$(wc -l <"$work/err")" -eq 1 ] && ok || bad "ids '$bad_ids': $(cat "$work/err")"
  [ ! -e "$work/bad.bin" ] && ok || bad "ids '$bad_ids': output written"
done
"$bin" forward "$g/models/llama" --ids 1,2 2>/dev/null; [ $? -eq 2 ] && ok || bad "missing --out is a usage error"
echo '{"temperature": [1.0, 0.5]}' >"$work/badrule.json"
"$bin" forward "$g/models/llama" --ids 1,2 --rule "$work/badrule.json" --out "$work/bad.bin" 2>"$work/err"
grep -q CP_ERULE_MODEL "$work/err" && [ ! -e "$work/bad.bin" ] && ok || bad "rule/model mismatch: $(cat "$work/err")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
