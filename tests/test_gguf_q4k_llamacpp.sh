#!/usr/bin/env bash
# Q4_K (and Q4_0 / Q8_0) decoding proven against llama.cpp (node-llama-cpp 3.22.1, prebuilt CPU
# binding, tests/gguf/llamacpp_run.mjs) on files quantised by tests/gguf/requant.py (numpy, ggml's
# reference quantisers):
#   - stories260K has no tensor whose rows (ne[0] = 64 or 172) are whole Q4_K super-blocks of 256:
#     requant.py quantises none of them (asserted), so the Q4_K proof runs on a project-made random
#     Llama (bench/make_random_llama.py: d_model 256, d_ff 688, vocab 4096, 2 layers, F32 GGUF with
#     the probe models' byte-level BPE vocabulary so llama.cpp loads it);
#   - token_embd alone in Q4_K (then Q4_0, then Q8_0): llama.cpp's get_rows dequantises the rows
#     exactly (no activation quantisation), so its logits equal the engine's to float rounding
#     (max |diff| < 1e-3, measured 1.7e-4 for Q4_K) while the quantisation moved them by 13 (Q8_0: 1);
#   - every 256-multiple matrix in Q4_K (token_embd, attn_q/k/v/output, ffn_gate/up, output;
#     ffn_down's 688-wide rows stay F32): llama.cpp quantises activations to Q8_K in these matmuls,
#     so the logits agree only to that noise: mean |diff| under a quarter of what Q4_K moved them,
#     max under half, argmax equal at >= 75% of positions (measured mean 0.16 vs 1.0, max 2.6
#     vs 14, 88%);
#   - a tensor whose type id is patched to Q6_K is refused by name, nothing written.
# Skips (77) without ../shared/fixtures or node-llama-cpp.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
fx=$CTXPATCH_FIXTURES
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
stories=$fx/third_party/stories260K/stories260K.gguf
[ -f "$stories" ] || { echo "SKIP: ../shared/fixtures (stories260K) not found at $fx"; exit 77; }
[ -d "$nm/node-llama-cpp" ] && [ -d "$nm/@node-llama-cpp/linux-x64" ] ||
  { echo "SKIP: node-llama-cpp not installed in $nm (set CTXPATCH_NODE_MODULES)"; exit 77; }
command -v node >/dev/null || { echo "SKIP: node not on PATH"; exit 77; }
cp "$src/tests/gguf/llamacpp_run.mjs" "$work/run.mjs"; ln -s "$nm" "$work/node_modules"
requant() { "$py" "$src/tests/gguf/requant.py" "$@"; }

# --- stories260K: no tensor qualifies for Q4_K
requant "$stories" "$work/s.gguf" .weight=Q4_K >"$work/s.txt" && ok || bad "requant stories260K"
[ ! -s "$work/s.txt" ] && cmp -s "$stories" "$work/s.gguf" && ok ||
  bad "stories260K: Q4_K changed tensors $(cat "$work/s.txt")"

# --- the random Llama, F32, with a vocabulary llama.cpp can load
"$py" "$src/bench/make_random_llama.py" "$work/rl" 8 7 && cp "$src/examples/probe-models/tokenizer.json" "$work/rl/" &&
  "$bin" convert "$work/rl" "$work/f32.gguf" --to gguf --dtype f32 >/dev/null && ok || bad "random llama F32 GGUF"
