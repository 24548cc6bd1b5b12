#!/usr/bin/env bash
# Every modern family through the whole pipeline (issue 31, "Pipelines end to end"): on a tiny
# random model of each (tests/gguf/make_random_family.py: llama with Llama 3.1's llama3 scaling,
# qwen2, qwen3, gemma, gemma2 with its window of 64, gemma3 (sliding and full layers), phi3, mistral with a window of 128, olmo2, starcoder2
# with a window of 128), `convert`, then `patch` with
# LM-Infinite and a RoPE scaling (rope-pi), each certified on short passkey probes (random
# weights: the verdict may fail, but the run must complete, exit 0 or 1, and say its verdict;
# rope-pi on llama3 scaling and on phi3 is refused in one line), `check` on what was written,
# `calibrate` by P_max and entropy (a tau in the grid for each),
# `patch --method auto` (its first candidate the P_max-calibrated temperature) saying its choice or
# why none, each candidate that does not fit the family with its reason, and one `batch` of a
# temperature patch over every family, its outputs checked.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not importable by $py"; exit 77; }

fams=(${CTXPATCH_FAMILIES:-llama3 qwen2 qwen3 gemma gemma2 gemma3 phi3 mistral_hd olmo2 starcoder2})
vopts=(--verify passkey --lengths 256,512 --depths 0:1:2 --samples 1 --threads 1 --accept-no-gain --accept-underpowered)
# field FILE.json EXPR: a Python expression over the document `r`
field() { "$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

for f in "${fams[@]}"; do
  hf=$work/$f-hf
  "$py" "$src/tests/gguf/make_random_family.py" "$hf" "$f" 7 || { bad "$f: make_random_family"; continue; }
  # llama3: trained at 256 like the others (its scaling from an original 32), so 512 is past it
  [ "$f" = llama3 ] && "$py" - "$hf/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 256
c["rope_scaling"]["original_max_position_embeddings"] = 32
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
  # mistral: a window of 128 on every layer (MistralModel), so the probes at 512 run past it
  [ "$f" = mistral_hd ] && sed -i 's/"sliding_window": null/"sliding_window": 128/' "$hf/config.json"
  # starcoder2: likewise (Starcoder2Model masks every layer with sliding_window)
  [ "$f" = starcoder2 ] && sed -i 's/"sliding_window": null/"sliding_window": 128/' "$hf/config.json"
  # 1. convert (safetensors folder out) and the config read back
  "$bin" convert "$hf" "$work/$f" --to safetensors >"$work/$f.conv.log" 2>&1 && [ -f "$work/$f/config.json" ] && ok ||
    bad "$f: convert: $(tail -1 "$work/$f.conv.log")"
  # 2. patch: LM-Infinite and a RoPE scaling, certified (the temperature is the batch's, below);
  # the run completes and states a verdict, or refuses in one line where the family cannot carry it
  for m in "lm-infinite --n-global 4 --n-local 128 --for ctxpatch" "rope-pi --factor 2"; do
    name=${m%% *}
    # shellcheck disable=SC2086
    "$bin" patch "$work/$f" "$work/$f-$name" --method $m --target-len 512 "${vopts[@]}" --json \
      >"$work/$f-$name.json" 2>"$work/$f-$name.err"
    rc=$?
    case $f-$name in
      llama3-rope-pi | phi3-rope-pi) # one rope_scaling type per config; Phi3Config takes no 'linear'
        [ $rc = 1 ] && [ ! -e "$work/$f-$name" ] && [[ $(cat "$work/$f-$name.err") == *"rope-pi "*"use a temperature or lm-infinite patch" ]] &&
          ok || bad "$f $name: not refused in one line (exit $rc): $(cat "$work/$f-$name.err")"
        echo "$f $name: refused: $(cat "$work/$f-$name.err")"
        continue ;;
    esac
    verdict=$(field "$work/$f-$name.json" "r['verdict']")
    if [ $rc -le 1 ] && [ -n "$verdict" ]; then ok; else
      bad "$f $name: exit $rc, verdict '$verdict': $(tail -1 "$work/$f-$name.err")"; continue; fi
    written=$(field "$work/$f-$name.json" "r['written']")
    echo "$f $name: verdict $verdict, written $written"
    # 3. check on what was written
    if [ "$written" = True ]; then
      "$bin" check "$work/$f-$name" >"$work/$f-$name.check" 2>&1 && ok ||
        bad "$f $name: check: $(tail -1 "$work/$f-$name.check")"
    fi
  done
  # 4. calibrate: P_max and entropy at 512, a tau in the grid for each
  "$bin" calibrate "$work/$f" --method pmax,entropy --lengths 512 --samples 1 --threads 1 --json \
    >"$work/$f-cal.json" 2>"$work/$f-cal.err"
  taus=$(field "$work/$f-cal.json" "' '.join('%s %s' % (e['method'], e['tau']) for e in r['entries'] if 0.5 <= e['tau'] <= 1)")
  [[ $taus == "pmax "*" entropy "* ]] && ok || bad "$f calibrate: '$taus' $(tail -1 "$work/$f-cal.err")"
  echo "$f calibrate at 512: $taus"
  # 5. patch --method auto: its choice (or why none), every candidate with a status and, when it
  # did not run, the reason
  "$bin" patch "$work/$f" "$work/$f-auto" --method auto --target-len 512 --calibration-samples 1 --budget 0 \
    "${vopts[@]}" --json >"$work/$f-auto.json" 2>"$work/$f-auto.err"
  rc=$?
  summary=$(field "$work/$f-auto.json" "'; '.join('%s %s: %s%s' % (c['method'], c['options'], c['status'], (' (' + c['reason'] + ')') if c['reason'] and c['status'] != 'pass' else '') for c in r['certificate']['auto']['candidates'])" 2>&1)
  if [ $rc -le 1 ] && [[ $summary == *"temperature --method temperature --calibrate pmax"* ]]; then ok; else
    bad "$f auto: exit $rc: $summary $(tail -1 "$work/$f-auto.err")"; fi
  case $f in llama3 | phi3) # rope-pi listed as not fitting, with the reason the patch above gave
    [[ $summary == *"rope-pi --factor 2: does not fit ("*"rope-pi "*"use a temperature or lm-infinite patch)"* ]] && ok ||
      bad "$f auto: rope-pi not listed as not fitting: $summary" ;;
  esac
  # alibi-pi listed as not fitting, the model named as its config does (gemma3, not the gemma family)
  case $f in llama3) name=llama ;; mistral_hd) name=mistral ;; *) name=$f ;; esac
  [[ $summary == *"alibi-pi --factor 2: does not fit (--method alibi-pi needs ALiBi positions; this $name model uses RoPE)"* ]] &&
    ok || bad "$f auto: alibi-pi's reason does not name $name: $summary"
  echo "$f auto: $summary"
