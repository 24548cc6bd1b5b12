#!/usr/bin/env bash
# Q4_K and Q4_0 GGUF matrices opened as stored (the rest of test_model_stored_quant.c, which makes
# its Q8_0 file with ctxpatch itself; ctxpatch writes no Q4 type): the random Llama of
# bench/make_random_llama.py (d_model 256, d_ff 688, 2 layers) converted to an F32 GGUF, then
# quantised by tests/gguf/requant.py (numpy, ggml's reference quantisers) three ways: every
# matrix whose rows are whole blocks in Q4_K, the same in Q4_0, and a mix (token_embd Q4_K,
# attn_v Q4_0, attn_output and ffn_gate Q8_0). ffn_down's 688-wide rows are not whole blocks and
# stay F32. test_model_stored_quant checks each file: block matrices in the mapping, llama q/k as
# reordered copies that keep their block type, logits bit-equal to the file opened with full
# dequantisation.
# Skips (77) without numpy.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py (tests/gguf/requant.py needs it)"; exit 77; }
exe=$CTXPATCH_BUILD_DIR/tests/test_model_stored_quant
requant() { "$py" "$src/tests/gguf/requant.py" "$@"; }
"$py" "$src/bench/make_random_llama.py" "$work/rl" 8 7 &&
  "$bin" convert "$work/rl" "$work/f32.gguf" --to gguf --dtype f32 >/dev/null && ok || bad "random llama F32 GGUF"
requant "$work/f32.gguf" "$work/q4k.gguf" .weight=Q4_K >"$work/q4k.txt" && ok || bad "requant Q4_K"
requant "$work/f32.gguf" "$work/q40.gguf" .weight=Q4_0 >"$work/q40.txt" && ok || bad "requant Q4_0"
requant "$work/f32.gguf" "$work/mix.gguf" token_embd=Q4_K attn_v=Q4_0 attn_output=Q8_0 ffn_gate=Q8_0 \
  >"$work/mix.txt" && ok || bad "requant mix"
# the files hold what the test is about: Q4_K / Q4_0 matrices, ffn_down left F32
grep -q "token_embd.weight Q4_K" "$work/q4k.txt" && grep -q "blk.1.ffn_up.weight Q4_K" "$work/q4k.txt" && ok ||
  bad "Q4_K file: $(head -3 "$work/q4k.txt")"
grep -q "blk.0.attn_v.weight Q4_0" "$work/q40.txt" && ok || bad "Q4_0 file: $(head -3 "$work/q40.txt")"
! grep -q "ffn_down" "$work/q4k.txt" && ok || bad "ffn_down quantised"
out=$("$exe" "$work/q4k.gguf" "$work/q40.gguf" "$work/mix.gguf" 2>&1) && ok || bad "test_model_stored_quant: $out"
echo "$out"
finish
