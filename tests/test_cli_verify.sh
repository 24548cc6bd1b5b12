#!/usr/bin/env bash
# ctxpatch verify: accuracy at the training length, deterministic certificates, the report,
# thresholds and refusals (one line, nonzero exit, nothing written).
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
refused() { # refused CODE CMD...: exit 1, one line naming CODE, no output files
  local code=$1; shift
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [ $rc = 1 ] && grep -q "$code" "$work/err" && [ "$(wc -l <"$work/err")" = 1 ] && [ ! -e "$work/never.json" ]; then ok
  else bad "expected $code (rc=$rc): $(cat "$work/err")"; fi
}

model=$src/examples/probe-models/rope-probe
tiny=$src/tests/goldens/engine/models/llama
if [ ! -f "$model/model.safetensors" ]; then echo "SKIP: $model is absent"; exit 77; fi

# The trained model retrieves at its training length; the certificate is deterministic.
common=(--probe passkey --lengths 256 --depths 0:1:5 --samples 4 --seed 3 --threads 2)
"$bin" verify "$model" "${common[@]}" --certificate "$work/c1.json" --report "$work/r.html" >"$work/table" \
  && ok || bad "verify at 256: $(cat "$work/table")"
"$bin" verify "$model" "${common[@]}" --certificate "$work/c2.json" >/dev/null && ok || bad "second verify"
"$py" - "$work/c1.json" "$work/c2.json" <<'PY' && ok || bad "certificate checks"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for d in (a, b):
    d.pop("run")
assert a == b, "certificates differ outside the run block"
acc = a["results"]["patched"]["passkey"][0]["accuracy"]
# rope-probe retrieves every passkey of its evaluation set at 256 (its MODEL_CARD, PyTorch);
# two misses in these 20 samples are allowed, an untrained or broken engine scores ~0.
assert acc >= 0.9, f"passkey accuracy at the training length is {acc}"
assert a["probes"]["depths"] == [0, 0.25, 0.5, 0.75, 1]
assert [f["path"] for f in a["model"]["files"]] == sorted(f["path"] for f in a["model"]["files"])
assert a["verdict"]["result"] == "none"  # no criterion given: measured, not passed
PY
grep -q 'class="hm-cell"' "$work/r.html" && ok || bad "report has no heatmap"

# Shared prefixes change no result (docs/certificate.md): the same certificate outside the run
# block when every prompt runs alone, and run.tokens + run.tokens_reused is that run's count.
"$bin" verify "$model" "${common[@]}" --no-shared-prefix --certificate "$work/c3.json" >/dev/null && ok \
  || bad "verify --no-shared-prefix"
"$py" - "$work/c1.json" "$work/c3.json" <<'PY' && ok || bad "shared vs unshared certificates"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.pop("run"), b.pop("run")
assert a == b, "results differ with and without shared prefixes"
assert rb["tokens_reused"] == 0 and ra["tokens_reused"] > 0, (ra, rb)
assert ra["tokens"] + ra["tokens_reused"] == rb["tokens"], (ra, rb)
PY

# A threshold that fails: exit 1, verdict fail recorded with its reason.
echo '{"temperature": 0.05}' >"$work/harmful.json"
"$bin" verify "$model" --probe passkey --lengths 256 --depths 0.5 --samples 2 --rule "$work/harmful.json" \
  --min-accuracy 0.9 --certificate "$work/fail.json" >/dev/null; [ $? = 1 ] && ok || bad "harmful rule passed"
grep -q '"fail"' "$work/fail.json" && ok || bad "verdict fail not recorded"

# The verdicts beyond pass and fail (docs/certificate.md, "Verdicts"): the model beside itself (no
# rule) at 288 tokens, past its training length 256, on 6 prompts, which detect only a drop of
# 0.731: "inconclusive"; with --accept-underpowered nothing is gained: "no effect"; with
# --accept-no-gain too, the old "pass". (40 prompts and the no-effect line: tests/test_stats.c.)
cmp=(--probe passkey --lengths 288 --baseline --no-regression-at 288 --depths 0:1:6 --samples 1 --seed 3 --threads 2
  --no-stats)
