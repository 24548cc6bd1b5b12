#!/usr/bin/env bash
# Recovery accounts for every node on the path to the logits (issue 33 item 1; import/onnx/
# onnx_account.c; docs/onnx.md "Recovering third-party graphs", "Every node accounted for").
# tests/onnx/make_tampered.py inserts nodes named tamper/... into each decoder graph recovery reads:
#   - torch.onnx's GPT-2 (tests/onnx/make_torch_gpt2.py) and Llama (tests/onnx/make_torch_llama.py
#     on the golden GQA llama), when Debian's torch is there;
#   - onnxruntime/gpt2_past.onnx and onnxruntime-genai's tiny-random-gpt2-fp32 (fixtures, when there);
#   - the synthetic contrib graphs of tests/onnx/make_onnx_cases.py (genai Llama with
#     MultiHeadAttention and with GroupQueryAttention, an ORT-fused GPT-2).
# Each graph whose computation changed (a Mul by 0 on the attention output of one or every layer, an
# Add on the residual stream, a Mul on the logits, scores, probabilities, the MLP's activation,
# RoPE's cos) must be refused: exit 1, one line, CP_EONNX_RECOVER, naming the inserted node, nothing
# written. An Identity inserted changes nothing and is read. Where onnxruntime-node is installed:
# every refused graph computes something else than its original in onnxruntime (so the refusal is
# needed), and every graph read (the originals and the Identity copies) gives onnxruntime's logits
# under `ctxpatch forward` (max|a-b|/max|b| <= 1e-4). The counts of refused and read graphs are printed.
# ctxpatch's own exports (golden llama and gpt2) tampered the same way are refused by the structural
# check (export/onnx/onnx_own_check.c), naming an inserted node; an export, its fp16 export and its
# in-place rewrite read, and a tampered rewrite is refused.
# A graph with Hugging Face names and a config.json beside it (tests/onnx/make_hf_named.py: the
# torch.onnx GPT-2 renamed as Optimum's GPT2Model export keeps it, vocab 559 for rope-probe's
# tokenizer) is recovered from its nodes too, not read by its names: its tampered copies (each
# beside the config.json) are refused like the others by forward, `patch IN.onnx OUT.onnx` (also
# with --verify) and verify (before: all read as the untampered model, and a tampered copy patched
# --verify was certified and passed `check`); the untampered graph reads bit-equal to forward on
# its weights as a safetensors folder, a certified patch of it passes `check`, and a config.json
# that describes another model is refused naming the key. torch.onnx's Llama under Optimum's names
# beside its config.json reads within 1e-4 of the folder (before: refused).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
t=$src/tests/onnx
"$py" -c "import onnx, numpy" 2> /dev/null || { echo "SKIP: $py lacks onnx/numpy (Debian python3-onnx)"; exit 77; }
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
ort=0
[ -d "$nm/onnxruntime-node" ] && command -v node > /dev/null && ort=1 && export CTXPATCH_NODE_MODULES=$nm
[ $ort = 1 ] || echo "note: onnxruntime-node not installed in $nm: refusals only, no runtime comparisons"
fx=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party

# sources: NAME FILE VOCAB ORT-MODE
srcs=()
mkdir -p "$work/src"
if "$py" -c "import torch" 2> /dev/null; then
  PYTHONPATH=$src/python "$py" "$t/make_torch_gpt2.py" "$work/src/torch_gpt2.onnx" 2> "$work/err" &&
    srcs+=("torch_gpt2 $work/src/torch_gpt2.onnx 50 pass") || bad "make_torch_gpt2: $(tail -1 "$work/err")"
  PYTHONPATH=$src/python "$py" "$t/make_torch_llama.py" "$src/tests/goldens/engine/models/llama" \
    "$work/src/torch_llama.onnx" 2> "$work/err" &&
    srcs+=("torch_llama $work/src/torch_llama.onnx 96 pass") || bad "make_torch_llama: $(tail -1 "$work/err")"
  # pass-hidden: one onnxruntime pass whose output is hidden states (compared only original vs tampered)
  PYTHONPATH=$src/python "$py" "$t/make_torch_gpt2.py" "$work/src/tg559.onnx" --vocab 559 --positions 128 2> "$work/err" &&
    PYTHONPATH=$src/python "$py" "$t/make_hf_named.py" "$work/src/tg559.onnx" "$work/src/hf" 2> "$work/err" &&
    srcs+=("hf_gpt2 $work/src/hf/model.onnx 559 pass-hidden") || bad "make_hf_named: $(tail -1 "$work/err")"