prompt=$("$py" -c "import random; r = random.Random(3); print(','.join(str(r.randrange(3, 559)) for _ in range(48)))")
requant "$work/f32.gguf" "$work/k_embd.gguf" token_embd=Q4_K >/dev/null && ok || bad "requant k_embd"
requant "$work/f32.gguf" "$work/q4_embd.gguf" token_embd=Q4_0 >/dev/null && ok || bad "requant q4_embd"
requant "$work/f32.gguf" "$work/q8_embd.gguf" token_embd=Q8_0 >/dev/null && ok || bad "requant q8_embd"
requant "$work/f32.gguf" "$work/k_all.gguf" .weight=Q4_K >"$work/k_all.txt" && ok || bad "requant k_all"
[ "$(cut -d' ' -f1 "$work/k_all.txt" | paste -sd' ')" = "token_embd.weight blk.0.attn_q.weight blk.0.attn_k.weight \
blk.0.attn_v.weight blk.0.attn_output.weight blk.0.ffn_gate.weight blk.0.ffn_up.weight blk.1.attn_q.weight \
blk.1.attn_k.weight blk.1.attn_v.weight blk.1.attn_output.weight blk.1.ffn_gate.weight blk.1.ffn_up.weight \
output.weight" ] && ok || bad "Q4_K tensors: $(cat "$work/k_all.txt")"
"$bin" inspect "$work/k_all.gguf" >"$work/k_inspect.txt"
grep -q 'blk.0.attn_q.weight  *F32 (Q4_K) \[256, 256\]' "$work/k_inspect.txt" &&
  grep -q 'blk.0.ffn_down.weight  *F32 (F32) \[256, 688\]' "$work/k_inspect.txt" && ok || bad "inspect shows Q4_K"
for f in f32 k_embd q4_embd q8_embd k_all; do
  "$bin" forward "$work/$f.gguf" --ids "$prompt" --out "$work/$f.bin" --threads 1 >/dev/null && ok ||
    bad "ctxpatch forward $f"
  node "$work/run.mjs" "$work/$f.gguf" 1 "$prompt" 1 >"$work/lc_$f.json" && ok || bad "llama.cpp $f"
done

"$py" - "$work" <<'PY' && ok || bad "quantised random llama against llama.cpp"
import json, sys
import numpy as np
w = sys.argv[1]
def load(f):
    lc = np.array(json.load(open(f"{w}/lc_{f}.json"))["logits"], dtype=np.float64)
    me = np.fromfile(f"{w}/{f}.bin", dtype="<f4").reshape(lc.shape).astype(np.float64)
    return lc, me
lc32, f32 = load("f32")
assert lc32.shape == (48, 4096) and np.abs(lc32 - f32).max() < 1e-3, np.abs(lc32 - f32).max()
for f in ("k_embd", "q4_embd", "q8_embd"):
    lc, me = load(f)
    diff, moved = np.abs(lc - me).max(), np.abs(me - f32).max()
    assert diff < 1e-3 and moved > 0.5, (f, diff, moved)
    print(f"{f}: max |logit diff| to llama.cpp {diff:.1e} (quantisation moved them {moved:.2f})")
lc, me = load("k_all")
d, m = np.abs(lc - me), np.abs(me - f32)
agree = (lc.argmax(1) == me.argmax(1)).mean()
print(f"k_all: |diff| to llama.cpp mean {d.mean():.3f} max {d.max():.2f}; Q4_K moved mean {m.mean():.3f} "
      f"max {m.max():.2f}; argmax equal {agree:.2f}")
assert d.mean() < m.mean() / 4 and d.max() < m.max() / 2 and agree >= 0.75
PY

# --- a type the reader does not decode, refused by name
requant "$work/f32.gguf" "$work/q6.gguf" attn_q=retype:Q6_K >/dev/null && ok || bad "requant retype"
"$bin" forward "$work/q6.gguf" --ids 1,2 --out "$work/q6.bin" 2>"$work/q6.err"; rc=$?
[ "$rc" -ne 0 ] && [ ! -e "$work/q6.bin" ] && [ "$(cat "$work/q6.err")" = "ctxpatch: error CP_EGGUF_QUANT: \
$work/q6.gguf: tensor 'blk.0.attn_q.weight' is Q6_K; only F32, F16, BF16, Q8_0, Q4_0 and Q4_K are read" ] &&
  ok || bad "Q6_K refusal: rc $rc: $(cat "$work/q6.err")"

finish
