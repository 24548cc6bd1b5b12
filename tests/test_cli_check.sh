#!/usr/bin/env bash
# ctxpatch check (docs/ci.md): the CI commands of docs/ci.md's GitHub Actions and GitLab CI jobs,
# run against an artifact `ctxpatch patch` made from the rope probe model and against tampered
# copies of it (flipped byte, added file, edited config field, certificate from another
# artifact, forged results, an edited report), each caught with its own message; --rerun reproducing the
# certificate bit for bit; exit 2 for what cannot be judged.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

model=$src/examples/probe-models/rope-probe
[ -f "$model/model.safetensors" ] || { echo "SKIP: $model is absent"; exit 77; }
vopts="--lengths 256,512 --depths 0:1:3 --samples 1 --threads 1 --accept-no-gain --accept-underpowered"
good=$work/good other=$work/other
"$bin" patch "$model" "$good" --method lm-infinite --n-global 10 --n-local 256 --for ctxpatch $vopts >"$work/p1.log" 2>&1 \
  || { echo "FAIL: patch for the artifact"; cat "$work/p1.log"; exit 1; }
"$bin" patch "$model" "$other" --method temperature --tau 0.9 --lengths 256 --depths 0:1:3 --samples 1 --threads 1 \
  --accept-no-gain --accept-underpowered >"$work/p2.log" 2>&1 || { echo "FAIL: patch for the second artifact"; cat "$work/p2.log"; exit 1; }

# The commands of the two CI jobs, as docs/ci.md writes them.
"$py" - "$src/docs/ci.md" >"$work/cmds" <<'EOF' || { echo "FAIL: docs/ci.md: CI commands"; exit 1; }
import re, sys
blocks = re.findall(r"```yaml\n(.*?)```", open(sys.argv[1]).read(), re.S)
assert len(blocks) == 2, "expected a GitHub Actions and a GitLab CI block"
cmds = []
for b in blocks:
    cmds.append([re.sub(r"^\s*(- )?(run: )?", "", l) for l in b.splitlines() if re.match(r"^\s*(- )?(run: )?ctxpatch check ", l)])
assert cmds[0] and cmds[0] == cmds[1], cmds
print("\n".join(cmds[0]))
EOF
mkdir -p "$work/path" && ln -s "$bin" "$work/path/ctxpatch"
# Runs the CI commands on $1 (in a scratch folder, as a CI job would); prints their output;
# the status is the first nonzero one.
ci() {
  local status=0 dir
  dir=$(mktemp -d -p "$work")
  while IFS= read -r cmd; do
    (cd "$dir" && ARTIFACT=$1 PATH="$work/path:$PATH" bash -c "$cmd") >"$dir/out" 2>&1
    local s=$?
    cat "$dir/out" "$dir"/check-report.json 2>/dev/null
    [ $status -ne 0 ] || status=$s
  done <"$work/cmds"
  return $status
}
[ "$(wc -l <"$work/cmds")" -ge 2 ] && ok || bad "fewer than two CI commands: $(cat "$work/cmds")"

# 1. The good artifact passes every CI command (--rerun included: bit-equal accuracies).
ci "$good" >"$work/good.out" && ok || { bad "good artifact failed the CI commands"; cat "$work/good.out"; }
grep -q '"result":[[:space:]]*"pass"' "$work/good.out" && ok || bad "--json report without a pass"
"$bin" check "$good" --rerun >"$work/rerun.out" && grep -q "re-run: 2 cells equal" "$work/rerun.out" && ok \
  || { bad "--rerun on the good artifact"; cat "$work/rerun.out"; }

# 2. Four tamperings, each its own message, all through the CI commands.
copy() { rm -rf "$work/t"; cp -r "$good" "$work/t"; }
resum() { (cd "$work/t" && sha256sum $(awk '{print $2}' SHA256SUMS) >SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS); }
expect() { # expect NAME PATTERN: the CI commands fail on $work/t with a line matching PATTERN
  ci "$work/t" >"$work/$1.out"
  local s=$?
  [ $s -eq 1 ] && ok || bad "$1: exit $s, expected 1"
  grep -Eq "$2" "$work/$1.out" && ok || { bad "$1: no line matching '$2'"; cat "$work/$1.out"; }
}
copy
"$py" -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-100]^=1; open(p,'wb').write(b)" "$work/t/model.safetensors"
expect flipped "FAIL sums-mismatch: model.safetensors: "
copy; echo "not part of it" >"$work/t/extra.txt"
expect added "FAIL sums-extra-file: extra.txt: present but not listed"
copy; sed -i 's/"rms_norm_eps": 1e-06/"rms_norm_eps": 1e-05/' "$work/t/config.json"; resum
expect edited "FAIL cert-files: config.json: SHA-256 .* differs from the certified"
grep -q "sums-" "$work/edited.out" && bad "edited: SHA256SUMS was recomputed, yet a sums- failure" || ok
copy; cp "$other/certificate.json" "$work/t/certificate.json"; resum
expect swapped "FAIL cert-digest: config.json: ctxpatch: certificate_sha256 .* is not certificate.json's"
# The report bound to the certificate (issue 33 item 6): a number edited on the page, SHA256SUMS
# recomputed, fails; so does a report of another artifact's certificate.
copy; sed -i 's|<td class="n">1.000|<td class="n">0.900|' "$work/t/report.html"; resum
cmp -s "$good/report.html" "$work/t/report.html" && bad "report: the edit changed nothing" || ok
expect report "FAIL report-mismatch: report.html: line [0-9]+, column [0-9]+: differs from the report of the certificate"
copy; cp "$other/report.html" "$work/t/report.html"; resum
expect report2 "FAIL report-mismatch: report.html: line"
# The distinct messages: no tampering's expected line appears for another one.
for pair in "flipped:cert-digest" "added:sums-mismatch" "edited:sums-extra-file" "swapped:sums-extra-file" \
    "flipped:report-mismatch" "edited:report-mismatch" "report:sums-mismatch" "report:cert-files"; do
  grep -q "FAIL ${pair#*:}" "$work/${pair%%:*}.out" && bad "${pair%%:*} also reports ${pair#*:}" || ok
