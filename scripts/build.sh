#!/usr/bin/env bash
# Configures and builds ctxpatch into build/ (or $1), Release with debug info.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
