#!/usr/bin/env bash
# The runtime check (#30; docs/certificate.md, "Runtime check"): `patch --to gguf|onnx --runtime-dir`
# runs the probe prompts through llama.cpp (node-llama-cpp 3.22.1) or onnxruntime-node 1.30.0 on
# the written artifact and through the engine, and records the comparison in the certificate.
#   1. a GGUF with a baked temperature: "equal" in llama.cpp, check and check --rerun pass, and a
#      second run writes the same bytes;
#   2. a GGUF whose lm-infinite rule is only ctxpatch.rule metadata: "differs", verdict fail,
#      nothing written; written without a runtime folder it says "not checked", and check --rerun
#      with the runtime then fails it; llama.cpp's own logits (tests/gguf/llamacpp_run.mjs, not
#      the code under test) show why: on that file they are the unpatched model's, not the engine's;
#   3. ONNX artifacts (temperature, lm-infinite as graph nodes): "equal" in onnxruntime;
#   4. no runtime in the folder: "not checked" with the reason; a runtime that fails or floods its
#      output: a one-line refusal, nothing written;
#   5. check refuses forged runtime_check blocks (differs, a looser tolerance) in an ONNX folder;
#   6. stories260K (fixtures): equal in llama.cpp, check --rerun on the file's own tokenizer.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

model=$src/examples/probe-models/rope-probe
[ -f "$model/model.safetensors" ] || { echo "SKIP: $model is absent"; exit 77; }
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
if ! command -v node >/dev/null || [ ! -d "$nm/node-llama-cpp" ] || [ ! -d "$nm/@node-llama-cpp/linux-x64" ] ||
  [ ! -d "$nm/onnxruntime-node" ]; then
  echo "SKIP: node, node-llama-cpp (+ @node-llama-cpp/linux-x64) or onnxruntime-node not in $nm (scripts/install-test-runtimes.sh)"
  exit 77
fi
unset CTXPATCH_RUNTIMES CTXPATCH_RUNTIME_SCRIPT
# Once `patch` refuses a rule its runtime ignores (issue 30, first item), writing one takes --for ctxpatch.
meta=""
"$bin" patch --help | grep -- "--for ctxpatch" >/dev/null && meta="--for ctxpatch"
v="--lengths 256,400 --depths 0:1:3 --samples 1 --threads 2 --accept-no-gain --accept-underpowered"
json() { "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
getv() { # getv FILE KEY: a GGUF string value (stdlib; the layout of tests/test_cli_check_gguf.sh)
  "$py" - "$1" "$2" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read(); k = sys.argv[2].encode()
i = d.find(struct.pack("<Q", len(k)) + k) + 8 + len(k)
n = struct.unpack_from("<Q", d, i + 4)[0]
sys.stdout.buffer.write(d[i + 12:i + 12 + n])
PY
}

# 1. temperature, baked into the q weights: llama.cpp runs it
t=$work/t.gguf
"$bin" patch "$model" "$t" --method temperature --tau 0.8 $v --to gguf --runtime-dir "$nm" --json >"$work/t.json" \
  2>"$work/t.err" && ok || bad "temperature --to gguf: $(tail -3 "$work/t.err")"
rc=$(json "$work/t.json" 'd["certificate"]["runtime_check"]')
[ "$(json "$work/t.json" 'd["certificate"]["runtime_check"]["result"]')" = equal ] && ok || bad "temperature: $rc"
json "$work/t.json" 'd["certificate"]["runtime_check"]["version"]' | grep "^node-llama-cpp 3.22.1" >/dev/null && ok || bad "version: $rc"
json "$work/t.json" '(lambda r: r["runtime"] == "llama.cpp" and r["prompts"] == 2 and r["weights"] == "f32" and
  r["tolerance"] == 1e-3 and 0 <= r["max_abs_logit_diff"] <= 1e-3 and r["top1_agree"] == r["positions"])(
  d["certificate"]["runtime_check"])' | grep -x True >/dev/null && ok || bad "temperature fields: $rc"
[ "$(json "$work/t.json" 'd["certificate"]["runtime_check"]["content_sha256"]')" = "$(getv "$t" ctxpatch.content_sha256)" ] &&
  ok || bad "content_sha256 is not the file's"
