#!/usr/bin/env bash
# The tokenizers people ship today, written by `convert --to gguf` as llama.cpp's
# convert_hf_to_gguf.py writes them (export/gguf/gguf_vocab.c, gguf_vocab_json.c), and tokenized
# by llama.cpp (node-llama-cpp 3.22.1) into the real tokenizers' ids: for each tokenizer.json of
# ../shared/fixtures/tokenizers/modern (SOURCES.md there) a tiny Llama folder holding it
# (tests/gguf/vocab_modern.py: a vocabulary-sized tied embedding, D 8), converted, then every text
# through llama.cpp in one node process (tests/gguf/llamacpp_tokenize.mjs) and compared with the
# llama.cpp `.out` ids (HF's, made upstream) and the hf-goldens rows; tokenizer.ggml.model / pre
# checked, and add_bos_token / bos_token_id against the token HF's add_special_tokens=True puts
# in front of a text. `ctxpatch tokenize` on the gemma-2 GGUF (its own reader) gives HF's ids on
# three texts (a tab, an emoji, the first .inp text): before import/gguf/gguf_model.c added the
# byte piece Gemma's tokenizer.json lacks (<0x09>), libsentencepiece refused the vocabulary. The texts where llama.cpp itself differs from HF are listed
# with the reason in vocab_modern.py (NFC not applied; tekken's \p{M}) and asserted to differ.
# Default set (CI time: llama.cpp loads each vocabulary in ~2.3 s of CPU here): llama-3.2 (gpt2 /
# llama-bpe) and gemma-2 (llama: scores from the merges, no space prefix); CTXPATCH_TOKENIZERS
# names others from vocab_modern.py's KINDS, "all" the nine (measured: every text equal but the
# five listed).
# Then refusals, one line naming the file and the key, nothing written: a byte-level BPE whose
# pre-tokenizer llama.cpp has no name for, Llama 3's regex with ignore_merges off read as another
# kind's (smaug-bpe: written), Qwen2's with it on, a byte-fallback BPE with a Lowercase normalizer.
# Skips (77) without the fixtures or numpy; the llama.cpp part without node-llama-cpp.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
fx=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/tokenizers/modern
[ -f "$fx/SOURCES.md" ] || { echo "SKIP: ../shared/fixtures (tokenizers/modern) not found at $fx"; exit 77; }
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"
names=(${CTXPATCH_TOKENIZERS:-llama-3.2 gemma-2})
[ "${names[*]}" = all ] && names=(llama-3.2 llama-3-8b-instruct qwen3 qwen2.5 command-r-plus mistral-nemo deepseek-v3 gemma-2 gemma-3)

check "$py" "$src/tests/gguf/vocab_modern.py" make "$w/m" "$fx" "${names[@]}"
for n in "${names[@]}"; do
  check "$bin" convert "$w/m/$n" "$w/m/$n.gguf" --to gguf
done
# the GGUF reader (ctxpatch's own tokenizer) on the SentencePiece-derived file: HF's ids
[[ " ${names[*]} " == *" gemma-2 "* ]] && check "$py" "$src/tests/gguf/vocab_modern.py" ours "$w/m" "$fx" gemma-2 "$bin"
if [ $lc = 1 ]; then
  cp "$src/tests/gguf/llamacpp_tokenize.mjs" "$w/tok.mjs"
  node "$w/tok.mjs" "$w/m/job.json" >"$w/m/ids.json" && ok || bad "llama.cpp tokenizing"
  check "$py" "$src/tests/gguf/vocab_modern.py" compare "$w/m" "$fx" "${names[@]}"
fi

# --- refusals (and one acceptance) on GPT-2's tokenizer.json with another pre-tokenizer / model
gpt2=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/tokenizers/gpt2/tokenizer.json
check "$py" "$src/tests/gguf/vocab_modern.py" refusals "$w/r" "$gpt2"
refused() { # NAME KEY: one line naming the tokenizer.json and KEY, nonzero exit, nothing written
  mkdir "$w/r/out_$1"
  "$bin" convert "$w/r/$1" "$w/r/out_$1/m.gguf" --to gguf >/dev/null 2>"$w/r/err"; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(wc -l <"$w/r/err")" -eq 1 ] && grep -qF -- "$1/tokenizer.json: $2" "$w/r/err" &&
     [ -z "$(ls -A "$w/r/out_$1")" ]; then ok; echo "ok   $1: $(cat "$w/r/err")"
  else bad "$1: rc $rc, want one line naming $2, nothing written: $(head -c 300 "$w/r/err"); $(ls -A "$w/r/out_$1")"; fi
}
refused unknown_pre "pre_tokenizer:"
refused qwen_ignore "model.ignore_merges true"
refused spm_lower "normalizer:"
# Llama 3's regex without ignore_merges is llama.cpp's smaug-bpe (and dbrx)
if "$bin" convert "$w/r/smaug" "$w/r/smaug.gguf" --to gguf >/dev/null; then
  pre=$("$py" "$src/tests/gguf/vocab_modern.py" pre "$w/r/smaug.gguf")
  [ "$pre" = smaug-bpe ] && ok || bad "smaug: tokenizer.ggml.pre is $pre, not smaug-bpe"
else bad "smaug: not written"; fi
finish
