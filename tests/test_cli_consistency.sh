#!/usr/bin/env bash
# CLI consistency (issue 16): --json is one JSON document on stdout in every command; --probe and
# --verify are one option; numbers at a readable precision in tables and JSON; progress only on
# a terminal; patch --rule / --calibration-samples / --json; the default probe set (text and
# certificate); patch's table with intervals and the paired test; verify --baseline on a
# metadata artifact compares with the rule-free model (regression test: it compared the
# artifact with itself).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

m=$src/examples/probe-models/rope-probe
[ -f "$m/model.safetensors" ] || { echo "SKIP: $m is absent"; exit 77; }
small=(--lengths 256 --depths 0:1:2 --samples 3 --threads 2 --accept-no-gain --accept-underpowered)

# 1. --json everywhere: stdout alone parses as one JSON document.
is_json() { "$py" -c 'import json,sys; json.load(open(sys.argv[1]))' "$1"; }
json_cmd() { # NAME CMD...: stdout must be JSON, exit 0
  local name=$1; shift
  if "$@" >"$work/$name.json" 2>"$work/$name.err" && is_json "$work/$name.json"; then ok
  else bad "$name --json: not one JSON document on stdout"; head -c 400 "$work/$name.json" "$work/$name.err"; fi
}
json_cmd inspect "$bin" inspect "$m" --json
json_cmd stats "$bin" inspect "$m" --attention-stats --lengths 64,128 --threads 2 --json
json_cmd tokenize "$bin" tokenize "$m" --text "hello world" --json
json_cmd calibrate "$bin" calibrate "$m" --method pmax,log --lengths 512 --samples 1 --threads 2 --json
json_cmd convert "$bin" convert "$m" "$work/conv" --to safetensors --json
json_cmd verify "$bin" verify "$m" --probe passkey "${small[@]}" --json
json_cmd patch "$bin" patch "$m" "$work/p1" --method lm-infinite --n-local 256 --for ctxpatch --verify passkey "${small[@]}" --json
json_cmd check "$bin" check "$work/p1" --json
# verify --json prints the certificate: the same document --certificate writes.
"$bin" verify "$m" --probe passkey "${small[@]}" --certificate "$work/v.cert" >/dev/null 2>&1
"$py" - "$work/verify.json" "$work/v.cert" <<'PY' && ok || bad "verify --json is not the certificate"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a == b and a["certificate_version"] == 1
PY
# patch --json: the outcome with the certificate; the artifact written and certified.
"$py" - "$work/patch.json" "$work/p1/certificate.json" <<'PY' && ok || bad "patch --json outcome"
import json, sys
o, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert o["written"] is True and o["certified"] is True and o["verdict"] == "pass", o
assert o["method"] == "lm-infinite" and o["fidelity"] == "ctxpatch-metadata"
assert o["certificate"] == c and len(o["certificate_sha256"]) == 64
PY
grep -q "^patch:\|^fidelity:\|^probe" "$work/patch.json" && bad "patch --json printed text on stdout" || ok
# A failing patch with --json: JSON still, exit 1, the certificate of the refused verdict.
"$bin" patch "$m" "$work/pfail" --method rope-pi --factor 4 --verify passkey "${small[@]}" --json >"$work/pf.json" 2>/dev/null
[ $? -eq 1 ] && ok || bad "failing patch --json should exit 1"
"$py" -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["written"] is False and o["verdict"]=="fail" and o["certificate"]["verdict"]["result"]=="fail", o["verdict"]' \
  "$work/pf.json" && ok || bad "failing patch --json document"
[ ! -e "$work/pfail" ] && ok || bad "failing patch wrote its output"
# The old 'verify --json FILE' form is refused, not silently reinterpreted.
"$bin" verify "$m" --probe passkey "${small[@]}" --json "$work/x.json" >/dev/null 2>"$work/old.err"
[ $? -eq 2 ] && grep -q "unexpected argument" "$work/old.err" && ok || bad "verify --json FILE not refused"

# 2. --probe and --verify: one option, equal results, in verify and patch; both at once refused.
"$bin" verify "$m" --verify passkey "${small[@]}" --json >"$work/alias.json" 2>/dev/null
cmp -s "$work/alias.json" "$work/verify.json" && ok || bad "verify --verify differs from --probe"
"$bin" patch "$m" "$work/p2" --method lm-infinite --n-local 256 --for ctxpatch --probe passkey "${small[@]}" >/dev/null 2>&1
cmp -s "$work/p2/certificate.json" "$work/p1/certificate.json" && ok || bad "patch --probe differs from --verify"
"$bin" verify "$m" --probe passkey --verify passkey "${small[@]}" >/dev/null 2>"$work/both.err"
[ $? -eq 2 ] && grep -q "one option" "$work/both.err" && ok || bad "--probe with --verify not refused"