"$bin" verify "$model" "${cmp[@]}" --certificate "$work/in.json" --report "$work/in.html" >"$work/in.txt"
[ $? = 1 ] && grep -q "^verdict: inconclusive" "$work/in.txt" && grep -q "0.731 with 80% power" "$work/in.txt" && ok \
  || bad "6 prompts: $(tail -3 "$work/in.txt")"
grep -q '<section class="verdict weak"><span class="big">INCONCLUSIVE</span>not certified: too few prompts' "$work/in.html" \
  && ok || bad "the report does not show the inconclusive verdict"
"$bin" verify "$model" "${cmp[@]}" --accept-underpowered --certificate "$work/ne.json" >"$work/ne.txt"
[ $? = 1 ] && grep -q "^verdict: no effect" "$work/ne.txt" && ok || bad "no-op: $(tail -3 "$work/ne.txt")"
"$bin" verify "$model" "${cmp[@]}" --accept-underpowered --accept-no-gain --certificate "$work/old.json" >"$work/old.txt" \
  && grep -q "^verdict: pass" "$work/old.txt" && ok || bad "both options: $(tail -3 "$work/old.txt")"
"$py" - "$work/in.json" "$work/ne.json" "$work/old.json" <<'PY' && ok || bad "verdict certificates"
import json, sys
inc, ne, old = (json.load(open(p)) for p in sys.argv[1:])
assert inc["verdict"]["result"] == "inconclusive" and inc["statistics"]["detectable_drop"] == 0.731351, inc["statistics"]
assert [r.split(":")[0] for r in inc["verdict"]["reasons"]] == ["inconclusive", "no effect"], inc["verdict"]
assert inc["thresholds"]["require_gain"] is True and inc["thresholds"]["max_detectable_drop"] == 0.2, inc["thresholds"]
assert ne["verdict"]["result"] == "no effect" and len(ne["verdict"]["reasons"]) == 1, ne["verdict"]
assert ne["thresholds"]["require_gain"] is True and ne["thresholds"]["max_detectable_drop"] is None, ne["thresholds"]
g = ne["statistics"]["gain"]
assert g["lengths"] == [288] and g["lost"] == 0 and g["gained"] == 0 and g["p_value"] == 1 and g["found"] is False, g
assert old["verdict"] == {"result": "pass", "reasons": []}, old["verdict"]
assert old["thresholds"]["require_gain"] is False and old["thresholds"]["max_detectable_drop"] is None
PY

# Refusals
refused CP_EVERIFY_PROBE "$bin" verify "$model" --probe passkeys --lengths 256 --certificate "$work/never.json"
refused CP_EVERIFY_LENGTH "$bin" verify "$model" --probe passkey --lengths 40 --certificate "$work/never.json"
refused CP_ETOK_MISSING "$bin" verify "$tiny" --probe passkey --lengths 256 --certificate "$work/never.json"
printf '' >"$work/empty.json"
refused CP_ERULE_JSON "$bin" verify "$model" --probe passkey --lengths 256 --rule "$work/empty.json" --certificate "$work/never.json"
echo '{"lambda_mask": {"n_local": 0, "n_global": 1}}' >"$work/badrule.json"
refused CP_ERULE_VALUE "$bin" verify "$model" --probe passkey --lengths 256 --rule "$work/badrule.json" --certificate "$work/never.json"
refused CP_EVERIFY_THRESHOLD "$bin" verify "$model" --probe passkey --lengths 256 --no-regression-at 256 --certificate "$work/never.json"
"$bin" verify "$model" --probe passkey 2>/dev/null; [ $? = 2 ] && ok || bad "missing --lengths is not a usage error"
"$bin" verify "$model" --probe passkey --lengths 256 --device cuda 2>/dev/null; [ $? = 2 ] && ok || bad "--device cuda accepted"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
