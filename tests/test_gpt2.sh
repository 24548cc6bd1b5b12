#!/usr/bin/env bash
# GPT-2 (learned absolute positions) through the CLI, on the engine goldens' tiny GPT-2s (made by
# PyTorch, tests/reference/make_engine_goldens.py): inspect names the family and its position
# table; positions past n_positions are refused (forward and generate) with one line naming the
# family; the rule parts that act on a distance (distance_ceiling, top_k.distance, alibi_scale,
# fire_threshold) and the positional patches (alibi-pi, rope-pi, fire-threshold) are refused with
# their reason; `patch --method lm-infinite` gives a Lambda-mask rule without a ceiling whose
# artifact computes the PyTorch golden of that rule.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
g=$src/tests/goldens/engine
[ -f "$g/MANIFEST.json" ] || { echo "SKIP: $g/MANIFEST.json is absent"; exit 77; }
chk=$src/tests/cli_forward_check.py
m=$g/models/gpt2; mb=$g/models/gpt2_bin   # n_positions 64 (safetensors) and 48 (pytorch_model.bin)

# refused CMD...: exit 1, one line naming gpt2 and every further word given with -w, nothing written
refused() {
  local want=() ; while [ "$1" = -w ]; do want+=("$2"); shift 2; done
  rm -f "$work/out.bin"
  "$@" >/dev/null 2>"$work/err"; local rc=$?
  [ $rc = 1 ] && [ "$(wc -l <"$work/err")" = 1 ] && grep -q gpt2 "$work/err" && [ ! -e "$work/out.bin" ] ||
    { bad "refused $*: rc $rc: $(cat "$work/err")"; return; }
  for w in "${want[@]}"; do grep -qF -- "$w" "$work/err" || { bad "refused $*: no '$w' in: $(cat "$work/err")"; return; }; done
  ok
}

# inspect: family, scheme, table size, both checkpoint formats
for d in "$m" "$mb"; do
  "$bin" inspect "$d" --json >"$work/i.json" && ok || bad "inspect $d"
  "$py" - "$work/i.json" "$d" <<'PY' && ok || bad "inspect fields of $d"
import json, sys
j = json.load(open(sys.argv[1]))
n = 48 if sys.argv[2].endswith("_bin") else 64
assert j["architecture"]["family"] == "gpt2", j["architecture"]
assert j["positional"] == {"scheme": "learned", "n_positions": n, "scale_attn_weights": True,
                           "scale_attn_by_inverse_layer_idx": n == 48}, j["positional"]
assert j["train_len"] == n and j["train_len_source"] == "config.json n_positions", j
PY
done

# positions: gpt2_bin's identity golden is exactly n_positions = 48 tokens long
c=$g/cases/gpt2_bin__identity.safetensors
ids=$("$py" "$chk" ids "$c" input_ids)
check "$bin" forward "$mb" --ids "$ids" --threads 2 --out "$work/f.bin"
check "$py" "$chk" logits "$c" "$work/f.bin"
refused -w "49 positions" -w "learned 48" -w "n_positions" "$bin" forward "$mb" --ids "$ids,5" --out "$work/out.bin"
# generate embeds the prompt and every generated token but the last: 41 + 8 - 1 = 48 fits
short=$(cut -d, -f1-41 <<<"$ids")
"$bin" forward "$mb" --ids "$short" --generate 8 >"$work/gen.txt" && ok || bad "generate at the limit"
[ "$(tr ',' '\n' <"$work/gen.txt" | grep -c .)" = 8 ] && ok || bad "generate at the limit: $(cat "$work/gen.txt")"
refused -w "49 positions" "$bin" forward "$mb" --ids "$short,3" --generate 8

# rule parts that need a distance in attention
for r in '{"distance_ceiling": 8}:distance_ceiling' \
         '{"lambda_mask": {"n_global": 2, "n_local": 8}, "top_k": {"k": 2, "distance": 4}}:top_k.distance' \
         '{"alibi_scale": {"mode": "static", "factor": 2}}:alibi_scale' '{"fire_threshold": 12}:fire_threshold'; do
  echo "${r%:*}" >"$work/rule.json"
  refused -w "${r##*:} cannot apply to a gpt2 model" -w "learned absolute" \
    "$bin" forward "$m" --ids 1,2,3 --rule "$work/rule.json" --out "$work/out.bin"
done

# positional patches
refused -w "--method alibi-pi needs ALiBi" -w "learned absolute" "$bin" patch "$m" "$work/p1" --method alibi-pi --factor 2 --no-verify
refused -w "--method rope-pi needs RoPE" "$bin" patch "$m" "$work/p2" --method rope-pi --factor 2 --no-verify
refused -w "--method fire-threshold needs FIRE" "$bin" patch "$m" "$work/p3" --method fire-threshold --threshold 9 --no-verify
refused -w "distance_ceiling cannot apply" "$bin" patch "$m" "$work/p4" --method lm-infinite --n-global 2 --n-local 8 \
  --ceiling 8 --no-verify
[ ! -e "$work/p1" ] && [ ! -e "$work/p4" ] && ok || bad "a refused patch wrote its output"

# lm-infinite: the Lambda mask alone (no ceiling), and the artifact computes the golden's rule
"$bin" patch "$m" "$work/lmi" --method lm-infinite --n-global 2 --n-local 8 --for ctxpatch --no-verify >"$work/patch.log" 2>&1 &&
  ok || bad "patch lm-infinite: $(tail -2 "$work/patch.log")"
"$py" - "$work/lmi/config.json" <<'PY' && ok || bad "lm-infinite rule of the artifact"
import json, sys
rule = json.load(open(sys.argv[1]))["ctxpatch"]["rule"]
assert rule == {"lambda_mask": {"n_global": 2, "n_local": 8}}, rule
PY
c=$g/cases/gpt2__lambda.safetensors
check "$bin" forward "$work/lmi" --ids "$("$py" "$chk" ids "$c" input_ids)" --threads 2 --out "$work/l.bin"
check "$py" "$chk" logits "$c" "$work/l.bin"
finish