else
  echo "note: $py has no torch (Debian python3-torch): torch.onnx graphs skipped"
fi
if [ -d "$fx/onnxruntime" ]; then
  srcs+=("gpt2_past $fx/onnxruntime/gpt2_past.onnx 20 steps")
  srcs+=("genai_gpt2 $fx/onnxruntime-genai/tiny-random-gpt2-fp32/past.onnx 1000 pass")
else
  echo "note: $fx is absent: fixture graphs skipped"
fi
(cd "$t" && "$py" - "$work/src" <<'EOF') || bad "synthetic contrib graphs"
import os, sys
import onnx
out = sys.argv[1]
sys.argv = ["make_onnx_cases.py", os.path.join(out, "unused")]
import make_onnx_cases as mc
onnx.save(mc.contrib_llama(), os.path.join(out, "contrib_llama.onnx"))
onnx.save(mc.contrib_llama(gqa=True, d=32), os.path.join(out, "contrib_gqa.onnx"))
onnx.save(mc.contrib_gpt2(layers=2), os.path.join(out, "contrib_gpt2.onnx"))
EOF
srcs+=("contrib_llama $work/src/contrib_llama.onnx 64 pass" "contrib_gqa $work/src/contrib_gqa.onnx 64 pass"
  "contrib_gpt2 $work/src/contrib_gpt2.onnx 8 pass")

# ort FILE MODE IDS OUT: onnxruntime's first output
ort_run() { node "$t/ort_recover.mjs" "$1" --ids "$3" --mode "${2%-hidden}" --out "$4" > /dev/null 2> "$work/ort.log"; }

refused=0 accepted=0
for s in "${srcs[@]}"; do
  set -- $s
  name=$1 g=$2 V=$3 mode=$4
  ids=$("$py" -c "import sys; print(','.join(str((i * 7 + 3) % int(sys.argv[1])) for i in range(8)))" "$V")
  "$py" "$t/make_tampered.py" "$g" "$work/$name" > /dev/null 2> "$work/err" || { bad "$name: make_tampered: $(tail -1 "$work/err")"; continue; }
  [ -f "${g%/*}/config.json" ] && cp "${g%/*}/config.json" "$work/$name/" # HF names: the config beside each copy
  # the original reads, and gives onnxruntime's logits (gpt2_past has no head: compared in test_onnx_recover.sh)
  "$bin" forward "$g" --ids "$ids" --threads 2 --out "$work/$name.eng.f32" 2> "$work/err" || bad "$name: original refused: $(head -1 "$work/err")"
  [ $ort = 1 ] && { ort_run "$g" "$mode" "$ids" "$work/$name.ort.f32" || bad "$name: onnxruntime: $(tail -1 "$work/ort.log")"; }
  while IFS=$'\t' read -r kind expect node_name; do
    f=$work/$name/$kind.onnx
    rm -f "$work/out.f32"
    "$bin" forward "$f" --ids "$ids" --threads 2 --out "$work/out.f32" 2> "$work/err"
    rc=$?
    if [ "$expect" = refuse ]; then
      if [ $rc = 1 ] && [ "$(wc -l < "$work/err")" = 1 ] && grep -qF "error CP_EONNX_RECOVER: $f: " "$work/err" &&
         grep -qF "node '$node_name" "$work/err" && [ ! -e "$work/out.f32" ]; then
        ok; refused=$((refused + 1))
      else
        bad "$name/$kind: expected a refusal naming node '$node_name' (rc=$rc): $(cat "$work/err")"
      fi
      if [ $ort = 1 ] && ort_run "$f" "$mode" "$ids" "$work/t.ort.f32"; then # the tampering matters
        "$py" "$t/compare_logits.py" "$work/t.ort.f32" "$work/$name.ort.f32" --vocab 1 --tol 1e-6 > /dev/null 2>&1 &&
          bad "$name/$kind: onnxruntime computes the same as on the original: not a tampering" || ok
      fi
    else
      [ $rc = 0 ] && { ok; accepted=$((accepted + 1)); } || { bad "$name/$kind: expected to read (rc=$rc): $(cat "$work/err")"; continue; }
      if [ $ort = 1 ] && [ "$mode" = pass ]; then
        ort_run "$f" "$mode" "$ids" "$work/k.ort.f32" &&
          "$py" "$t/compare_logits.py" "$work/k.ort.f32" "$work/out.f32" --vocab "$V" --tol 1e-4 \
            --label "$name/$kind onnxruntime vs engine" || bad "$name/$kind: onnxruntime vs engine: $(tail -1 "$work/ort.log")"
      fi
    fi
  done < "$work/$name/cases.tsv"
  if [ $ort = 1 ] && [ "$mode" = pass ]; then
    "$py" "$t/compare_logits.py" "$work/$name.ort.f32" "$work/$name.eng.f32" --vocab "$V" --tol 1e-4 \
      --label "$name (original) onnxruntime vs engine" && ok || bad "$name: original: onnxruntime vs engine"
  fi
