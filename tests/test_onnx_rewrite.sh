#!/usr/bin/env bash
# Patching an ONNX graph in place (`patch IN.onnx OUT.onnx`, export/onnx/rewrite/onnx_rewrite.c,
# formats/onnx_edit.c; docs/onnx.md "Patching a third-party graph in place"), run in
# onnxruntime-node:
#  - ctxpatch's own exports (engine golden models gpt2, llama, bloom, mpt, exported with no rule): the
#    rewritten graph's logits equal `ctxpatch forward --rule` (the C engine) within 1e-4, in one
#    pass and through the cache, and `forward` on the rewritten graph (the rule read back from its
#    metadata) gives the same logits;
#  - third-party graphs (../shared/fixtures: onnxruntime/gpt2_past.onnx, plain ops;
#    onnxruntime-genai tiny-random-gpt2 with com.microsoft Attention; tiny-random-Llama fp16 with
#    MultiHeadAttention + RotaryEmbedding and external data; onnxruntime/attention_opt.onnx, one
#    Attention without a past, weights drawn at random by python): outputs equal a reference built
#    without ctxpatch's code (tests/onnx/rewrite_check.py: the temperature baked into the query
#    weights by python3-onnx/numpy, a schedule's tau at the decode row's length computed by
#    numpy from the spec's interpolation, the Lambda mask as a numpy constant added before each
#    attention Softmax) within 1e-4, and the original graph differs from that reference by more
#    (the check can fail);
#  - every node but the changed ones, every initializer, input, output, value_info, opset and
#    metadata entry compares byte-equal (python3-onnx), and untouched nodes occur verbatim in the
#    file; the external data file is copied beside OUT byte for byte; the stored
#    ctxpatch.graph_sha256 is the digest tests/onnx/graph_digest.py recomputes (docs/onnx.md);
#  - Lambda on com.microsoft attention with a cache, from the nodes' runtime shapes: the fused
#    GPT-2's Attention with a past (as its mask_index; also on a copy without one), and
#    make_mha_graph.py's MultiHeadAttention and GroupQueryAttention decoders (as their
#    attention_bias), each on a prefill and on 2 tokens after 9 cached (GQA also a batch of two
#    lengths), against the numpy bias / mask as a constant in the same place;
#  - refusals, one line naming the node: a training graph (BLOOM), Lambda on a cross-attention
#    MultiHeadAttention, on an Attention with a past and a 1-D mask_index, Lambda on RoPE (own llama
#    export: its Cos node; Llama fp16: its RotaryEmbedding), rules the rewriter does not express,
#    per-layer taus of the wrong count, a graph with no attention, no --no-verify on a graph whose
#    model cannot be recovered; nothing written;
#  - certification where the model can be recovered (ctxpatch's export of the rope probe): the
#    certificate in metadata_props, no temporary left, a failing verdict writes nothing.
# Skips (77) without onnxruntime-node / python3-onnx, and the third-party part without fixtures.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/onnx/env.sh"
onnx_env onnxruntime-node
models=$src/tests/goldens/engine/models
chk=$t/rewrite_check.py
fx=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party
ids=$(seq -s, 1 48 | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), ($i*7+3)%96}')

# run MODEL SPEC OUTDIR: onnxruntime-node on the inputs of SPEC
run() { rm -rf "$3" && mkdir -p "$3" && node "$t/ort_feed.mjs" "$1" "$2" "$3"; }

# --- ctxpatch's own exports against the C engine -------------------------------------------------
# step_ref MODEL RULE OUT IDS_VAR: the engine through its KV cache (`forward --generate 18
# --step-logits`) after a prefill of the first 30 ids: OUT = the prefill's rows 0..28 (one pass,
# `forward`), then the logits each of the 18 generated tokens was chosen from (row 29, then one row
# per step); the prompt plus the first 17 generated tokens go to IDS_VAR, for onnxruntime's split
# run to feed the same tokens. What a rule whose F depends on the pass (dynamic ALiBi: T keys)
# gives through the cache.
step_ref() {
  local model=$1 rule=$2 out=$3 p30 gen
  p30=$(echo "$ids" | cut -d, -f1-30)
  "$bin" forward "$models/$model" --ids "$p30" --rule "$rule" --out "$out.prefill" >/dev/null || return 1
  gen=$("$bin" forward "$models/$model" --ids "$p30" --rule "$rule" --generate 18 --step-logits "$out.steps") || return 1
  printf -v "$4" '%s,%s' "$p30" "$(echo "$gen" | cut -d, -f1-17)"
  "$py" - "$out" <<'PYEOF'
import sys
import numpy as np
out = sys.argv[1]
pre = np.fromfile(f"{out}.prefill", "<f4").reshape(30, 96)
steps = np.fromfile(f"{out}.steps", "<f4").reshape(18, 96)
np.concatenate([pre[:29], steps]).astype("<f4").tofile(out)
PYEOF
}

