#!/usr/bin/env bash
# Reading ctxpatch's own T5 ONNX exports back (issue 14; import/onnx/onnx_import_t5.c). For the T5
# engine goldens (t5_gated: gated-gelu, untied head, fp16 weights; t5_relu: relu, tied head) and
# the trained t5-probe, exported with `ctxpatch convert X OUT --to onnx`:
#   - `ctxpatch forward` on OUT, OUT/onnx, either graph file, and the two graph files copied alone
#     (config from metadata_props) gives logits bit-equal to `ctxpatch forward X` (encoder ids +
#     decoder ids);
#   - `--dtype fp16` / `bf16` exports: bit-equal to forward on a copy of X whose weights numpy
#     rounded as the exporter stores them (every 2-D weight but the bucket tables, round to nearest
#     even): the import widens the stored halves exactly, so the engine sees the same float32
#     weights (tolerance 0); the difference to X itself is printed;
#   - a rule exported in the graphs (`--rule`, temperature 0.8) comes back as the model's rule:
#     forward on the export equals `forward X --rule`, and differs from the identity's;
#   - `convert OUT Y --to safetensors` gives X's tensors: the same names, shapes and values
#     (numpy, float32);
#   - `verify` on the t5-probe export gives the certificate results of `verify` on the folder;
# and the refusals, each by its exact line: one graph missing, graphs of two exports (config;
# version; dtype, so `shared.weight` differs; a weight changed in one graph), an unknown
# initializer, two encoders, a T5 export without ctxpatch's metadata (third-party), and a certified
# in-place `patch` of one of the two graphs.
# Skips (77) without python3-onnx and numpy (the graphs the refusals need are made with them).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import onnx, numpy" 2>/dev/null || { echo "SKIP: $py lacks onnx/numpy (Debian python3-onnx)"; exit 77; }
models=$src/tests/goldens/engine/models
probe=$src/examples/probe-models/t5-probe
ids=3,17,5,40,2,61,9,33,80,12,7,55,21,4,90,30,18,66,1,44,8,19,27,70
dec=0,4,8,15,16,23,42,11,6,2
fwd() { "$bin" forward "$@" --ids "$ids" --decoder-ids "$dec" --threads 2; }

# numpy's copy of X with the 2-D weights rounded as the exporter stores them (SRC DST fp16|bf16),
# or a comparison of two safetensors folders' tensors (--compare A B).
st_tool() {
  "$py" - "$@" <<'EOF'
import json, os, shutil, struct, sys
import numpy as np
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    dt = {"F32": np.float32, "F16": np.float16}
    return {k: np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dt[v["dtype"]])
            .reshape(v["shape"]).astype(np.float32) for k, v in h.items() if k != "__metadata__"}
def write(path, ts):
    off, hdr, blobs = 0, {}, []
    for k in sorted(ts):
        a = np.ascontiguousarray(ts[k], np.float32)
        hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes; blobs.append(a.tobytes())
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
if sys.argv[1] == "--compare":
    a, b = read(sys.argv[2] + "/model.safetensors"), read(sys.argv[3] + "/model.safetensors")
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
    for k in a:
        assert a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k
    print(f"{len(a)} tensors equal")
    sys.exit(0)
src, dst, dtype = sys.argv[1:]
os.makedirs(dst)
shutil.copy(src + "/config.json", dst)
ts = read(src + "/model.safetensors")
for k, a in ts.items():
    if a.ndim != 2 or "relative_attention_bias" in k: continue
    if dtype == "fp16":
        ts[k] = a.astype(np.float16).astype(np.float32)
    else:  # bf16, round to nearest even
        u = a.view(np.uint32).astype(np.uint64)
        ts[k] = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
write(dst + "/model.safetensors", ts)
EOF
}

