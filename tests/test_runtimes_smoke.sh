#!/usr/bin/env bash
# The pinned test runtimes (scripts/install-test-runtimes.sh) load offline: onnxruntime-node's CPU
# library, transformers.js, and node-llama-cpp's linux-x64 prebuilt (no download, no build).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
[ -f "$nm/.ctxpatch-installed" ] && command -v node >/dev/null ||
  { echo "SKIP: test runtimes not installed in $nm (run scripts/install-test-runtimes.sh; needs npm)"; exit 77; }
export CTXPATCH_NODE_MODULES=$nm
netns=(); unshare -n true 2>/dev/null && netns=(unshare -n)   # no network where we may cut it
out=$("${netns[@]}" node --input-type=module -e "
import {load} from '$src/tests/runtimes/load.mjs';
const ort = await load('onnxruntime-node');
const t = await load('@huggingface/transformers');
console.log('ort', ort.env.versions.node, 'transformers.js', t.env.version);" 2>&1)
echo "$out"
check grep -q "ort 1.30.0 transformers.js 4.3.1" <<<"$out"
out=$("${netns[@]}" node "$src/tests/runtimes/llama_smoke.mjs" 2>&1)
echo "$out"
check grep -q "build prebuilt, gpu false" <<<"$out"
finish
