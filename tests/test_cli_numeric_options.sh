#!/usr/bin/env bash
# Every numeric option is bounded, tested at its limit N (accepted) and N+1 (refused with a usage
# error naming the option and the bound, exit 2); a repeated option is refused; verify refuses a
# length whose KV cache and activations would not fit in memory before allocating anything.
set -uo pipefail
bin=$CTXPATCH_BIN; src=$CTXPATCH_SOURCE_DIR
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
none=$work/no-such-model # options are parsed first: accepted options then fail on the model (exit 1)
accepted() {
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [ $rc = 1 ] && grep -q CP_ENOTFOUND "$work/err"; then ok; else bad "accepted? (rc=$rc) $*: $(cat "$work/err")"; fi
}
refused() { # refused PATTERN CMD...: usage error (exit 2) whose message matches PATTERN
  local pat=$1; shift
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [ $rc = 2 ] && grep -q -- "$pat" "$work/err"; then ok; else bad "refused /$pat/? (rc=$rc) $*: $(cat "$work/err")"; fi
}
limit() { # limit OPT N PATTERN CMD... (the value goes after CMD): N accepted, N+1 refused
  local opt=$1 n=$2 pat=$3; shift 3
  accepted "$@" "$opt" "$n"
  refused "$pat" "$@" "$opt" $((n + 1))
}
low() { # low OPT N PATTERN CMD...: N accepted, N-1 refused
  local opt=$1 n=$2 pat=$3; shift 3
  accepted "$@" "$opt" "$n"
  refused "$pat" "$@" "$opt" $((n - 1))
}

V=("$bin" verify "$none" --probe passkey)
limit --lengths 1048576 "over the limit of 1048576 tokens" "${V[@]}"
refused "over the limit of 1048576 tokens" "${V[@]}" --lengths 1099511627776
limit --no-regression-at 1048576 "over the limit of 1048576 tokens" "${V[@]}" --lengths 256
limit --samples 100000 "--samples must be in \[1, 100000\]" "${V[@]}" --lengths 256
low --samples 1 "--samples must be in \[1, 100000\]" "${V[@]}" --lengths 256
limit --threads 1024 "--threads must be in \[0, 1024\]" "${V[@]}" --lengths 256
low --work-budget 1 "--work-budget must be in \[1, 18446744073709551615\]" "${V[@]}" --lengths 256
refused "--samples given more than once" "${V[@]}" --lengths 256 --samples 3 --samples 4
refused "--lengths given more than once" "${V[@]}" --lengths 256 --lengths 512

P=("$bin" patch "$none" "$work/out_dir" --method lm-infinite)
for opt in --n-local --target-len --train-len --ceiling --top-k; do
  limit $opt 1048576 "$opt must be in \[1, 1048576\]" "${P[@]}"
  low $opt 1 "$opt must be in \[1, 1048576\]" "${P[@]}"
done
limit --n-global 1048576 "--n-global must be in \[0, 1048576\]" "${P[@]}"
accepted "${P[@]}" --n-global 0
limit --samples 100000 "--samples must be in \[1, 100000\]" "${P[@]}"
refused "--n-local given more than once" "${P[@]}" --n-local 4 --n-local 8

