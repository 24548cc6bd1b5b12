#!/usr/bin/env bash
# Every file of the hostile tokenizer corpus (tests/hostile/hostile_tokenizers.py) through
# `ctxpatch tokenize`: the expected code and a one-line message naming the file, or success
# for the CP_OK cases (limits at N); never a crash or a hang (ctest's timeout stands guard).
set -uo pipefail
bin=$CTXPATCH_BIN
dir=$CTXPATCH_HOSTILE/tokenizers
passed=0; failed=0
[ -f "$dir/expected.tsv" ] || { echo "FAIL: $dir/expected.tsv missing (make_hostile_corpus)"; echo "0 passed, 1 failed"; exit 1; }
err=$(mktemp); trap 'rm -f "$err"' EXIT
while IFS=$'\t' read -r name want; do
  # decode_* cases run the decoder on 36 ids of "a"; the others encode text.txt
  input=(--text-file "$dir/text.txt")
  case $name in decode_*) input=(--decode "$(printf '1,%.0s' {1..35})1") ;; esac
  "$bin" tokenize "$dir/$name" "${input[@]}" >/dev/null 2>"$err"; rc=$?
  msg=$(head -c 300 "$err")
  if [ "$want" = CP_OK ]; then
    if [ $rc -eq 0 ]; then passed=$((passed+1)); else failed=$((failed+1)); echo "FAIL: $name: rc $rc: $msg"; fi
  elif [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$err")" -eq 1 ] && grep -q -- "$want" "$err" &&
       grep -qF -- "$name" "$err"; then
    passed=$((passed+1)); echo "ok   $name: $msg"
  else
    failed=$((failed+1)); echo "FAIL: $name: rc $rc (want $want): $msg"
  fi
done <"$dir/expected.tsv"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
