#!/usr/bin/env bash
# Output and input paths (issue 12, part H): an output replaces only a regular file (a folder for
# folder outputs), writes through a character device, refuses FIFOs, sockets, symlinks and the
# wrong kind of file, and never overlaps its input; every input open refuses a FIFO at once
# instead of blocking; temporaries of dead processes are swept by the next run.
set -uo pipefail
bin=$CTXPATCH_BIN; src=$CTXPATCH_SOURCE_DIR; py=${CTXPATCH_PYTHON:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
# A blocked open never returns, so any bound tells it from a refusal; 60 s, not 10, so that a loaded
# machine or a sanitizer build is not taken for a hang.
hang=60
# refused CODE CMD...: exits 1 (within $hang s) with a one-line "error CODE" message.
refused() {
  local code=$1; shift
  timeout $hang "$@" >/dev/null 2>"$work/err"; local rc=$?
  if [ $rc -eq 1 ] && grep -q "error $code:" "$work/err" && [ "$(wc -l <"$work/err")" -eq 1 ]; then ok
  else bad "expected $code, rc $rc: $* :: $(head -c 300 "$work/err")"; fi
}

# Copies: a regression here must not be able to destroy the source tree's models.
cp -r "$src/tests/goldens/engine/models/llama" "$work/llama"
llama=$work/llama
t5=$src/examples/probe-models/t5-probe
tiny=$src/examples/tiny-llama
fwd=("$bin" forward "$llama" --ids 1,2,3)

# --- outputs -------------------------------------------------------------------------------
# A character device is written through, never replaced (as root, renaming over /dev/null would
# turn it into a regular file; a private node stands in for it here).
if mknod "$work/null" c 1 3 2>/dev/null; then
  timeout $hang "${fwd[@]}" --out "$work/null" --stats "$work/null" >/dev/null 2>"$work/err" && ok || bad "forward --out device: $(cat "$work/err")"
  [ -c "$work/null" ] && ok || bad "forward --out replaced a character device"
  ls -a "$work" | grep >/dev/null '\.tmp-' && bad "temporary left beside a device output" || ok
fi
timeout $hang "${fwd[@]}" --out /dev/null >/dev/null 2>"$work/err" && [ -c /dev/null ] && ok || bad "--out /dev/null: $(cat "$work/err")"

mkfifo "$work/fifo"
echo keep >"$work/target"
ln -s "$work/target" "$work/link"
ln -s "$work/nowhere" "$work/dangling"
mkdir "$work/dir"
"$py" -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$work/sock"
for out in fifo link dangling dir sock; do
  refused CP_EFILETYPE "${fwd[@]}" --out "$work/$out"
  refused CP_EFILETYPE "${fwd[@]}" --out "$work/ok.bin" --stats "$work/$out"
done
[ -p "$work/fifo" ] && [ -L "$work/link" ] && [ -L "$work/dangling" ] && [ -d "$work/dir" ] && [ -S "$work/sock" ] \
  && ok || bad "a refused output was replaced"
[ "$(cat "$work/target")" = keep ] && ok || bad "symlink output was followed"
[ ! -e "$work/nowhere" ] && [ ! -e "$work/ok.bin" ] && ok || bad "refused run wrote something"
vcommon=(verify "$t5" --probe passkey --lengths 64 --depths 0.5 --samples 1 --threads 1)
refused CP_EFILETYPE "$bin" "${vcommon[@]}" --certificate "$work/fifo"
refused CP_EFILETYPE "$bin" "${vcommon[@]}" --certificate "$work/link"
refused CP_EFILETYPE "$bin" "${vcommon[@]}" --report "$work/sock"
# a regular file is still replaced atomically
"${fwd[@]}" --out "$work/target" >/dev/null 2>&1 && [ -f "$work/target" ] && ! cmp -s "$work/target" <(echo keep) \
  && ok || bad "regular output not replaced"

# folder outputs: the input is never destroyed (compared as real paths, symlinked parents too)
cp -r "$tiny" "$work/in"
ln -s "$work" "$work/alias"
refused CP_EOVERLAP "$bin" convert "$work/in" "$work/in" --to safetensors --force
refused CP_EOVERLAP "$bin" convert "$work/in/pytorch_model.bin" "$work/in" --to safetensors --force
refused CP_EOVERLAP "$bin" convert "$work/in" "$work/in/sub" --to safetensors
refused CP_EOVERLAP "$bin" convert "$work/in" "$work/alias/in" --to safetensors --force
refused CP_EOVERLAP "$bin" convert "$work/in" "$work" --to safetensors --force
refused CP_EOVERLAP "$bin" patch "$work/in" "$work/alias/in" --method temperature --tau 1.1 --no-verify --force
refused CP_EOVERLAP "${fwd[@]}" --out "$llama/model.safetensors"
refused CP_EOVERLAP "${fwd[@]}" --out "$work/alias/llama/config.json"
"${fwd[@]}" --out "$llama/logits.bin" >/dev/null && [ -f "$llama/logits.bin" ] && rm "$llama/logits.bin" && ok \
  || bad "a new file beside the model's files was refused"
refused CP_EFILETYPE "$bin" convert "$work/in" "$work/link" --to safetensors --force
refused CP_EFILETYPE "$bin" convert "$work/in" "$work/fifo" --to safetensors --force
cmp -s "$tiny/pytorch_model.bin" "$work/in/pytorch_model.bin" && [ ! -e "$work/in/sub" ] && ok || bad "input changed"
"$bin" convert "$work/in" "$work/st" --to safetensors >/dev/null && ok || bad "plain convert"
"$bin" convert "$work/in" "$work/st" --to safetensors --force >/dev/null && (cd "$work/st" && sha256sum --quiet -c SHA256SUMS) \
  && ok || bad "convert --force over a folder"

# --- temporaries of dead processes are swept; live ones are kept --------------------------
host=$(hostname | tr -cd 'A-Za-z0-9_.' | cut -c1-32); host=${host:-_}
dead=$(sh -c 'echo $$')
mkdir "$work/.st.tmp-$dead-$host-AAAAAA" "$work/.st.tmp-$dead-otherhost-AAAAAA" "$work/.st.tmp-$$-$host-BBBBBB"
touch "$work/.st.tmp-$dead-$host-AAAAAA.old" "$work/.x.bin.tmp-$dead-$host-CCCCCC"
"$bin" convert "$work/in" "$work/st" --to safetensors --force >/dev/null && ok || bad "convert with stale temporaries"
[ ! -e "$work/.st.tmp-$dead-$host-AAAAAA" ] && [ ! -e "$work/.st.tmp-$dead-$host-AAAAAA.old" ] && ok || bad "stale temporary kept"
[ -d "$work/.st.tmp-$$-$host-BBBBBB" ] && [ -d "$work/.st.tmp-$dead-otherhost-AAAAAA" ] && ok || bad "live or foreign temporary removed"
"${fwd[@]}" --out "$work/x.bin" >/dev/null 2>&1 && [ ! -e "$work/.x.bin.tmp-$dead-$host-CCCCCC" ] && ok || bad "file temporary not swept"

# --- inputs: a FIFO is refused at once, never waited on -----------------------------------
mkdir "$work/m1" "$work/m2" "$work/m3"
cp "$llama/config.json" "$work/m1/"; mkfifo "$work/m1/model.safetensors"
cp "$llama/model.safetensors" "$work/m2/"; mkfifo "$work/m2/config.json"
cp "$llama/config.json" "$work/m3/"; cp "$llama/model.safetensors" "$work/m3/model-00001-of-00002.safetensors"
mkfifo "$work/m3/model-00002-of-00002.safetensors"
"$py" - "$work/m3" <<'PY'
import json, struct, sys
d = sys.argv[1]
with open(d + "/model-00001-of-00002.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    names = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
json.dump({"metadata": {}, "weight_map": {k: "model-00002-of-00002.safetensors" for k in names}},
          open(d + "/model.safetensors.index.json", "w"))
PY
refused CP_EFILETYPE "$bin" forward "$work/fifo" --ids 1,2 --out "$work/never.bin"
refused CP_EFILETYPE "$bin" forward "$work/m1" --ids 1,2 --out "$work/never.bin"
refused CP_EFILETYPE "$bin" forward "$work/m1/model.safetensors" --ids 1,2 --out "$work/never.bin"
refused CP_EFILETYPE "$bin" inspect "$work/m2"
refused CP_EFILETYPE "$bin" inspect "$work/m3"
refused CP_EFILETYPE "${fwd[@]}" --rule "$work/fifo" --out "$work/never.bin"
refused CP_EFILETYPE "$bin" forward "$llama" --ids "@$work/fifo" --out "$work/never.bin"
refused CP_EFILETYPE "$bin" tokenize "$t5/tokenizer.json" --text-file "$work/fifo"
refused CP_EFILETYPE "$bin" tokenize "$work/fifo" --text hi
refused CP_EFILETYPE "$bin" convert "$work/m1" "$work/never" --to safetensors
refused CP_EFILETYPE "$bin" patch "$tiny" "$work/never" --method temperature --tau 1.1 --tokenizer "$work/fifo"
[ ! -e "$work/never.bin" ] && [ ! -e "$work/never" ] && ok || bad "a refused input wrote output"
# inputs may be symlinks (followed, then checked)
ln -s "$llama/model.safetensors" "$work/m.safetensors"
"$bin" inspect "$work/m.safetensors" >/dev/null && ok || bad "symlinked input refused"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
