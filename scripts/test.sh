#!/usr/bin/env bash
# Builds ctxpatch and runs the whole test suite twice: a normal build, then an
# AddressSanitizer + UndefinedBehaviorSanitizer build, then every libFuzzer harness for a bounded
# time (CTXPATCH_FUZZ_SECONDS each, default 30). Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
bash scripts/install-test-runtimes.sh   # npm runtimes for the ONNX tests (skip when offline)
(cd build && ctest --output-on-failure -j2)
bash scripts/build.sh build-asan -DCTXPATCH_SANITIZE=ON -DCTXPATCH_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j2 -E '_slow$')
bash scripts/fuzz.sh "${CTXPATCH_FUZZ_SECONDS:-30}"
