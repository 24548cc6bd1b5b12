#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/fuzz_*.c) with clang + ASan + UBSan into build-fuzz/
# and runs each for SECONDS (default 60; for a long local run: bash scripts/fuzz.sh 3600), as many at
# once as there are processors.
# Seeds: the project's own model files, the hostile corpus, the committed regression corpus and,
# when ../shared/fixtures is there, its checkpoints and tokenizers. A crash, leak, timeout (10 s
# an input) or memory blow-up (2 GiB) fails the run and leaves the input in build-fuzz/crashes/:
# fix the bug, then commit that file under tests/fuzz/regress/<harness>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
only=${2:-}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCTXPATCH_FUZZ=ON -DCTXPATCH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_safetensors fuzz_st_index fuzz_pytorch fuzz_config \
  fuzz_rule fuzz_tokenizer_json fuzz_spm_model fuzz_certificate fuzz_gguf fuzz_onnx fuzz_onnx_recover fuzz_onnx_sites >/dev/null
python3 tests/hostile/make_corpus.py build-fuzz/hostile >/dev/null
fx=../shared/fixtures
pm=examples/probe-models
seed() { # harness, then files or folders to copy in
  local h=$1; shift
  mkdir -p "build-fuzz/corpus/$h"
  cp -r tests/fuzz/regress/"$h"/. "build-fuzz/corpus/$h/" 2>/dev/null || true
  for s in "$@"; do
    [ -e "$s" ] || continue
    if [ -d "$s" ]; then find "$s" -maxdepth 2 -type f -size -8M -exec cp -t "build-fuzz/corpus/$h/" {} + 2>/dev/null || true
    else cp "$s" "build-fuzz/corpus/$h/$(echo "$s" | tr / _)"; fi
  done
}
seed fuzz_safetensors $pm/t5-probe/model.safetensors build-fuzz/hostile/safetensors tests/goldens/safetensors/sample.safetensors
seed fuzz_st_index tests/goldens/safetensors/sample.json
seed fuzz_pytorch $pm/alibi-probe/pytorch_model.bin build-fuzz/hostile/pytorch $fx/third_party/burn
seed fuzz_config $pm/t5-probe/config.json $pm/alibi-probe/config.json $pm/rope-probe/config.json $pm/fire-probe/config.json tests/fuzz/seeds/config
seed fuzz_rule tests/fuzz/seeds/rule
seed fuzz_certificate tests/fuzz/seeds/certificate
seed fuzz_tokenizer_json $pm/tokenizer.json $fx/tokenizers/gpt2/tokenizer.json $fx/tokenizers/t5/tokenizer.json \
  build-fuzz/hostile/tokenizers  # Split / Replace / Prepend / ByteLevel chains and limit pairs
seed fuzz_spm_model build-fuzz/hostile/tokenizers/spm_ok.model build-fuzz/hostile/tokenizers/spm_piece_at_limit.model
seed fuzz_spm_model $fx/tokenizers/t5/spiece.model $fx/tokenizers/llama2/tokenizer.model
python3 tests/gguf/make_gguf_cases.py build-fuzz/gguf_cases >/dev/null
# gpt2 and t5 GGUFs (their own keys and tensor checks in import/gguf/gguf_model.c), written by the
# normal build when there is one (scripts/test.sh builds it first).
if [ -x build/ctxpatch ]; then
  for src in tests/goldens/engine/models/gpt2 examples/probe-models/t5-probe; do
    build/ctxpatch convert "$src" "build-fuzz/gguf_cases/family_$(basename "$src").gguf" --to gguf --force \
      >/dev/null 2>&1 || echo "fuzz: could not write the GGUF seed of $src" >&2
  done
fi
seed fuzz_gguf tests/fuzz/seeds/gguf build-fuzz/gguf_cases $fx/third_party/stories260K/stories260K.gguf \
  $fx/third_party/ollama/llama-2-tiny-random.gguf $fx/tokenizers/llama2/ggml-vocab-llama-spm.gguf