done
echo "tampered graphs: $refused refused, $accepted read (Identity copies)"
[ $refused -ge 20 ] && ok || bad "only $refused refusals checked"

# --- ctxpatch's own exports (read back by their initializer names): tampered copies, and a copy with an
# Identity (no longer the graph ctxpatch writes), are refused naming an inserted node; the export,
# its fp16 export and its in-place rewrite (fidelity graph-rewrite, compared with the regenerated
# export rewritten again) still read, bit-equal to forward on the folder.
own_refused=0
for fam in llama gpt2; do
  "$bin" convert "$src/tests/goldens/engine/models/$fam" "$work/own_$fam" --to onnx > /dev/null 2> "$work/err" ||
    { bad "convert $fam: $(head -1 "$work/err")"; continue; }
  g=$work/own_$fam/onnx/model.onnx
  "$py" "$t/make_tampered.py" "$g" "$work/own_$fam/t" > /dev/null 2> "$work/err" || { bad "$fam: make_tampered: $(tail -1 "$work/err")"; continue; }
  "$bin" forward "$work/own_$fam" --ids 1,2,3,4 --threads 2 --out "$work/own.f32" 2> "$work/err" || bad "own $fam: $(head -1 "$work/err")"
  "$bin" forward "$g" --ids 1,2,3,4 --threads 2 --out "$work/own_g.f32" 2> "$work/err" && check cmp -s "$work/own.f32" "$work/own_g.f32" ||
    bad "own $fam graph: $(head -1 "$work/err")"
  while IFS=$'\t' read -r kind expect node_name; do
    f=$work/own_$fam/t/$kind.onnx
    rm -f "$work/out.f32"
    "$bin" forward "$f" --ids 1,2,3,4 --threads 2 --out "$work/out.f32" 2> "$work/err"
    rc=$?
    if [ $rc = 1 ] && [ "$(wc -l < "$work/err")" = 1 ] && grep -qF "error CP_EONNX_RECOVER: $f: node 'tamper/$kind" "$work/err" &&
       grep -qF "differs from the graph ctxpatch writes for the weights read from it" "$work/err" && [ ! -e "$work/out.f32" ]; then
      ok; own_refused=$((own_refused + 1))
    else
      bad "own $fam/$kind: expected a refusal naming node 'tamper/$kind...' (rc=$rc): $(cat "$work/err")"
    fi
  done < "$work/own_$fam/t/cases.tsv"
done
echo "tampered own exports: $own_refused refused"
[ $own_refused -ge 18 ] && ok || bad "only $own_refused own-export refusals checked"
"$bin" convert "$src/tests/goldens/engine/models/llama" "$work/own16" --to onnx --dtype fp16 > /dev/null 2>&1 &&
  "$bin" forward "$work/own16" --ids 1,2,3 --threads 2 --out "$work/o16.f32" 2> "$work/err" && ok || bad "fp16 export: $(head -1 "$work/err")"