done

# 3. More of what check compares: the metadata rule, forged results, schema, verdict.
copy; sed -i 's/"n_local": 256/"n_local": 128/' "$work/t/config.json"; resum
expect rule "FAIL meta-rule: config.json: ctxpatch: rule .*n_local.:128"
# forge MODE: certificate.json rewritten, its digest replaced in every file, SHA256SUMS recomputed.
forge() {
  copy
  "$py" - "$work/t" "$1" <<'EOF'
import hashlib, json, os, sys
d, mode = sys.argv[1], sys.argv[2]
raw = open(d + "/certificate.json", "rb").read()
c = json.loads(raw)
if mode == "results":
    cell = c["results"]["patched"]["passkey"][0]
    cell["correct_by_depth"][0] = 1 - cell["correct_by_depth"][0]
    cell["accuracy"] = sum(cell["correct_by_depth"]) / (c["probes"]["samples"] * len(c["probes"]["depths"]))
elif mode == "schema":
    del c["probes"]["seed"]
elif mode == "verdict":
    c["verdict"] = {"result": "fail", "reasons": ["forged"]}
elif mode == "gain":  # a gain test that found nothing, claimed as part of the verdict
    c["thresholds"]["require_gain"] = True
    c["statistics"]["gain"]["found"] = False
elif mode == "pairs":
    for cells in c["results"]["comparison"].values():
        for cell in cells:
            cell["pairs"] = 100
elif mode == "fidelity":
    c["patch"]["fidelity"] = "exact-weights"
new = json.dumps(c, indent=1).encode()
old_hex, new_hex = hashlib.sha256(raw).hexdigest().encode(), hashlib.sha256(new).hexdigest().encode()
open(d + "/certificate.json", "wb").write(new)
for name in ("config.json", "model.safetensors"):
    b = open(d + "/" + name, "rb").read()
    assert old_hex in b, name
    open(d + "/" + name, "wb").write(b.replace(old_hex, new_hex))
EOF
  resum
}
forge results
"$bin" check "$work/t" >"$work/forged-report.out"
[ $? -eq 1 ] && grep -q "FAIL report-mismatch: report.html" "$work/forged-report.out" && ok \
  || { bad "forged results: the report no longer renders from the certificate"; cat "$work/forged-report.out"; }
# The forger drops the page (a report is optional): the static checks pass, --rerun does not.
rm "$work/t/report.html"; sed -i '/  report.html$/d' "$work/t/SHA256SUMS"
"$bin" check "$work/t" >"$work/forged.out" && ok || { bad "forged results: static checks should pass"; cat "$work/forged.out"; }
"$bin" check "$work/t" --rerun >"$work/forged-rerun.out"
[ $? -eq 1 ] && grep -q "FAIL rerun-accuracy: rerun: passkey at 256: accuracy" "$work/forged-rerun.out" && ok \
  || { bad "forged results: --rerun"; cat "$work/forged-rerun.out"; }
forge schema
"$bin" check "$work/t" >"$work/schema.out"
[ $? -eq 1 ] && grep -q "FAIL cert-schema: certificate.json: probes.seed: missing" "$work/schema.out" && ok \
  || { bad "schema violation"; cat "$work/schema.out"; }
forge verdict
"$bin" check "$work/t" >"$work/verdict.out"
[ $? -eq 1 ] && grep -q "FAIL cert-verdict: certificate.json: verdict.result is 'fail'" "$work/verdict.out" && ok \
  || { bad "failing verdict"; cat "$work/verdict.out"; }