done

# 6. batch: one temperature job per family
inputs=$(printf '"%s",' "${fams[@]/#/$work/}")
cat >"$work/recipe.json" <<EOR
{
  "recipe_version": 1,
  "inputs": [${inputs%,}],
  "methods": [{"name": "t08", "method": "temperature", "options": {"tau": 0.8}}],
  "target_lengths": [512],
  "verify": {"probes": "passkey", "lengths": [256, 512], "depths": "0:1:2", "samples": 1, "threads": 1, "accept_no_gain": true, "accept_underpowered": true},
  "output": {"dir": "$work/batch", "name": "{input}/{method}-{target}"}
}
EOR
"$bin" batch "$work/recipe.json" --json >"$work/batch.json" 2>"$work/batch.err"
rc=$?
jobs=$(field "$work/batch.json" "len(r['jobs'])" 2>/dev/null)
[ $rc -le 1 ] && [ "$jobs" = "${#fams[@]}" ] && ok || bad "batch: exit $rc, jobs '$jobs': $(tail -2 "$work/batch.err")"
for f in "${fams[@]}"; do # what the batch wrote passes check
  [ -e "$work/batch/$f/t08-512" ] || { echo "batch $f: nothing written"; continue; }
  "$bin" check "$work/batch/$f/t08-512" >"$work/$f-batch.check" 2>&1 && ok || bad "batch $f: check: $(tail -1 "$work/$f-batch.check")"
done
finish
