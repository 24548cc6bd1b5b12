#!/usr/bin/env bash
# patch --method temperature --schedule (certified, kept as metadata or graph nodes) and the
# provenance of patched artifacts (issue 16): re-verify records and reports the rule the artifact
# applied, inspect shows the ctxpatch block, and a --rule temperature on top of a baked one is
# refused unless --on-top. Runs on the trained rope-probe model (train length 256).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

model=$src/examples/probe-models/rope-probe
[ -f "$model/model.safetensors" ] || { echo "SKIP: $model is absent"; exit 77; }
small="--verify passkey --depths 0:1:2 --samples 2 --threads 2 --accept-no-gain --accept-underpowered"

# 1. patch --schedule: calibrated at the lengths past 256, certified, kept as metadata
out=$work/sched
if "$bin" patch "$model" "$out" --method temperature --schedule --lengths 256,512,1024 --for ctxpatch $small >"$work/p.log" 2>&1; then
  ok; else bad "patch --schedule: $(cat "$work/p.log")"; fi
grep -q '^fidelity: ctxpatch-metadata' "$work/p.log" && ok || bad "fidelity: $(cat "$work/p.log")"
"$py" - "$out" <<'EOF' && ok || bad "the artifact's schedule"
import json, sys
d = sys.argv[1]
block = json.load(open(d + "/config.json"))["ctxpatch"]
pts = block["rule"]["temperature_schedule"]["points"]
assert [p[0] for p in pts] == [256, 512, 1024] and pts[0][1] == 1, pts
assert 0.5 <= pts[2][1] <= pts[1][1] < 1, pts
assert block["baked_rule"] == {} and block["certified"] is True
entries = block["calibration"]["entries"]
assert [(e["length"], e["method"]) for e in entries] == [(512, "pmax"), (1024, "pmax")]
# the schedule's taus are the calibration's (the table is printed by cJSON to 15 digits)
assert all(abs(e["tau"] - p[1]) < 1e-12 for e, p in zip(entries, pts[1:]))
cert = json.load(open(d + "/certificate.json"))
assert cert["rule"] == block["rule"], cert["rule"]
EOF
# the same schedule as `calibrate --schedule` at the same lengths and seed
"$bin" calibrate "$model" --method pmax --lengths 512,1024 --schedule --out "$work/cal.json" >/dev/null 2>&1 &&
  "$py" -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))["ctxpatch"]["rule"]; assert a==b,(a,b)' \
    "$work/cal.json" "$out/config.json" && ok || bad "patch --schedule differs from calibrate --schedule"
# --to onnx: the schedule as graph nodes
if "$bin" patch "$model" "$work/onnx" --method temperature --schedule --lengths 256,512 --to onnx $small \
    >"$work/o.log" 2>&1; then ok; else bad "patch --schedule --to onnx: $(cat "$work/o.log")"; fi
grep -qF '{"temperature_schedule":{"points":[[256,1],[512,' <("$bin" inspect "$work/onnx") && ok ||
  bad "onnx metadata: $("$bin" inspect "$work/onnx" | head -4)"
# refusals: --schedule with --tau, or with another method
"$bin" patch "$model" "$work/x" --method temperature --schedule --tau 0.8 --no-verify >/dev/null 2>&1
[ $? -eq 2 ] && [ ! -e "$work/x" ] && ok || bad "--schedule --tau not refused"
"$bin" patch "$model" "$work/x" --method rope-pi --factor 2 --schedule --no-verify >/dev/null 2>&1
[ $? -eq 2 ] && [ ! -e "$work/x" ] && ok || bad "--schedule with rope-pi not refused"

# 2. re-verify a metadata artifact: the certificate and the report name the applied rule
if "$bin" verify "$out" --probe passkey --lengths 256,512 --depths 0:1:2 --samples 1 --threads 2 \
    --certificate "$work/c.json" --report "$work/r.html" >"$work/v.log" 2>&1; then ok; else bad "re-verify: $(cat "$work/v.log")"; fi
grep -q '^rule: {"temperature_schedule".*(from the artifact' "$work/v.log" && ok || bad "re-verify text: $(head -2 "$work/v.log")"
"$py" - "$work/c.json" "$out/config.json" <<'EOF' && ok || bad "re-verify certificate's rule/artifact"
import json, sys
c = json.load(open(sys.argv[1])); block = json.load(open(sys.argv[2]))["ctxpatch"]
assert c["rule"] == block["rule"] and c["rule"] != {}, c["rule"]
a = c["artifact"]
assert a["method"] == "temperature" and a["fidelity"] == "ctxpatch-metadata" and a["rule"] == block["rule"]
assert a["certified"] is True and a["certificate_sha256"] == block["certificate_sha256"]
EOF
grep -q 'temperature_schedule' "$work/r.html" && ! grep -q 'none: the patched side ran' "$work/r.html" && ok ||
  bad "report does not show the artifact's rule"

