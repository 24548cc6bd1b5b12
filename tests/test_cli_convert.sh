#!/usr/bin/env bash
# inspect/convert end to end against PyTorch as the independent reference.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
check() { if "$@"; then ok; else bad "$*"; fi; }

model=$src/examples/tiny-llama
"$bin" inspect "$model" --json >"$work/inspect.json" || bad "inspect --json exited nonzero"
check "$py" "$src/tests/cli_convert_check.py" inspect "$model/pytorch_model.bin" "$work/inspect.json"
"$bin" inspect "$model" >"$work/inspect.txt" && grep -q "rope (theta 10000" "$work/inspect.txt" && ok || bad "text inspect"

# single-file conversion, verified by torch and by sha256sum
check "$bin" convert "$model" "$work/st" --to safetensors
check "$py" "$src/tests/cli_convert_check.py" convert "$model/pytorch_model.bin" "$work/st"
(cd "$work/st" && sha256sum --quiet -c SHA256SUMS) && ok || bad "sha256sum -c"
check test -f "$work/st/config.json"
check cmp -s "$model/config.json" "$work/st/config.json"

# determinism: same input, same bytes
check "$bin" convert "$model" "$work/st2" --to safetensors
check cmp -s "$work/st/model.safetensors" "$work/st2/model.safetensors"
check cmp -s "$work/st/SHA256SUMS" "$work/st2/SHA256SUMS"

# sharded output, then sharded input back to one file: same bytes as the direct conversion
check "$bin" convert "$model" "$work/sharded" --to safetensors --shard-size 100K
n=$(ls "$work/sharded"/model-*-of-*.safetensors 2>/dev/null | wc -l)
[ "$n" -ge 3 ] && ok || bad "expected >= 3 shards, got $n"
check test -f "$work/sharded/model.safetensors.index.json"
check "$py" "$src/tests/cli_convert_check.py" convert "$model/pytorch_model.bin" "$work/sharded"
(cd "$work/sharded" && sha256sum --quiet -c SHA256SUMS) && ok || bad "sha256sum -c sharded"
"$bin" inspect "$work/sharded" --json >"$work/sharded.json" && ok || bad "inspect sharded"
check "$py" "$src/tests/cli_convert_check.py" inspect "$model/pytorch_model.bin" "$work/sharded.json"
check "$bin" convert "$work/sharded" "$work/merged" --to safetensors
check cmp -s "$work/st/model.safetensors" "$work/merged/model.safetensors"