# own MODEL NAME RULE_JSON NODES_CHANGED INITS_CHANGED PATCH_ARGS... : export without a rule,
# rewrite, compare with forward --rule (per_pass=1: the split against step_ref)
own() {
  local model=$1 name=$2 rule=$3 nn=$4 ni=$5; shift 5
  local exp=$work/$model.exp d=$work/$model.$name
  [ -d "$exp" ] || "$bin" convert "$models/$model" "$exp" --to onnx >/dev/null || { bad "$model: export"; return; }
  rm -rf "$d" && cp -r "$exp" "$d"
  echo "$rule" >"$d.json"
  "$bin" patch "$exp/onnx/model.onnx" "$d/onnx/model.onnx" --force --no-verify "$@" >"$d.log" 2>&1 \
    || { bad "$model $name: patch"; cat "$d.log"; return; }
  "$bin" forward "$models/$model" --ids "$ids" --rule "$d.json" --out "$d.ref" >/dev/null || { bad "$model $name: forward"; return; }
  node "$t/ort_run.mjs" "$d" --ids "$ids" --out "$d.ort" --split 30 --split-out "$d.split" || { bad "$model $name: ort_run"; return; }
  local line sref=$d.ref sids
  if [ -n "${per_pass:-}" ]; then
    step_ref "$model" "$d.json" "$d.sref" sids && sref=$d.sref || { bad "$model $name: step reference"; return; }
    node "$t/ort_run.mjs" "$d" --ids "$sids" --out "$d.split" --split 30 || { bad "$model $name: ort_run steps"; return; }
  fi
  line=$("$py" "$t/compare_logits.py" "$d.ort" "$d.ref" --vocab 96 --label "$model $name one-pass") && ok || bad "$line"
  echo "$line"
  line=$("$py" "$t/compare_logits.py" "$d.split" "$sref" --vocab 96 --label "$model $name prefill 30 + steps") && ok || bad "$line"
  echo "$line"
  [ -f "$work/$model.ident" ] || "$bin" forward "$models/$model" --ids "$ids" --out "$work/$model.ident" >/dev/null
  "$py" "$t/compare_logits.py" "$d.ort" "$work/$model.ident" --vocab 96 >/dev/null && bad "$model $name: the rule changes nothing" || ok
  "$py" "$chk" kept "$exp/onnx/model.onnx" "$d/onnx/model.onnx" "$nn" "$ni" >/dev/null && ok || bad "$model $name: untouched parts differ"
  "$py" "$t/graph_digest.py" --stored "$d/onnx/model.onnx" && ok || bad "$model $name: graph digest"
  # Read back: the rule comes from the rewritten graph's metadata, the engine computes the same.
  "$bin" forward "$d/onnx/model.onnx" --ids "$ids" --out "$d.back" >/dev/null &&
    "$py" "$t/compare_logits.py" "$d.back" "$d.ref" --vocab 96 --tol 1e-6 >/dev/null && ok || bad "$model $name: forward on the rewritten graph"
}
own gpt2 tau '{"temperature": 0.8}' 3 0 --method temperature --tau 0.8
own gpt2 per_layer '{"temperature": [0.7, 0.9, 1.2]}' 3 0 --rule "$work/gpt2.per_layer.json"
own gpt2 lambda '{"lambda_mask": {"n_global": 2, "n_local": 8}}' 3 0 --method lm-infinite --n-global 2 --n-local 8
own llama tau '{"temperature": 0.8}' 3 0 --method temperature --tau 0.8
sched='{"temperature_schedule": {"points": [[12, 1.0], [24, 0.8], [48, 0.7]]}}'
own gpt2 schedule "$sched" 3 0 --rule "$work/gpt2.schedule.json"
own llama schedule "$sched" 3 0 --rule "$work/llama.schedule.json"
# Both row-wise pieces in one site (each used to add its own <p>const/col: a duplicate initializer).
sched_lambda='{"temperature_schedule": {"points": [[12, 1.0], [24, 0.8], [48, 0.7]]}, "lambda_mask": {"n_global": 2, "n_local": 8}}'
own gpt2 sched_lambda "$sched_lambda" 3 0 --rule "$work/gpt2.sched_lambda.json"
# Static ALiBi: the slopes constant (float64 in ctxpatch's exports; MPT's alibi_bias_max 6, 6 heads)
# is replaced in place by m_h / F; no node changes.
own bloom alibi '{"alibi_scale": {"mode": "static", "factor": 2.0}}' 0 1 --method alibi-pi --factor 2
own mpt alibi '{"alibi_scale": {"mode": "static", "factor": 2.0}}' 0 1 --method alibi-pi --factor 2
# Dynamic and progressive ALiBi: the term the slopes make is multiplied by 1 / F before it meets the
# scores (one node changed per layer: the Add reading it), F from the scores' shape at run time;
# train_len 16 and 20, so 48 tokens reach F = 3 and 2.4 (the config's 24 would make dynamic
# F = 2 in one pass, the static rewrite's factor). Dynamic's F is per pass:
# through the cache it is compared with the engine's own cached generation (step_ref). Each differs from
# the static rewrite (and, in own(), from the unpatched graph).
for model in bloom mpt; do
  nl=$([ $model = bloom ] && echo 3 || echo 2)
  for tl in 16 20; do
    per_pass=1 own $model dyn$tl "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": $tl}" "$nl" 0 \
      --method alibi-pi --dynamic --train-len $tl
    own $model prog$tl "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": $tl}" "$nl" 0 \
      --method alibi-pi --progressive --train-len $tl
    for mode in dyn prog; do
      "$py" "$t/compare_logits.py" "$work/$model.$mode$tl.ort" "$work/$model.alibi.ort" --vocab 96 >/dev/null \
        && bad "$model $mode$tl: equals the static rewrite" || ok
    done
  done
