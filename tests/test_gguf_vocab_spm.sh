#!/usr/bin/env bash
# A SentencePiece tokenizer.model beside HF weights written as llama.cpp's "llama" vocabulary by
# `convert --to gguf` (export/gguf/gguf_vocab.c): the round trip stories260K.gguf -> safetensors
# folder (with tok512.model beside it as tokenizer.model) -> GGUF carries the vocabulary:
#   - tokenizer.ggml.tokens, .scores, .token_type and the unknown/bos/eos ids equal the original
#     file's (made by llama.cpp's converter), read by the independent numpy reader tests/gguf/gguf_py.py;
#   - llama.cpp (node-llama-cpp) loads the written file: its greedy 100 tokens from BOS and its
#     tokenization of 40 TinyStories lines (32 distinct) equal its own on the original file;
#   - `ctxpatch tokenize` on the written file equals the original's;
#   - a tokenizer.model with more pieces than the model's vocabulary is refused, nothing written.
# Skips (77) without ../shared/fixtures; the llama.cpp part without node-llama-cpp.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
fx=$CTXPATCH_FIXTURES
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
st=$fx/third_party/stories260K; text=$fx/third_party/text/tinystories_val_1000_eot.txt
[ -f "$st/stories260K.gguf" ] && [ -f "$st/tok512.model" ] && [ -f "$text" ] ||
  { echo "SKIP: ../shared/fixtures (stories260K, text) not found at $fx"; exit 77; }

"$bin" convert "$st/stories260K.gguf" "$work/hf" --to safetensors >/dev/null && ok || bad "GGUF -> safetensors"
cp "$st/tok512.model" "$work/hf/tokenizer.model"
"$bin" convert "$work/hf" "$work/rt.gguf" --to gguf >/dev/null && ok || bad "safetensors + tokenizer.model -> GGUF"
"$py" - "$src/tests/gguf" "$st/stories260K.gguf" "$work/rt.gguf" <<'PY' && ok || bad "vocabulary keys equal"
import sys
sys.path.insert(0, sys.argv[1])
import gguf_py
_, a, _, ta, _ = gguf_py.read(sys.argv[2])
_, b, _, tb, _ = gguf_py.read(sys.argv[3])
for k in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
    assert a[k] == b[k], k
assert b["tokenizer.ggml.add_bos_token"] is True and len(b["tokenizer.ggml.tokens"][0]) == 512
assert sorted(ta) == sorted(tb) and all(ta[n][2] == tb[n][2] for n in ta)
print("tokenizer.ggml.* equal to llama.cpp's converter's (512 pieces)")
PY

"$py" - "$text" "$work/lines.txt" <<'PY'
import sys
lines = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.strip()][:40]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines) + "\n")
PY
while IFS= read -r line; do "$bin" tokenize "$st/stories260K.gguf" --text "$line"; done <"$work/lines.txt" >"$work/a.txt"
while IFS= read -r line; do "$bin" tokenize "$work/rt.gguf" --text "$line"; done <"$work/lines.txt" >"$work/b.txt"
[ -s "$work/a.txt" ] && cmp -s "$work/a.txt" "$work/b.txt" && ok || bad "ctxpatch tokenize on the written file"

if [ -d "$nm/node-llama-cpp" ] && [ -d "$nm/@node-llama-cpp/linux-x64" ] && command -v node >/dev/null; then
  cp "$src/tests/gguf/llamacpp_run.mjs" "$work/run.mjs"; ln -s "$nm" "$work/node_modules"
  node "$work/run.mjs" "$st/stories260K.gguf" 100 1 1 "$work/lines.txt" >"$work/lc_a.json" && ok || bad "llama.cpp original"
  node "$work/run.mjs" "$work/rt.gguf" 100 1 1 "$work/lines.txt" >"$work/lc_b.json" && ok || bad "llama.cpp written"
  "$py" - "$work" <<'PY' && ok || bad "llama.cpp on the written file equals the original"
import json, sys
w = sys.argv[1]
a, b = json.load(open(f"{w}/lc_a.json")), json.load(open(f"{w}/lc_b.json"))
assert len(a["greedy"]) == 100 and a["greedy"] == b["greedy"], (a["greedy"][:10], b["greedy"][:10])
assert len(a["tokenize"]) >= 30 and a["tokenize"] == b["tokenize"], len(a["tokenize"])
print(f"llama.cpp: greedy 100 and {len(a['tokenize'])} tokenizations equal on the written file")
PY
else
  echo "note: node-llama-cpp not installed in $nm: the llama.cpp comparison is skipped"
fi

# --- more pieces than the model's vocabulary: refused, nothing written
"$py" - "$work/hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["vocab_size"] = 300
json.dump(c, open(sys.argv[1], "w"))
PY
"$bin" convert "$work/hf" "$work/bad.gguf" --to gguf >/dev/null 2>"$work/bad.err"; rc=$?
[ "$rc" -ne 0 ] && [ ! -e "$work/bad.gguf" ] && grep -q "tokenizer.model: 512 pieces for a model vocabulary of 300" \
  "$work/bad.err" && ok || bad "short vocabulary: rc $rc: $(cat "$work/bad.err")"

finish