"$bin" check "$t" >"$work/c.out" 2>&1 && ok || bad "check: $(cat "$work/c.out")"
# check's policy flags (docs/ci.md): the comparison was made in llama.cpp, not onnxruntime
"$bin" check "$t" --require-runtime llama.cpp --fidelity exact >"$work/c.out" 2>&1 && ok || bad "policy: $(cat "$work/c.out")"
"$bin" check "$t" --require-runtime onnxruntime >"$work/c.out" 2>&1
[ $? -eq 1 ] && grep -q "^FAIL policy-runtime: --require-runtime onnxruntime: the certificate compared the logits in llama.cpp instead$" \
  "$work/c.out" && ok || bad "--require-runtime onnxruntime: $(cat "$work/c.out")"
# deterministic: the same run gives the same bytes, the comparison included
"$bin" patch "$model" "$work/t2.gguf" --method temperature --tau 0.8 $v --to gguf --runtime-dir "$nm" >/dev/null 2>&1 &&
  cmp -s "$t" "$work/t2.gguf" && ok || bad "two runs differ"
"$bin" check "$t" --rerun --runtime-dir "$nm" >"$work/c.out" 2>&1 && grep -q "runtime re-run: equal" "$work/c.out" && ok ||
  bad "check --rerun: $(cat "$work/c.out")"

# 2. lm-infinite as ctxpatch.rule metadata: llama.cpp ignores it
l=$work/l.gguf
"$bin" patch "$model" "$l" --method lm-infinite --n-local 128 $v --to gguf $meta --runtime-dir "$nm" >"$work/l.out" 2>&1
[ $? -eq 1 ] && [ ! -e "$l" ] && grep -q "certification failed: nothing written" "$work/l.out" && ok ||
  bad "lm-infinite in llama.cpp must fail: $(tail -4 "$work/l.out")"
grep -q "^runtime: llama.cpp computes other logits than the certified engine" "$work/l.out" && ok ||
  bad "differs line: $(tail -4 "$work/l.out")"
"$bin" patch "$model" "$l" --method lm-infinite --n-local 128 $v --to gguf $meta --runtime-dir "$nm" --json >"$work/l.json" 2>/dev/null
json "$work/l.json" '(d["certificate"]["runtime_check"]["result"], d["certificate"]["verdict"]["result"], d["written"])' |
  grep -x "('differs', 'fail', False)" >/dev/null && ok || bad "differs in --json: $(head -c 600 "$work/l.json")"
# without a runtime folder it is written, and says so
"$bin" patch "$model" "$l" --method lm-infinite --n-local 128 $v --to gguf $meta --json >"$work/n.json" 2>/dev/null && ok ||
  bad "lm-infinite without runtime"
json "$work/n.json" '(d["certificate"]["runtime_check"]["result"], d["certificate"]["runtime_check"]["statement"])' |
  grep -xF "('not checked', 'certified on the ctxpatch engine; runtime equivalence not checked')" >/dev/null && ok ||
  bad "not checked: $(json "$work/n.json" 'd["certificate"].get("runtime_check")')"
"$bin" check "$l" >/dev/null 2>&1 && ok || bad "check of a 'not checked' GGUF"
"$bin" check "$l" --rerun --runtime-dir "$nm" >"$work/c.out" 2>&1
[ $? -eq 1 ] && grep -q "^FAIL runtime-rerun: runtime rerun: llama.cpp computes other logits" "$work/c.out" && ok ||
  bad "check --rerun of the lm-infinite GGUF: $(cat "$work/c.out")"
"$bin" check "$l" --rerun >"$work/c.out" 2>&1
[ $? -eq 2 ] && grep -q "rerun: not supported for a gguf file without --runtime-dir" "$work/c.out" && ok ||
  bad "--rerun without a runtime: $(cat "$work/c.out")"
# llama.cpp's own logits, by the tests' own script: the lm-infinite file runs as the unpatched model
"$bin" convert "$model" "$work/orig.gguf" --to gguf >/dev/null 2>&1 || bad "convert"
cp "$src/tests/gguf/llamacpp_run.mjs" "$work/run.mjs" && ln -s "$nm" "$work/node_modules"
ids=$("$py" -c 'print(",".join(str((i * 37 + 11) % 500 + 3) for i in range(400)))')
node "$work/run.mjs" "$l" 1 "$ids" 2 >"$work/lc_l.json" && node "$work/run.mjs" "$work/orig.gguf" 1 "$ids" 2 >"$work/lc_o.json" &&
  "$bin" forward "$l" --ids "$ids" --threads 2 --out "$work/eng.bin" >/dev/null && ok || bad "llama.cpp / forward runs"
