#!/usr/bin/env bash
# FIRE with the paper's two hidden layers (docs/fire-layout.md, config fire_mlp_layers 2) on the
# engine golden model fire2: inspect reports the layout, and a checkpoint whose tensors disagree
# with its config is refused with one exact line and nothing written:
#   - mlp.4 present under fire_mlp_layers 1 (the field dropped from fire2's config);
#   - fire_mlp_layers 2 with mlp.2 of the one-layer shape [H, W] (mlp.4 present);
#   - fire_mlp_layers 2 on the one-layer golden model fire (its mlp.2 is [H, W]);
#   - fire_mlp_layers 2 without mlp.4;
#   - a checkpoint storing the training parameter L_multiplier instead of L.
# The values the engine computes are checked elsewhere: test_engine_goldens (PyTorch),
# test_onnx_rules.sh / test_onnx_runtime.sh (onnxruntime), test_cuda_emulated (CUDA kernel),
# test_onnx_import.sh (the ONNX round trip), cli_patch_torchref.py (temperature baked into mlp.4).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
models=$src/tests/goldens/engine/models
[ -f "$models/fire2/config.json" ] || { echo "SKIP: no fire2 golden model"; exit 77; }
"$py" -c "import torch" 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no torch (the copies are written with it)"; exit 77; }

# inspect: the MLP's depth, in JSON and in text
"$bin" inspect "$models/fire2" --json > "$work/insp.json" || bad "inspect fire2"
check "$py" -c "import json,sys; p=json.load(open(sys.argv[1]))['positional']; sys.exit(not (p['mlp_layers'] == 2 and p['mlp_width'] == 32))" "$work/insp.json"
"$bin" inspect "$models/fire" --json > "$work/insp1.json" || bad "inspect fire"
check "$py" -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['positional']['mlp_layers'] != 1)" "$work/insp1.json"
"$bin" inspect "$models/fire2" | grep -F "MLP 2 hidden layers of width 32" >/dev/null && ok || bad "inspect text: MLP line"

# The edited copies, written by one python run (torch loads once).
P=model.layers.0.self_attn.fire
"$py" - "$work" "$models" "$P" <<'EOF' || bad "writing the edited copies"
import collections, json, os, sys
import torch
work, models, P = sys.argv[1:4]
from ctxpatch_ref import stio

def set_(d, k, v):
    d[k] = v

variants = [
    ("no_field", "fire2", lambda cfg, t: cfg.pop("fire_mlp_layers")),
    ("mid_shape", "fire2", lambda cfg, t: set_(t, P + ".mlp.2.weight", t[P + ".mlp.4.weight"].clone())),
    ("one_as_two", "fire", lambda cfg, t: set_(cfg, "fire_mlp_layers", 2)),
    ("no_out", "fire2", lambda cfg, t: [t.pop(P + ".mlp.4." + s) for s in ("weight", "bias")]),
    ("multiplier", "fire2", lambda cfg, t: set_(t, P + ".L_multiplier", t.pop(P + ".L") / 24.0)),
    ("same", "fire2", lambda cfg, t: None),
]
for name, model, edit in variants:
    src, dst = os.path.join(models, model), os.path.join(work, name)
    cfg = json.load(open(os.path.join(src, "config.json")), object_pairs_hook=collections.OrderedDict)
    _, t = stio.read_safetensors(os.path.join(src, "model.safetensors"))
    t = collections.OrderedDict(t)
    edit(cfg, t)
    os.makedirs(dst)
    stio.write_atomic(os.path.join(dst, "config.json"), stio.json_bytes(cfg))
    stio.write_atomic(os.path.join(dst, "model.safetensors"), stio.safetensors_bytes(t, {"format": "pt"}))
EOF

# refuse NAME WANT_LINE: forward of $work/NAME fails with exactly WANT_LINE and writes nothing
refuse() {
  local d=$work/$1
  if "$bin" forward "$d" --ids 1,2,3 --out "$d.logits" 2> "$d.err"; then
    bad "$1: forward accepted the checkpoint"; return
  fi
  [ "$(cat "$d.err")" = "$2" ] && ok || bad "$1: got '$(cat "$d.err")', want '$2'"
  [ ! -e "$d.logits" ] && ok || bad "$1: an output was written"
}
E="ctxpatch: error CP_EMODEL_TENSOR: $work"
refuse no_field "$E/no_field: tensor '$P.mlp.4.weight' is present: a FIRE MLP with two hidden layers needs config.json fire_mlp_layers 2 (it is 1)"
refuse mid_shape "$E/mid_shape: tensor '$P.mlp.2.weight' has shape [4,32], expected [32,32]"
refuse one_as_two "$E/one_as_two: tensor '$P.mlp.2.weight' has shape [4,32], expected [32,32]"
refuse no_out "$E/no_out: tensor '$P.mlp.4.weight' is missing"
refuse multiplier "$E/multiplier: tensor '$P.L' is missing"

# the unedited copy loads and computes what the original does (the copying changes nothing)
"$bin" forward "$work/same" --ids 1,2,3 --out "$work/same.logits" >/dev/null &&
  "$bin" forward "$models/fire2" --ids 1,2,3 --out "$work/orig.logits" >/dev/null &&
  cmp -s "$work/same.logits" "$work/orig.logits" && ok || bad "an unedited copy of fire2 gives other logits"
finish
