# Sourced by the GGUF family tests (test_gguf_gemma, _granite, _olmo2, _phi3, _qwen3, _llama3, _starcoder2,
# _yarn) after tests/harness.sh: the set-up each of them wrote out.
#   - skips (77) without numpy (Debian python3); tests/gguf/llamacpp_env.sh (lc, run.mjs,
#     PYTHONPATH with gguf_py, w=$work);
#   family_gguf DIR KIND [ARGS]  a tiny random folder (make_random_family.py DIR KIND ARGS) and
#                                DIR.gguf written from it by `convert --to gguf` (two checks)
#   back_to_safetensors GGUF DIR `convert GGUF DIR --to safetensors` (one check)
#   random_ids SEED N            prints "2" and N - 1 ids in 3..558 (the tiny models' vocabulary
#                                is 559), comma-separated, from Python's random.Random(SEED)
#   engine_logits OUT MODEL IDS [ARGS]  `forward MODEL --ids IDS --out OUT --threads 1 ARGS` (one check)
#   llamacpp_vs_engine LABEL GGUF IDS ENGINE_BIN JSON [TOL [GENERATE]]  when llama.cpp runs here:
#                                its run into JSON (llamacpp_run.mjs), its logits on GGUF at every
#                                position of IDS against ENGINE_BIN (the
#                                engine's), max |diff| <= TOL (default 1e-4) x max |logit|
#                                (llamacpp_compare.py), and with GENERATE its greedy GENERATE tokens
#                                equal `forward GGUF --generate GENERATE`'s
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }
. "$src/tests/gguf/llamacpp_env.sh"

family_gguf() {
  local dir=$1; shift
  check "$py" "$src/tests/gguf/make_random_family.py" "$dir" "$@"
  check "$bin" convert "$dir" "$dir.gguf" --to gguf
}
back_to_safetensors() { check "$bin" convert "$1" "$2" --to safetensors; }
random_ids() {
  "$py" -c "import random, sys; r = random.Random(int(sys.argv[1]))
print(','.join(['2'] + [str(r.randrange(3, 559)) for _ in range(int(sys.argv[2]) - 1)]))" "$1" "$2"
}
engine_logits() {
  local out=$1 model=$2 ids=$3; shift 3
  check "$bin" forward "$model" --ids "$ids" --out "$out" --threads 1 "$@"
}
llamacpp_vs_engine() {
  [ "$lc" = 1 ] || return 0
  local label=$1 gguf=$2 ids=$3 engine=$4 json=$5 tol=${6:-1e-4} gen=${7:-0} n
  n=$(tr ',' '\n' <<<"$ids" | wc -l)
  node "$w/run.mjs" "$gguf" "$gen" "$ids" 1 >"$json" && ok || { bad "llama.cpp on $gguf ($label)"; return; }
  if [ "$gen" -gt 0 ]; then
    "$bin" forward "$gguf" --ids "$ids" --generate "$gen" --threads 1 >"$json.gen" && ok || bad "generate ($label)"
    check "$py" "$src/tests/gguf/llamacpp_compare.py" --tol "$tol" "$label" "$json" "$engine" "$n" 559 "$json.gen"
  else
    check "$py" "$src/tests/gguf/llamacpp_compare.py" --tol "$tol" "$label" "$json" "$engine" "$n" 559
  fi
}
# same_logits IDS OUT1 MODEL1 OUT2 MODEL2 ...: engine_logits of each, every OUT bit for bit OUT1
same_logits() {
  local ids=$1 first=$2; shift
  while [ $# -ge 2 ]; do
    engine_logits "$1" "$2" "$ids"
    [ "$1" = "$first" ] || check cmp "$first" "$1"
    shift 2
  done
}
