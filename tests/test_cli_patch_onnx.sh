#!/usr/bin/env bash
# ctxpatch patch --to onnx (issue 13): certification on the C engine, then the ONNX layout with
# fidelity "graph"; two runs give the same bytes; the certificate, config.json and the graph's
# metadata_props agree (fidelity, rule, digest); `check` passes it and catches a flipped byte in
# model.onnx.data and an edited metadata rule; `inspect --json` lists the safetensors artifact's
# tensors (HF names mapped, docs/onnx.md), rule and its own certificate digest; a failing
# certification writes nothing; a temperature patch (a rule the graph computes) gives a
# certified artifact whose rule is the safetensors artifact's rule + baked_rule combined.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

model=$src/examples/probe-models/rope-probe
[ -f "$model/model.safetensors" ] || { echo "SKIP: $model is absent"; exit 77; }
"$py" -c "import onnx" 2>/dev/null || { echo "SKIP: $py has no onnx module (Debian python3-onnx)"; exit 77; }
V="--lengths 256,512 --depths 0:1:3 --samples 1 --threads 1 --accept-no-gain --accept-underpowered"
a=$work/a b=$work/b st=$work/st
# rope-pi 1.001: an identity rule (the factor is RoPE's), certifies on the rope probe model.
"$bin" patch "$model" "$a" --method rope-pi --factor 1.001 --to onnx --external-threshold 4K $V >"$work/a.log" 2>&1 \
  && ok || { bad "patch --to onnx"; cat "$work/a.log"; }
grep -q "^fidelity: graph" "$work/a.log" && ok || bad "plan line without fidelity graph"
"$bin" patch "$model" "$b" --method rope-pi --factor 1.001 --to onnx --external-threshold 4K $V >/dev/null 2>&1
diff -r "$a" "$b" >/dev/null && ok || bad "two runs differ: $(diff -rq "$a" "$b")"
[ -f "$a/onnx/model.onnx.data" ] && [ ! -e "$a/model.safetensors" ] && [ -f "$a/certificate.json" ] && ok \
  || bad "layout: $(cd "$a" && find . -type f | sort | tr '\n' ' ')"
(cd "$a" && sha256sum --quiet -c SHA256SUMS) && ok || bad "SHA256SUMS does not match the files"

# Certificate, config.json block and metadata_props agree; the checker accepts the graph.
"$py" - "$a" <<'EOF' && ok || bad "metadata agreement"
import hashlib, json, os, sys, onnx
d = sys.argv[1]
cert_bytes = open(os.path.join(d, "certificate.json"), "rb").read()
digest = hashlib.sha256(cert_bytes).hexdigest()
cert = json.loads(cert_bytes)
block = json.load(open(os.path.join(d, "config.json")))["ctxpatch"]
m = onnx.load(os.path.join(d, "onnx/model.onnx"), load_external_data=False)
meta = {p.key: p.value for p in m.metadata_props}
assert meta["ctxpatch.fidelity"] == "graph" == cert["patch"]["fidelity"] == block["fidelity"], (meta, cert["patch"], block)
assert meta["ctxpatch.certificate_sha256"] == digest == block["certificate_sha256"], (meta, digest)
assert json.loads(meta["ctxpatch.rule"]) == cert["patch"]["rule"] == cert["rule"] == block["rule"], meta
assert block["certified"] is True and block["baked_rule"] == {} and block["rope_scaling"]["factor"] == 1.001, block
files = {f["path"] for f in cert["model"]["files"]}
assert {"onnx/model.onnx", "onnx/model.onnx.data", "config.json"} <= files, files
assert cert["verdict"]["result"] == "pass", cert["verdict"]
EOF
# The checker on a copy: onnx 1.12's full_check on a path writes the inferred shapes back into it.
cp -r "$a" "$work/chk" && "$py" -c "import onnx, sys; onnx.checker.check_model(sys.argv[1], full_check=True)" \
  "$work/chk/onnx/model.onnx" && ok || bad "python3-onnx checker"

# check: pass; a flipped byte in the external data; an edited metadata rule; --rerun refused.
"$bin" check "$a" >"$work/c.out" && grep -q "pass (onnx" "$work/c.out" && ok || { bad "check on the artifact"; cat "$work/c.out"; }
rm -rf "$work/t" && cp -r "$a" "$work/t"
printf '\x5a' | dd of="$work/t/onnx/model.onnx.data" bs=1 seek=4100 conv=notrunc 2>/dev/null
"$bin" check "$work/t" >"$work/t1.out"; s=$?
[ $s -eq 1 ] && grep -q "sums-mismatch: onnx/model.onnx.data" "$work/t1.out" && grep -q "cert-files: onnx/model.onnx.data" "$work/t1.out" \
  && ok || { bad "flipped data byte: exit $s"; cat "$work/t1.out"; }