done
# No training length: a --rule without train_len is refused with --no-verify (no model is run to
# give the config's); the method without --train-len is a usage error there.
echo '{"alibi_scale": {"mode": "progressive"}}' >"$work/prog_nolen.json"
"$bin" patch "$work/bloom.exp/onnx/model.onnx" "$work/b.onnx" --rule "$work/prog_nolen.json" --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/b.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] && grep -q '^ctxpatch: error CP_ERULE_MODEL: .*model.onnx: alibi_scale mode "progressive" needs a training length: give train_len in the rule' "$work/e" \
  && ok || { bad "progressive without train_len: exit $s"; cat "$work/e"; }
"$bin" patch "$work/bloom.exp/onnx/model.onnx" "$work/b.onnx" --method alibi-pi --dynamic --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 2 ] && [ ! -e "$work/b.onnx" ] && grep -q "alibi-pi --factor F | --dynamic --train-len N" "$work/e" \
  && ok || { bad "dynamic without --train-len: exit $s"; cat "$work/e"; }
# A term not proportional to the slopes (here slopes + 0 before the distance product: an Add that
# python3-onnx splices into the bloom export, rewrite_check.py alibi-variant) cannot be rescaled:
# refused naming both nodes.
"$py" "$chk" alibi-variant affine "$work/bloom.exp" "$work/bloom_affine"
"$bin" patch "$work/bloom_affine/onnx/model.onnx" "$work/b.onnx" --method alibi-pi --dynamic --train-len 16 --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/b.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] && grep -q "^ctxpatch: error CP_EONNX_SITE: .*(Add): the ALiBi term it adds to the logits of node .* (Softmax) is not proportional to the slopes (node 'affine/add' (Add) combines them with another term): alibi_scale dynamic cannot scale it" "$work/e" \
  && ok || { bad "affine ALiBi term: exit $s"; cat "$work/e"; }
# A site whose logits get no term from the slopes through an Add (here layer 0's Add(scores, term)
# made Sub(term, scores), a term that is not ALiBi's -m d added to the scores) is refused, naming
# its Softmax; the slopes are still found through the other layers.
"$py" "$chk" alibi-variant noterm "$work/bloom.exp" "$work/bloom_noterm"
"$bin" patch "$work/bloom_noterm/onnx/model.onnx" "$work/b.onnx" --method alibi-pi --progressive --train-len 16 --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/b.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] && grep -q "^ctxpatch: error CP_EONNX_SITE: .*model.onnx: node [0-9]* (Softmax): no ALiBi term (a slopes constant times a distance) is added on its logits' way from its q.k MatMul, so alibi_scale progressive has nothing to scale" "$work/e" \
  && ok || { bad "site without an ALiBi term: exit $s"; cat "$work/e"; }