for m in "$models/t5_gated" "$models/t5_relu" "$probe"; do
  name=$(basename "$m") c=$work/$name
  check "$bin" convert "$m" "$c" --to onnx --no-manifest >/dev/null
  fwd "$m" --out "$work/$name.ref" >/dev/null || { bad "$name: forward on the folder"; continue; }
  for p in "$c" "$c/onnx" "$c/onnx/encoder_model.onnx" "$c/onnx/decoder_model_merged.onnx"; do
    fwd "$p" --out "$work/x.f32" 2> "$work/err" >/dev/null && check cmp -s "$work/$name.ref" "$work/x.f32" ||
      bad "$name: forward $p: $(head -1 "$work/err")"
  done
  mkdir -p "$work/lone.$name/sub"
  cp "$c/onnx/"* "$work/lone.$name/sub/"
  fwd "$work/lone.$name/sub/encoder_model.onnx" --out "$work/x.f32" >/dev/null 2>&1 &&
    check cmp -s "$work/$name.ref" "$work/x.f32" || bad "$name: the two graphs alone"
  # back to safetensors: the original's tensors (t5_gated's fp16 widened to float32)
  "$bin" convert "$c" "$work/$name.st" --to safetensors > /dev/null 2> "$work/err" &&
    check st_tool --compare "$m" "$work/$name.st" || bad "$name: convert --to safetensors: $(head -1 "$work/err")"
  fwd "$work/$name.st" --out "$work/x.f32" >/dev/null 2>&1 && check cmp -s "$work/$name.ref" "$work/x.f32" ||
    bad "$name: forward on the safetensors copy"
  # half-precision exports against the same rounding done by numpy
  for dt in fp16 bf16; do
    check "$bin" convert "$m" "$c.$dt" --to onnx --dtype "$dt" --no-manifest >/dev/null
    st_tool "$m" "$work/$name.r$dt" "$dt" || { bad "$name: rounding $dt"; continue; }
    fwd "$work/$name.r$dt" --out "$work/r.f32" >/dev/null && fwd "$c.$dt" --out "$work/x.f32" >/dev/null &&
      check cmp -s "$work/r.f32" "$work/x.f32" || bad "$name: $dt export differs from the $dt-rounded original"
    "$py" "$src/tests/onnx/compare_logits.py" "$work/x.f32" "$work/$name.ref" \
      --vocab "$("$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$m/config.json")" \
      --tol 1 --label "$name $dt export vs the unrounded original (information)" || true
  done
done

# A rule in the graphs: the recovered model applies ctxpatch.rule as `forward --rule` does.
echo '{"temperature": 0.8, "temperature_scope": "all"}' > "$work/t08.json"
check "$bin" convert "$probe" "$work/t08" --to onnx --rule "$work/t08.json" --no-manifest >/dev/null
fwd "$probe" --rule "$work/t08.json" --out "$work/t08.ref" >/dev/null &&
  fwd "$work/t08/onnx/decoder_model_merged.onnx" --out "$work/t08.onnx" >/dev/null &&
  check cmp -s "$work/t08.ref" "$work/t08.onnx" || bad "rule t08: a step failed"
cmp -s "$work/t08.onnx" "$work/t5-probe.ref" && bad "rule t08: logits equal the identity's" || ok

# verify on the export = verify on the folder (the probe's tokenizer comes along in the export)
vopts=(--probe passkey --lengths 256 --depths 0:1:3 --samples 1 --seed 5 --threads 2)
"$bin" verify "$probe" "${vopts[@]}" --certificate "$work/v.folder.json" > /dev/null 2> "$work/err" &&
  "$bin" verify "$work/t5-probe" "${vopts[@]}" --certificate "$work/v.onnx.json" > /dev/null 2>> "$work/err" &&
  "$py" - "$work/v.folder.json" "$work/v.onnx.json" <<'EOF' && ok || bad "verify on the export: $(head -1 "$work/err")"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["results"] == b["results"], (a["results"], b["results"])
files = [f["path"] for f in b["model"]["files"]]
assert "onnx/encoder_model.onnx" in files and "onnx/decoder_model_merged.onnx" in files, files
print("verify passkey:", json.dumps(b["results"])[:200])
EOF

# inspect names what it recovered
"$bin" inspect "$work/t5_gated" > "$work/inspect.txt" 2>&1
check grep -q "^recovered:     t5, t5-buckets positions (ctxpatch names, config from metadata_props ctxpatch.config)" "$work/inspect.txt"
check grep -q "vocab 96, d_model 32, layers 2, heads 4 (kv 4, d_head 12), d_ff 48, .*gelu" "$work/inspect.txt"

# ---------------------------------------------------------------- refusals
refuse() { # refuse DIR FILE LINE: forward on DIR/FILE fails with exactly LINE
  "$bin" forward "$1/$2" --ids 1,2 --out "$work/x.f32" 2> "$work/refuse.err" && { bad "$1/$2 accepted"; return; }
  grep -qxF "$3" "$work/refuse.err" && ok || bad "$1/$2: got '$(head -1 "$work/refuse.err")', want '$3'"
}
pair() { # pair NAME ENC_EXPORT DEC_EXPORT: a folder with the encoder of one export, the decoder of another
  mkdir -p "$work/$1"
  cp "$2/onnx/encoder_model.onnx"* "$work/$1/"
  cp "$3/onnx/decoder_model_merged.onnx"* "$work/$1/"
}
relu=$work/t5_relu
mkdir -p "$work/miss" && cp "$relu/onnx/encoder_model.onnx"* "$work/miss/"
refuse "$work/miss" encoder_model.onnx "ctxpatch: error CP_ENOTFOUND: $work/miss/encoder_model.onnx: the export's other graph $work/miss/decoder_model_merged.onnx is missing (ctxpatch writes T5 as encoder_model.onnx + decoder_model_merged.onnx in one folder)"
pair mixed "$relu" "$work/t5_gated"
refuse "$work/mixed" decoder_model_merged.onnx "ctxpatch: error CP_EONNX_METADATA: $work/mixed/decoder_model_merged.onnx: metadata_props 'ctxpatch.config' is not the same in $work/mixed/encoder_model.onnx (the two graphs come from different exports)"
pair dtype "$relu" "$relu.fp16"
refuse "$work/dtype" encoder_model.onnx "ctxpatch: error CP_EONNX_RECOVER: $work/dtype/encoder_model.onnx: initializer 'shared.weight' is not byte-equal in $work/dtype/encoder_model.onnx and $work/dtype/decoder_model_merged.onnx (the two graphs come from different exports)"
mkdir -p "$work/twoenc" && cp "$relu/onnx/encoder_model.onnx" "$work/twoenc/decoder_model_merged.onnx" &&
  cp "$relu/onnx/encoder_model.onnx"* "$work/twoenc/"
