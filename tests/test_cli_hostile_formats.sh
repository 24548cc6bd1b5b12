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
  [ $rc = 1 ] && echo "$msg" | grep -q CP_EPT_RECORD && echo "$msg" | grep -q "archive/data/0" && ok \
    || bad "bomb: rc=$rc: $msg"
  [ -n "$rss" ] && [ "$rss" -lt 262144 ] && ok || bad "bomb: peak RSS ${rss:-?} KiB, want < 262144"
  [ ! -e "$work/bomb_out" ] && ok || bad "bomb: output written"
else
  echo "SKIP part: /usr/bin/time absent"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