"$bin" patch "$work/bloom.exp/onnx/model.onnx" "$work/b.onnx" --method lm-infinite --n-local 8 --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/b.onnx" ] && grep -q "^ctxpatch: error CP_EONNX_SITE: .*initializer 'const/9' (ALiBi slopes): lambda_mask implies a distance ceiling of 8" "$work/e" \
  && ok || { bad "bloom export lambda: exit $s"; cat "$work/e"; }
# RoPE built from ops (Cos, Sin): the ceiling Lambda implies cannot reach it.
"$bin" patch "$work/llama.exp/onnx/model.onnx" "$work/l.onnx" --method lm-infinite --n-local 8 --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/l.onnx" ] && grep -q "^ctxpatch: error CP_EONNX_SITE: .*(Cos): lambda_mask implies a distance ceiling of 8 on RoPE" "$work/e" \
  && ok || { bad "llama export lambda: exit $s"; cat "$work/e"; }
# Certified: a graph whose model ctxpatch recovers (its own export of the rope probe model) is
# certified on the C engine under the rule (as `patch --to onnx`), then rewritten; the
# certificate's bytes travel in metadata_props with their sha256, its report beside the graph; the
# temporary folder is gone;
# the rewritten graph computes `forward --rule`. A failing certification writes nothing.
probe=$src/examples/probe-models/rope-probe
V="--lengths 256,512 --depths 0:1:3 --samples 2 --threads 1 --accept-no-gain --accept-underpowered"
"$bin" convert "$probe" "$work/rp" --to onnx >/dev/null && mkdir -p "$work/cert" && ok || bad "rope-probe export"
"$bin" patch "$work/rp" "$work/cert/rw.onnx" --method temperature --tau 0.9 $V >"$work/c.log" 2>&1 \
  && grep -q "^wrote $work/cert/rw.onnx (certified, certificate sha256" "$work/c.log" && ok || { bad "certified rewrite"; cat "$work/c.log"; }
[ "$(ls -A "$work/cert" | sort | tr '\n' ' ')" = "model.onnx.data rw.onnx rw.onnx.report.html " ] && ok ||
  bad "left behind: $(ls -A "$work/cert")"
"$py" - "$work/cert/rw.onnx" <<'PYEOF' && ok || bad "certificate in metadata_props"
import hashlib, json, sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
d = {p.key: p.value for p in m.metadata_props}
cert = json.loads(d["ctxpatch.certificate"])
assert d["ctxpatch.certified"] == "true" and d["ctxpatch.fidelity"] == "graph-rewrite", d.keys()
assert hashlib.sha256(d["ctxpatch.certificate"].encode()).hexdigest() == d["ctxpatch.certificate_sha256"]
assert cert["rule"] == json.loads(d["ctxpatch.rule"]) == {"temperature": 0.9}, cert["rule"]
assert cert["verdict"]["result"] == "pass", cert["verdict"]
PYEOF
mkdir -p "$work/rpo/onnx" && cp "$work/cert/rw.onnx" "$work/rpo/onnx/model.onnx" && cp "$work/cert/model.onnx.data" "$work/rpo/onnx/" \
  && cp "$work/rp/config.json" "$work/rpo/" && echo '{"temperature": 0.9}' >"$work/rp.json"
"$bin" forward "$probe" --ids "$ids" --rule "$work/rp.json" --out "$work/rp.ref" >/dev/null &&
  node "$t/ort_run.mjs" "$work/rpo" --ids "$ids" --out "$work/rp.ort" &&
  "$py" "$t/compare_logits.py" "$work/rp.ort" "$work/rp.ref" --vocab "$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$probe/config.json")" \
    --label "rope-probe certified tau" && ok || bad "certified rewrite against forward --rule"
"$bin" patch "$work/rp" "$work/cert/fail.onnx" --method temperature --tau 3 $V >"$work/f.log" 2>&1; s=$?
[ $s -eq 1 ] && [ ! -e "$work/cert/fail.onnx" ] && grep -q "nothing written" "$work/f.log" && [ -z "$(ls -A "$work/cert" | grep '^\.')" ] \
  && ok || { bad "failing certification: exit $s"; cat "$work/f.log"; }