"$py" - "$work" <<'PY' && ok || bad "llama.cpp's own logits"
import json, struct, sys
w = sys.argv[1]
a = json.load(open(f"{w}/lc_l.json"))["logits"]; b = json.load(open(f"{w}/lc_o.json"))["logits"]
raw = open(f"{w}/eng.bin", "rb").read(); V = len(a[0])
e = struct.unpack(f"<{len(raw) // 4}f", raw)
last = len(a) - 1
same = max(abs(x - y) for x, y in zip(a[last], b[last]))
eng = max(abs(a[last][v] - e[last * V + v]) for v in range(V))
print(f"llama.cpp: lm-infinite file vs original {same:.2e}; vs the engine under the rule {eng:.3f}")
assert same < 1e-4 and eng > 0.5, (same, eng)
PY

# 3. ONNX: onnxruntime runs the whole rule as graph nodes
for m in "temperature --tau 0.8" "lm-infinite --n-local 128"; do
  o=$work/onnx-${m%% *}
  "$bin" patch "$model" "$o" --method $m $v --to onnx --runtime-dir "$nm" >"$work/o.out" 2>&1 && ok ||
    bad "$m --to onnx: $(tail -3 "$work/o.out")"
  json "$o/certificate.json" '(lambda r: (r["runtime"], r["result"], r["tolerance"], r["max_abs_logit_diff"] <= 1e-3,
    r["version"]))(d["runtime_check"])' | grep -xF "('onnxruntime', 'equal', 0.001, True, 'onnxruntime-node 1.30.0')" >/dev/null && ok ||
    bad "$m onnx: $(json "$o/certificate.json" 'd.get("runtime_check")')"
  grep "<h2>Runtime check</h2><p class=\"note\">certified on the ctxpatch engine; onnxruntime computes the same" \
    "$o/report.html" >/dev/null && ok || bad "$m: the report's runtime card"
  "$bin" check "$o" --rerun --runtime-dir "$nm" >"$work/c.out" 2>&1 && grep -q "runtime re-run: equal" "$work/c.out" && ok ||
    bad "check --rerun $o: $(cat "$work/c.out")"
done

# 4. a folder without the runtime; a runtime that fails; one that floods its output
mkdir "$work/empty"
"$bin" patch "$model" "$work/e.gguf" --method temperature --tau 0.8 $v --to gguf --runtime-dir "$work/empty" --json \
  >"$work/e.json" 2>/dev/null && ok || bad "empty runtime folder"
json "$work/e.json" 'd["certificate"]["runtime_check"]["reason"]' | grep -F "node-llama-cpp is not installed in $work/empty" >/dev/null &&
  ok || bad "reason: $(json "$work/e.json" 'd["certificate"].get("runtime_check")')"
printf 'process.stderr.write("the runtime refuses this file\\n"); process.exit(2);\n' >"$work/fail.mjs"
printf 'process.stdout.write("x".repeat(1 << 26));\n' >"$work/flood.mjs"
for s in fail flood; do
  CTXPATCH_RUNTIME_SCRIPT=$work/$s.mjs "$bin" patch "$model" "$work/$s.gguf" --method temperature --tau 0.8 $v --to gguf \
    --runtime-dir "$nm" >"$work/$s.out" 2>"$work/$s.err"
  st=$?
  [ "$(wc -l <"$work/$s.err")" -eq 1 ] && [ ! -e "$work/$s.gguf" ] && [ ! -e "$work/$s.gguf.bake" ] && [ $st -ne 0 ] && ok ||
    bad "$s: exit $st, $(cat "$work/$s.err")"
done
grep -q "llama.cpp runtime check: exit 2: the runtime refuses this file" "$work/fail.err" && ok || bad "fail: $(cat "$work/fail.err")"
grep -q "llama.cpp runtime check: output past [0-9]* bytes: stopped" "$work/flood.err" && ok || bad "flood: $(cat "$work/flood.err")"

