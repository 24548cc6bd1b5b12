#!/usr/bin/env bash
# ctxpatch tokenize end to end: ids comma-separated on one line, --no-special, --decode, --json,
# and one-line errors with a nonzero exit for bad inputs. Reference ids: the fixture goldens
# (../shared/fixtures/tokenizers/goldens, made by Hugging Face tokenizers / SentencePiece).
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON
fx=$CTXPATCH_FIXTURES/tokenizers
if [ ! -d "$fx" ]; then echo "SKIP: shared fixtures folder $fx is absent"; exit 77; fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
expect() { # expect WANT CMD...: stdout equals WANT and exit 0
  local want=$1; shift
  local got; got=$("$@" 2>"$work/err"); local rc=$?
  if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then ok; else bad "$* -> rc $rc, '$got' (want '$want') $(cat "$work/err")"; fi
}
expect_error() { # expect_error PATTERN CMD...: nonzero exit, nothing on stdout, one stderr line matching
  local pat=$1; shift
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [ $rc -ne 0 ] && [ ! -s "$work/out" ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q -- "$pat" "$work/err"; then ok
  else bad "$* -> rc $rc, stderr: $(cat "$work/err")"; fi
}

# T5 (transformers' test case): EOS appended unless --no-special
expect "71,307,8986,21,4505,1635,1707,5,1" "$bin" tokenize "$fx/t5/tokenizer.json" --text "A long paragraph for summarization."
expect "71,307,8986,21,4505,1635,1707,5" "$bin" tokenize "$fx/t5/tokenizer.json" --text "A long paragraph for summarization." --no-special
expect "71,307,8986,21,4505,1635,1707,5,1" "$bin" tokenize "$fx/t5/spiece.model" --text "A long paragraph for summarization."
# Llama-2 .model (llama2.c test.c case): BOS prepended; the folder finds tokenizer.model
printf 'Hello world' >"$work/hello.txt"
expect "1,15043,3186" "$bin" tokenize "$fx/llama2" --text-file "$work/hello.txt"
expect "15043,3186" "$bin" tokenize "$fx/llama2/tokenizer.model" --text "Hello world" --no-special
expect "Hello world" "$bin" tokenize "$fx/llama2" --decode 1,15043,3186 --no-special
# GPT-2: every golden row through the CLI (the text goes through a file: exact bytes)
n=0; m=0
while IFS= read -r line; do
  printf '%s' "$line" | "$py" -c 'import json,sys; sys.stdout.write(json.loads(sys.stdin.read())["text"])' >"$work/t.txt"
  want=$(printf '%s' "$line" | "$py" -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.read())["ids"])))')
  got=$("$bin" tokenize "$fx/gpt2/tokenizer.json" --text-file "$work/t.txt" --no-special 2>&1)
  n=$((n+1)); [ "$got" = "$want" ] && m=$((m+1))
done < <(head -n 40 "$fx/goldens/gpt2.jsonl")
echo "gpt2 goldens through the CLI: $m / $n"
[ "$m" -eq "$n" ] && ok || bad "gpt2 CLI goldens $m / $n"
# --decode round trip and --json
ids=$("$bin" tokenize "$fx/gpt2/tokenizer.json" --text "Hello world, it's 2024!" --no-special)
expect "Hello world, it's 2024!" "$bin" tokenize "$fx/gpt2/tokenizer.json" --decode "$ids"
"$bin" tokenize "$fx/gpt-neox/tokenizer.json" --text "Hello   world" --json >"$work/j.json" && ok || bad "--json exit"
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ids"]==[12092,50275,10186] and d["count"]==3 and d["kind"]=="bpe", d' "$work/j.json" && ok || bad "--json content"
"$bin" tokenize "$fx/t5/tokenizer.json" --decode 100,19,1 --json >"$work/d.json" && ok || bad "--decode --json exit"
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["text"]=="This is</s>", d' "$work/d.json" && ok || bad "--decode --json content"