# A hub download's own files (README.md, .gitattributes, huggingface_hub's .cache/huggingface/) are
# not in SHA256SUMS and pass; anything else unlisted, also elsewhere under .cache/, still fails.
copy; echo "# card" >"$work/t/README.md"; echo "*.safetensors filter=lfs" >"$work/t/.gitattributes"
mkdir -p "$work/t/.cache/huggingface/download" && echo "meta" >"$work/t/.cache/huggingface/download/model.safetensors.metadata"
"$bin" check "$work/t" >"$work/hub.out"; [ $? -eq 0 ] && ok || { bad "hub layout"; cat "$work/hub.out"; }
mkdir -p "$work/t/.cache/other" && echo x >"$work/t/.cache/other/f"
"$bin" check "$work/t" >"$work/hub2.out"; [ $? -eq 1 ] && grep -q "sums-extra-file: .cache/other/f" "$work/hub2.out" && ok \
  || { bad "an unlisted file under .cache/ outside huggingface/"; cat "$work/hub2.out"; }
copy; echo "# card" >"$work/t/README.md"; (cd "$work/t" && sha256sum README.md >>SHA256SUMS); echo "# edited card" >"$work/t/README.md"
"$bin" check "$work/t" >"$work/hub3.out"; [ $? -eq 1 ] && grep -q "sums-mismatch: README.md" "$work/hub3.out" && ok \
  || { bad "a listed README.md is checked"; cat "$work/hub3.out"; }
copy; rm "$work/t/report.html"
"$bin" check "$work/t" --json >"$work/gone.out"
[ $? -eq 1 ] && grep -q '"check":[[:space:]]*"sums-missing-file"' "$work/gone.out" && ok || { bad "missing file"; cat "$work/gone.out"; }

# 4. The policy flags for CI (docs/ci.md): each against a certificate that does not meet it
# (3 pairs per cell, --accept-no-gain, no runtime check, fidelity ctxpatch-metadata), and forged.
pol() { # pol NAME STATUS PATTERN ARGS...: check ARGS exits STATUS with a line matching PATTERN
  local name=$1 want=$2 pat=$3; shift 3
  "$bin" check "$@" >"$work/$name.out" 2>&1
  local s=$?
  [ $s -eq "$want" ] && grep -Eq -- "$pat" "$work/$name.out" && ok || { bad "$name: exit $s, want $want, '$pat'"; cat "$work/$name.out"; }
}
pol prompts-ok 0 "^check: .*: pass" "$good" --min-prompts 3
pol prompts 1 "^FAIL policy-prompts: --min-prompts 4: [a-z]+ at 256 was compared on 3 pairs$" "$good" --min-prompts 4
pol gain 1 "^FAIL policy-gain: --require-gain: the verdict did not include the gain criterion \(thresholds.require_gain is false" \
  "$good" --require-gain
pol runtime 1 "^FAIL policy-runtime: --require-runtime llama.cpp: the certificate has no runtime_check$" "$good" \
  --require-runtime llama.cpp
pol fidelity 1 "^FAIL policy-fidelity: --fidelity exact: the certificate's patch.fidelity is 'ctxpatch-metadata'$" "$good" \
  --fidelity exact
pol fidelity-ok 0 "^check: .*: pass" "$other" --fidelity exact --min-prompts 3
pol usage 2 "--fidelity expects exact" "$good" --fidelity exactly
pol usage2 2 "--require-runtime expects llama.cpp or onnxruntime" "$good" --require-runtime vllm
forge gain
pol forged-gain 1 "^FAIL policy-gain: --require-gain: statistics.gain.found is not true" "$work/t" --require-gain
forge pairs
pol forged-pairs 1 "^FAIL policy-prompts: --min-prompts 4: [a-z]+ at 256: 100 pairs, but the probes ran 3 prompts" \
  "$work/t" --min-prompts 4
forge fidelity
pol forged-fidelity 1 "^FAIL meta-fidelity: " "$work/t" --fidelity exact

# 5. What cannot be judged: exit 2, one error line.
"$bin" check "$work/nothing" 2>"$work/e1"; [ $? -eq 2 ] && grep -q "CP_ENOTFOUND" "$work/e1" && ok || bad "missing path"
"$bin" check "$work/nothing" --json >"$work/e1.json" 2>/dev/null; s=$?
[ $s -eq 2 ] && "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['result']=='error' and d['error']['code']=='CP_ENOTFOUND', d" "$work/e1.json" \
  && ok || { bad "--json on a missing path: exit $s, one JSON document with the error"; cat "$work/e1.json"; }
mkdir "$work/g" && : >"$work/g/model.gguf"
"$bin" check "$work/g" 2>"$work/e2"; [ $? -eq 2 ] && grep -q "format not supported by check yet" "$work/e2" && ok \
  || bad "GGUF folder"
"$bin" check "$model" >"$work/orig.out"; [ $? -eq 1 ] && grep -q "FAIL meta-missing" "$work/orig.out" && ok \
  || bad "an unpatched checkpoint is not an artifact"
"$bin" check 2>/dev/null; [ $? -eq 2 ] && ok || bad "no ARTIFACT: exit 2"
finish
