#!/usr/bin/env bash
# The main job on the bundled default model (examples/probe-models/t5-probe, a T5 trained here
# on retrieval at 256 tokens): install, build, then
#   1. calibrate the encoder softmax temperature for 4x the training length (Algorithm 1 and
#      its closed forms),
#   2. patch: bake the P_max-aligned temperature into the weights, certify the baked artifact on
#      passkey probes at 1x and 4x the training length with the original side by side, and write
#      OUT (weights, config, certificate.json, report.html, SHA256SUMS) only if it passes,
#   3. verify the written artifact again from disk.
# usage: bash scripts/main.sh [MODEL] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
model=${1:-examples/probe-models/t5-probe}
out=${2:-out/t5-probe-patched}
target=1024
mkdir -p "$(dirname "$out")"
./build/ctxpatch inspect "$model" --json >/dev/null && echo "inspected $model"
./build/ctxpatch calibrate "$model" --method all --lengths 512,$target,2048 --samples 4
./build/ctxpatch patch "$model" "$out" --method temperature --calibrate pmax --target-len $target \
  --verify passkey --lengths 256,$target --depths 0:1:5 --samples 8 --force
./build/ctxpatch verify "$out" --probe passkey --lengths 256,$target --depths 0:1:5 --samples 8 \
  --certificate "$out.reverify.json"
(cd "$out" && sha256sum -c --quiet SHA256SUMS)
echo "main job done: $out (certificate.json, report.html inside)"
