#!/usr/bin/env bash
# Every folder of the hostile GGUF-vocabulary corpus (tests/hostile/hostile_gguf_vocab.py: a tiny
# Llama beside a tokenizer.json) through `ctxpatch convert DIR OUT.gguf --to gguf`. A refused case:
# nonzero exit, the expected code on one line naming the tokenizer.json (and the token or merge),
# nothing written in the output folder. A CP_OK case: the GGUF is written and its own reader reads
# the vocabulary back (`tokenize` on it). Before the fix the writer wrote 2000-byte, empty and
# repeated tokens that `tokenize` on the GGUF then refused, and cut a token at its NUL byte. Then a
# GGUF whose block_count is below its layers (#33).
set -uo pipefail
bin=$CTXPATCH_BIN
dir=$CTXPATCH_HOSTILE/gguf_vocab
passed=0; failed=0
[ -f "$dir/expected.tsv" ] || { echo "FAIL: $dir/expected.tsv missing (make_hostile_corpus)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
printf 'ab c' >"$work/text.txt"
while IFS=$'\t' read -r name want; do
  out=$work/$name; mkdir "$out"
  "$bin" convert "$dir/$name" "$out/model.gguf" --to gguf >/dev/null 2>"$work/err"; rc=$?
  msg=$(head -c 300 "$work/err")
  if [ "$want" = CP_OK ]; then
    if [ $rc -eq 0 ] && "$bin" tokenize "$out/model.gguf" --text-file "$work/text.txt" >/dev/null 2>"$work/err"; then
      passed=$((passed+1)); echo "ok   $name"
    else
      failed=$((failed+1)); echo "FAIL: $name: convert rc $rc: $msg; tokenize: $(head -c 300 "$work/err")"
    fi
  elif [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && grep -q -- "$want" "$work/err" &&
       grep -qF -- "$name/tokenizer.json: " "$work/err" && grep -qE "(token|merge) [0-9]+" "$work/err" &&
       [ -z "$(ls -A "$out")" ]; then
    passed=$((passed+1)); echo "ok   $name: $msg"
  else
    failed=$((failed+1)); echo "FAIL: $name: rc $rc (want $want, nothing written): $msg; written: $(ls -A "$out")"
  fi
done <"$dir/expected.tsv"

# The vocab_ok GGUF (2 layers) with llama.block_count cut to 1: refused naming the key and a tensor
# of the dropped layer (it ran on the first layer without a word), exit 1, nothing written.
"$CTXPATCH_PYTHON" - "$work/vocab_ok/model.gguf" "$work/short.gguf" <<'PY' || { failed=$((failed+1)); echo "FAIL: short"; }
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
k = b"llama.block_count"
i = b.index(k) + len(k)
assert struct.unpack_from("<II", b, i) == (4, 2)  # u32 2
struct.pack_into("<I", b, i + 4, 1)
open(sys.argv[2], "wb").write(b)
PY
for cmd in inspect forward patch; do
  args=(); case $cmd in forward) args=(--ids 1,2 --generate 2);; patch) args=("$work/short_out" --method rope-pi --factor 2 --no-verify);; esac
  "$bin" $cmd "$work/short.gguf" "${args[@]}" >/dev/null 2>"$work/err"; rc=$?
  if [ $rc = 1 ] && [ "$(wc -l <"$work/err")" -eq 1 ] && [ ! -e "$work/short_out" ] &&
     grep -q "CP_EGGUF_KEY: .*short.gguf: key 'llama.block_count' is 1, but tensor 'blk.1\..*' is of layer 1" "$work/err"; then
    passed=$((passed+1)); echo "ok   block_count short, $cmd"
  else
    failed=$((failed+1)); echo "FAIL: block_count short, $cmd: rc $rc: $(head -c 300 "$work/err")"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -ge 12 ]