# 3. inspect shows the ctxpatch block, checks the digest against certificate.json
"$bin" inspect "$out" >"$work/i.txt" 2>&1
grep -q '^ctxpatch: *method temperature, fidelity ctxpatch-metadata' "$work/i.txt" &&
  grep -q '^  rule: *{"temperature_schedule"' "$work/i.txt" &&
  grep -q "^  certified: *yes, certificate sha256 $("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ctxpatch"]["certificate_sha256"])' "$out/config.json") (certificate.json matches)" \
    "$work/i.txt" && ok || bad "inspect text: $(cat "$work/i.txt" | head -12)"
"$bin" inspect "$out" --json | "$py" -c 'import json,sys; b=json.load(sys.stdin)["ctxpatch"]; assert b["method"]=="temperature" and b["certified"] is True and len(b["certificate_sha256"])==64 and b["rule"]["temperature_schedule"], b' \
  && ok || bad "inspect --json ctxpatch"
cp -r "$out" "$work/tampered" && echo ' ' >>"$work/tampered/certificate.json"
grep -q 'certificate.json DIFFERS' <("$bin" inspect "$work/tampered") && ok || bad "inspect: tampered certificate not noticed"
"$bin" inspect "$model" >"$work/plain.txt" && ! grep -q '^ctxpatch:' "$work/plain.txt" && ok ||
  bad "inspect shows a ctxpatch block on a plain model"
# a malformed block is refused in one line naming the key
for kv in '"certified": "yes"' '"certificate_sha256": "xyz"' '"method": 7' '"baked_rule": {"temprature": 1}'; do
  rm -rf "$work/bad"; cp -r "$out" "$work/bad"
  "$py" - "$work/bad/config.json" "$kv" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); c["ctxpatch"].update(json.loads("{" + sys.argv[2] + "}"))
json.dump(c, open(sys.argv[1], "w"))
EOF
  key=$(echo "$kv" | sed 's/^"\([a-z_0-9]*\)".*/\1/')
  "$bin" inspect "$work/bad" >"$work/out" 2>"$work/err"
  [ $? -eq 1 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q "ctxpatch.$key" "$work/err" && ok ||
    bad "malformed ctxpatch.$key: $(cat "$work/err")"
done

# 4. a second temperature on a baked one: refused unless --on-top
"$bin" patch "$model" "$work/baked" --method temperature --tau 0.8 --no-verify >"$work/b.log" 2>&1 &&
  grep -q 'fidelity: exact-weights' "$work/b.log" && ok || bad "baked patch: $(cat "$work/b.log")"
"$bin" inspect "$work/baked" >"$work/ib.txt" && grep -q '^  baked: *{"temperature":0.8}' "$work/ib.txt" &&
  grep -q '^  certified: *no (written with --no-verify)' "$work/ib.txt" && ok || bad "inspect baked: $("$bin" inspect "$work/baked" | sed -n 7,11p)"
echo '{"temperature": 0.9}' >"$work/t.json"
echo '{"temperature_schedule": {"points": [[256, 1], [512, 0.9]]}}' >"$work/s.json"
vargs="--probe passkey --lengths 256 --depths 0:1:2 --samples 1 --threads 2"
for r in t s; do
  "$bin" verify "$work/baked" --rule "$work/$r.json" $vargs >"$work/out" 2>"$work/err"
  [ $? -eq 1 ] && [ ! -s "$work/out" ] && grep -q 'already carry a temperature.*--on-top' "$work/err" && ok ||
    bad "verify --rule $r.json on a baked temperature: $(cat "$work/err" "$work/out")"
done
"$bin" verify "$work/baked" --rule "$work/t.json" --on-top $vargs >"$work/out" 2>&1 &&
  grep -q '^rule: {"temperature":0.9} (--rule)' "$work/out" && grep -q '^baked into the weights: {"temperature":0.8}' "$work/out" &&
  ok || bad "verify --on-top: $(cat "$work/out")"
echo '{"lambda_mask": {"n_global": 4, "n_local": 64}}' >"$work/lm.json"  # no temperature: allowed
"$bin" verify "$work/baked" --rule "$work/lm.json" $vargs >/dev/null 2>"$work/err" && ok || bad "verify lambda on baked: $(cat "$work/err")"
"$bin" forward "$work/baked" --ids 1,2,3 --rule "$work/t.json" --out "$work/f.bin" 2>"$work/err"
[ $? -eq 1 ] && [ ! -e "$work/f.bin" ] && grep -q 'already carry a temperature' "$work/err" && ok || bad "forward on top: $(cat "$work/err")"
"$bin" forward "$work/baked" --ids 1,2,3 --rule "$work/t.json" --on-top --out "$work/f.bin" 2>"$work/err" && ok ||
  bad "forward --on-top: $(cat "$work/err")"
finish