"$bin" patch "$work/own_llama/onnx/model.onnx" "$work/rw.onnx" --method temperature --tau 0.8 --no-verify > /dev/null 2> "$work/err" &&
  "$bin" forward "$work/rw.onnx" --ids 1,2,3,4 --threads 2 --out "$work/rw.f32" 2>> "$work/err" &&
  echo '{"temperature":0.8}' > "$work/rule.json" &&
  "$bin" forward "$work/own_llama" --rule "$work/rule.json" --ids 1,2,3,4 --threads 2 --out "$work/rwf.f32" 2>> "$work/err" &&
  check cmp -s "$work/rw.f32" "$work/rwf.f32" || bad "rewritten own export: $(head -1 "$work/err")"
# the same rewrite with one more node after it: refused
"$py" "$t/make_tampered.py" "$work/rw.onnx" "$work/rwt" > /dev/null 2>&1 &&
  "$bin" forward "$work/rwt/attn_zero.onnx" --ids 1,2 --out "$work/never.f32" 2> "$work/err" && bad "tampered rewrite read" ||
  check grep -qF "node 'tamper/attn_zero/0" "$work/err"

# a certified in-place patch (which certifies on the recovered model) refuses the tampered graph too
for s in "${srcs[@]}"; do
  set -- $s
  "$bin" patch "$work/$1/attn_zero.onnx" "$work/p.onnx" --method temperature --tau 0.9 2> "$work/err" &&
    bad "$1: patch of attn_zero.onnx certified" ||
    { grep -qF "no model description can be recovered from this graph ($work/$1/attn_zero.onnx: " "$work/err" &&
      grep -qF "node 'tamper/attn_zero/0' (Mul, index " "$work/err" && ok || bad "$1: patch: $(cat "$work/err")"; }
  [ -e "$work/p.onnx" ] && bad "$1: p.onnx written" || ok
done

# --- Hugging Face names beside a config.json (issue 33 item 1, the last hole): recovered from the
# nodes, never read by the names alone
hf=$work/src/hf
if [ -f "$hf/model.onnx" ]; then
  rp=$src/examples/probe-models/rope-probe
  # the untampered graph: its logits are those of the same weights as a safetensors folder, and
  # inspect says where the model came from and that the config.json agrees
  "$bin" forward "$hf/model.onnx" --ids 3,1,4,1,5,9,2,6 --threads 2 --out "$work/hf.f32" 2> "$work/err" &&
    "$bin" forward "$hf/ref" --ids 3,1,4,1,5,9,2,6 --threads 2 --out "$work/hf_ref.f32" 2>> "$work/err" &&
    check cmp -s "$work/hf.f32" "$work/hf_ref.f32" || bad "hf_gpt2: $(head -1 "$work/err")"
  "$bin" inspect "$hf/model.onnx" > "$work/hf.txt" 2>&1
  check grep -qF "recovered:     gpt2, learned positions (recovered from the graph's pattern)" "$work/hf.txt"
  check grep -qF "config.json: $hf/config.json agrees: model_type gpt2, vocab_size 559, n_embd 16, n_layer 2, n_head 2, n_inner 40, n_positions 128" "$work/hf.txt"
  # verify and a certified patch of a tampered copy: refused naming the node, nothing written
  cp "$rp/tokenizer.json" "$work/hf_gpt2/"
  z=$work/hf_gpt2/attn_zero.onnx
  "$bin" verify "$z" --probe passkey --lengths 80 --samples 2 --certificate "$work/hfz.json" 2> "$work/err" &&
    bad "hf_gpt2: verify of attn_zero.onnx ran" ||
    check grep -qxF "ctxpatch: error CP_EONNX_RECOVER: $z: node 'tamper/attn_zero/0' (Mul, index 77) is on the path to the logits 'last_hidden_state' but no part of the recovered model: the plain-op GPT-2 pattern recovery does not explain it, so the model would not compute what the graph computes" "$work/err"
  "$bin" patch "$z" "$work/hfz.onnx" --method temperature --tau 0.9 --verify passkey --lengths 80 --samples 2 --accept-no-gain --accept-underpowered 2> "$work/err" &&
    bad "hf_gpt2: patch --verify of attn_zero.onnx certified" || check grep -qF "node 'tamper/attn_zero/0' (Mul, index 77)" "$work/err"
  [ -e "$work/hfz.json" ] || [ -e "$work/hfz.onnx" ] && bad "hf_gpt2: a tampered copy left an output" || ok
  # the untampered graph certifies, and the artifact passes check
  cp "$rp/tokenizer.json" "$hf/"
  "$bin" patch "$hf/model.onnx" "$work/hfp.onnx" --method temperature --tau 0.9 --verify passkey --lengths 80 --samples 2 --accept-no-gain --accept-underpowered > /dev/null 2> "$work/err" &&
    "$bin" check "$work/hfp.onnx" > /dev/null 2>> "$work/err" && ok || bad "hf_gpt2: certified patch: $(head -1 "$work/err")"
  # torch.onnx's Llama under Optimum's names (embedding and norms `model.`-named, projections
  # `onnx::MatMul_N`) beside the golden llama's config.json: recovered from its nodes (before:
  # refused, the by-name reader found the projections anonymous), within 1e-4 of the folder
  if [ -f "$work/src/torch_llama.onnx" ]; then
    mkdir -p "$work/hfl" && cp "$src/tests/goldens/engine/models/llama/config.json" "$work/hfl/"
    "$py" - "$work/src/torch_llama.onnx" "$work/hfl/model.onnx" <<'PYEOF'