# shards written (and hashed) by 1 and by 2 threads at once: the same bytes and the same manifest
check "$bin" convert "$model" "$work/sh1" --to safetensors --shard-size 100K --threads 1
check "$bin" convert "$model" "$work/sh2" --to safetensors --shard-size 100K --threads 2
for f in "$work/sharded"/*; do
  check cmp -s "$f" "$work/sh1/$(basename "$f")"
  check cmp -s "$f" "$work/sh2/$(basename "$f")"
done
"$bin" convert "$model" "$work/x" --to safetensors --threads 0 2>/dev/null; [ $? = 2 ] && ok || bad "--threads 0 should be a usage error"

# --no-manifest: the output says so, no SHA256SUMS, same weights, and `check` reports the absence
out=$("$bin" convert "$model" "$work/nm" --to safetensors --no-manifest) && ok || bad "convert --no-manifest failed"
grep -q "no SHA256SUMS" <<<"$out" && ok || bad "output does not say there is no manifest: $out"
check test ! -e "$work/nm/SHA256SUMS"
check cmp -s "$work/st/model.safetensors" "$work/nm/model.safetensors"
"$bin" check "$work/nm" >"$work/nm.check" 2>&1 && bad "check passed an artifact without a manifest" || ok
grep -q "sums-missing: SHA256SUMS: absent: the artifact has no manifest" "$work/nm.check" && ok ||
  bad "check does not say the manifest is absent: $(cat "$work/nm.check")"
"$bin" convert "$model" "$work/x.gguf" --to gguf --no-manifest 2>/dev/null; [ $? = 2 ] && ok ||
  bad "--no-manifest with --to gguf should be a usage error"

# refusals: exit nonzero, one line, nothing written
"$bin" convert "$model" "$work/st" --to safetensors 2>"$work/err" && bad "overwrote without --force" || ok
grep -q "CP_EEXIST" "$work/err" && ok || bad "expected CP_EEXIST: $(cat "$work/err")"
check "$bin" convert "$model" "$work/st" --to safetensors --force
printf 'not a checkpoint at all' >"$work/junk.safetensors"
"$bin" convert "$work/junk.safetensors" "$work/never" --to safetensors 2>"$work/err" && bad "junk accepted" || ok
[ "$(wc -l <"$work/err")" = 1 ] && ok || bad "error is not one line: $(cat "$work/err")"
check test ! -e "$work/never"
leftovers=$(ls -A "$work" | grep -c '^\.' || true)
[ "$leftovers" = 0 ] && ok || bad "temporary files left behind: $(ls -A "$work")"
"$bin" convert "$model" "$work/x" --to bogus 2>/dev/null; [ $? = 2 ] && ok || bad "--to bogus should be a usage error"
"$bin" inspect 2>/dev/null; [ $? = 2 ] && ok || bad "inspect without PATH should be a usage error"
check "$bin" inspect --help
check "$bin" convert --help

# Streaming exports: an F16 Llama of 21M parameters (84 MB as float32, 42 MB on disk; its largest
# tensor, the embedding, 8 MB as float32). Its conversion's peak RSS may exceed that of converting
# the tiny rope probe by at most 42 MB (half the model as float32): loading the model as float32,
# as convert --to onnx did before it streamed, takes 84 MB more; writing tensor by tensor takes
# about 3 MB more (measured). A difference, not a cap: a CUDA build maps its libraries at start
# (about 230 MB of RSS either way; a heap cap made them fail to load).
big=$work/big16
"$py" - "$big" <<'PY'
import json, os, struct, sys
import numpy as np
D, F, V, L = 512, 1408, 4096, 6
os.makedirs(sys.argv[1])
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
       "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": 8, "num_key_value_heads": 8,
       "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
       "tie_word_embeddings": True, "torch_dtype": "float16"}
json.dump(cfg, open(os.path.join(sys.argv[1], "config.json"), "w"))
shapes = [("model.embed_tokens.weight", (V, D)), ("model.norm.weight", (D,))]
for l in range(L):
    p = f"model.layers.{l}."
    shapes += [(p + n, s) for n, s in [("self_attn.q_proj.weight", (D, D)), ("self_attn.k_proj.weight", (D, D)),
               ("self_attn.v_proj.weight", (D, D)), ("self_attn.o_proj.weight", (D, D)), ("mlp.gate_proj.weight", (F, D)),
               ("mlp.up_proj.weight", (F, D)), ("mlp.down_proj.weight", (D, F)), ("input_layernorm.weight", (D,)),
               ("post_attention_layernorm.weight", (D,))]]
rng, header, off = np.random.default_rng(0), {}, 0
for n, s in shapes:
    header[n] = {"dtype": "F16", "shape": list(s), "data_offsets": [off, off + 2 * int(np.prod(s))]}
    off += 2 * int(np.prod(s))
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(os.path.join(sys.argv[1], "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for n, s in shapes:
        f.write((rng.standard_normal(int(np.prod(s)), dtype=np.float32) * 0.02).astype("<f2").tobytes())
PY
# peak_rss ARGS...: the peak RSS in KiB of `ctxpatch ARGS` (getrusage of the child), empty on failure
peak_rss() {
  "$py" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else "")' "$bin" "$@"
}
for to in onnx gguf; do
  dt=fp16; [ $to = gguf ] && dt=f16
  small_rss=$(peak_rss convert "$src/examples/probe-models/rope-probe" "$work/small.$to" --to $to --dtype $dt)
  big_rss=$(peak_rss convert "$big" "$work/big.$to" --to $to --dtype $dt)
  [ -n "$small_rss" ] && [ -n "$big_rss" ] && [ $((big_rss - small_rss)) -lt 43008 ] && ok ||
    bad "convert --to $to of the F16 Llama: peak RSS ${big_rss:-failed} KiB vs ${small_rss:-failed} for the tiny model"
done
(cd "$work/big.onnx" 2>/dev/null && sha256sum --quiet -c SHA256SUMS) && ok || bad "streamed onnx: sha256sum -c"
[ "$(stat -c %s "$work/big.onnx/onnx/model.onnx.data" 2>/dev/null || echo 0)" -gt 40000000 ] && ok ||
  bad "streamed onnx: external data smaller than the F16 weights"
rm -rf "$big" "$work/big.onnx" "$work/big.gguf" "$work/small.onnx" "$work/small.gguf"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