rm -rf "$work/t" && cp -r "$a" "$work/t"
"$py" - "$work/t/onnx/model.onnx" <<'EOF' || bad "editing the metadata rule"
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
for p in m.metadata_props:
    if p.key == "ctxpatch.rule": p.value = '{"temperature":0.5}'
onnx.save(m, sys.argv[1])
EOF
(cd "$work/t" && sha256sum $(awk '{print $2}' SHA256SUMS) >SHA256SUMS.new && mv SHA256SUMS.new SHA256SUMS) # hide it from the manifest
"$bin" check "$work/t" >"$work/t2.out"; s=$?
[ $s -eq 1 ] && grep -q "meta-rule: onnx/model.onnx: metadata_props: rule" "$work/t2.out" && grep -q "cert-files: onnx/model.onnx:" "$work/t2.out" \
  && ok || { bad "edited metadata rule: exit $s"; cat "$work/t2.out"; }
"$bin" check "$a" --rerun >/dev/null 2>"$work/r.err"; s=$?
[ $s -eq 2 ] && grep -q "does not run ONNX graphs" "$work/r.err" && ok || { bad "--rerun on ONNX: exit $s"; cat "$work/r.err"; }

# inspect --json round trip against the safetensors artifact of the same patch.
"$bin" patch "$model" "$st" --method rope-pi --factor 1.001 $V >/dev/null 2>&1 && ok || bad "safetensors patch"
"$bin" inspect "$a" --json >"$work/ia.json" && "$bin" inspect "$st" --json >"$work/is.json" && ok || bad "inspect --json"
"$py" - "$work/ia.json" "$work/is.json" "$a" "$st" <<'EOF' && ok || bad "inspect round trip"
import hashlib, json, os, re, sys
ia, is_ = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
# docs/onnx.md's name mapping (Llama): the graph's initializers are named after the model description.
hf = {"self_attn.q_proj": "attn.q", "self_attn.k_proj": "attn.k", "self_attn.v_proj": "attn.v",
      "self_attn.o_proj": "attn.o", "mlp.gate_proj": "mlp.gate", "mlp.up_proj": "mlp.up", "mlp.down_proj": "mlp.down",
      "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
def onnx_name(n):
    if n == "lm_head.weight": return "lm_head.weight"
    m = re.match(r"model\.layers\.(\d+)\.(.*)\.weight$", n)
    return f"model.layers.{m.group(1)}.{hf[m.group(2)]}.weight" if m else n
# The FFN matrices are stored transposed ([in, out], MatMul's layout).
st = {onnx_name(t["name"]): (t["dtype"], t["shape"][::-1] if ".mlp." in t["name"] else t["shape"]) for t in is_["tensors"]}
ox = {t["name"]: (t["dtype"], t["shape"]) for t in ia["tensors"] if not t["name"].startswith("const/")}
assert st == ox, (sorted(set(st) ^ set(ox)), [k for k in st if k in ox and st[k] != ox[k]])
block = json.load(open(os.path.join(sys.argv[4], "config.json")))["ctxpatch"]
assert ia["rule"] == block["rule"] and ia["fidelity"] == "graph", (ia["rule"], block["rule"])
assert ia["certificate_sha256"] == hashlib.sha256(open(os.path.join(sys.argv[3], "certificate.json"), "rb").read()).hexdigest()
assert ia["external_data"] == "model.onnx.data" and ia["external_bytes"] > 0, ia["external_data"]
EOF

# A failing certification (rope-pi 2 loses to the original) writes nothing.
"$bin" patch "$model" "$work/f" --method rope-pi --factor 2 --to onnx $V >"$work/f.log" 2>&1; s=$?
[ $s -eq 1 ] && [ ! -e "$work/f" ] && grep -q "nothing written" "$work/f.log" && [ -z "$(ls -A "$work" | grep '^\.')" ] \
  && ok || { bad "failing certification: exit $s"; cat "$work/f.log"; }

# Every rule is graph nodes now (docs/onnx-rules.md): the temperature patch gives a certified
# artifact that check accepts, whose rule is the safetensors artifact's rule and baked_rule
# combined (safetensors bakes the temperature into q; the graph computes it).
"$bin" patch "$model" "$work/tau" --method temperature --tau 0.9 --to onnx $V >"$work/tau.log" 2>&1 \
  && grep -q "(certified, certificate sha256" "$work/tau.log" && ok || { bad "temperature --to onnx"; cat "$work/tau.log"; }
"$bin" check "$work/tau" >"$work/tauc.out" && grep -q "pass (onnx" "$work/tauc.out" && ok || { bad "check on the temperature artifact"; cat "$work/tauc.out"; }
"$bin" patch "$model" "$work/taus" --method temperature --tau 0.9 $V >/dev/null 2>&1 && ok || bad "temperature safetensors patch"
"$bin" inspect "$work/tau" --json >"$work/itau.json" && ok || bad "inspect --json (temperature)"
"$py" - "$work/tau" "$work/taus" "$work/itau.json" <<'EOF' && ok || bad "temperature ONNX artifact"
import hashlib, json, os, sys, onnx
d, ds, ij = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
m = onnx.load(os.path.join(d, "onnx/model.onnx"), load_external_data=False)
meta = {p.key: p.value for p in m.metadata_props}
cert_bytes = open(os.path.join(d, "certificate.json"), "rb").read()
cert, block = json.loads(cert_bytes), json.load(open(os.path.join(d, "config.json")))["ctxpatch"]
sblock = json.load(open(os.path.join(ds, "config.json")))["ctxpatch"]
combined = {**sblock["rule"], **sblock["baked_rule"]}
assert combined == {"temperature": 0.9}, sblock
assert json.loads(meta["ctxpatch.rule"]) == combined == block["rule"] == ij["rule"] == cert["rule"], (meta, block, ij["rule"])
assert meta["ctxpatch.fidelity"] == "graph" == ij["fidelity"] and block["baked_rule"] == {} and block["certified"] is True
assert meta["ctxpatch.certificate_sha256"] == hashlib.sha256(cert_bytes).hexdigest() == ij["certificate_sha256"]
assert cert["verdict"]["result"] == "pass", cert["verdict"]
EOF

# Usage errors: options of the other format.
for args in "--dtype fp16" "--to bogus" "--external-threshold 4K" "--to onnx --require exact" "--to onnx --shard-size 1M" "--to onnx --dtype fp8"; do
  "$bin" patch "$model" "$work/u" --method rope-pi --factor 1.001 --no-verify $args >/dev/null 2>&1; s=$?
  [ $s -eq 2 ] && [ ! -e "$work/u" ] && ok || bad "'$args' accepted (exit $s)"
done
# --no-verify: uncertified, metadata digest empty, config block null.
"$bin" patch "$model" "$work/nv" --method rope-pi --factor 1.001 --to onnx --dtype fp16 --no-verify >/dev/null 2>&1 && "$py" - "$work/nv" <<'EOF' && ok || bad "--no-verify ONNX artifact"
import json, os, sys, onnx
d = sys.argv[1]
m = onnx.load(os.path.join(d, "onnx/model.onnx"), load_external_data=False)
meta = {p.key: p.value for p in m.metadata_props}
block = json.load(open(os.path.join(d, "config.json")))["ctxpatch"]
assert meta["ctxpatch.certificate_sha256"] == "" and block["certified"] is False and block["certificate_sha256"] is None
assert not os.path.exists(os.path.join(d, "certificate.json"))
assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in m.graph.initializer)
EOF
# T5 (regression: place_onnx_digest assumed onnx/model.onnx, so every certified T5 --to onnx failed
# with "onnx/model.onnx: No such file or directory"): both graphs carry the certificate's digest,
# SHA256SUMS covers them, `check` passes and catches an edited digest in one of them.
t5=$src/examples/probe-models/t5-probe
"$bin" patch "$t5" "$work/t5" --method temperature --tau 0.8 --to onnx --verify passkey --lengths 256 --samples 2 \
  --threads 1 --accept-no-gain --accept-underpowered >"$work/t5.log" 2>&1 && ok || { bad "T5 patch --to onnx"; cat "$work/t5.log"; }
"$py" - "$work/t5" <<'EOF' && ok || bad "T5 graphs' digests"
import hashlib, os, sys, onnx
d = sys.argv[1]
digest = hashlib.sha256(open(os.path.join(d, "certificate.json"), "rb").read()).hexdigest()
for g in ("encoder_model", "decoder_model_merged"):
    m = onnx.load(os.path.join(d, "onnx", g + ".onnx"), load_external_data=False)
    assert {p.key: p.value for p in m.metadata_props}["ctxpatch.certificate_sha256"] == digest, g
EOF
(cd "$work/t5" && sha256sum --quiet -c SHA256SUMS) && "$bin" check "$work/t5" >/dev/null && ok || bad "T5 artifact: check"
cp -r "$work/t5" "$work/t5x" && "$py" - "$work/t5x/onnx/encoder_model.onnx" <<'EOF'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
i = b.index(b"ctxpatch.certificate_sha256") + len("ctxpatch.certificate_sha256") + 2
b[i] = ord("0") if b[i] != ord("0") else ord("1")
open(p, "wb").write(bytes(b))
EOF
"$bin" check "$work/t5x" >/dev/null 2>&1; [ $? -eq 1 ] && ok || bad "check passed a T5 graph with an edited digest"
finish