# Certified progressive ALiBi without --train-len: the model's (alibi-probe's config, 256), which
# the certification's engine run used and its certificate records, goes into the graph and its
# ctxpatch.rule; the rewritten graph computes `forward --rule` with that train_len at 320 tokens.
ap=$src/examples/probe-models/alibi-probe
"$bin" convert "$ap" "$work/ap" --to onnx >/dev/null && mkdir -p "$work/cert2/onnx" && ok || bad "alibi-probe export"
"$bin" patch "$work/ap" "$work/cert2/onnx/model.onnx" --method alibi-pi --progressive --verify passkey --lengths 256 \
  --depths 0:1:3 --samples 2 --threads 1 --accept-no-gain --accept-underpowered >"$work/c2.log" 2>&1 && grep -q "(certified, certificate sha256" "$work/c2.log" \
  && ok || { bad "certified progressive rewrite"; cat "$work/c2.log"; }
"$py" -c "import json, sys, onnx; d = {p.key: p.value for p in onnx.load(sys.argv[1], load_external_data=False).metadata_props}; \
assert json.loads(d['ctxpatch.rule']) == {'alibi_scale': {'mode': 'progressive'}, 'train_len': 256}, d['ctxpatch.rule']" \
  "$work/cert2/onnx/model.onnx" && ok || bad "certified progressive: train_len in ctxpatch.rule"
cp "$work/ap/config.json" "$work/cert2/"
echo '{"alibi_scale": {"mode": "progressive"}, "train_len": 256}' >"$work/ap.json"
apids=$(seq -s, 1 320 | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), ($i*37+11)%500+4}')
"$bin" forward "$ap" --ids "$apids" --rule "$work/ap.json" --out "$work/ap.ref" >/dev/null &&
  node "$t/ort_run.mjs" "$work/cert2" --ids "$apids" --out "$work/ap.ort" &&
  "$py" "$t/compare_logits.py" "$work/ap.ort" "$work/ap.ref" --vocab 559 --label "alibi-probe certified progressive" \
  && ok || bad "certified progressive rewrite against forward --rule"
# No model recoverable (a third-party graph, below) and no --no-verify: refused, nothing written.
# Options of the other paths are usage errors.
"$bin" patch "$work/gpt2.exp/onnx/model.onnx" "$work/u.onnx" --method temperature --tau 0.8 --no-verify --to onnx >/dev/null 2>&1
[ $? -eq 2 ] && [ ! -e "$work/u.onnx" ] && ok || bad "--to onnx with an in-place rewrite accepted"
"$bin" patch "$work/gpt2.exp/onnx/model.onnx" "$work/u.onnx" --method temperature --no-verify >/dev/null 2>&1
[ $? -eq 2 ] && [ ! -e "$work/u.onnx" ] && ok || bad "temperature without --tau accepted (nothing to calibrate with)"

# Bad input and outputs: one line, exit 1, nothing written (the input untouched).
cp "$work/gpt2.exp/onnx/model.onnx" "$work/same.onnx" && sum0=$(sha256sum <"$work/same.onnx")
"$bin" patch "$work/same.onnx" "$work/same.onnx" --method temperature --tau 0.8 --no-verify --force >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && grep -q "CP_EOVERLAP" "$work/e" && [ "$(sha256sum <"$work/same.onnx")" = "$sum0" ] && ok || { bad "OUT = IN: exit $s"; cat "$work/e"; }
head -c 300 "$work/gpt2.exp/onnx/model.onnx" >"$work/trunc.onnx"
"$bin" patch "$work/trunc.onnx" "$work/t.onnx" --method temperature --tau 0.8 --no-verify >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/t.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] && grep -q "^ctxpatch: error CP_EONNX_WIRE: .*trunc.onnx: offset" "$work/e" \
  && ok || { bad "truncated graph: exit $s"; cat "$work/e"; }

# --- third-party graphs against references built without ctxpatch -------------------------------
if [ ! -f "$fx/onnxruntime/gpt2_past.onnx" ]; then
  echo "SKIP (part): ../shared/fixtures/third_party not found at $fx"
  finish
  exit
fi