import sys
import onnx
m = onnx.load(sys.argv[1])
ren = {t.name: "model." + t.name for t in m.graph.initializer if not t.name.startswith("onnx::")}
for t in m.graph.initializer: t.name = ren.get(t.name, t.name)
for n in m.graph.node: n.input[:] = [ren.get(i, i) for i in n.input]
onnx.save(m, sys.argv[2])
PYEOF
    "$bin" forward "$work/hfl/model.onnx" --ids 3,1,4,1,5 --threads 2 --out "$work/hfl.f32" 2> "$work/err" &&
      "$bin" forward "$src/tests/goldens/engine/models/llama" --ids 3,1,4,1,5 --threads 2 --out "$work/hfl_ref.f32" 2>> "$work/err" &&
      "$py" "$t/compare_logits.py" "$work/hfl.f32" "$work/hfl_ref.f32" --vocab 96 --tol 1e-4 --label "hf-named torch llama vs folder" && ok ||
      bad "hf-named torch llama: $(head -1 "$work/err")"
  fi
  # a config.json that describes another model: refused naming the key
  mkdir -p "$work/hfc" && cp "$hf/model.onnx" "$work/hfc/" &&
    sed 's/"n_head": 2/"n_head": 4/' "$hf/config.json" > "$work/hfc/config.json"
  "$bin" forward "$work/hfc/model.onnx" --ids 1,2 --out "$work/hfc.f32" 2> "$work/err" && bad "hf_gpt2: a wrong config.json accepted" ||
    check grep -qxF "ctxpatch: error CP_EONNX_METADATA: $work/hfc/config.json: key 'n_head' gives 4 but the graph gives 2 (the config.json beside the graph describes another model)" "$work/err"
fi

# --- onnxruntime on the graph itself (issue 33 item 1, its last part; patchers/patch_runtime.c):
# torch.onnx's GPT-2 (vocab 559, rope-probe's tokenizer beside it) with the first layer's masked-score
# fill (the -inf Constant its Where puts above the diagonal; the recovery reads the causal mask from
# the lower-triangular buffer, not that value) set to -2. Recovery accepts the copy and reads the
# original's model (forward bit-equal), but onnxruntime now lets masked positions into the scores.
# With onnxruntime, patch --verify refuses the copy before certifying: one line naming the graph, the
# difference and where, nothing written (before: certified, its runtime_check made on ctxpatch's own
# re-export). The original certifies with input_equivalence (onnxruntime on IN) and runtime_check
# (onnxruntime on the written graph) both measured; check --rerun redoes the written graph's
# comparison, and refuses once IN no longer holds the graph the model was recovered from. Without
# onnxruntime both say they were not compared, and check passes.
rp=$src/examples/probe-models/rope-probe
if [ -f "$work/src/tg559.onnx" ]; then
  ie=$work/ie
  mkdir -p "$ie/in" "$ie/bad"
  cp "$work/src/tg559.onnx" "$ie/in/model.onnx"
  cp "$rp/tokenizer.json" "$ie/in/" && cp "$rp/tokenizer.json" "$ie/bad/"
  "$py" - "$ie/in/model.onnx" "$ie/bad/model.onnx" <<'PYEOF' || bad "mask fill copy"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