seed fuzz_onnx tests/fuzz/seeds/onnx
# The ONNX corpus (one model.onnx per case folder: flattened under unique names; data files stay out).
/usr/bin/python3 tests/onnx/make_onnx_cases.py build-fuzz/onnx_cases >/dev/null
for f in build-fuzz/onnx_cases/hostile/*/model.onnx build-fuzz/onnx_cases/good/structure.onnx \
  build-fuzz/onnx_cases/good/elements/model.onnx; do
  cp "$f" "build-fuzz/corpus/fuzz_onnx/$(basename "$(dirname "$f")")-$(basename "$f")"
done
# Recovery of third-party graphs: the synthetic fused GPT-2s, the recovery cases, the fixture decoders.
seed fuzz_onnx_recover tests/fuzz/seeds/onnx_recover tests/fuzz/seeds/onnx $fx/third_party/onnxruntime/gpt2_past.onnx \
  $fx/third_party/onnxruntime-genai/tiny-random-gpt2-fp32/past.onnx
# A plain-op Llama as torch.onnx exports it (import/onnx/onnx_pattern_llama.c), from the golden GQA Llama.
scripts/py tests/onnx/make_torch_llama.py tests/goldens/engine/models/llama \
  build-fuzz/corpus/fuzz_onnx_recover/torch_llama.onnx >/dev/null 2>&1 || echo "fuzz: no torch.onnx Llama seed" >&2
for f in build-fuzz/onnx_cases/recover/*/model.onnx; do
  cp "$f" "build-fuzz/corpus/fuzz_onnx_recover/$(basename "$(dirname "$f")")-$(basename "$f")"
done
# A graph with Hugging Face names (Optimum's GPT2Model layout) and its tampered copies (issue 33
# item 1: recovered from the nodes, never read by the names; hf_gpt2_attn_zero.onnx is in the seeds).
if scripts/py tests/onnx/make_torch_gpt2.py build-fuzz/hf_src.onnx >/dev/null 2>&1 &&
  scripts/py tests/onnx/make_hf_named.py build-fuzz/hf_src.onnx build-fuzz/hf >/dev/null 2>&1 &&
  scripts/py tests/onnx/make_tampered.py build-fuzz/hf/model.onnx build-fuzz/hf_t >/dev/null 2>&1; then
  cp build-fuzz/hf/model.onnx build-fuzz/corpus/fuzz_onnx_recover/hf_gpt2.onnx
  for f in build-fuzz/hf_t/*.onnx; do cp "$f" "build-fuzz/corpus/fuzz_onnx_recover/hf_gpt2_$(basename "$f")"; done
else
  echo "fuzz: no Hugging Face-named GPT-2 seeds (torch.onnx)" >&2
fi
# The rewriter's site finder: its seeds, the recovery seeds (contrib and plain-op decoders), the
# fixtures' attention graphs and the recovery cases.
seed fuzz_onnx_sites tests/fuzz/seeds/onnx_sites tests/fuzz/seeds/onnx_recover tests/fuzz/seeds/onnx \
  $fx/third_party/onnxruntime/gpt2_past.onnx $fx/third_party/onnxruntime/attention_mha.onnx \
  $fx/third_party/onnxruntime-genai/tiny-random-gpt2-fp32/past.onnx
cp build-fuzz/corpus/fuzz_onnx_recover/*.onnx build-fuzz/corpus/fuzz_onnx_sites/ 2>/dev/null || true
mkdir -p build-fuzz/crashes
# One harness per processor at a time: each libFuzzer process is single-threaded, so on the 2-core
# CI machine two run side by side in the time one took (the total fuzzing time is unchanged).
par=$(nproc)
run_one() { # harness: runs it, leaves its one-line outcome in build-fuzz/$h.outcome
  local h=$1
  if ./build-fuzz/tests/$h "build-fuzz/corpus/$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="build-fuzz/crashes/$h-" -print_final_stats=1 >"build-fuzz/$h.log" 2>&1; then
    echo "fuzz: $h: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "build-fuzz/$h.log" | grep -o '[0-9]*$') runs in ${seconds}s, no crash" \
      >"build-fuzz/$h.outcome"
  else
    echo "FAILED" >"build-fuzz/$h.outcome"
  fi
}
harnesses=()
for h in fuzz_safetensors fuzz_st_index fuzz_pytorch fuzz_config fuzz_rule fuzz_tokenizer_json fuzz_spm_model \
  fuzz_certificate fuzz_gguf fuzz_onnx fuzz_onnx_recover fuzz_onnx_sites; do
  [ -n "$only" ] && [ "$only" != "$h" ] && continue
  harnesses+=("$h")
  rm -f "build-fuzz/$h.outcome"
  while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n || true; done
  run_one "$h" &
done
wait
status=0
for h in "${harnesses[@]}"; do
  if [ -f "build-fuzz/$h.outcome" ] && [ "$(cat "build-fuzz/$h.outcome")" != FAILED ]; then
    cat "build-fuzz/$h.outcome"
  else
    echo "fuzz: $h: FAILED (see build-fuzz/$h.log and build-fuzz/crashes/)"; tail -30 "build-fuzz/$h.log"; status=1
  fi
done
exit $status
