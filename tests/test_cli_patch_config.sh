#!/usr/bin/env bash
# `ctxpatch patch` edits config.json without touching what it does not change: every untouched
# key keeps its original text byte for byte (big integers, 1E400, strings with \u0000, the
# original formatting), identifiers with a NUL are refused, and a rope factor that overflows is
# refused naming the key, with nothing written.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
models=$src/tests/goldens/engine/models
[ -f "$models/llama/model.safetensors" ] || { echo "SKIP: $models/llama is absent"; exit 77; }

# mk NAME BASE 'EXTRA MEMBERS' [sed expression]: BASE's folder with EXTRA added after the opening brace.
mk() {
  mkdir -p "$work/$1"
  ln -sf "$models/$2/model.safetensors" "$work/$1/model.safetensors"
  { printf '{\n  %s,' "$3"; tail -c +2 "$models/$2/config.json"; } >"$work/$1/config.json"
  if [ $# -ge 4 ]; then sed -i "$4" "$work/$1/config.json"; fi
}
# the members a patch must keep byte for byte
odd='"big_int": 9007199254740993, "huge": 1E400, "nul_str": "a\u0000b", "tiny": 1.0000000000000002, "esc": "\u00e9\/"'

# 1. untouched keys keep their bytes, for a metadata patch, a native-config patch and an exact one
mk odd llama "$odd"
for m in "lm-infinite --n-global 2 --n-local 8 --for ctxpatch" "rope-pi --factor 2" "temperature --tau 0.8"; do
  rm -rf "$work/o"
  if "$bin" patch "$work/odd" "$work/o" --method $m --no-verify >"$work/o.log" 2>&1; then
    ok
    "$py" - "$work/odd/config.json" "$work/o/config.json" <<'EOF' && ok || bad "untouched keys rewritten ($m)"
import sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
for member in [b'"big_int": 9007199254740993', b'"huge": 1E400', b'"nul_str": "a\\u0000b"',
               b'"tiny": 1.0000000000000002', b'"esc": "\\u00e9\\/"', b'"rms_norm_eps": 1e-06',
               b'"rope_theta": 10000.0', b'"architectures": [\n    "LlamaForCausalLM"\n  ]']:
    assert member in a and member in b, member
EOF
    "$bin" inspect "$work/o" >/dev/null 2>&1 && ok || bad "artifact does not open ($m)"
  else
    bad "patch --method $m exited nonzero"; cat "$work/o.log"
  fi
done

# 2. NUL in identifiers and keys: refused, one line naming the file and the key, nothing written
i=0
for case in 's/"model_type": "llama"/"model_type": "llama\\u0000x"/' \
            's/"LlamaForCausalLM"/"LlamaForCausalLM\\u0000"/' \
            's/"hidden_act": "silu"/"hidden_act": "silu\\u0000gelu"/' \
            's/"use_cache"/"use\\u0000cache"/'; do
  i=$((i+1))
  mk "nul$i" llama '"x": 1' "$case"
  rm -rf "$work/o"
  "$bin" patch "$work/nul$i" "$work/o" --method temperature --tau 0.8 --no-verify >/dev/null 2>"$work/e" \
    && bad "NUL case $i accepted" || ok
  [ "$(wc -l <"$work/e")" -eq 1 ] && grep -q "config.json" "$work/e" && grep -q "key '" "$work/e" && ok \
    || { bad "NUL case $i: message"; cat "$work/e"; }
  [ ! -e "$work/o" ] && ok || bad "NUL case $i wrote OUT"
done

# 3. rope-pi on a factor of 1e308: the product overflows; refused naming the key, nothing written
mk big llama_rope2 '"x": 1' 's/"factor": 2.0/"factor": 1e308/'
rm -rf "$work/o"
"$bin" patch "$work/big" "$work/o" --method rope-pi --factor 10 --no-verify >/dev/null 2>"$work/e" \
  && bad "overflowing rope factor accepted" || ok
grep -q "rope_scaling.factor" "$work/e" && grep -q "config.json" "$work/e" && ok || { bad "overflow message"; cat "$work/e"; }
[ ! -e "$work/o" ] && ok || bad "overflow wrote OUT"
# ... and the largest product that is finite still works (N and N+1: 1e307 x 10 is finite)
mk big2 llama_rope2 '"x": 1' 's/"factor": 2.0/"factor": 1e307/'
rm -rf "$work/o"
"$bin" patch "$work/big2" "$work/o" --method rope-pi --factor 10 --no-verify >/dev/null 2>"$work/e" \
  && ok || { bad "finite rope factor refused"; cat "$work/e"; }
grep -q '"factor": 1e+308' "$work/o/config.json" 2>/dev/null && ok || bad "factor not 1e+308"

# 4. a compact one-line config stays one line apart from the new members
mkdir -p "$work/compact"; ln -sf "$models/llama/model.safetensors" "$work/compact/model.safetensors"
"$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(json.dumps(c,separators=(",",":")),end="")' \
  "$models/llama/config.json" >"$work/compact/config.json"
rm -rf "$work/o"
"$bin" patch "$work/compact" "$work/o" --method rope-pi --factor 2 --no-verify >/dev/null 2>&1 && ok || bad "compact config"
"$py" - "$work/compact/config.json" "$work/o/config.json" <<'EOF' && ok || bad "compact config changed"
import json, sys
a, b = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
assert b["rope_scaling"] == {"type": "linear", "factor": 2} and b["ctxpatch"]["method"] == "rope-pi", b
del b["ctxpatch"]; b["rope_scaling"] = None
assert b == json.loads(a)
EOF

# 5. options whose 0 used to mean "the default" silently are refused (N = 1 accepted, 0 refused)
for opt in --n-local --ceiling --top-k; do
  rm -rf "$work/o"
  "$bin" patch "$work/odd" "$work/o" --method lm-infinite $opt 0 --no-verify >/dev/null 2>"$work/e" \
    && bad "$opt 0 accepted" || ok
  grep -q -- "$opt" "$work/e" && [ "$(wc -l <"$work/e")" -eq 1 ] && ok || { bad "$opt 0: message"; cat "$work/e"; }
  [ ! -e "$work/o" ] && ok || bad "$opt 0 wrote OUT"
  rm -rf "$work/o"
  "$bin" patch "$work/odd" "$work/o" --method lm-infinite $opt 1 --for ctxpatch --no-verify >/dev/null 2>"$work/e" \
    && ok || { bad "$opt 1 refused"; cat "$work/e"; }
done
for opt in --target-len --train-len; do
  "$bin" patch "$work/odd" "$work/o0" --method lm-infinite $opt 0 --no-verify >/dev/null 2>"$work/e" \
    && bad "$opt 0 accepted" || { grep -q -- "$opt" "$work/e" && grep -q "got 0" "$work/e" && ok || bad "$opt 0: message"; }
done
"$py" -c 'import json,sys; r=json.load(open(sys.argv[1]))["ctxpatch"]["rule"]; assert r["top_k"]["k"]==1, r' \
  "$work/o/config.json" && ok || bad "--top-k 1 not in the rule"
# --top-k above the rule bound (4096): refused naming top_k.k; 4096 accepted
rm -rf "$work/o"
"$bin" patch "$work/odd" "$work/o" --method lm-infinite --top-k 4097 --no-verify >/dev/null 2>"$work/e" \
  && bad "--top-k 4097 accepted" || ok
grep -q "top_k.k\|--top-k" "$work/e" && ok || { bad "--top-k 4097: message"; cat "$work/e"; }
"$bin" patch "$work/odd" "$work/o" --method lm-infinite --top-k 4096 --for ctxpatch --no-verify >/dev/null 2>&1 && ok || bad "--top-k 4096 refused"

finish
