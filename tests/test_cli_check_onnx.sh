#!/usr/bin/env bash
# ctxpatch check on one graph `patch IN.onnx OUT.onnx` rewrote (docs/ci.md, "A rewritten ONNX
# graph"): a certified rewrite of ctxpatch's export of the rope probe (weights in external data)
# passes (text and --json; --rerun is refused, exit 2) and its ctxpatch.graph_sha256 equals the
# digest tests/onnx/graph_digest.py recomputes from docs/onnx.md's recipe (python3-onnx, hashlib);
# copies with the certificate's bytes edited, the digest edited, the rule edited, the certified
# flag flipped, the fidelity edited, all ctxpatch metadata removed, an inline weight bit flipped,
# a node attribute changed, an external data bit flipped, another producer's metadata entry added
# or edited, the graph digest removed, and an uncertified rewrite (--no-verify) each fail (exit 1)
# with their exact line (a changed graph's: the digest python recomputes on the changed files).
# The copies are edited byte by byte (tests/onnx/onnx_tamper.py: every other byte kept, so only
# ctxpatch's own entries changed leaves the graph digest as it was).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

probe=$src/examples/probe-models/rope-probe
[ -f "$probe/model.safetensors" ] || { echo "SKIP: $probe is absent"; exit 77; }
"$py" -c "import onnx" 2>/dev/null || { echo "SKIP: $py lacks onnx (Debian python3-onnx)"; exit 77; }
V="--lengths 256 --depths 0:1:3 --samples 1 --threads 1 --accept-no-gain --accept-underpowered"
"$bin" convert "$probe" "$work/rp" --to onnx >/dev/null || { echo "FAIL: export"; exit 1; }
mkdir -p "$work/g"
"$bin" patch "$work/rp" "$work/g/rw.onnx" --method temperature --tau 0.9 $V >"$work/p.log" 2>&1 \
  || { echo "FAIL: certified rewrite"; cat "$work/p.log"; exit 1; }
"$bin" patch "$work/rp" "$work/g/nv.onnx" --method temperature --tau 0.9 --no-verify >"$work/p2.log" 2>&1 \
  || { echo "FAIL: uncertified rewrite"; cat "$work/p2.log"; exit 1; }
g=$work/g/rw.onnx

# 1. The certified rewrite passes; --json says so; --rerun is refused (exit 2).
"$bin" check "$g" >"$work/ok.out" 2>&1 && grep -q "^check: $g: pass (onnx, 0 files, certificate sha256 [0-9a-f]\{64\})$" "$work/ok.out" \
  && ok || { bad "clean rewrite"; cat "$work/ok.out"; }