# 3. Precision: no number with 10+ decimals in any table, and the certificate's measured numbers
# at most 6 significant digits (depths and rules are exact: a re-run reads them back).
"$bin" verify "$m" --probe passkey --lengths 256 --depths 0:1:4 --samples 2 --threads 2 --baseline \
  --no-regression-at 256 >"$work/v.txt" 2>&1
"$bin" calibrate "$m" --method pmax,log --lengths 512 --samples 1 --threads 2 >"$work/c.txt" 2>&1
for f in v.txt c.txt; do
  grep -Eq '[0-9]\.[0-9]{9,}' "$work/$f" && { bad "$f prints a long number"; grep -E '[0-9]\.[0-9]{9,}' "$work/$f"; } || ok
done
"$bin" verify "$m" --probe passkey --lengths 256 --depths 0:1:4 --samples 2 --threads 2 --baseline --json \
  >"$work/v3.json" 2>/dev/null
"$py" - "$work/v3.json" "$work/calibrate.json" "$work/stats.json" <<'PY' && ok || bad "JSON numbers past 6 significant digits"
import json, sys
def walk(x, path, exact):
    if isinstance(x, dict):
        for k, v in x.items():
            if not (k.endswith("rule") or k in exact): yield from walk(v, path + "." + k, exact)
    elif isinstance(x, list):
        for i, v in enumerate(x): yield from walk(v, "%s[%d]" % (path, i), exact)
    elif isinstance(x, float) and x != int(x):
        yield path, x
bad = []
for f, exact in zip(sys.argv[1:], [{"depths"}, {"tau", "layer_tau", "other_root"}, set()]):
    for p, v in walk(json.load(open(f)), "", exact):
        if float("%.6g" % v) != v: bad.append((f, p, v))
assert not bad, bad[:5]
cert = json.load(open(sys.argv[1]))
assert cert["probes"]["depths"][1] == 1 / 3  # exact, as the re-run needs it
PY

# 4. Progress: on a terminal (a pty from script(1)) calibrate and convert draw it; piped, never.
if command -v script >/dev/null; then
  script -qec "$bin calibrate $m --method pmax --lengths 512 --samples 1 --threads 2 >/dev/null" /dev/null \
    >"$work/tty.out" 2>&1
  grep -q "length 512 sample 1/1" "$work/tty.out" && ok || bad "calibrate draws no progress on a terminal"
  script -qec "$bin convert $m $work/conv2 --to safetensors >/dev/null" /dev/null >"$work/tty2.out" 2>&1
  grep -q '\] [0-9]*/[0-9]*' "$work/tty2.out" && ok || bad "convert draws no progress on a terminal"
fi
"$bin" calibrate "$m" --method pmax --lengths 512 --samples 1 --threads 2 >/dev/null 2>"$work/pipe.err"
[ ! -s "$work/pipe.err" ] && ok || bad "calibrate printed progress into a pipe: $(cat "$work/pipe.err")"

# 5. The default probe set: screened on the original at its training length; printed and recorded.
"$bin" patch "$m" "$work/p3" --method lm-infinite --n-local 256 --for ctxpatch --lengths 256 --depths 0:1:2 --samples 3 \
  --threads 2 --accept-no-gain --accept-underpowered >"$work/p3.txt" 2>&1 && ok || { bad "default-set patch failed"; cat "$work/p3.txt"; }
grep -q "^probes: default set, screened on the original at its training length 256" "$work/p3.txt" && ok \
  || bad "default set not announced"
grep -q "^  passkey   1.000  used" "$work/p3.txt" && ok || bad "passkey not used"
grep -q "^  lines .*skipped: the original itself does not do it" "$work/p3.txt" && ok || bad "lines skip not explained"
grep -q "^  ppl .*skipped: no --corpus" "$work/p3.txt" && ok || bad "ppl skip not explained"
"$py" - "$work/p3/certificate.json" <<'PY' && ok || bad "certificate probes.selection"
import json, sys
c = json.load(open(sys.argv[1]))
s = c["probes"]["selection"]
assert s["floor"] == 0.5 and s["length"] == 256 and s["prompts"] >= 10 and s["ppl"] is False, s
assert s["screened"]["passkey"] == {"original_accuracy": 1, "used": True}, s
assert s["screened"]["lines"]["used"] is False
assert c["probes"]["names"] == [k for k, v in s["screened"].items() if v["used"]], c["probes"]["names"]
PY
"$bin" check "$work/p3" >/dev/null && ok || bad "check refuses the default-set artifact"
# 6. patch's table: intervals and the paired test, as verify prints them.
grep -q "patched \[95% CI\] *original \[95% CI\] *drop p(drop>margin)" "$work/p3.txt" && ok || bad "patch table header"
grep -Eq '^passkey +256 +1\.000 \[0\.[0-9]{2}, 1\.00\] +1\.000 \[0\.[0-9]{2}, 1\.00\]' "$work/p3.txt" && ok \
  || bad "patch table row with intervals"
