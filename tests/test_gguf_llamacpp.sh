#!/usr/bin/env bash
# GGUF models against llama.cpp itself (node-llama-cpp 3.22.1 with its prebuilt CPU binding
# @node-llama-cpp/linux-x64, run by tests/gguf/llamacpp_run.mjs):
#   - stories260K.gguf (a real pretrained TinyStories Llama): llama.cpp's greedy 200 tokens from
#     BOS equal `ctxpatch forward --ids 1 --generate 200`, and llama.cpp's raw logits equal the
#     engine's at every position of a 64-token prompt;
#   - the GGUF tokenizer (tokenizer.ggml.*) gives llama.cpp's ids on TinyStories text, and the
#     .model file's ids (python3-sentencepiece) wherever the text has no run of spaces (the .model
#     collapses them, llama.cpp does not);
#   - a Q8_0/Q4_0 re-quantisation of stories260K: logits near llama.cpp's on the same bytes;
#   - ollama's llama-2-tiny-random.gguf (F16, GQA-free, 32000 pieces): greedy 30 tokens equal.
# Node modules come from $CTXPATCH_NODE_MODULES (default tests/runtimes/node_modules); skips
# (77) when they or ../shared/fixtures are absent.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR; fx=$CTXPATCH_FIXTURES
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
stories=$fx/third_party/stories260K
tiny=$fx/third_party/ollama/llama-2-tiny-random.gguf
text=$fx/third_party/text/tinystories_val_1000_eot.txt
[ -f "$stories/stories260K.gguf" ] && [ -f "$tiny" ] && [ -f "$text" ] ||
  { echo "SKIP: ../shared/fixtures (stories260K, ollama, text) not found at $fx"; exit 77; }
[ -d "$nm/node-llama-cpp" ] && [ -d "$nm/@node-llama-cpp/linux-x64" ] ||
  { echo "SKIP: node-llama-cpp not installed in $nm (set CTXPATCH_NODE_MODULES)"; exit 77; }
command -v node >/dev/null || { echo "SKIP: node not on PATH"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
# ESM imports resolve from the script's folder: run a copy beside a link to the modules.
cp "$src/tests/gguf/llamacpp_run.mjs" "$work/run.mjs"; ln -s "$nm" "$work/node_modules"
llamacpp() { node "$work/run.mjs" "$@"; }

# --- stories260K: greedy 200 from BOS, and logits on a 64-token prompt
"$bin" forward "$stories/stories260K.gguf" --ids 1 --generate 200 --threads 1 >"$work/ours.txt" &&
  ok || bad "ctxpatch forward --generate 200"
# Texts for the tokenizer check: 300 lines of TinyStories validation text plus space runs.
"$py" - "$text" "$work/lines.txt" <<'PY'
import sys
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.strip()][:300]
lines += ["Hello  world", "  leading", "trailing  ", "a   b", "Lily's mom said, \"No!\""]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines) + "\n")
PY
prompt=$(head -c 2000 "$work/ours.txt" | tr ',' '\n' | head -63 | paste -sd, -)
llamacpp "$stories/stories260K.gguf" 200 1 1 "$work/lines.txt" >"$work/lc_gen.json" && ok || bad "llama.cpp generate"
llamacpp "$stories/stories260K.gguf" 1 "1,$prompt" 1 >"$work/lc_logits.json" && ok || bad "llama.cpp logits"
"$bin" forward "$stories/stories260K.gguf" --ids "1,$prompt" --out "$work/logits.bin" --threads 1 >/dev/null &&
  ok || bad "ctxpatch forward logits"
while IFS= read -r line; do
  "$bin" tokenize "$stories/stories260K.gguf" --text "$line" --no-special
done <"$work/lines.txt" >"$work/ours_tok.txt" && ok || bad "ctxpatch tokenize"