# Values that passed and should not (#33): a tau that zeroes every query weight, a factor below 1
# (no interpolation), a shard size past 1 PiB (2^64 and above read as 2^64-1), an output name too
# long for its temporary beside it (refused after the work was done).
T=("$bin" patch "$none" "$work/out_dir" --method temperature)
limit --tau 1000 "--tau must be in \[1e-06, 1000\], got '1001'" "${T[@]}"
refused "--tau must be in \[1e-06, 1000\], got '1e308'" "${T[@]}" --tau 1e308 --no-verify
RP=("$bin" patch "$none" "$work/out_dir" --method rope-pi)
low --factor 1 "--factor must be in \[1, 1048576\], got '0'" "${RP[@]}"
refused "--factor must be in \[1, 1048576\], got '0.5'" "${RP[@]}" --factor 0.5 --no-verify
CV=("$bin" convert "$none" "$work/conv" --to safetensors)
limit --shard-size 1125899906842624 "--shard-size expects a positive byte count up to 1125899906842624" "${CV[@]}"
refused "got '18446744073709551615'" "${CV[@]}" --shard-size 18446744073709551615
refused "got '18446744073709551616'" "${CV[@]}" --shard-size 18446744073709551616
refused "got '1048577G'" "${CV[@]}" --shard-size 1048577G
long=$work/$(printf 'n%.0s' $(seq 240))
refused "a name of 240 bytes: its temporary" "$bin" patch "$none" "$long" --method temperature --tau 0.8 --no-verify
refused "a name of 240 bytes: its temporary" "$bin" convert "$none" "$long" --to safetensors
refused "a name of 240 bytes: its temporary" "$bin" convert "$none" "$long" --to gguf
[ ! -e "$long" ] && [ -z "$(ls -A "$work" | grep nnnn)" ] && ok || bad "a refused long name wrote something"
accepted "$bin" patch "$none" "$work/$(printf 'n%.0s' $(seq 200))" --method temperature --tau 0.8 --no-verify

F=("$bin" forward "$none" --ids 1,2)
limit --generate 1048576 "--generate must be in \[0, 1048576\]" "${F[@]}"
limit --threads 1024 "--threads must be in \[1, 1024\]" "${F[@]}" --out "$work/o.bin"
low --threads 1 "--threads must be in \[1, 1024\]" "${F[@]}" --out "$work/o.bin"

C=("$bin" calibrate "$none" --method pmax --lengths 256)
limit --train-len 1048575 "--train-len must be in \[2, 1048575\]" "$bin" calibrate "$none" --method pmax --lengths 1048576
low --train-len 2 "--train-len must be in \[2, 1048575\]" "${C[@]}"
limit --samples 1000 "--samples must be in \[1, 1000\]" "${C[@]}"
limit --threads 1024 "--threads must be in \[1, 1024\]" "${C[@]}"
limit --lengths 1048576 "over the limit of 1048576 tokens" "$bin" calibrate "$none" --method pmax

I=("$bin" inspect "$none" --attention-stats --lengths 256)
limit --threads 1024 "--threads must be in \[0, 1024\]" "${I[@]}"
refused "--json given more than once" "${I[@]}" --json --json

# verify's memory estimate, at N and N+1 bytes of CTXPATCH_MEMORY_LIMIT.
model=$src/examples/probe-models/rope-probe
if [ -f "$model/model.safetensors" ]; then
  run=("$bin" verify "$model" --probe passkey --lengths 256 --depths 0:1:1 --samples 1 --threads 2)
  CTXPATCH_MEMORY_LIMIT=1 "${run[@]}" >"$work/out" 2>"$work/err"; rc=$?
  per=$(sed -n 's/.*(\([0-9]*\) per token.*/\1/p' "$work/err")
  [ $rc = 1 ] && grep -q CP_EVERIFY_LENGTH "$work/err" && [ -n "$per" ] && ok || bad "memory limit 1: rc=$rc $(cat "$work/err")"
  need=$(( ${per:-0} * (256 + 10) ))  # the length plus verify's 10 generated tokens
  CTXPATCH_MEMORY_LIMIT=$need "${run[@]}" >"$work/out" 2>"$work/err" && ok || bad "memory limit N=$need: $(cat "$work/err")"
  CTXPATCH_MEMORY_LIMIT=$((need - 1)) "${run[@]}" >"$work/out" 2>"$work/err"; rc=$?
  [ $rc = 1 ] && grep -q "CP_EVERIFY_LENGTH.*--lengths: 256 tokens need" "$work/err" && ok || bad "memory limit N-1: rc=$rc $(cat "$work/err")"
else
  echo "SKIP part: $model absent"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