# third KIND MODEL NAME N_CHANGED OUTPUTS REF_ARGS -- PATCH_ARGS...
third() {
  local kind=$1 model=$2 name=$3 nchanged=$4 outs=$5 refcmd=$6 refargs=$7; shift 7
  local d=$work/$kind.$name
  mkdir -p "$d/in"
  "$py" "$chk" inputs "$kind" "$d/in"
  "$bin" patch "$model" "$d/out.onnx" --no-verify "$@" >"$d.log" 2>&1 || { bad "$kind $name: patch"; cat "$d.log"; return; }
  # shellcheck disable=SC2086
  "$py" "$chk" "$refcmd" "$model" "$d/ref.onnx" $refargs || { bad "$kind $name: reference"; return; }
  run "$d/out.onnx" "$d/in/spec.json" "$d/x" && run "$d/ref.onnx" "$d/in/spec.json" "$d/r" && run "$model" "$d/in/spec.json" "$d/o" \
    || { bad "$kind $name: onnxruntime"; return; }
  local line
  line=$("$py" "$chk" compare "$d/x" "$d/r" "$outs") && ok || bad "$kind $name: $line"
  echo "$kind $name: rewritten vs reference: $line"
  line=$("$py" "$chk" compare "$d/o" "$d/r" "${outs%%,*}") && bad "$kind $name: the original equals the reference" || ok
  echo "$kind $name: original vs reference (must differ): $line"
  "$py" "$chk" kept "$model" "$d/out.onnx" "$nchanged" && ok || bad "$kind $name: untouched parts differ"
  "$py" "$t/graph_digest.py" --stored "$d/out.onnx" && ok || bad "$kind $name: graph digest"
}
g2=$fx/onnxruntime/gpt2_past.onnx
third gpt2_past "$g2" tau 12 last_state,present_0 ref-tau 0.8 --method temperature --tau 0.8
per=$("$py" -c "print(','.join(str(round(0.6 + 0.05 * l, 2)) for l in range(12)))")
echo "{\"temperature\": [$per]}" >"$work/per12.json"
# layer 8's tau is 1: its Softmax is left as it was (11 changed).
third gpt2_past "$g2" per_layer 11 last_state,present_0 ref-tau "$per" --rule "$work/per12.json"
# The decode row sees T = 6 keys (5 cached): tau(6) between the points (4, 1.0) and (8, 0.7).
pts='[[4,1.0],[8,0.7]]'
echo "{\"temperature_schedule\": {\"points\": $pts}}" >"$work/sched12.json"
third gpt2_past "$g2" schedule 12 last_state,present_0 ref-sched "6 $pts" --rule "$work/sched12.json"
third gpt2_past "$g2" lambda 12 last_state,present_0 ref-lambda "1 3 1 6" --method lm-infinite --n-global 1 --n-local 3
cg=$fx/onnxruntime-genai/tiny-random-gpt2-fp32/past.onnx
third genai_gpt2 "$cg" tau 5 logits,present_0 ref-tau 0.8 --method temperature --tau 0.8
# com.microsoft Attention without a past: the Lambda bias as its attention_bias (input 5). The
# fixture's weights are all ones (every score ties), so a copy with random weights is used.
"$py" "$chk" randomize "$fx/onnxruntime/attention_opt.onnx" "$work/attention_opt_random.onnx"
third attention_opt "$work/attention_opt_random.onnx" lambda 1 output ref-lambda "1 1 3 3" --method lm-infinite --n-global 1 --n-local 1
third attention_opt "$work/attention_opt_random.onnx" tau 1 output ref-tau 0.5 --method temperature --tau 0.5
# com.microsoft Attention with a past (onnxruntime refuses it an attention_bias): the Lambda mask as
# its mask_index [B, S, T] int32, ANDed with the graph's attention_mask; a prefill (an empty past,
# 8 tokens) and 2 tokens after 9 cached (key 0 global, keys 1..6 or 1..7 outside n_local 3, key 7
# also padded by attention_mask), positions absolute (past + row).
for x in "prefill 8 8" "decode 2 11"; do
  read -r ph S T <<<"$x"
  third genai_gpt2_$ph "$cg" lambda 5 logits,present_0 ref-lambda "1 3 $S $T $work/genai_gpt2_$ph.lambda/in/attention_mask.bin" \
    --method lm-infinite --n-global 1 --n-local 3
done
# The same Attention graph without a mask_index: the keep mask expanded over the batch.
"$py" - "$cg" "$work/genai_nomask.onnx" <<'PY' || bad "making the graph without a mask"
import sys, onnx
m = onnx.load(sys.argv[1])
for n in m.graph.node:
    if n.op_type == "Attention":
        n.input[3] = ""
