#!/usr/bin/env bash
# Llama 3.1-style RoPE scaling in GGUF (issue 31): a tiny random LlamaForCausalLM with rope_scaling
# llama3 (tests/gguf/make_random_family.py llama3: factor 8, low/high 1/32 over an original 2048)
# written as llama.cpp's converter writes it, read back, and proven in llama.cpp itself:
#   - a `rope_freqs.weight` float32 tensor of the 8 per-pair divisors, equal to llama.cpp's
#     converter formula computed here in numpy (float32 frequencies), and no rope.scaling keys;
#   - the GGUF read back gives the same scaling (model/rope.c cp_rope_fit_factors): `forward` on
#     the GGUF == on the HF folder byte for byte, and GGUF -> safetensors keeps the rope_scaling
#     (in config.json; the tensor is not written);
#   - llama.cpp's logits on a 300-token prompt == the engine's within 1e-4 x max |logit|, while the
#     same model without the scaling is far from them (the check can fail);
#   - factors that no llama3 table gives, and a NaN factor, are refused in one exact line naming the tensor,
#     as are a rope_freqs not float32, of the wrong count, beside a scaling key, or on qwen2
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
. "$src/tests/gguf/family_common.sh"
family_gguf "$w/l3" llama3
back_to_safetensors "$w/l3.gguf" "$w/l3_sf"
"$py" - "$w" <<'PY' && ok || bad "llama3 GGUF: rope_freqs and keys"
import sys, json, math, numpy as np, gguf_py as g
w = sys.argv[1]
_, kv, _, t, order = g.read(f"{w}/l3.gguf")
assert order[0] == "rope_freqs.weight" and t["rope_freqs.weight"][0] == 0 and t["rope_freqs.weight"][1] == [8], order[:2]
got = g.f32(t["rope_freqs.weight"]).astype(np.float64)
# llama.cpp's converter (LlamaModel, rope_freqs): float32 frequencies, bands in double
freqs = (1.0 / (np.float32(10000.0) ** (np.arange(0, 16, 2, dtype=np.float32) / np.float32(16)))).astype(np.float32)
want = []
for f in freqs:
    wl = 2 * math.pi / float(f)
    if wl < 2048 / 32: want.append(1.0)
    elif wl > 2048 / 1: want.append(8.0)
    else:
        s = (2048 / wl - 1) / (32 - 1)
        want.append(1 / ((1 - s) / 8 + s))
want = np.array(want, np.float32).astype(np.float64)
assert np.all(np.abs(got - want) <= 1e-6 * want), (got, want)
assert 3 == np.sum((want > 1) & (want < 8)), want
assert not any(k.startswith("llama.rope.scaling") for k in kv), [k for k in kv if "rope" in k]
back = json.load(open(f"{w}/l3_sf/config.json"))["rope_scaling"]
src = json.load(open(f"{w}/l3/config.json"))["rope_scaling"]
assert {k: back[k] for k in src if k != "rope_type"} == {k: v for k, v in src.items() if k != "rope_type"}, (back, src)
assert back.get("rope_type", back.get("type")) == "llama3", back
raw = open(f"{w}/l3_sf/model.safetensors", "rb").read()
names = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
assert "rope_freqs.weight" not in names and len(names) - ("__metadata__" in names) == 21, sorted(names)
print("llama3 GGUF: rope_freqs", np.round(got, 6).tolist(), "= llama.cpp's converter; scaling read back")
PY
prompt=$(random_ids 13 300)
same_logits "$prompt" "$w/e_hf.bin" "$w/l3" "$w/e_gguf.bin" "$w/l3.gguf"
# the same weights without the scaling: what llama.cpp would compute if it ignored rope_freqs
mkdir -p "$w/plain" && cp "$w/l3/model.safetensors" "$w/l3/tokenizer.json" "$w/plain/"
"$py" -c "import json,sys; c=json.load(open(sys.argv[1])); del c['rope_scaling']; json.dump(c, open(sys.argv[2],'w'))" \
  "$w/l3/config.json" "$w/plain/config.json"
engine_logits "$w/e_plain.bin" "$w/plain" "$prompt"
llamacpp_vs_engine llama3 "$w/l3.gguf" "$prompt" "$w/e_gguf.bin" "$w/lc.json"
if [ "$lc" = 1 ]; then
  "$py" - "$w" <<'PY' && ok || bad "llama.cpp's logits far from the unscaled model's"
