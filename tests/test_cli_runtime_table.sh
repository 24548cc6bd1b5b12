#!/usr/bin/env bash
# The runtime table end to end (issue 30; docs/patching.md, "Runtimes"): each format's row, on the
# trained rope probe (Llama, training length 256): an inert rule (lm-infinite, all ctxpatch
# metadata) is refused by default for a safetensors folder (transformers, vLLM, TGI) and a GGUF
# file (llama.cpp), one line naming the part, the runtime and the ONNX route, nothing written;
# --for ctxpatch writes it, and its block, GGUF keys, certificate and inspect say "effective in
# ctxpatch only"; check accepts it. ONNX carries the rule without the option. What travels (a
# baked temperature, rope-pi) lists the runtimes. stories260K (trained at 512, its GGUF says
# 2048): lm-infinite --to gguf is refused naming --to onnx, and --train-len 512 gives a certified
# temperature GGUF whose context_length and certificate say 512 and where it came from, and whose
# NLL in llama.cpp itself equals the engine's (node-llama-cpp; skipped without it), as does the
# NLL under llama.cpp's context shift (verify --context-shift against eraseContextTokenRanges).
# --train-len on verify, calibrate, convert and batch (a recipe's method option); auto takes it.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

rope=$src/examples/probe-models/rope-probe
alibi=$src/examples/probe-models/alibi-probe
[ -f "$rope/model.safetensors" ] && [ -f "$alibi/model.safetensors" ] || { echo "SKIP: the probe models are absent"; exit 77; }
small="--verify passkey --lengths 256 --depths 0:1:2 --samples 1 --threads 2 --accept-no-gain --accept-underpowered"
lmi="--method lm-infinite --n-global 10 --n-local 128"

# refused OUT FRAGMENT... -- ARGS: exit 1, one line on stderr holding every fragment, OUT absent
refused() {
  local out=$1 frags=() a
  shift
  while [ "$1" != "--" ]; do frags+=("$1"); shift; done
  shift
  "$bin" patch "$rope" "$out" "$@" >"$work/r.out" 2>"$work/r.err"
  local rc=$?
  [ $rc -eq 1 ] && [ "$(wc -l <"$work/r.err")" -eq 1 ] && [ ! -e "$out" ] && ok ||
    { bad "not refused in one line (rc $rc): $*: $(cat "$work/r.err")"; return; }
  for a in "${frags[@]}"; do grep -qF -- "$a" "$work/r.err" && ok || bad "refusal lacks '$a': $(cat "$work/r.err")"; done
  [ -z "$(ls -A "$work" | grep '^\.' || true)" ] && ok || bad "a temporary was left: $(ls -A "$work")"
}

