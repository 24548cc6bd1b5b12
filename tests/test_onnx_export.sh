#!/usr/bin/env bash
# convert --to onnx: Debian's python3-onnx checker accepts every decoder-only family's graph (IR 8,
# opset 17), the weights read back by python3-onnx equal the checkpoint's (MatMul weights
# transposed, fp16 rounded by numpy), bytes are deterministic, SHA256SUMS covers onnx/, and the
# folder appears atomically (refusals leave nothing). Runtime equality (onnxruntime) is tests/onnx/.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import onnx, numpy" 2>/dev/null || { echo "SKIP: /usr/bin/python3 lacks onnx or numpy (apt-get install python3-onnx)"; exit 77; }
models=$src/tests/goldens/engine/models

# 1. every decoder-only family: checker (full_check runs shape inference too) and metadata
for m in llama gpt_neox bloom mpt fire fire_shared fire2 llama_rope2 phi3 granite olmo2 starcoder2; do
  "$bin" convert "$models/$m" "$work/$m" --to onnx --external-threshold 4K >/dev/null || { bad "$m: convert"; continue; }
  "$py" - "$work/$m/onnx/model.onnx" <<'EOF' && ok || bad "$m: checker / layout"
import onnx, sys
# (check_model on a path with full_check writes the inferred model back over the file: give it the proto)
onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)
m = onnx.load(sys.argv[1], load_external_data=False)
assert m.ir_version == 8 and [(o.domain, o.version) for o in m.opset_import] == [("", 17)], m.opset_import
meta = {p.key: p.value for p in m.metadata_props}
assert meta["ctxpatch.rule"] == "{}" and meta["ctxpatch.fidelity"] == "graph", meta
assert meta["ctxpatch.certificate_sha256"] == "" and meta["ctxpatch.version"], meta
ins = [i.name for i in m.graph.input]; outs = [o.name for o in m.graph.output]
assert ins[:3] == ["input_ids", "attention_mask", "position_ids"], ins
assert "past_key_values.0.key" in ins and "present.0.value" in outs and outs[-1] == "logits", outs
ext = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
assert ext, "no external initializer at a 4K threshold"
for t in ext:
    kv = {e.key: e.value for e in t.external_data}
    assert kv["location"] == "model.onnx.data" and int(kv["offset"]) % 4096 == 0, kv
EOF
  (cd "$work/$m" && sha256sum --quiet -c SHA256SUMS) && ok || bad "$m: sha256sum -c"
  grep -q "  onnx/model.onnx$" "$work/$m/SHA256SUMS" && grep -q "  onnx/model.onnx.data$" "$work/$m/SHA256SUMS" \
    && ok || bad "$m: SHA256SUMS lacks onnx/ files"
  check cmp -s "$models/$m/config.json" "$work/$m/config.json"
done

# 2. weights as python3-onnx reads them back equal the checkpoint's (read with numpy), fp32 and fp16
"$bin" convert "$models/llama" "$work/l16" --to onnx --dtype fp16 --external-threshold 4K >/dev/null || bad "fp16 convert"
"$py" - "$models/llama/model.safetensors" "$work/llama/onnx/model.onnx" "$work/l16/onnx/model.onnx" <<'EOF' && ok || bad "weights read back"
import json, struct, sys, numpy as np, onnx
from onnx import numpy_helper
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
def st(name):
    s, e = h[name]["data_offsets"]
    return np.frombuffer(b[8 + n + s:8 + n + e], dtype="<f4").reshape(h[name]["shape"])
for path, dt in ((sys.argv[2], np.float32), (sys.argv[3], np.float16)):
    m = onnx.load(path)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    sfx = ".stored" if dt == np.float16 else ""
    q = w["model.layers.1.attn.q.weight" + sfx]
    assert q.dtype == dt and np.array_equal(q, st("model.layers.1.self_attn.q_proj.weight").T.astype(dt)), "q"
    e = w["model.embed_tokens.weight" + sfx]
    assert np.array_equal(e, st("model.embed_tokens.weight").astype(dt)), "embed"
    n1 = w["model.layers.0.attn_norm.weight"]
    assert n1.dtype == np.float32 and np.array_equal(n1, st("model.layers.0.input_layernorm.weight")), "norm"
EOF

