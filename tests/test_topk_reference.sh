#!/usr/bin/env bash
# LM-Infinite top-k on the trained RoPE probe against an independent numpy reference of the spec
# (lab/topk_probe.py: Lambda mask, distance ceiling and top-k written from
# ../shared/spec/attention-rules.md, not from the engine): `ctxpatch forward --rule` must give the
# reference's logits on a 512-token passkey prompt with the key hidden (max |diff| <= 1e-3, float32
# against float64) and the same 7 greedy tokens through the KV cache, under Lambda alone and top-k
# with the default distance, distance 255, rows "all" and from_layer 1.
set -euo pipefail
bin=$CTXPATCH_BIN; src=$CTXPATCH_SOURCE_DIR
py=/usr/bin/python3
if ! "$py" -c "import numpy" 2>/dev/null; then
  echo "SKIP: $py has no numpy (Debian python3-numpy)"; exit 77
fi
out=$(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" "$src/lab/topk_probe.py" --bin "$bin" \
      --only-agreement --n 1 --max-diff 1e-3 2>&1) || { echo "$out"; echo "FAIL: reference differs"; exit 1; }
echo "$out"
# The table must hold all five rules, each with 1 / 1 same answers.
n=$(grep -c '| 1 / 1 |$' <<<"$out" || true)
[[ $n -eq 5 ]] || { echo "FAIL: expected 5 agreeing rules, found $n"; exit 1; }
echo "PASS"
