#!/usr/bin/env bash
# Hostile checkpoint files through the CLI: bare and legacy pickles are named with advice on
# re-saving them, a zip bomb is refused within a memory bound, non-finite weights are found by
# inspect --check-values. Each refusal: one line, nonzero exit, nothing written.
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; hostile=$CTXPATCH_HOSTILE/pytorch
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
refused() { # refused CODE PATTERN CMD...: exit 1, one line naming CODE and matching PATTERN
  local code=$1 pat=$2; shift 2
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [ $rc = 1 ] && grep -q "$code" "$work/err" && grep -q -- "$pat" "$work/err" \
     && [ "$(wc -l <"$work/err")" = 1 ]; then ok
  else bad "expected $code /$pat/ (rc=$rc): $(cat "$work/err")"; fi
}

# Bare pickles (every protocol torch or pickle.dump writes) and the legacy format.
for p in 2 3 4 5; do
  refused CP_EPT_LEGACY "bare pickle (protocol $p" "$bin" inspect "$hostile/bare_pickle_protocol$p.pt"
  grep -q "torch.save(obj, f, _use_new_zipfile_serialization=True)" "$work/err" && grep -q safetensors "$work/err" && ok \
    || bad "protocol $p: no re-save advice: $(cat "$work/err")"
done
refused CP_EPT_LEGACY "legacy (pre-1.6" "$bin" inspect "$hostile/legacy.pt"
refused CP_EPT_LEGACY "legacy (pre-1.6" "$bin" inspect "$hostile/legacy_protocol4.pt"
# Through a model folder too (pytorch_model.bin is sniffed by its first byte).
mkdir -p "$work/legacy_dir" && cp "$hostile/bare_pickle_protocol2.pt" "$work/legacy_dir/pytorch_model.bin"
refused CP_EPT_LEGACY "bare pickle" "$bin" inspect "$work/legacy_dir"

# Zip bomb: 16 bytes of storage, a deflated record declaring 256 MiB (255 KiB on disk). convert
# refuses it naming the entry, writes nothing, and stays under 256 MiB peak RSS (a memory bound;
# before the fix the record was inflated whole into memory).
if [ -x /usr/bin/time ]; then
  /usr/bin/time -v "$bin" convert "$hostile/bomb_record_256m.pt" "$work/bomb_out" --to safetensors \
    >"$work/out" 2>"$work/err"; rc=$?
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/err")
  msg=$(grep -v '^	' "$work/err" | grep -v 'Command exited' | head -1)
  [ $rc = 1 ] && echo "$msg" | grep >/dev/null CP_EPT_RECORD && echo "$msg" | grep >/dev/null "archive/data/0" && ok \
    || bad "bomb: rc=$rc: $msg"
  [ -n "$rss" ] && [ "$rss" -lt 262144 ] && ok || bad "bomb: peak RSS ${rss:-?} KiB, want < 262144"
  [ ! -e "$work/bomb_out" ] && ok || bad "bomb: output written"
else
  echo "SKIP part: /usr/bin/time absent"
fi

# Non-finite weights: all-NaN q rows of one head (the kernel zeroes a NaN score row, so the
# logits stayed finite), one Inf in the output head, one NaN in an FFN weight. The forward pass
# fails naming the layer and head (or the logits row); inspect --check-values names the tensor
# and the element; the clean model passes both.
tiny=$CTXPATCH_SOURCE_DIR/tests/goldens/engine/models/llama
if [ -f "$tiny/model.safetensors" ]; then
  "$py" - "$tiny" "$work" <<'PY' || bad "making the NaN checkpoints"
import json, os, shutil, struct, sys
src, work = sys.argv[1], sys.argv[2]
cfg = json.load(open(os.path.join(src, "config.json")))
dh = cfg["hidden_size"] // cfg["num_attention_heads"]
blob = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
hdr = json.loads(blob[8:8 + n])
def poison(name, tensor, first, count, value):
    data = bytearray(blob)
    start = 8 + n + hdr[tensor]["data_offsets"][0]
    for i in range(first, first + count):
        struct.pack_into("<f", data, start + 4 * i, value)
    os.makedirs(os.path.join(work, name))
    shutil.copy(os.path.join(src, "config.json"), os.path.join(work, name))
    open(os.path.join(work, name, "model.safetensors"), "wb").write(bytes(data))
d = hdr["model.layers.1.self_attn.q_proj.weight"]["shape"][1]
poison("nan_q", "model.layers.1.self_attn.q_proj.weight", dh * d, dh * d, float("nan"))
poison("inf_head", "lm_head.weight", 5 * d + 3, 1, float("inf"))
poison("nan_ffn", "model.layers.2.mlp.up_proj.weight", 7, 1, float("nan"))
PY
  refused CP_EMODEL_NONFINITE "layer 1 head 1 row 0: non-finite attention query" \
    "$bin" forward "$work/nan_q" --ids 1,2,3 --out "$work/never.bin"
  refused CP_EMODEL_NONFINITE "row 0: non-finite logits" "$bin" forward "$work/inf_head" --ids 1,2,3 --out "$work/never.bin"
  refused CP_EMODEL_NONFINITE "non-finite" "$bin" forward "$work/nan_ffn" --ids 1,2,3 --generate 2
  [ ! -e "$work/never.bin" ] && ok || bad "logits written despite non-finite values"
  "$bin" forward "$tiny" --ids 1,2,3 --out "$work/clean.bin" >/dev/null 2>&1 && ok || bad "clean forward"
  # head 1 of 4 (d_head 8, d_model 32): q_proj rows 8..15, elements 256..511
  for c in "nan_q:model.layers.1.self_attn.q_proj.weight:element 256 " "inf_head:lm_head.weight:element 163 " \
           "nan_ffn:model.layers.2.mlp.up_proj.weight:element 7 "; do
    IFS=: read -r dir tensor what <<<"$c"
    "$bin" inspect "$work/$dir" --check-values >"$work/out" 2>"$work/err"; rc=$?
    [ $rc = 1 ] && grep -q "'$tensor'.*$what" "$work/out" && ok || bad "check-values $dir: rc=$rc $(cat "$work/out" "$work/err")"
  done
  "$bin" inspect "$tiny" --check-values >"$work/out" 2>&1 && grep -q "all finite" "$work/out" && ok \
    || bad "check-values on the clean model: $(cat "$work/out")"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