keep = [i for i in m.graph.input if i.name != "attention_mask"]
del m.graph.input[:]
m.graph.input.extend(keep)
onnx.save(m, sys.argv[2])
PY
third genai_gpt2_nomask "$work/genai_nomask.onnx" lambda 5 logits,present_0 ref-lambda "1 3 2 11 $work/genai_gpt2_nomask.lambda/in/ones.bin" \
  --method lm-infinite --n-global 1 --n-local 3
# MultiHeadAttention (attention_bias, input 5) and GroupQueryAttention (attention_bias, input 10)
# without rotary embeddings: tests/onnx/make_mha_graph.py's 2-layer decoders with learned positions.
for op in mha gqa; do
  "$py" "$t/make_mha_graph.py" "$work/$op.onnx" $op || bad "make_mha_graph.py $op"
  third ${op}_prefill "$work/$op.onnx" lambda 2 logits,present_key.0 ref-lambda "1 3 8 8" --method lm-infinite --n-global 1 --n-local 3
  third ${op}_decode "$work/$op.onnx" lambda 2 logits,present_key.0 ref-lambda "1 3 2 11" --method lm-infinite --n-global 1 --n-local 3
done
# GQA, a batch of two sequences of different lengths (seqlens_k 9 and 7, one new token each): each
# sequence's query at its own position.
third gqa_batch "$work/gqa.onnx" lambda 2 logits,present_key.0 ref-lambda "1 3 1 10 $work/gqa_batch.lambda/in/seqlens_k.bin" \
  --method lm-infinite --n-global 1 --n-local 3
ll=$fx/onnxruntime-genai/tiny-random-LlamaForCausalLM-fp16
# tau 0.25: 1/tau is exact in float16, so the reference's scaled weights round nowhere.
third llama_fp16 "$ll/model.onnx" tau 2 logits,present.0.key ref-tau 0.25 --method temperature --tau 0.25
cmp -s "$ll/model.onnx.data" "$work/llama_fp16.tau/model.onnx.data" && ok || bad "external data not copied beside OUT byte for byte"