"$bin" check "$g" --json >"$work/ok.json" && "$py" - "$work/ok.json" <<'PY' && ok || { bad "--json on the clean rewrite"; cat "$work/ok.json"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["format"] == "onnx" and r["result"] == "pass" and r["failures"] == [] and len(r["certificate_sha256"]) == 64, r
PY
"$bin" check "$g" --rerun >/dev/null 2>"$work/rerun.out"
[ $? -eq 2 ] && grep -q "rw.onnx: --rerun: the C engine does not run ONNX graphs" "$work/rerun.out" && ok \
  || { bad "--rerun on a rewritten graph: exit 2"; cat "$work/rerun.out"; }

# edit NAME PYTHON: a copy of the certified graph with metadata_props d (a dict) edited by PYTHON,
# byte by byte (the entries changed re-encoded in place, removed ones dropped, new ones appended).
edit() { "$py" "$src/tests/onnx/onnx_tamper.py" meta "$g" "$work/g/$1.onnx" "$2" || bad "editing $1"; }
gd() { "$py" "$src/tests/onnx/graph_digest.py" "$1"; }
# expect NAME EXIT LINE [N]: `check` on NAME.onnx exits EXIT and prints exactly LINE among N (1) failures.
expect() {
  local n=${4:-1} what=failures
  [ "$n" -eq 1 ] && what=failure
  "$bin" check "$work/g/$1.onnx" >"$work/$1.out" 2>&1; local s=$?
  [ $s -eq "$2" ] && grep -qxF -- "$3" "$work/$1.out" && grep -qx "check: $work/g/$1.onnx: $n $what" "$work/$1.out" \
    && ok || { bad "$1: exit $s, want $2 and: $3"; cat "$work/$1.out"; }
}
sha=$("$py" -c "import onnx,sys; print({p.key: p.value for p in onnx.load(sys.argv[1], load_external_data=False).metadata_props}['ctxpatch.certificate_sha256'])" "$g")

# 2. The certificate's bytes edited (its probe seed + 1), its digest left: the digest no longer matches.
edit cert 'import json; c = json.loads(d["ctxpatch.certificate"]); c["probes"]["seed"] += 1; d["ctxpatch.certificate"] = json.dumps(c, indent=2)'
new=$("$py" -c "import onnx,sys,hashlib; print(hashlib.sha256({p.key: p.value for p in onnx.load(sys.argv[1], load_external_data=False).metadata_props}['ctxpatch.certificate'].encode()).hexdigest())" "$work/g/cert.onnx")
expect cert 1 "FAIL cert-digest: metadata_props: certificate_sha256 ${sha:0:12}... is not ctxpatch.certificate's ${new:0:12}..."
# 3. The digest edited.
edit sha 'd["ctxpatch.certificate_sha256"] = "0" * 64'
expect sha 1 "FAIL cert-digest: metadata_props: certificate_sha256 000000000000... is not ctxpatch.certificate's ${sha:0:12}..."
# 4. The rule edited: it differs from the certificate's patch.rule and from the rule it ran.
edit rule 'd["ctxpatch.rule"] = "{\"temperature\": 0.8}"'
expect rule 1 "FAIL meta-rule: metadata_props: rule {\"temperature\":0.8} differs from the certificate's patch.rule {\"temperature\":0.9}" 2
expect rule 1 "FAIL meta-rule: metadata_props: rule {\"temperature\":0.8} differs from the certificate's rule {\"temperature\":0.9}" 2
# 5. The certified flag flipped.
edit flag 'd["ctxpatch.certified"] = "false"'
expect flag 1 "FAIL meta-certified: metadata_props: certified is not true (written with --no-verify)"
# 6. The fidelity edited (as an export's graph says).
edit fid 'd["ctxpatch.fidelity"] = "graph"'
expect fid 1 "FAIL meta-fidelity: $work/g/fid.onnx: metadata_props ctxpatch.fidelity is 'graph', not 'graph-rewrite' (a graph of an export folder: check the folder)"
# 7. No ctxpatch metadata at all.
edit none 'd = {k: v for k, v in d.items() if not k.startswith("ctxpatch.")}'
expect none 1 "FAIL meta-missing: $work/g/none.onnx: no ctxpatch metadata_props (not a graph ctxpatch rewrote)"
# 8. The uncertified rewrite.
expect nv 1 "FAIL cert-missing: $work/g/nv.onnx: no ctxpatch.certificate in metadata_props (ctxpatch.certified is false: written with --no-verify)"
"$bin" check "$work/g/nv.onnx" --json >"$work/nv.json"; s=$?
[ $s -eq 1 ] && "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); assert r['result']=='fail' and [f['check'] for f in r['failures']]==['cert-missing'], r" "$work/nv.json" \
  && ok || { bad "--json on the uncertified rewrite: exit $s"; cat "$work/nv.json"; }
# 9. The graph digest: the stored one is what python recomputes from the recipe (the external data
# file included), and each change to what the graph computes with fails with its exact line, the
# new digest the one python recomputes on the changed files.
stored=$("$py" -c "import onnx,sys; print({p.key: p.value for p in onnx.load(sys.argv[1], load_external_data=False).metadata_props}['ctxpatch.graph_sha256'])" "$g")
[ -f "$work/g/model.onnx.data" ] && grep -q "model.onnx.data" "$g" && [ "$(gd "$g")" = "$stored" ] && [ ${#stored} -eq 64 ] && ok \
  || bad "ctxpatch.graph_sha256 $stored is not python's $(gd "$g") (or no external data)"
digest_line() {
  local now; now=$(gd "$work/g/$1.onnx")
  echo "FAIL graph-digest: $work/g/$1.onnx: metadata_props ctxpatch.graph_sha256 ${stored:0:12}... is not the graph's ${now:0:12}... (nodes, weights, metadata or external data changed after the rewrite)"
}
"$py" "$src/tests/onnx/onnx_tamper.py" weight "$g" "$work/g/weight.onnx" >"$work/weight.what" || bad "flipping a weight"
expect weight 1 "$(digest_line weight)"
"$py" "$src/tests/onnx/onnx_tamper.py" attr "$g" "$work/g/attr.onnx" >"$work/attr.what" || bad "changing an attribute"
expect attr 1 "$(digest_line attr)"
# One bit of the external data flipped (data.onnx: the graph's bytes unchanged; the data file is
# put back from a copy afterwards).
mkdir -p "$work/x" && cp "$work/g/model.onnx.data" "$work/x/" && cp "$g" "$work/g/data.onnx" \
  && "$py" "$src/tests/onnx/onnx_tamper.py" flip "$work/g/model.onnx.data" && cmp -s "$g" "$work/g/data.onnx" || bad "flipping external data"
expect data 1 "$(digest_line data)"
cp "$work/x/model.onnx.data" "$work/g/" # the other copies read it
# Another producer's metadata is part of the graph file: an entry added fails; a graph rewritten
# from an input carrying one keeps it (and passes), and that entry edited fails.
edit other 'd["producer.note"] = "added later"'
expect other 1 "$(digest_line other)"
cp -r "$work/rp" "$work/rp2" && "$py" "$src/tests/onnx/onnx_tamper.py" meta "$work/rp/onnx/model.onnx" "$work/rp2/onnx/model.onnx" 'd["producer.note"] = "kept"' \
  && "$bin" patch "$work/rp2" "$work/g/foreign.onnx" --method temperature --tau 0.9 $V >"$work/p3.log" 2>&1 || { bad "rewrite with a foreign entry"; cat "$work/p3.log"; }
"$bin" check "$work/g/foreign.onnx" >"$work/foreign.out" 2>&1 && "$py" -c "import onnx,sys; assert {p.key: p.value for p in onnx.load(sys.argv[1], load_external_data=False).metadata_props}['producer.note'] == 'kept'" "$work/g/foreign.onnx" \
  && ok || { bad "rewrite with a foreign entry: check"; cat "$work/foreign.out"; }
g0=$g g=$work/g/foreign.onnx stored0=$stored
stored=$("$py" -c "import onnx,sys; print({p.key: p.value for p in onnx.load(sys.argv[1], load_external_data=False).metadata_props}['ctxpatch.graph_sha256'])" "$g")
edit foreign_ed 'd["producer.note"] = "edited"'
expect foreign_ed 1 "$(digest_line foreign_ed)"
g=$g0 stored=$stored0
# No graph digest (an older ctxpatch's rewrite): fails, it would pass any graph whose entry was cut.
edit older 'del d["ctxpatch.graph_sha256"]'
expect older 1 "FAIL graph-digest: $work/g/older.onnx: no ctxpatch.graph_sha256 in metadata_props (written by an older ctxpatch: no graph digest; rewrite the original graph again)"
# 11. The report beside the certified rewrite (issue 30), none beside the uncertified one; an edit
#     to the page fails check (it is rendered again from ctxpatch.certificate).
[ -f "$g.report.html" ] && [ ! -e "$work/g/nv.onnx.report.html" ] &&
  grep -q '<span class="title">rp, temperature, for onnxruntime and transformers.js</span>' "$g.report.html" && ok || bad "the rewrite's report"
sed -i 's/training length 256 tokens/training length 512 tokens/' "$g.report.html"
"$bin" check "$g" >"$work/rep.out" 2>&1
[ $? -eq 1 ] && grep -q "^FAIL report-mismatch: $g.report.html: line" "$work/rep.out" && ok || { bad "edited report"; cat "$work/rep.out"; }
# 10. A file that is not a graph: one failure, exit 1.
head -c 200 "$g" >"$work/g/trunc.onnx"
"$bin" check "$work/g/trunc.onnx" >"$work/trunc.out" 2>&1; s=$?
[ $s -eq 1 ] && grep -q "^FAIL onnx-unreadable: .*trunc.onnx: offset" "$work/trunc.out" && ok || { bad "truncated graph: exit $s"; cat "$work/trunc.out"; }
finish
