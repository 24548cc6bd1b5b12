#!/usr/bin/env bash
# The main job on the bundled default model: install, build, inspect, convert to safetensors,
# check the manifest. (Later issues turn this into calibrate + patch + verify.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
model=${1:-examples/tiny-llama}
out=${2:-out/tiny-llama-safetensors}
mkdir -p "$(dirname "$out")"
./build/ctxpatch inspect "$model"
./build/ctxpatch convert "$model" "$out" --to safetensors --force
./build/ctxpatch inspect "$out" --json >"$out.inspect.json"
(cd "$out" && sha256sum -c SHA256SUMS)
echo "main job done: $out (description in $out.inspect.json)"
