#!/usr/bin/env bash
# The device kit's run (scripts/device-check.sh, issue 32) in its dry-run mode: the same steps with
# --device cpu, nothing failed for want of a GPU, the report in the shape a device run writes;
# and its time box: with a budget too small for the later steps they are recorded as skipped
# and the report still comes back.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

# The kit packs and runs the normal build; a sanitizer build is not what a device gets.
"$bin" --version | grep 'sanitize=on' >/dev/null && { echo "SKIP: the device kit is for the normal build, not a sanitizer one"; exit 77; }

"$py" -c 'import numpy' 2>/dev/null || { echo "SKIP: numpy is absent for $py"; exit 77; }
build=$(dirname "$bin")
OUT=$work/full bash "$src/scripts/device-check.sh" --dry-run --bin "$build" >"$work/full.log" 2>&1 \
  || { cat "$work/full.log"; bad "device-check.sh --dry-run failed"; }
"$py" - "$work/full/device-report.json" <<'PY' && ok || bad "the dry-run report"
import json, sys
r = json.load(open(sys.argv[1]))
names = [s["step"] for s in r["steps"]]
assert names == ["environment", "cuda_consistency", "engine_goldens", "verify_passkey", "transformers",
                 "attention_bench", "big_model"], names
status = {s["step"]: s["status"] for s in r["steps"]}
assert r["dry_run"] is True and r["failed"] == 0, status
assert status["environment"] == "pass" and status["engine_goldens"] == "pass" and status["verify_passkey"] == "pass", status
assert status["attention_bench"] == "skipped", status
g = next(s for s in r["steps"] if s["step"] == "engine_goldens")["detail"]
assert g["cases"] >= 165 and g["failed"] == 0 and g["worst_rel_err"]["cpu"] <= 1e-4, g
v = next(s for s in r["steps"] if s["step"] == "verify_passkey")["detail"]["rows"]
assert [x["model"] for x in v] == ["rope", "alibi", "fire", "t5"] and all(x["same_at_cpu_lengths"] for x in v), v
assert all(x["device"] == "cpu" for x in v), v
b = next(s for s in r["steps"] if s["step"] == "big_model")
if b["status"] == "pass":  # skipped only without the fixtures' Llama 3.2 tokenizer
    rows = b["detail"]["rows"]
    assert b["detail"]["preset"] == "tiny-llama3" and [x["rule"] for x in rows] == ["none", "lambda"], b
    assert all(x["exit"] == 0 and x["tokens"] > 200 and x["device"] == "cpu" for x in rows), rows
else:
    assert b["status"] == "skipped" and "tokenizer" in b["detail"]["reason"], b
PY
check test -s "$work/full/device-check.log"
"$py" "$src/scripts/device-report.py" "$work/full/device-report.json" >"$work/table.md" || bad "device-report.py"
check grep -q '| engine_goldens | pass |' "$work/table.md"

# The time box: 40 s leaves room for the environment step only; the rest are skipped, not run.
OUT=$work/short bash "$src/scripts/device-check.sh" --dry-run --bin "$build" --budget 40 >"$work/short.log" 2>&1
"$py" - "$work/short/device-report.json" <<'PY' && ok || bad "the time-boxed report"
import json, sys
r = json.load(open(sys.argv[1]))
status = {s["step"]: s["status"] for s in r["steps"]}
assert status["environment"] == "pass", status
assert all(status[k] == "skipped" for k in ["cuda_consistency", "engine_goldens", "verify_passkey", "transformers",
                                            "attention_bench", "big_model"]), status
assert "left" in next(s for s in r["steps"] if s["step"] == "engine_goldens")["detail"]["reason"]
PY
finish