m = onnx.load(sys.argv[1])
made = {o: n for n in m.graph.node for o in n.output}
for n in m.graph.node:
    c = made.get(n.input[1]) if n.op_type == "Where" else None
    if c is not None and c.op_type == "Constant" and np.isneginf(numpy_helper.to_array(c.attribute[0].t)).all():
        c.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(-2.0, np.float32), c.attribute[0].t.name))
        break
else:
    sys.exit("no Where with a -inf Constant fill")
onnx.save(m, sys.argv[2])
PYEOF
  ids=3,1,4,1,5,9,2,6
  "$bin" forward "$ie/in/model.onnx" --ids $ids --threads 2 --out "$ie/a.f32" 2> "$work/err" &&
    "$bin" forward "$ie/bad/model.onnx" --ids $ids --threads 2 --out "$ie/b.f32" 2>> "$work/err" &&
    check cmp -s "$ie/a.f32" "$ie/b.f32" || bad "mask fill: the recovery does not read the copy as the original: $(head -1 "$work/err")"
  vargs=(--method temperature --tau 0.9 --verify passkey --lengths 80 --samples 2 --accept-no-gain --accept-underpowered)
  cert() { "$py" -c "import json, sys, onnx; print(json.dumps(json.loads({p.key: p.value for p in onnx.load(sys.argv[1]).metadata_props}['ctxpatch.certificate'])))" "$1"; }
  if [ $ort = 1 ]; then
    ort_run "$ie/in/model.onnx" pass $ids "$ie/a.ort.f32" && ort_run "$ie/bad/model.onnx" pass $ids "$ie/b.ort.f32" &&
      ! "$py" "$t/compare_logits.py" "$ie/b.ort.f32" "$ie/a.ort.f32" --vocab 1 --tol 1e-4 > /dev/null 2>&1 && ok ||
      bad "mask fill: onnxruntime computes the same on the copy: not a difference the check must catch"
    "$bin" patch "$ie/bad/model.onnx" "$ie/bad.onnx" "${vargs[@]}" --runtime-dir "$nm" > /dev/null 2> "$work/err"
    s=$?
    [ $s = 1 ] && [ "$(wc -l < "$work/err")" = 1 ] &&
      grep -qF "error CP_EVERIFY_RUNTIME: $ie/bad/model.onnx: onnxruntime computes other logits on this graph than the ctxpatch engine on the model recovered from it (max |diff| " "$work/err" &&
      grep -qE "> 0.001, at position [0-9]+ of prompt 0, [0-9]+ tokens\): the recovery misses part of what the graph computes" "$work/err" &&
      ok || bad "mask fill: patch --verify with onnxruntime (exit $s): $(cat "$work/err")"
    [ $s = 1 ] && echo "mask fill -2: refused $(sed 's/.*(max/(max/; s/): the recovery.*/)/' "$work/err")"
    [ -z "$(find "$ie" -maxdepth 1 -name 'bad.onnx*')" ] && ok || bad "mask fill: refused patch wrote $(find "$ie" -maxdepth 1 -name 'bad.onnx*')"
    "$bin" patch "$ie/in/model.onnx" "$ie/out.onnx" "${vargs[@]}" --runtime-dir "$nm" > "$ie/p.out" 2> "$work/err" &&
      check grep -qF "input graph: onnxruntime computes on the input graph the logits the ctxpatch engine computes on the model recovered from it" "$ie/p.out" ||
      bad "certified patch with onnxruntime: $(head -1 "$work/err")"
    cert "$ie/out.onnx" | "$py" -c '
