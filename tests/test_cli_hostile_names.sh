#!/usr/bin/env bash
# Names from model files and paths with terminal escapes, control bytes and invalid UTF-8
# (tests/make_hostile_names.py: safetensors tensor names, dtypes, __metadata__ and config strings;
# GGUF keys, values and tensor names; ONNX node and initializer names; a model folder and an
# output folder so named) through inspect (plain and --json), forward, verify, convert, patch,
# check and batch --validate (#33 item 13). Every byte any command prints, and every JSON file
# it writes, must be valid UTF-8 with no control character but tab and newline (no ESC, BEL, DEL,
# C1 CSI); every JSON document must parse strictly; refusals still name the thing, its bytes as
# \xNN. Before the fix the ESC sequences reached the terminal raw and inspect --json printed
# invalid UTF-8.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON
src=$CTXPATCH_SOURCE_DIR/examples/probe-models/rope-probe
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }

"$bin" convert "$src" "$work/rope.gguf" --to gguf >/dev/null && "$bin" convert "$src" "$work/rope_onnx" --to onnx >/dev/null \
  && "$py" "$CTXPATCH_SOURCE_DIR/tests/make_hostile_names.py" "$src" "$work/h" "$work/rope.gguf" "$work/rope_onnx" >/dev/null \
  || { echo "FAIL: making the hostile models"; echo "0 passed, 1 failed"; exit 1; }
h=$work/h; o=$work/out; mkdir "$o"
hostile_dir=$h/$(printf 'dir\033[31m\xff\x07\xc2\x9b')  # a model folder named with ESC, 0xff, BEL, C1 CSI
cp -r "$h/st_names" "$hostile_dir"

# run NAME WANT_RC CMD...: stdout and stderr kept as $o/NAME.out / .err for the byte check below.
run() {
  local name=$1 want=$2; shift 2
  "$@" >"$o/$name.out" 2>"$o/$name.err"; local rc=$?
  [ "$want" = any ] || [ $rc = "$want" ] && ok || bad "$name: exit $rc, want $want: $(head -c 300 "$o/$name.err")"
}
probe=(--probe passkey --lengths 128 --samples 1 --depths 0.5)
for m in st_names gguf_names.gguf onnx_node onnx_init; do
  run "inspect_$m" 0 "$bin" inspect "$h/$m"
  run "inspect_json_$m" 0 "$bin" inspect "$h/$m" --json
  cp "$o/inspect_json_$m.out" "$o/inspect_json_$m.json"
done
for m in st_names gguf_names.gguf; do
  run "forward_$m" 0 "$bin" forward "$h/$m" --ids 1,2,3 --out "$o/logits_$m.bin"
done
run convert_st_names 0 "$bin" convert "$h/st_names" "$o/conv_st_names" --to safetensors
# a GGUF tensor with no HF name is refused by --to safetensors (export/gguf/gguf_names.c), naming it
run convert_gguf_names.gguf 1 "$bin" convert "$h/gguf_names.gguf" "$o/conv_gguf_names" --to safetensors
run forward_onnx_init 1 "$bin" forward "$h/onnx_init" --ids 1,2,3 --out "$o/never.bin"
for m in st_model_type st_dtype st_utf8 gguf_arch.gguf; do
  run "inspect_$m" 1 "$bin" inspect "$h/$m"
  run "inspect_json_$m" 1 "$bin" inspect "$h/$m" --json
  run "convert_$m" any "$bin" convert "$h/$m" "$o/conv_$m" --to gguf
done
run verify 0 "$bin" verify "$h/st_names" "${probe[@]}" --json --certificate "$o/verify_cert.json"
cp "$o/verify.out" "$o/verify_stdout.json"
# A hostile model path and a hostile output path, through patch, check and inspect.
patched=$o/$(printf 'patched\033]0;t\007\xfe')
run patch 0 "$bin" patch "$hostile_dir" "$patched" --method rope-pi --factor 2 --verify passkey --lengths 128 \
  --samples 1 --depths 0.5 --accept-no-gain --accept-underpowered