# 5. forged runtime_check blocks in the lm-infinite ONNX folder (digests placed again, so only the block is wrong)
forge() { # forge DIR PYEXPR(r: the runtime_check object, edited in place)
  rm -rf "$work/forged" && cp -r "$1" "$work/forged"
  "$py" - "$work/forged" "$2" <<'PY'
import hashlib, json, os, sys
d, expr = sys.argv[1], sys.argv[2]
cp = f"{d}/certificate.json"
old = hashlib.sha256(open(cp, "rb").read()).hexdigest()
c = json.load(open(cp)); r = c["runtime_check"]; exec(expr)
open(cp, "w").write(json.dumps(c, indent=2) + "\n")
new = hashlib.sha256(open(cp, "rb").read()).hexdigest()
for f in ("config.json", "onnx/model.onnx"):
    b = open(f"{d}/{f}", "rb").read(); open(f"{d}/{f}", "wb").write(b.replace(old.encode(), new.encode()))
lines = []
for f in sorted(os.listdir(d)) + [f"onnx/{g}" for g in sorted(os.listdir(f"{d}/onnx"))]:
    if os.path.isfile(f"{d}/{f}") and f != "SHA256SUMS":
        lines.append(f"{hashlib.sha256(open(f'{d}/{f}', 'rb').read()).hexdigest()}  {f}\n")
open(f"{d}/SHA256SUMS", "w").write("".join(sorted(lines, key=lambda s: s[66:])))
PY
  "$bin" check "$work/forged" >"$work/f.out" 2>&1
}
o=$work/onnx-lm-infinite
forge "$o" 'pass'
[ $? -eq 0 ] && ok || bad "the forging itself breaks check: $(cat "$work/f.out")"
forge "$o" 'r["result"] = "differs"; r["max_abs_logit_diff"] = 2.5'
[ $? -eq 1 ] && grep -q "^FAIL runtime-differs: certificate.json: runtime_check: onnxruntime computes other logits" "$work/f.out" &&
  ok || bad "forged differs: $(cat "$work/f.out")"
forge "$o" 'r["tolerance"] = 5.0'
[ $? -eq 1 ] && grep -q "^FAIL cert-schema: certificate.json: runtime_check: tolerance 5 is not the 0.001 of f32 weights" \
  "$work/f.out" && ok || bad "forged tolerance: $(cat "$work/f.out")"
forge "$o" 'r["max_abs_logit_diff"] = 0.5'
[ $? -eq 1 ] && grep -q "^FAIL cert-schema: .*result 'equal' disagrees with max_abs_logit_diff" "$work/f.out" && ok ||
  bad "forged diff: $(cat "$work/f.out")"
forge "$o" 'r["runtime"] = "llama.cpp"'
[ $? -eq 1 ] && grep -q "^FAIL cert-schema: .*runtime: llama.cpp does not run onnx artifacts" "$work/f.out" && ok ||
  bad "forged runtime: $(cat "$work/f.out")"
forge "$o" 'r["result"] = "not checked"; r["statement"] = "certified"'
[ $? -eq 1 ] && grep -q "^FAIL cert-schema: .*a check not made must say" "$work/f.out" && ok ||
  bad "forged statement: $(cat "$work/f.out")"

# 6. stories260K (a real pretrained Llama with its SentencePiece vocabulary in the GGUF): equal in
#    llama.cpp; check --rerun passes on the prompts of the file's own tokenizer and says so
fx=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party/stories260K
if [ -f "$fx/stories260K.gguf" ] && [ -f "$fx/tok512.model" ]; then
  "$bin" patch "$fx/stories260K.gguf" "$work/s.gguf" --method temperature --tau 0.8 --tokenizer "$fx/tok512.model" \
    --verify passkey --lengths 512,1024 --depths 0:1:3 --samples 1 --threads 2 --accept-no-gain --accept-underpowered --to gguf --runtime-dir "$nm" >"$work/s.out" 2>&1 &&
    grep "^runtime: certified on the ctxpatch engine; llama.cpp computes the same logits" "$work/s.out" >/dev/null && ok ||
    bad "stories260K: $(tail -3 "$work/s.out")"
  "$bin" check "$work/s.gguf" --rerun --runtime-dir "$nm" >"$work/c.out" 2>&1 &&
    grep "runtime re-run: equal, max |diff| .*, on other prompts than the certified ones" "$work/c.out" >/dev/null && ok ||
    bad "stories260K check --rerun: $(cat "$work/c.out")"
else
  echo "note: stories260K fixtures absent at $fx: section 6 skipped"
fi
finish