import sys, json, numpy as np
w = sys.argv[1]
lc = np.array(json.load(open(f"{w}/lc.json"))["logits"], np.float64)
e = np.fromfile(f"{w}/e_gguf.bin", "<f4").reshape(300, -1)
plain = np.fromfile(f"{w}/e_plain.bin", "<f4").reshape(300, -1)
d, dp = np.abs(lc - e).max(), np.abs(lc - plain).max()
assert dp > 100 * d and dp > 1e-3 * np.abs(e).max(), (dp, d)
print(f"the unscaled model is {dp:.2e} from llama.cpp's logits")
PY
fi
# Factors no llama3 table gives, and a NaN factor: refused in one exact line, naming the tensor.
"$py" - "$w" <<'PY' && ok || bad "tampered rope_freqs written"
import sys, numpy as np, gguf_py as g
w = sys.argv[1]
b = bytearray(open(f"{w}/l3.gguf", "rb").read())
raw = g.read(f"{w}/l3.gguf")[3]["rope_freqs.weight"][2]
at = b.find(raw)
assert at > 0 and b.find(raw, at + 1) < 0
for name, vals in (("bad", [1, 1.1, 1.15, 3, 3.01, 3.02, 7, 8]), ("nan", [1, float("nan"), 1, 1, 1, 1, 1, 8])):
    c = bytearray(b)
    c[at:at + len(raw)] = np.array(vals, "<f4").tobytes()
    open(f"{w}/{name}.gguf", "wb").write(bytes(c))
PY
pre="tensor 'rope_freqs.weight'"
for case in "bad|the 8 RoPE frequency factors (largest 8) are not a llama3 or linear scaling table (no band of blended pairs fits them)" \
            "nan|factor 1 is nan: want finite factors in [1, 1e6] that do not decrease with the pair (llama3 scaling)"; do
  name=${case%%|*}
  "$bin" inspect "$w/$name.gguf" >/dev/null 2>"$w/$name.err"
  [ $? -ne 0 ] && [ "$(cat "$w/$name.err")" = "ctxpatch: error CP_ECFG_POSITION: $w/$name.gguf: $pre: ${case#*|}" ] && ok ||
    bad "tampered rope_freqs ($name): $(cat "$w/$name.err")"
done
# rope_freqs variants the reader refuses, each in one exact line (tests/gguf/make_gguf_cases.py
# rewrite of l3.gguf): not float32, a wrong count, a scaling key beside it, a non-llama
# architecture; and a tensor no HF name maps (rf_extra), refused by GGUF -> safetensors.
"$py" - "$w" <<'PY' && ok || bad "hostile rope_freqs variants"
import sys, numpy as np, gguf_py as g, make_gguf_cases as m
w = sys.argv[1]
r = g.read(f"{w}/l3.gguf")
def freqs(tl, tname, raw, ne):
    i = [t[0] for t in tl].index("rope_freqs.weight")
    tl[i] = ("rope_freqs.weight", ne, tname, raw)
vals = g.f32(r[3]["rope_freqs.weight"])
def qwen2(kl):
    kl[:] = [(k.replace("llama.", "qwen2.", 1), t, "qwen2" if k == "general.architecture" else v) for k, t, v in kl]
cases = {"f16": (None, lambda tl: freqs(tl, "F16", vals.astype("<f2").tobytes(), [8])),
         "count": (None, lambda tl: freqs(tl, "F32", vals[:7].astype("<f4").tobytes(), [7])),
         "key": (lambda kl: kl.append(("llama.rope.scaling.type", m.STR, "linear")), None),
         "arch": (qwen2, None)}
cases["extra"] = (None, lambda tl: tl.append(("extra.weight", [4], "F32", bytes(16))))
for name, (ek, et) in cases.items():
    open(f"{w}/rf_{name}.gguf", "wb").write(m.rewrite(r, ek, et))
PY
for case in "f16|want 8 float32 factors (one per rotated pair), not 8 F16 values in a 1-dim tensor" \
            "count|want 8 float32 factors (one per rotated pair), not 7 F32 values in a 1-dim tensor" \
            "key|comes with key 'llama.rope.scaling.type': two RoPE scalings" \
            "arch|llama.cpp's qwen2 does not read per-pair RoPE frequency factors"; do
  name=rf_${case%%|*}
  "$bin" inspect "$w/$name.gguf" >/dev/null 2>"$w/$name.err"
  [ $? -ne 0 ] && [ "$(cat "$w/$name.err")" = "ctxpatch: error CP_ECFG_POSITION: $w/$name.gguf: $pre: ${case#*|}" ] && ok ||
    bad "hostile rope_freqs ($name): $(cat "$w/$name.err")"
done
# A tensor with no HF name is not written under its GGUF name (cp_gguf_hf_names_make): refused.
"$bin" convert "$w/rf_extra.gguf" "$w/extra_sf" --to safetensors >/dev/null 2>"$w/extra.err"
[ $? -ne 0 ] && [ ! -e "$w/extra_sf" ] && [ "$(cat "$w/extra.err")" = "ctxpatch: error CP_EUNSUPPORTED: $w/rf_extra.gguf: \
tensor 'extra.weight': no HF name in the llama layout (refused rather than written under its GGUF name)" ] && ok ||
  bad "GGUF tensor with no HF name: $(cat "$w/extra.err")"
finish