run patch_json 0 "$bin" patch "$hostile_dir" "$o/patched_json" --method rope-pi --factor 2 --verify passkey \
  --lengths 128 --samples 1 --depths 0.5 --accept-no-gain --accept-underpowered --json
cp "$o/patch_json.out" "$o/patch_stdout.json"
run check 0 "$bin" check "$patched"
run check_json 0 "$bin" check "$patched" --json
cp "$o/check_json.out" "$o/check_stdout.json"
run inspect_hostile_dir 0 "$bin" inspect "$hostile_dir"
run inspect_missing 1 "$bin" inspect "$hostile_dir/missing"
run usage_hostile 2 "$bin" inspect "$hostile_dir" --bogus-$'\033'
cp "$patched/certificate.json" "$o/patch_certificate.json"
# batch lists its jobs by names made from the input folders' names (a glob over a shared folder).
cat >"$h/recipe.json" <<'JSON'
{"recipe_version": 1, "inputs": ["dir*"], "methods": [{"name": "t09", "method": "temperature", "options": {"tau": 0.9}}],
 "target_lengths": [256], "formats": ["safetensors"], "output": {"dir": "../batch_out", "name": "{input}-{method}-{target}"}}
JSON
run batch_validate 0 "$bin" batch "$h/recipe.json" --validate
run batch_validate_json 0 "$bin" batch "$h/recipe.json" --validate --json
cp "$o/batch_validate_json.out" "$o/batch_validate_stdout.json"

# The refusals name the offending text with its bytes escaped.
for c in "inspect_st_model_type:unsupported model type 'llama\\\\x1b\\[31mRED" \
         "inspect_gguf_arch.gguf:general.architecture 'llama\\\\x1b\\[31mRED.*\\\\xff\\\\x80" \
         "inspect_missing:dir\\\\x1b\\[31m\\\\xff\\\\x07\\\\xc2\\\\x9b/missing"; do
  grep >/dev/null -- "${c#*:}" "$o/${c%%:*}.err" && ok || bad "${c%%:*}: want /${c#*:}/: $(cat "$o/${c%%:*}.err")"
done
grep >/dev/null -F -- 'extra.\x1b[31mRED\x1b[0m\x07\x1b]0;title\x07\xc2\x9b2J\x7f' "$o/inspect_st_names.out" && ok \
  || bad "inspect: the hostile tensor name is not shown escaped"
grep >/dev/null -F -- "tensor 'extra.\x1b[31mRED\x1b[0m\x07\x1b]0;title\x07\xc2\x9b2J\x7f': no HF name" \
  "$o/convert_gguf_names.gguf.err" && ok || bad "convert: the hostile GGUF tensor name is not shown escaped"

# Every output and every JSON file written: valid UTF-8, no control byte but tab and newline;
# the JSON documents parse strictly.
"$py" - "$o" "$patched" "$o/conv_st_names" <<'PY'
import json, os, re, sys
out, extra = sys.argv[1], sys.argv[2:]
files = [os.path.join(out, f) for f in sorted(os.listdir(out)) if f.endswith((".out", ".err", ".json"))]
files += [os.path.join(d, f) for d in extra for f in sorted(os.listdir(d)) if f.endswith(".json")]
bad = 0
for f in files:
    b = open(f, "rb").read()
    try:
        t = b.decode("utf-8")
    except UnicodeDecodeError as e:
        print(f"FAIL: {ascii(f)}: invalid UTF-8 at byte {e.start}: {b[max(0, e.start - 20):e.start + 8]!r}")
        bad += 1
        continue
    m = re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", t)
    if m:
        print(f"FAIL: {ascii(f)}: control character {ascii(m.group())} at {m.start()}: {ascii(t[max(0, m.start() - 30):m.start() + 10])}")
        bad += 1
    elif f.endswith(".json"):
        try:
            json.loads(t)
        except ValueError as e:
            print(f"FAIL: {ascii(f)}: not JSON: {e}")
            bad += 1
print(f"checked {len(files)} outputs, {bad} bad")
sys.exit(1 if bad else 0)
PY
[ $? = 0 ] && ok || bad "raw control bytes or invalid UTF-8 in the outputs above"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