# Modern tokenizers (../shared/fixtures/tokenizers/modern, ids made by transformers / HF tokenizers):
# Llama 3.2's tokenizer.json, Phi-3's SentencePiece GGUF and DeepSeek LLM's byte-level GGUF (its
# tokenizer.ggml.pre 'deepseek-llm'), each on llama.cpp's .inp texts against the .out ids; Llama 3.2
# with its BOS from the post-processor. All rows run in-process in test_tokenizer_modern.
mod=$fx/modern
if [ -d "$mod" ]; then
  mkdir "$work/l32" && gzip -dc "$mod/llama3/llama-3.2/tokenizer.json.gz" >"$work/l32/tokenizer.json" && ok ||
    bad "gunzip llama-3.2"
  for pair in llama3/ggml-vocab-llama-bpe:l32 phi3/ggml-vocab-phi-3:phi3 deepseek/ggml-vocab-deepseek-llm:dsl; do
    stem=${pair%%:*}; name=${pair##*:}
    case $name in l32) tok=$work/l32;; *) tok=$mod/$stem.gguf;; esac
    "$py" - "$mod/$stem.gguf.inp" "$mod/$stem.gguf.out" "$work/$name" <<'PY' || bad "split $stem"
import os, sys
texts = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
outs = open(sys.argv[2]).read().split("\n")
os.makedirs(sys.argv[3], exist_ok=True)
for i in (0, 1, 5, 14, 29, 45):  # digits, umlaut, spaces, newlines, CJK, the long mixed text
    open(f"{sys.argv[3]}/{i:02d}.txt", "w", encoding="utf-8").write(texts[i])
    open(f"{sys.argv[3]}/{i:02d}.ids", "w").write(",".join(outs[i].split()) + "\n")
PY
    n=0; m=0
    for f in "$work/$name"/*.txt; do
      got=$("$bin" tokenize "$tok" --text-file "$f" --no-special 2>&1)
      n=$((n+1)); [ "$got" = "$(cat "${f%.txt}.ids")" ] && m=$((m+1)) || echo "$stem ${f##*/}: got $got"
    done
    echo "$stem through the CLI: $m / $n texts equal"
    [ "$m" -eq "$n" ] && [ "$n" -eq 6 ] && ok || bad "$stem CLI $m / $n"
  done
  expect "128000,9906,1917,0" "$bin" tokenize "$work/l32" --text "Hello world!"
  expect "Hello world!" "$bin" tokenize "$work/l32" --decode 128000,9906,1917,0 --no-special
  # A pre-tokenizer or normalizer the engine does not have: one line naming the file and the key.
  printf '{"pre_tokenizer":{"type":"Punctuation"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}' >"$work/punct.json"
  expect_error "$work/punct.json: pre_tokenizer type 'Punctuation' is not supported" \
    "$bin" tokenize "$work/punct.json" --text hi
  printf '{"normalizer":{"type":"BertNormalizer"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}' >"$work/bert.json"
  expect_error "$work/bert.json: normalizer.*BertNormalizer" "$bin" tokenize "$work/bert.json" --text hi
else
  echo "note: $mod absent: the modern tokenizers part is skipped"
fi

# errors: one line, nonzero exit
mkdir "$work/empty"
expect_error "CP_ETOK_MISSING" "$bin" tokenize "$work/empty" --text hi
printf '{"model": {"type": "BPE",}' >"$work/bad.json"
expect_error "CP_ETOK_JSON" "$bin" tokenize "$work/bad.json" --text hi
expect_error "CP_ENOTFOUND" "$bin" tokenize "$work/nonexistent.json" --text hi
printf 'not a model' >"$work/bad.model"
expect_error "CP_ETOK_MODEL" "$bin" tokenize "$work/bad.model" --text hi
expect_error "CP_ETOK_ID" "$bin" tokenize "$fx/gpt2/tokenizer.json" --decode 50257
printf 'a\377b' >"$work/bin.txt"
expect_error "CP_ETOK_TEXT" "$bin" tokenize "$fx/gpt2/tokenizer.json" --text-file "$work/bin.txt"
expect_error "exactly one of" "$bin" tokenize "$fx/gpt2/tokenizer.json"
expect_error "non-negative ids" "$bin" tokenize "$fx/gpt2/tokenizer.json" --decode 1,x

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