grep -q "^paired test: Tango" "$work/p3.txt" && ok || bad "patch prints no paired test"

# 7. patch --rule FILE: top-k with from_layer / distance / rows, certified; a mixed rule is
# method "rule"; method options beside --rule are refused.
cat >"$work/topk.json" <<'EOF'
{"lambda_mask": {"n_global": 4, "n_local": 256}, "top_k": {"k": 3, "from_layer": 1, "distance": 100, "rows": "all"}}
EOF
"$bin" patch "$m" "$work/p4" --rule "$work/topk.json" --for ctxpatch --verify passkey "${small[@]}" >"$work/p4.txt" 2>&1 && ok \
  || { bad "patch --rule top-k"; cat "$work/p4.txt"; }
"$py" - "$work/p4/certificate.json" <<'PY' && ok || bad "--rule top-k certificate"
import json, sys
c = json.load(open(sys.argv[1]))
assert c["rule"]["top_k"] == {"k": 3, "from_layer": 1, "distance": 100, "rows": "all"}, c["rule"]
assert c["patch"]["method"] == "lm-infinite" and c["verdict"]["result"] == "pass"
PY
echo '{"temperature": 0.9, "lambda_mask": {"n_global": 4, "n_local": 256}}' >"$work/mix.json"
"$bin" patch "$m" "$work/p5" --rule "$work/mix.json" --for ctxpatch --no-verify >"$work/p5.txt" 2>&1 && grep -q "^patch: rule " "$work/p5.txt" \
  && grep -q "fidelity: ctxpatch-metadata" "$work/p5.txt" && ok || { bad "mixed --rule"; cat "$work/p5.txt"; }
"$bin" patch "$m" "$work/p6" --rule "$work/topk.json" --n-local 9 --no-verify >/dev/null 2>"$work/p6.err"
[ $? -eq 2 ] && grep -q "takes no method options" "$work/p6.err" && ok || bad "--rule with a method option"
"$bin" patch "$m" "$work/p6" --rule "$work/topk.json" --method temperature --no-verify >/dev/null 2>"$work/p6.err"
[ $? -eq 2 ] && grep -q "rule file's method is lm-infinite" "$work/p6.err" && ok || bad "--rule with another --method"

# 8. --calibration-samples reaches the calibration (recorded in the artifact's block).
"$bin" patch "$m" "$work/p7" --method temperature --target-len 512 --calibration-samples 2 --no-verify --threads 2 \
  >/dev/null 2>&1 && ok || bad "patch --calibration-samples"
"$py" -c 'import json,sys; c=json.load(open(sys.argv[1]))["ctxpatch"]["calibration"]; assert c["samples"]==2, c' \
  "$work/p7/config.json" && ok || bad "calibration samples not 2"

# 9. verify --baseline on a metadata artifact: the baseline side is the model without the rule,
# so it scores what the original scores (before the fix both sides ran the rule: 0 vs 0).
"$bin" patch "$m" "$work/meta" --method lm-infinite --n-local 32 --for ctxpatch --no-verify >/dev/null 2>&1
"$bin" verify "$work/meta" --baseline --probe passkey "${small[@]}" --json >"$work/meta.json" 2>/dev/null
"$bin" verify "$m" --probe passkey "${small[@]}" --json >"$work/orig.json" 2>/dev/null
"$py" - "$work/meta.json" "$work/orig.json" <<'PY' && ok || bad "verify --baseline on a metadata artifact compares it with itself"
import json, sys
a, o = (json.load(open(p)) for p in sys.argv[1:])
base, orig = a["results"]["baseline"]["passkey"][0], o["results"]["patched"]["passkey"][0]
assert base["correct_by_depth"] == orig["correct_by_depth"], (base, orig)
assert a["rule"]["lambda_mask"]["n_local"] == 32
assert a["results"]["patched"]["passkey"][0]["accuracy"] < base["accuracy"], a["results"]
PY
finish