# json FILE EXPR: a Python assertion on the JSON document FILE (bound to d)
json() { "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert eval(sys.argv[2]), d' "$1" "$2" && ok || bad "$2 ($1)"; }

# 1. safetensors (transformers, vLLM, TGI)
refused "$work/st" "lm-infinite's lambda_mask, distance_ceiling" 'config.json "ctxpatch".rule' \
  "transformers, vLLM and TGI ignore" "--to onnx" "temperature or rope-pi" "--for ctxpatch" -- $lmi $small
if "$bin" patch "$rope" "$work/st" $lmi --for ctxpatch $small >"$work/st.log" 2>&1; then ok; else bad "--for ctxpatch: $(cat "$work/st.log")"; fi
grep -q '^effective in ctxpatch only' "$work/st.log" && ok || bad "stdout: $(cat "$work/st.log")"
json "$work/st/config.json" 'd["ctxpatch"]["effective_in"] == ["ctxpatch"]'
json "$work/st/certificate.json" 'd["patch"]["effective_in"] == ["ctxpatch"] and d["patch"]["format"] == "safetensors"'
json "$work/st/certificate.json" 'd["model"]["train_len"] == 256 and d["model"]["train_len_source"] == "config.json max_position_embeddings"'
"$bin" inspect "$work/st" >"$work/si.txt"
grep -q '^  effective:   in ctxpatch only' "$work/si.txt" && ok || bad "inspect: $(head -12 "$work/si.txt")"
grep -q 'effective in ctxpatch only</strong>' "$work/st/report.html" && ok || bad "the report does not say it"
"$bin" check "$work/st" >"$work/c.log" 2>&1 && ok || bad "check: $(cat "$work/c.log")"
# a certificate whose effective_in is not a list of names fails the schema
cp -r "$work/st" "$work/st_bad"
"$py" - "$work/st_bad/certificate.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["patch"]["effective_in"] = []
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF
"$bin" check "$work/st_bad" >"$work/c.log" 2>&1
[ $? -eq 1 ] && grep -q 'patch.effective_in: expected a non-empty array' "$work/c.log" && ok || bad "tampered effective_in: $(cat "$work/c.log")"
# BLOOM's temperature stays in the block (slopes from the head count): no method travels there
"$bin" patch "$alibi" "$work/bt" --method temperature --tau 0.9 --no-verify >"$work/r.out" 2>"$work/r.err"
[ $? -eq 1 ] && grep -qF "temperature's temperature" "$work/r.err" && grep -qF "none on this model" "$work/r.err" &&
  [ ! -e "$work/bt" ] && ok || bad "bloom temperature: $(cat "$work/r.err")"

# 2. GGUF (llama.cpp and what embeds it)
refused "$work/g.gguf" "the GGUF key ctxpatch.rule" "llama.cpp (and Ollama, llama-cpp-python, LM Studio) ignores" \
  "--to onnx" -- $lmi --to gguf $small
if "$bin" patch "$rope" "$work/g.gguf" $lmi --for ctxpatch --to gguf $small >"$work/g.log" 2>&1; then ok; else bad "gguf --for ctxpatch: $(cat "$work/g.log")"; fi
"$bin" inspect "$work/g.gguf" >"$work/gi.txt"
grep -q '^ctxpatch:      method lm-infinite, fidelity ctxpatch-metadata' "$work/gi.txt" &&
  grep -q '^  effective:   in ctxpatch only' "$work/gi.txt" &&
  grep -q '^  certified:   yes, certificate sha256 [0-9a-f]\{64\} (ctxpatch.certificate matches)' "$work/gi.txt" && ok ||
  bad "inspect on a certified GGUF: $(head -12 "$work/gi.txt")"
"$bin" inspect "$work/g.gguf" --json >"$work/gi.json"
json "$work/gi.json" 'd["ctxpatch"]["method"] == "lm-infinite" and d["ctxpatch"]["certified"] is True and d["ctxpatch"]["effective_in"] == "ctxpatch"'
"$bin" check "$work/g.gguf" >"$work/c.log" 2>&1 && ok || bad "check gguf: $(cat "$work/c.log")"
# the runtimes are bound to the certificate: an edited ctxpatch.effective_in fails check
"$py" - "$work/g.gguf" "$work/g_bad.gguf" <<'EOF'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
k = b"ctxpatch.effective_in"
i = d.find(struct.pack("<Q", len(k)) + k)
at = i + 8 + len(k)
assert i > 0 and struct.unpack_from("<I", d, at)[0] == 8
n = struct.unpack_from("<Q", d, at + 4)[0]
assert bytes(d[at + 12:at + 12 + n]) == b'["ctxpatch"]'
d[at + 12:at + 12 + n] = b'["llamacpp"]'
open(sys.argv[2], "wb").write(d)
EOF
"$bin" check "$work/g_bad.gguf" >"$work/c.log" 2>&1
[ $? -eq 1 ] && grep -q 'meta-effective: .*effective_in \["llamacpp"\] differs from the certificate' "$work/c.log" && ok ||
  bad "edited ctxpatch.effective_in: $(cat "$work/c.log")"
# what travels to llama.cpp: a baked temperature, rope-pi as rope.scaling keys
"$bin" patch "$rope" "$work/t.gguf" --method temperature --tau 0.9 --to gguf --no-verify >"$work/t.log" 2>&1 &&
  grep -q '^effective in: llama.cpp$' "$work/t.log" && ok || bad "temperature to gguf: $(cat "$work/t.log")"
"$bin" patch "$rope" "$work/p.gguf" --method rope-pi --factor 2 --to gguf --no-verify >"$work/p.log" 2>&1 &&
  grep -q '^effective in: llama.cpp$' "$work/p.log" && ok || bad "rope-pi to gguf: $(cat "$work/p.log")"

# 3. ONNX (onnxruntime, transformers.js): the graph carries every rule, no option needed
if "$bin" patch "$rope" "$work/o" $lmi --to onnx --no-verify >"$work/o.log" 2>&1; then ok; else bad "--to onnx: $(cat "$work/o.log")"; fi
json "$work/o/config.json" 'd["ctxpatch"]["effective_in"] == ["onnxruntime", "transformers.js"]'
"$bin" patch "$rope" "$work/tt" --method temperature --tau 0.9 --no-verify >"$work/tt.log" 2>&1 &&
  grep -q '^effective in: transformers, vLLM, TGI$' "$work/tt.log" && ok || bad "temperature folder: $(cat "$work/tt.log")"
json "$work/tt/config.json" 'd["ctxpatch"]["effective_in"] == ["transformers", "vLLM", "TGI"]'
# --for takes only ctxpatch
"$bin" patch "$rope" "$work/u" $lmi --for llama.cpp --no-verify >/dev/null 2>"$work/u.err"
[ $? -eq 2 ] && grep -q "\-\-for accepts only 'ctxpatch'" "$work/u.err" && ok || bad "--for llama.cpp: $(cat "$work/u.err")"

# 4. --train-len: verify records it; convert --to gguf writes it; calibrate reports it; auto takes it
"$bin" verify "$rope" --probe passkey --lengths 128 --depths 0:1:1 --samples 1 --threads 2 --train-len 128 --json \
  >"$work/v.json" 2>"$work/v.err" || true
json "$work/v.json" 'd["model"]["train_len"] == 128 and d["model"]["train_len_source"] == "option --train-len"'
"$bin" convert "$rope" "$work/c.gguf" --to gguf --train-len 200 >/dev/null 2>&1 &&
  "$bin" inspect "$work/c.gguf" >"$work/ci.txt" && grep -q '^train length:  200 (from GGUF llama.context_length)' "$work/ci.txt" &&
  ok || bad "convert --train-len"
"$bin" convert "$rope" "$work/cf" --to safetensors --train-len 200 >/dev/null 2>"$work/u.err"
[ $? -eq 2 ] && [ ! -e "$work/cf" ] && ok || bad "convert --to safetensors --train-len: $(cat "$work/u.err")"
"$bin" calibrate "$rope" --method pmax --lengths 256 --train-len 128 --samples 1 --threads 2 --json >"$work/cal.json" 2>/dev/null
json "$work/cal.json" 'd["train_len"] == 128 and d["train_len_source"] == "option --train-len"'
"$bin" patch "$rope" "$work/u" --method auto --train-len 256 --target-len 256 >/dev/null 2>"$work/u.err"
[ $? -eq 2 ] && grep -q 'past the training length 256' "$work/u.err" && ok || bad "auto --train-len: $(cat "$work/u.err")"

# batch: "train-len" and "for" pass through a recipe's method options to patch
cat >"$work/r.json" <<EOF
{"recipe_version": 1, "inputs": ["$rope"], "output": {"dir": "$work/bo"}, "target_lengths": [512], "formats": ["gguf"],
 "methods": [{"name": "lmi", "method": "lm-infinite", "options": {"n-local": 128, "train-len": 128, "for": "ctxpatch"}}],
 "verify": {"probes": "passkey", "lengths": [256], "depths": "0:1:2", "samples": 1, "accept_no_gain": true,
            "accept_underpowered": true}}
EOF
"$bin" batch "$work/r.json" --jobs 1 --threads 2 >"$work/b.log" 2>&1 && "$bin" inspect "$work/bo/rope-probe-lmi-512.gguf" --json >"$work/bi.json" &&
  ok || bad "batch with train-len and for: $(cat "$work/b.log")"
json "$work/bi.json" 'd["train_len"] == 128 and d["ctxpatch"]["effective_in"] == "ctxpatch"'

# 5. stories260K, trained at 512 (its GGUF says 2048): the audit's journey
stories=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party/stories260K/stories260K.gguf
corpus=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party/text/tinystories_val_1000_eot.txt
if [ -f "$stories" ] && [ -f "$corpus" ]; then
  "$bin" patch "$stories" "$work/s_lm.gguf" --method lm-infinite --to gguf >/dev/null 2>"$work/s.err"
  [ $? -eq 1 ] && grep -qF -- "--to onnx" "$work/s.err" && grep -qF "llama.cpp" "$work/s.err" && [ ! -e "$work/s_lm.gguf" ] && ok ||
    bad "stories lm-infinite --to gguf: $(cat "$work/s.err")"
  if "$bin" patch "$stories" "$work/s_t.gguf" --method temperature --tau 0.95 --to gguf --train-len 512 --verify ppl \
      --corpus "$corpus" --lengths 512,1024 --ppl-windows 2 --threads 2 --accept-no-gain >"$work/s.log" 2>&1; then ok
  else bad "stories temperature --train-len 512: $(tail -5 "$work/s.log")"; fi
  "$bin" inspect "$work/s_t.gguf" --json >"$work/s.json"
  json "$work/s.json" 'd["train_len"] == 512 and d["ctxpatch"]["method"] == "temperature" and d["ctxpatch"]["fidelity"] == "exact-weights" and d["ctxpatch"]["certified"] is True and d["ctxpatch"]["effective_in"] == "llama.cpp"'
  "$py" - "$work/s_t.gguf" <<'EOF' && ok || bad "stories certificate's training length"
import re, sys
data = open(sys.argv[1], "rb").read()
assert re.search(rb'"train_len":\s*512,\s*"train_len_source":\s*"option --train-len"', data), "no train_len 512 from the option"
EOF
  "$bin" check "$work/s_t.gguf" >"$work/c.log" 2>&1 && ok || bad "check stories: $(cat "$work/c.log")"
  # The certificate's numbers hold in llama.cpp: its own NLL (its tokenizer, corpus stream and
  # window, tests/gguf/llamacpp_nll.mjs) of window 0 at 1024 on the original and the written
  # file equals the engine's, and the patch moves it the same way in both.
  . "$src/tests/gguf/llamacpp_env.sh"
  if [ "$lc" = 1 ]; then
    cp "$src/tests/gguf/llamacpp_nll.mjs" "$work/nll.mjs" && cp "$src/tests/gguf/llamacpp_window.mjs" "$work/"
    i=0
    for m in "$stories" "$work/s_t.gguf"; do
      node "$work/nll.mjs" "$m" "$corpus" 1024 0 2 >"$work/lc_nll$i.json" || bad "llama.cpp NLL of $m"
      "$bin" verify "$m" --probe ppl --corpus "$corpus" --lengths 1024 --ppl-windows 1 --threads 2 --json \
        >"$work/cp_nll$i.json" 2>/dev/null || bad "engine NLL of $m"
      i=$((i + 1))
    done
    "$py" - "$work" <<'EOF' && ok || bad "llama.cpp's NLL of the stories temperature GGUF"
import json, sys
w = sys.argv[1]
lc = [json.load(open(f"{w}/lc_nll{i}.json"))["nll"] for i in (0, 1)]
cp = [json.load(open(f"{w}/cp_nll{i}.json"))["results"]["patched"]["ppl"][0]["nll"] for i in (0, 1)]
for a, b in zip(lc, cp):
    assert abs(a - b) < 1e-4, ("llama.cpp", a, "engine", b)
assert lc[1] != lc[0] and (lc[1] - lc[0] > 0) == (cp[1] - cp[0] > 0), (lc, cp)
print("llama.cpp NLL at 1024: original %.5f, patched %.5f; engine %.5f, %.5f" % (lc[0], lc[1], cp[0], cp[1]))
EOF
    # llama.cpp's context shift, emulated (verify --context-shift; docs/gguf.md): window 0 at 1024
    # through a context of 256 cells, 4 tokens kept, 8 a batch, in llama.cpp itself (the cells
    # removed and shifted by eraseContextTokenRanges, tests/gguf/llamacpp_shift_nll.mjs) and in
    # the engine: the same NLL, and far from the unshifted run (so the shifts were not a no-op).
    cp "$src/tests/gguf/llamacpp_shift_nll.mjs" "$work/shift.mjs"
    node "$work/shift.mjs" "$stories" "$corpus" 1024 0 2 256 4 8 >"$work/lc_shift.json" || bad "llama.cpp's shift NLL"
    "$bin" verify "$stories" --probe ppl --corpus "$corpus" --lengths 1024 --ppl-windows 1 --threads 2 \
      --context-shift 256 --shift-keep 4 --shift-batch 8 >"$work/cp_shift.txt" 2>&1 || bad "engine shift NLL"
    "$py" - "$work" <<'EOF' && ok || bad "llama.cpp's context shift vs the engine's: $(cat "$work/cp_shift.txt")"
import json, re, sys
w = sys.argv[1]
lc = json.load(open(f"{w}/lc_shift.json"))
m = re.search(r"^context shift: n_ctx 256, keep 4, batch 8: ppl NLL at 1024 = ([0-9.]+)$", open(f"{w}/cp_shift.txt").read(), re.M)
assert m, "no shift NLL line"
cp = float(m.group(1))
plain = json.load(open(f"{w}/lc_nll0.json"))["nll"]
assert lc["shifts"] >= 3, lc
assert abs(lc["nll"] - cp) < 1e-4, ("llama.cpp", lc["nll"], "engine", cp)
assert abs(plain - cp) > 0.02, ("unshifted", plain, "shifted", cp)
print("context shift at 1024 (n_ctx 256, keep 4, batch 8): llama.cpp %.6f, engine %.6f (%d shifts); unshifted %.5f"
      % (lc["nll"], cp, lc["shifts"], plain))
EOF
  fi
  # A context that never fills shifts nothing: the emulation's batches and cache give the one-shot
  # pass's NLL (to float rounding); an ALiBi model has no RoPE keys to shift: one line, exit 1
  "$bin" verify "$stories" --probe ppl --corpus "$corpus" --lengths 1024 --ppl-windows 1 --threads 2 --json \
    >"$work/cp_plain.json" 2>/dev/null || bad "engine NLL, unshifted"
  "$bin" verify "$stories" --probe ppl --corpus "$corpus" --lengths 1024 --ppl-windows 1 --threads 2 \
    --context-shift 1100 --shift-batch 64 >"$work/cp_big.txt" 2>&1 || bad "engine NLL, a context of 1100"
  "$py" - "$work" <<'EOF' && ok || bad "a context that never fills: $(cat "$work/cp_big.txt")"
import json, re, sys
w = sys.argv[1]
plain = json.load(open(f"{w}/cp_plain.json"))["results"]["patched"]["ppl"][0]["nll"]
m = re.search(r"^context shift: n_ctx 1100, keep 1, batch 64: ppl NLL at 1024 = ([0-9.]+)$", open(f"{w}/cp_big.txt").read(), re.M)
assert m and abs(float(m.group(1)) - plain) < 1e-5, (m and m.group(1), plain)
EOF
  "$bin" verify "$alibi" --probe passkey --lengths 256 --samples 1 --depths 0.5 --context-shift 128 >/dev/null 2>"$work/al.err"
  [ $? -eq 1 ] && [ "$(wc -l <"$work/al.err")" -eq 1 ] && grep -q "context shift is emulated for decoder-only RoPE" "$work/al.err" &&
    ok || bad "context shift on ALiBi: $(cat "$work/al.err")"
  # a GGUF input's context_length replaced, not duplicated
  "$bin" convert "$stories" "$work/s512.gguf" --to gguf --train-len 512 >/dev/null 2>&1 &&
    "$bin" inspect "$work/s512.gguf" >"$work/s512.txt" &&
    grep -q '^train length:  512 (from GGUF llama.context_length)' "$work/s512.txt" && ok ||
    bad "convert stories --train-len 512"
else
  echo "note: stories260K or the corpus fixture is absent: section 5 skipped"
fi
finish