# 3. determinism: same input, same options, same bytes
"$bin" convert "$models/bloom" "$work/bloom2" --to onnx --external-threshold 4K >/dev/null
for f in onnx/model.onnx onnx/model.onnx.data SHA256SUMS; do check cmp -s "$work/bloom/$f" "$work/bloom2/$f"; done
# The default threshold is onnx's own 1024 bytes: the tiny model's matrices go external, its
# small vectors stay inline; a threshold over every tensor keeps all inline (no data file).
"$bin" convert "$models/mpt" "$work/mpt_default" --to onnx >/dev/null && ok || bad "default threshold"
"$py" - "$work/mpt_default/onnx/model.onnx" <<'EOF' && ok || bad "default threshold placement"
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
ext = 0
for t in m.graph.initializer:
    x = t.data_location == onnx.TensorProto.EXTERNAL
    n = int({e.key: e.value for e in t.external_data}["length"]) if x else len(t.raw_data)
    assert x == (n >= 1024), (t.name, n)
    ext += x
assert ext > 0 and ext < len(m.graph.initializer), ext
EOF
"$bin" convert "$models/mpt" "$work/mpt_inline" --to onnx --external-threshold 1G >/dev/null && ok || bad "1G threshold"
[ ! -e "$work/mpt_inline/onnx/model.onnx.data" ] && ok || bad "tiny model at a 1G threshold wrote external data"

# 4. atomicity and refusals: exit nonzero, one line, nothing written or replaced
before=$(sha256sum "$work/llama/onnx/model.onnx")
"$bin" convert "$models/llama" "$work/llama" --to onnx 2>"$work/err" && bad "existing OUT without --force" || ok
check test "$before" = "$(sha256sum "$work/llama/onnx/model.onnx")"
# A rule that does not fit the model (ALiBi scaling on a RoPE model) is refused before anything is written.
echo '{"alibi_scale": {"mode": "static", "factor": 2.0}}' >"$work/rule.json"
"$bin" convert "$models/llama" "$work/ruled" --to onnx --rule "$work/rule.json" 2>"$work/err" && bad "rule accepted" || ok
grep -q "alibi_scale" "$work/err" && [ "$(wc -l <"$work/err")" -eq 1 ] && ok || bad "refusal message: $(cat "$work/err")"
[ ! -e "$work/ruled" ] && ok || bad "refused export left its folder"
[ -z "$(ls -A "$work" | grep '^\.')" ] && ok || bad "temporaries left: $(ls -A "$work" | grep '^\.')"
"$bin" convert "$models/llama" "$work/x" --to onnx --dtype fp8 2>/dev/null; [ $? -eq 2 ] && ok || bad "--dtype fp8 not a usage error"
check "$bin" convert "$models/llama" "$work/llama" --to onnx --force --external-threshold 4K
check test "$before" = "$(sha256sum "$work/llama/onnx/model.onnx")"

# 5. inspect reads the export back: the initializers python3-onnx lists, rule, fidelity; hostile
#    external data (outside the folder, past the data file) is refused
"$bin" inspect "$work/llama" --json >"$work/insp.json" && ok || bad "inspect --json of the folder"
"$py" - "$work/insp.json" "$work/llama/onnx/model.onnx" <<'EOF' && ok || bad "inspect --json content"
import json, sys, onnx
d = json.load(open(sys.argv[1])); m = onnx.load(sys.argv[2], load_external_data=False)
assert d["format"] == "onnx" and d["opset"] == 17 and d["ir_version"] == 8, d
assert d["rule"] == {} and d["fidelity"] == "graph" and d["certificate_sha256"] is None, d
assert [(t["name"], t["shape"]) for t in d["tensors"]] == [(t.name, list(t.dims)) for t in m.graph.initializer]
assert d["inputs"] == [i.name for i in m.graph.input] and d["external_data"] == "model.onnx.data"
EOF
"$bin" inspect "$work/llama/onnx/model.onnx" | grep "^rule: *{} (fidelity graph)" >/dev/null && ok || bad "inspect text"
cp "$work/llama/onnx/model.onnx.data" "$work/model.onnx.data"
for evil in ../SHA256SUMS /etc/passwd offset; do
  "$py" - "$work/llama/onnx/model.onnx" "$work/evil.onnx" "$evil" <<'EOF' || bad "making hostile model ($evil)"
import sys, onnx
m = onnx.load(sys.argv[1], load_external_data=False)
t = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL][-1]
for e in t.external_data:
    if sys.argv[3] == "offset" and e.key == "offset": e.value = str(int(e.value) + 4096)
    elif sys.argv[3] != "offset" and e.key == "location": e.value = sys.argv[3]
onnx.save(m, sys.argv[2])
EOF
  if "$bin" inspect "$work/evil.onnx" >/dev/null 2>"$work/err"; then bad "hostile external data ($evil) accepted"
  else grep -q "error CP_EONNX_EXTERNAL:" "$work/err" && ok || bad "hostile ($evil): $(cat "$work/err")"; fi
done
finish
