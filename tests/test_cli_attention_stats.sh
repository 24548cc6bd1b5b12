#!/usr/bin/env bash
# inspect --attention-stats: the dispersed-attention effect on the golden T5 model, JSON shape,
# agreement with `forward --stats`, and refusals.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
models=$src/tests/goldens/engine/models
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }

"$bin" inspect "$models/t5_relu" --attention-stats --lengths 24,96,384 --json >"$work/t5.json" && ok || bad "t5 stats"
"$py" - "$work/t5.json" <<'PY' && ok || bad "t5 JSON checks"
import json, sys
d = json.load(open(sys.argv[1]))
pts = d["lengths"]
assert [p["length"] for p in pts] == [24, 96, 384]
enc = [p["mean"]["encoder_self"]["pmax"] for p in pts]
ent = [p["mean"]["encoder_self"]["entropy"] for p in pts]
assert enc[0] > enc[1] > enc[2], enc          # attention disperses as the input grows
assert ent[0] < ent[1] < ent[2], ent
for p in pts:
    kinds = [m["kind"] for m in p["modules"]]
    assert kinds == ["encoder_self"] * 2 + ["decoder_self"] * 2 + ["cross"] * 2, kinds
    assert all(len(m["pmax"]) == 4 and 0 < min(m["pmax"]) <= 1 for m in p["modules"])
PY

# Same numbers as `forward --stats` on the same ids
"$py" -c "print(','.join(str((i*7+3)%96) for i in range(40)))" >"$work/ids"
"$bin" inspect "$models/llama" --attention-stats --lengths 40 --ids @"$work/ids" --json >"$work/a.json" && ok || bad "llama stats"
"$bin" forward "$models/llama" --ids @"$work/ids" --out "$work/logits" --stats "$work/b.json" && ok || bad "forward --stats"
"$py" - "$work/a.json" "$work/b.json" <<'PY' && ok || bad "inspect and forward statistics differ"
import json, sys
a = json.load(open(sys.argv[1]))["lengths"][0]["modules"]
b = json.load(open(sys.argv[2]))["modules"]
assert len(a) == len(b)
for x, y in zip(a, b):
    assert all(abs(p - q) < 1e-6 for p, q in zip(x["pmax"], y["pmax"])), (x, y)
PY

"$bin" inspect "$models/t5_relu" --attention-stats --lengths 24,0 2>"$work/err"; [ $? = 2 ] && ok || bad "length 0 accepted"
"$bin" inspect "$models/t5_relu" --lengths 24 2>"$work/err"; [ $? = 2 ] && ok || bad "--lengths without --attention-stats"
echo '{"alibi_scale": {"mode": "static", "factor": 2}}' >"$work/rule.json"
"$bin" inspect "$models/t5_relu" --attention-stats --lengths 24 --rule "$work/rule.json" 2>"$work/err"
[ $? = 1 ] && grep -q CP_ERULE_MODEL "$work/err" && ok || bad "alibi rule on T5 not refused: $(cat "$work/err")"
"$bin" inspect "$models/bloom" --attention-stats --lengths 24 --rule "$work/rule.json" >/dev/null && ok || bad "alibi rule on bloom"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
