#!/usr/bin/env bash
# Qwen2 (issue 31): a tiny random Qwen2ForCausalLM folder (tests/gguf/make_random_family.py qwen2:
# q/k/v biases, GQA 4/2, tied head) read and run by the engine, written as llama.cpp's `qwen2`
# architecture and proven in llama.cpp (node-llama-cpp 3.22.1):
#   - names and keys as llama.cpp's converter writes them (Qwen2Model: q/k rows NOT permuted,
#     llama.cpp rotates halves as HF does; attn_q/k/v biases; no output.weight for the tied head);
#   - `ctxpatch forward` on the GGUF == on the HF folder (the reader maps it back), GGUF ->
#     safetensors equal to the source tensors;
#   - llama.cpp's logits on a 300-token prompt (past the 256 training length) == the engine's,
#     max |diff| <= 1e-4 x max |logit| (SiLU and RMSNorm in f32: no lookup table as for GELU),
#     greedy tokens equal.
# llama.cpp parts skip (the rest runs) without node-llama-cpp; needs numpy (Debian python3).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"
check "$py" "$src/tests/gguf/make_random_family.py" "$w/qwen2" qwen2
check "$bin" convert "$w/qwen2" "$w/qwen2.gguf" --to gguf
check "$bin" convert "$w/qwen2.gguf" "$w/qwen2_sf" --to safetensors
"$py" - "$w" <<'PY' && ok || bad "qwen2 GGUF names, keys and rows"
import sys, json, struct, numpy as np, gguf_py as g
w = sys.argv[1]
raw = open(f"{w}/qwen2/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + n])
hf = {k: np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
      for k, e in hdr.items() if k != "__metadata__"}
_, kv, _, t, order = g.read(f"{w}/qwen2.gguf")
assert kv["general.architecture"] == "qwen2", kv["general.architecture"]
for key, v in {"qwen2.block_count": 2, "qwen2.embedding_length": 64, "qwen2.attention.head_count": 4,
               "qwen2.attention.head_count_kv": 2, "qwen2.context_length": 256, "qwen2.feed_forward_length": 256}.items():
    assert kv[key] == v, (key, kv.get(key))
assert abs(kv["qwen2.rope.freq_base"] - 10000.0) < 1e-3 and abs(kv["qwen2.attention.layer_norm_rms_epsilon"] - 1e-6) < 1e-12
assert "output.weight" not in t
for l in range(2):
    for r in ("q", "k", "v"):
        for s in ("weight", "bias"):
            a = g.f32(t[f"blk.{l}.attn_{r}.{s}"]).reshape(-1)
            assert np.array_equal(a, hf[f"model.layers.{l}.self_attn.{r}_proj.{s}"].reshape(-1)), (l, r, s)
    assert f"blk.{l}.attn_output.bias" not in t
back = json.load(open(f"{w}/qwen2_sf/config.json"))
assert back["model_type"] == "qwen2", back
print("qwen2 GGUF: arch keys, q/k/v rows and biases in HF order, tied head")
PY
prompt=$("$py" -c "import random; r=random.Random(11); print(','.join(['2']+[str(r.randrange(3,559)) for _ in range(299)]))")
check "$bin" forward "$w/qwen2" --ids "$prompt" --out "$w/e_hf.bin" --threads 1
check "$bin" forward "$w/qwen2.gguf" --ids "$prompt" --out "$w/e_gguf.bin" --threads 1
check cmp "$w/e_hf.bin" "$w/e_gguf.bin"
if [ "$lc" = 1 ]; then
  node "$w/run.mjs" "$w/qwen2.gguf" 20 "$prompt" 1 >"$w/lc.json" && ok || bad "llama.cpp qwen2.gguf"
  "$bin" forward "$w/qwen2.gguf" --ids "$prompt" --generate 20 --threads 1 >"$w/g.txt" && ok || bad "generate"
  check "$py" "$src/tests/gguf/llamacpp_compare.py" qwen2 "$w/lc.json" "$w/e_gguf.bin" 300 559 "$w/g.txt"
fi
finish