import json, os, sys
c = json.load(sys.stdin)
ie, rc = c["input_equivalence"], c["runtime_check"]
for o, graph in ((ie, "the input graph"), (rc, "the written graph")):
    assert o["runtime"] == "onnxruntime" and o["version"].startswith("onnxruntime-node "), o
    assert o["result"] == "equal" and o["graph"] == graph and o["weights"] == "f32", o
    assert 0 <= o["max_abs_logit_diff"] <= o["tolerance"] == 1e-3 and o["positions"] >= 1, o
    assert o["prompts_sha256"] == ie["prompts_sha256"], o
assert ie["path"] == os.path.realpath(sys.argv[1]) and len(ie["graph_sha256"]) == 64, ie
assert rc["statement"].startswith("certified on the ctxpatch engine; onnxruntime computes the same logits"), rc
' "$ie/in/model.onnx" && ok || bad "certified patch with onnxruntime: certificate"
    [ ! -e "$ie/out.onnx.ctxpatch-runtime.onnx" ] && ok || bad "the graph onnxruntime ran was left beside OUT"
    "$bin" check "$ie/out.onnx" --rerun --runtime-dir "$nm" > "$ie/c.out" 2> "$work/err" &&
      check grep -qF "runtime re-run: equal" "$ie/c.out" || bad "check --rerun: $(cat "$ie/c.out" "$work/err")"
    cp "$ie/bad/model.onnx" "$ie/in/model.onnx" # IN changed after certifying: the rerun has no model to run
    "$bin" check "$ie/out.onnx" --rerun --runtime-dir "$nm" > "$ie/c.out" 2>&1 && bad "check --rerun after IN changed passed" ||
      check grep -qF "the input graph the model was recovered from has changed" "$ie/c.out"
    cp "$work/src/tg559.onnx" "$ie/in/model.onnx"
    # kill -9 while onnxruntime runs the graph written beside OUT: the CLI's watchdog removes it
    # (before: OUT.ctxpatch-runtime.onnx stayed until a rerun). Waits are bounded by poll counts.
    "$py" - "$ie/kill.onnx" "$bin" patch "$ie/in/model.onnx" "$ie/kill.onnx" "${vargs[@]}" --runtime-dir "$nm" <<'PYEOF' &&
import os, signal, subprocess, sys, time
tmp = sys.argv[1] + ".ctxpatch-runtime.onnx"
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while p.poll() is None and not os.path.exists(tmp):
    time.sleep(0.005)
if p.poll() is not None:
    sys.exit("the run ended before its runtime graph appeared")
p.send_signal(signal.SIGKILL)
p.wait()
for _ in range(2000):  # up to ~10 s for the watchdog's rm
    if not os.path.exists(tmp):
        break
    time.sleep(0.005)
sys.exit(0 if not os.path.exists(tmp) and not os.path.exists(sys.argv[1]) else "left: " + " ".join(
    n for n in os.listdir(os.path.dirname(tmp)) if n.startswith("kill.onnx")))
PYEOF
      ok || bad "kill -9 during the runtime check left its graph beside OUT"
  else
    echo "note: onnxruntime-node not installed: the input graph's comparison and its refusal not checked"
  fi
  env -u CTXPATCH_RUNTIMES "$bin" patch "$ie/in/model.onnx" "$ie/nort.onnx" "${vargs[@]}" > /dev/null 2> "$work/err" &&
    cert "$ie/nort.onnx" | "$py" -c '
import json, sys
c = json.load(sys.stdin)
ie, rc = c["input_equivalence"], c["runtime_check"]
assert rc["result"] == "not checked" and rc["statement"] == "certified on the ctxpatch engine; runtime equivalence not checked", rc
assert ie["result"] == "not checked", ie
assert ie["statement"] == "the model recovered from the input graph was not compared with the graph in onnxruntime", ie
' && "$bin" check "$ie/nort.onnx" > /dev/null 2>> "$work/err" && ok || bad "certified patch without onnxruntime: $(head -1 "$work/err")"
fi

finish
