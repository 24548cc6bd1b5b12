#!/usr/bin/env bash
# A single .gguf file as MODEL, without llama.cpp at hand (test_gguf_llamacpp.sh runs it live):
#   - inspect: family, hyperparameters and where the training length came from (text and JSON);
#   - forward --generate 200 from BOS equals llama.cpp's greedy output recorded in
#     tests/goldens/gguf/stories260K_greedy200.txt (node-llama-cpp 3.22.1, temperature 0), and
#     decodes (tok512.model, python3-sentencepiece) to a TinyStories story;
#   - tokenize with a GGUF vocabulary equals llama.cpp's goldens (llama2.jsonl from
#     ggml-vocab-llama-spm.gguf);
#   - verify reads it; patch writes it as an HF folder; ollama's tiny random Llama-2 reads.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR; fx=$CTXPATCH_FIXTURES
stories=$fx/third_party/stories260K
[ -f "$stories/stories260K.gguf" ] && [ -f "$fx/tokenizers/llama2/ggml-vocab-llama-spm.gguf" ] ||
  { echo "SKIP: ../shared/fixtures (stories260K, tokenizers/llama2) not found at $fx"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
m=$stories/stories260K.gguf

"$bin" inspect "$m" >"$work/inspect.txt" && ok || bad "inspect"
grep -q '^format:        gguf (1 file)$' "$work/inspect.txt" && ok || bad "inspect format"
grep -q '^architecture:  llama (model_type llama, LlamaForCausalLM)$' "$work/inspect.txt" && ok || bad "inspect family"
grep -q '^train length:  2048 (from GGUF llama.context_length)$' "$work/inspect.txt" && ok || bad "inspect train length"
grep -q 'vocab 512, d_model 64, layers 5, heads 8 (kv 4), d_head 8, d_ff 172, silu, eps 1e-05$' "$work/inspect.txt" &&
  ok || bad "inspect hyperparameters"
"$bin" inspect "$m" --json >"$work/inspect.json" && ok || bad "inspect --json"
"$py" -c "
import json, sys
d = json.load(open(sys.argv[1]))
assert d['train_len'] == 2048 and d['train_len_source'] == 'GGUF llama.context_length', d
assert d['tensor_count'] == 48 and d['parameter_count'] == 292800
" "$work/inspect.json" && ok || bad "inspect JSON"

"$bin" forward "$m" --ids 1 --generate 200 --threads 2 >"$work/gen.txt" && ok || bad "forward --generate"
cmp -s "$work/gen.txt" "$src/tests/goldens/gguf/stories260K_greedy200.txt" && ok || bad "greedy 200 differs from llama.cpp's"
"$py" -c "
import sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
text = sp.decode([int(x) for x in open(sys.argv[1]).read().split(',')])
assert text.startswith('Once upon a time, there was a little girl named Lily.'), text[:80]
" "$work/gen.txt" "$stories/tok512.model" && ok || bad "generated text"

"$py" - "$bin" "$fx" <<'PY' && ok || bad "GGUF vocabulary against llama.cpp goldens"
import json, subprocess, sys
bin, fx = sys.argv[1], sys.argv[2]
n = 0
for line in open(f"{fx}/tokenizers/goldens/llama2.jsonl", encoding="utf-8"):
    d = json.loads(line)
    args = [bin, "tokenize", f"{fx}/tokenizers/llama2/ggml-vocab-llama-spm.gguf", "--text", d["text"]]
    if not d["add_special_tokens"]:
        args.append("--no-special")
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    ids = [int(x) for x in out.split(",") if x]
    assert ids == d["ids"], (d["text"], d["ids"], ids)
    n += 1
assert n == 51, n
PY

"$bin" verify "$m" --probe passkey --lengths 256 --samples 1 --threads 2 >"$work/verify.txt" 2>&1 && ok ||
  bad "verify on a GGUF model: $(tail -1 "$work/verify.txt")"
# A GGUF input patches into an HF folder (HF names, q/k in HF order; export/convert.c).
"$bin" patch "$m" "$work/out" --method rope-pi --factor 2 --no-verify >/dev/null 2>"$work/patch.err" &&
  [ -f "$work/out/config.json" ] && "$bin" forward "$work/out" --ids 1 --generate 5 --threads 1 >/dev/null &&
  ok || bad "patch of a GGUF: $(cat "$work/patch.err")"

# llama.block_count one below the 5 layers present (blk.4.* left over): refused naming the key and a
# tensor of the dropped layer, nothing written (it ran on the first 4 layers without a word).
"$py" - "$m" "$work/short.gguf" <<'PY' || bad "making the short block_count GGUF"
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
k = b"llama.block_count"
i = b.index(k) + len(k)
assert struct.unpack_from("<II", b, i) == (4, 5)  # u32 5
struct.pack_into("<I", b, i + 4, 4)
open(sys.argv[2], "wb").write(b)
PY
short_refused() { # short_refused CMD ARGS...: exit 1, one line naming the key and a dropped tensor
  "$bin" "$1" "$work/short.gguf" "${@:2}" >/dev/null 2>"$work/short.err"
  [ $? = 1 ] && [ "$(wc -l <"$work/short.err")" = 1 ] &&
    grep -q "CP_EGGUF_KEY: .*short.gguf: key 'llama.block_count' is 4, but tensor 'blk.4\..*' is of layer 4" "$work/short.err" &&
    ok || bad "short block_count, $1: $(cat "$work/short.err")"
}
short_refused inspect
short_refused forward --ids 1 --generate 5
short_refused patch "$work/short_out" --method rope-pi --factor 2 --no-verify
[ ! -e "$work/short_out" ] && ok || bad "short block_count: patch wrote $work/short_out"

tiny=$fx/third_party/ollama/llama-2-tiny-random.gguf
if [ -f "$tiny" ]; then
  "$bin" inspect "$tiny" >"$work/tiny.txt"  # to a file: grep -q closing a pipe early would fail it
  grep -q 'vocab 32000, d_model 8, layers 1, heads 2 (kv 2), d_head 4, d_ff 32' "$work/tiny.txt" && ok ||
    bad "tiny inspect"
  "$bin" forward "$tiny" --ids 1,2,3 --out "$work/tiny.bin" --threads 1 >/dev/null && ok || bad "tiny forward"
fi

echo "passed $passed, failed $failed"
[ "$failed" -eq 0 ]