refuse "$work/twoenc" encoder_model.onnx "ctxpatch: error CP_EONNX_RECOVER: $work/twoenc/decoder_model_merged.onnx: is not the T5 decoder graph of ctxpatch's export (no output 'logits' or no initializer 'shared.weight')"

edit() { # edit NAME WHAT: a copy of t5_relu's export with WHAT done to its decoder graph by python3-onnx
  mkdir -p "$work/$1" && cp "$relu/onnx/"* "$work/$1/"
  "$py" - "$work/$1" "$2" <<'EOF'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
d, what = sys.argv[1:]
for f in ("encoder_model.onnx", "decoder_model_merged.onnx"):
    if what != "foreign" and f.startswith("encoder"): continue
    m = onnx.load(f"{d}/{f}")  # external data read in; saved inline below
    if what == "extra":
        m.graph.initializer.append(numpy_helper.from_array(np.ones((4, 4), np.float32), "onnx::MatMul_9"))
    elif what == "version":
        next(p for p in m.metadata_props if p.key == "ctxpatch.version").value = "0.0.1"
    elif what == "shared":
        t = next(t for t in m.graph.initializer if t.name == "shared.weight")
        a = numpy_helper.to_array(t).copy(); a[5, 7] += 1
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    elif what == "foreign":
        del m.metadata_props[:]
    onnx.save(m, f"{d}/{f}")
EOF
}
edit extra extra
refuse "$work/extra" encoder_model.onnx "ctxpatch: error CP_EONNX_RECOVER: $work/extra/decoder_model_merged.onnx: initializer 'onnx::MatMul_9' is not a name ctxpatch recognises (ctxpatch T5 decoder names)"
edit version version
refuse "$work/version" encoder_model.onnx "ctxpatch: error CP_EONNX_METADATA: $work/version/encoder_model.onnx: metadata_props 'ctxpatch.version' is not the same in $work/version/decoder_model_merged.onnx (the two graphs come from different exports)"
edit shared shared
refuse "$work/shared" decoder_model_merged.onnx "ctxpatch: error CP_EONNX_RECOVER: $work/shared/decoder_model_merged.onnx: initializer 'shared.weight' is not byte-equal in $work/shared/encoder_model.onnx and $work/shared/decoder_model_merged.onnx (the two graphs come from different exports)"
edit foreign foreign
refuse "$work/foreign" decoder_model_merged.onnx "ctxpatch: error CP_EONNX_RECOVER: $work/foreign/decoder_model_merged.onnx: a T5 graph that is not ctxpatch's own export (metadata_props 'ctxpatch.version', T5 initializer names) is not read back: third-party T5 graphs are not recovered by their weights' role; ctxpatch's encoder_model.onnx + decoder_model_merged.onnx are"
# patching one graph in place cannot be certified: the model read back is both graphs
"$bin" patch "$work/t5-probe/onnx/encoder_model.onnx" "$work/enc.onnx" --method temperature --tau 0.8 \
  2> "$work/patch.err" >/dev/null && bad "one T5 graph patched certified" ||
  check grep -qxF "ctxpatch: error CP_EONNX_RECOVER: $work/t5-probe/onnx/encoder_model.onnx: one graph of a T5 export (encoder_model.onnx + decoder_model_merged.onnx): the model it certifies is both graphs, and only this one is rewritten; --no-verify writes the rewritten graph uncertified" "$work/patch.err"
check test ! -e "$work/enc.onnx"
# nothing written by a refused convert
"$bin" convert "$work/mixed/encoder_model.onnx" "$work/none" --to safetensors >/dev/null 2>&1 && bad "mixed export converted" ||
  check test ! -e "$work/none"

finish