"$py" - "$work" "$stories/tok512.model" <<'PY' && ok || bad "stories260K against llama.cpp"
import json, sys
import numpy as np
import sentencepiece as spm
w, model = sys.argv[1], sys.argv[2]
gen = json.load(open(f"{w}/lc_gen.json"))
ours = [int(x) for x in open(f"{w}/ours.txt").read().strip().split(",")]
assert len(ours) == 200 and gen["greedy"] == ours, (gen["greedy"][:20], ours[:20])
sp = spm.SentencePieceProcessor(model_file=model)
story = sp.decode(ours)
assert story.startswith("Once upon a time"), story[:80]
lc = np.array(json.load(open(f"{w}/lc_logits.json"))["logits"], dtype=np.float64)
mine = np.fromfile(f"{w}/logits.bin", dtype="<f4").reshape(lc.shape).astype(np.float64)
diff = np.abs(lc - mine).max()
assert lc.shape == (64, 512) and diff < 1e-3, (lc.shape, diff)
lines = open(f"{w}/lines.txt", encoding="utf-8").read().split("\n")[:-1]
toks = [[int(x) for x in l.split(",") if x] for l in open(f"{w}/ours_tok.txt").read().split("\n")[:-1]]
assert len(toks) == len(lines) == 305
same_model = 0
for line, ids in zip(lines, toks):
    assert gen["tokenize"][line] == ids, (line, gen["tokenize"][line], ids)
    if "  " not in line and line == line.strip():
        assert sp.encode(line) == ids, (line, sp.encode(line), ids)
        same_model += 1
    else:
        assert sp.encode(line) != ids, line  # the .model collapses spaces; llama.cpp keeps them
assert same_model >= 250, same_model
print(f"stories260K: greedy 200 equal; logits max |diff| {diff:.2e} over 64x512; "
      f"{len(lines)} texts tokenized as llama.cpp, {same_model} also as tok512.model")
PY

# --- Q8_0 / Q4_0 decoding: stories260K re-quantised (attention and output Q8_0; embedding, gate
# and up Q4_0) by tests/gguf/requant.py. llama.cpp quantises activations to Q8_0 in these matmuls,
# so logits agree to ~0.3 while the quantisation itself moves them by ~3: a wrong block layout
# would land nowhere near llama.cpp.
q=$work/q.gguf
"$py" "$src/tests/gguf/requant.py" "$stories/stories260K.gguf" "$q" attn_=Q8_0 output.=Q8_0 ffn_gate=Q4_0 \
  ffn_up=Q4_0 token_embd=Q4_0 && ok || bad "requant"
"$bin" inspect "$q" >"$work/q_inspect.txt"  # to a file: grep -q closing a pipe early would fail it
grep -q 'blk.0.attn_q.weight  *F32 (Q8_0) \[64, 64\]' "$work/q_inspect.txt" && ok || bad "inspect shows Q8_0"
"$bin" forward "$q" --ids "1,$prompt" --out "$work/q.bin" --threads 1 >/dev/null && ok || bad "forward Q"
"$bin" forward "$q" --ids 1 --generate 40 --threads 1 >"$work/q_gen.txt" && ok || bad "forward Q generate"
llamacpp "$q" 40 "1,$prompt" 1 >"$work/lc_q.json" && ok || bad "llama.cpp Q"
"$py" - "$work" <<'PY' && ok || bad "quantised stories260K against llama.cpp"
import json, sys
import numpy as np
w = sys.argv[1]
d = json.load(open(f"{w}/lc_q.json"))
lc = np.array(d["logits"])
q = np.fromfile(f"{w}/q.bin", dtype="<f4").reshape(lc.shape)
f32 = np.fromfile(f"{w}/logits.bin", dtype="<f4").reshape(lc.shape)
to_lc, moved = np.abs(lc - q).max(), np.abs(q - f32).max()
assert to_lc < 0.6 and moved > 1.5 and to_lc < moved / 5, (to_lc, moved)
assert (lc.argmax(1) == q.argmax(1)).mean() >= 0.95
ours = [int(x) for x in open(f"{w}/q_gen.txt").read().split(",")]
print(f"Q8_0/Q4_0: max |logit diff| to llama.cpp {to_lc:.3f} (quantisation moved them {moved:.2f}); "
      f"greedy 40 equal: {ours == d['greedy']}")
PY

# --- ollama's tiny random Llama-2 (F16)
"$bin" forward "$tiny" --ids 1 --generate 30 --threads 1 >"$work/tiny.txt" && ok || bad "ctxpatch forward tiny"
llamacpp "$tiny" 30 1 1 >"$work/lc_tiny.json" && ok || bad "llama.cpp tiny"
"$py" - "$work" <<'PY' && ok || bad "llama-2-tiny-random against llama.cpp"
import json, sys
w = sys.argv[1]
ours = [int(x) for x in open(f"{w}/tiny.txt").read().strip().split(",")]
lc = json.load(open(f"{w}/lc_tiny.json"))["greedy"]
assert len(ours) == 30 and lc == ours, (lc, ours)
PY

echo "passed $passed, failed $failed"
[ "$failed" -eq 0 ]
