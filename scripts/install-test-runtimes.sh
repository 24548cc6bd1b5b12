#!/usr/bin/env bash
# Installs the real runtimes the tests run exported models in (onnxruntime-node, transformers.js,
# node-llama-cpp with its linux-x64 prebuilt), pinned by tests/runtimes/package-lock.json, into
# tests/runtimes/node_modules (git-ignored) with --ignore-scripts: no install script runs and
# nothing is downloaded or built besides the packages themselves. Idempotent: skips when the
# stamp in node_modules holds the hash of the current package.json + lock. Without node/npm or a
# reachable registry it prints why and exits 0: the runtime tests then skip (exit 77).
set -euo pipefail
cd "$(dirname "$0")/../tests/runtimes"
stamp=node_modules/.ctxpatch-installed

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install-test-runtimes: node/npm not found: runtime tests will skip"
  exit 0
fi
want=$(cat package.json package-lock.json | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "install-test-runtimes: up to date ($stamp)"
  exit 0
fi
if ! timeout 60 npm ping --fetch-retries=0 >/dev/null 2>&1; then
  echo "install-test-runtimes: npm unreachable: runtime tests will skip"
  exit 0
fi
rm -f "$stamp"
# --omit=optional: node-llama-cpp's optional GPU builds are large and unused; the prebuilts the
# tests need are direct dependencies in package.json (see its "//" note).
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts --no-audit --no-fund --omit=optional \
  --loglevel=error
echo "$want" > "$stamp.tmp" && mv "$stamp.tmp" "$stamp"
echo "install-test-runtimes: installed into tests/runtimes/node_modules"