# Refusals: one line naming the node (or the rule), exit 1, nothing written; code CP_EONNX_SITE
# unless $code says otherwise.
code=CP_EONNX_SITE
refuse() {
  local what=$1 model=$2 pattern=$3; shift 3
  "$bin" patch "$model" "$work/refused.onnx" --no-verify "$@" >/dev/null 2>"$work/e"; local s=$?
  [ $s -eq 1 ] && [ ! -e "$work/refused.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] && grep -q -- "$pattern" "$work/e" \
    && grep -q "^ctxpatch: error $code: " "$work/e" && ok || { bad "$what: exit $s"; cat "$work/e"; }
}
refuse "BLOOM training graph" "$fx/onnxruntime/3layer_bloom_optimized_training.onnx" \
  "node 'YieldOp' (com.microsoft YieldOp): a training graph" --method temperature --tau 0.8
refuse "Llama fp16 lambda" "$ll/model.onnx" \
  "(com.microsoft RotaryEmbedding): lambda_mask implies a distance ceiling of 4 on RoPE" --method lm-infinite --n-local 4
# A MultiHeadAttention whose keys come from another value (cross-attention): not a decoder's self-attention.
"$py" - "$work/mha.onnx" "$work/mha_cross.onnx" <<'PY' || bad "making the cross-attention graph"
import sys, onnx
m = onnx.load(sys.argv[1])
m.graph.input.append(onnx.helper.make_tensor_value_info("encoder_states", onnx.TensorProto.FLOAT, ["batch", "enc", 32]))
next(n for n in m.graph.node if n.name == "layers.1.k").input[0] = "encoder_states"
onnx.save(m, sys.argv[2])
PY
refuse "MHA cross-attention lambda" "$work/mha_cross.onnx" "node 'layers.1.attention' (com.microsoft MultiHeadAttention): its keys are not projected from the query's hidden states" \
  --method lm-infinite --n-local 4
# An Attention with a past whose mask_index is 1-D (lengths): not combined with the Lambda mask.
"$py" - "$cg" "$work/genai_1d.onnx" <<'PY' || bad "making the 1-D mask graph"
import sys, onnx
m = onnx.load(sys.argv[1])
i = next(v for v in m.graph.input if v.name == "attention_mask")
del i.type.tensor_type.shape.dim[1]
onnx.save(m, sys.argv[2])
PY
refuse "Attention past with a 1-D mask" "$work/genai_1d.onnx" "node 'GptAttention_0' (com.microsoft Attention): lambda_mask with a past goes through mask_index (onnxruntime refuses attention_bias with a past), and its mask_index 'attention_mask' is 1-D (lengths)" \
  --method lm-infinite --n-local 4
refuse "contrib schedule" "$cg" "(com.microsoft Attention): temperature_schedule gives each row its own tau" \
  --rule "$work/sched12.json"
refuse "alibi without slopes" "$g2" "alibi_scale: no ALiBi slopes constant .* upstream of node 'Softmax_175' (Softmax)" \
  --method alibi-pi --factor 2
echo '{"alibi_scale": {"mode": "dynamic"}, "train_len": 8}' >"$work/alibid.json"
refuse "dynamic alibi without slopes" "$g2" "alibi_scale: no ALiBi slopes constant .* upstream of node 'Softmax_175' (Softmax)" \
  --rule "$work/alibid.json"
refuse "progressive alibi without slopes" "$g2" "alibi_scale: no ALiBi slopes constant .* upstream of node 'Softmax_175' (Softmax)" \
  --method alibi-pi --progressive --train-len 8
echo '{"lambda_mask": {"n_global": 1, "n_local": 3}, "distance_ceiling": 3}' >"$work/ceil.json"
refuse "distance_ceiling" "$g2" "distance_ceiling at node 'Softmax_175' (Softmax): not expressed by the in-place rewriter" \
  --rule "$work/ceil.json"
echo '{"temperature": [0.9, 0.8]}' >"$work/per2.json"
refuse "per-layer count" "$g2" "2 per-layer temperatures for 12 attention sites" --rule "$work/per2.json"
"$bin" patch "$g2" "$work/nv.onnx" --method temperature --tau 0.8 >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/nv.onnx" ] && grep -q "gpt2_past.onnx: no tokenizer.json, tokenizer.model or spiece.model beside the graph or in its parent folder; the probes need it to certify, --no-verify writes" "$work/e" \
  && ok || { bad "gpt2_past (recovered, no tokenizer) without --no-verify: exit $s"; cat "$work/e"; }
refuse "no attention" "$fx/onnxruntime/external-data/model_with_external_initializers.onnx" "no attention site found" \
  --method temperature --tau 0.8
# A graph rewritten once carries its rule: rewriting it again is refused (patch the original).
refuse "rewritten twice" "$work/gpt2_past.tau/out.onnx" \
  "metadata_props ctxpatch.rule: the graph already carries a ctxpatch rule" --method temperature --tau 0.9
# External data in a subfolder of IN's folder is not copied beside OUT.
mkdir -p "$work/subext/data" "$work/subext_out"
cp "$ll/model.onnx.data" "$work/subext/data/"
"$py" - "$ll/model.onnx" "$work/subext/model.onnx" <<'PY' || bad "making the subfolder data graph"
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
for t in m.graph.initializer:
    for e in t.external_data:
        if e.key == "location": e.value = "data/" + e.value
onnx.save(m, sys.argv[2])
PY
"$bin" patch "$work/subext/model.onnx" "$work/subext_out/out.onnx" --no-verify --method temperature --tau 0.5 \
  >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/subext_out/out.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] \
  && grep -q "^ctxpatch: error CP_EONNX_EXTERNAL: .*external data 'data/model.onnx.data' lies in a subfolder" "$work/e" \
  && ok || { bad "external data in a subfolder: exit $s"; cat "$work/e"; }
# Certified (no --no-verify) on a graph no model can be recovered from (attention only): refused.
"$bin" patch "$work/attention_opt_random.onnx" "$work/nomodel.onnx" --method temperature --tau 0.5 >/dev/null 2>"$work/e"; s=$?
[ $s -eq 1 ] && [ ! -e "$work/nomodel.onnx" ] && [ "$(wc -l <"$work/e")" -eq 1 ] \
  && grep -q "^ctxpatch: error CP_EONNX_RECOVER: .*attention_opt_random.onnx: no model description can be recovered from this graph" "$work/e" \
  && ok || { bad "certified rewrite of an unrecoverable graph: exit $s"; cat "$work/e"; }
finish
