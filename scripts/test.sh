#!/usr/bin/env bash
# Builds ctxpatch and runs the test suite in tiers (CTest labels, tests/CMakeLists.txt; docs/ci.md
# "Test tiers"): a normal build runs every test (unit, cli, runtime, research; fuzz replays), then
# an AddressSanitizer + UndefinedBehaviorSanitizer build runs the unit, cli and fuzz tiers (the
# third-party runtimes and the research scripts exercise no code the other tiers miss), then
# every libFuzzer harness runs for a bounded time (CTXPATCH_FUZZ_SECONDS each, default 30).
# Installs what it needs first. Each stage's wall time is printed (docs/ci.md, "CI wall time").
set -euo pipefail
cd "$(dirname "$0")/.."
stage() { echo "test.sh: $1: $((SECONDS - t0)) s"; t0=$SECONDS; }
t0=$SECONDS
bash scripts/install-deps.sh
bash scripts/build.sh build
bash scripts/install-test-runtimes.sh   # npm runtimes for the ONNX tests (skip when offline)
stage "dependencies and normal build"
(cd build && ctest --output-on-failure -j2)
stage "normal build: every tier"
bash scripts/build.sh build-asan -DCTXPATCH_SANITIZE=ON -DCTXPATCH_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
stage "sanitizer build"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j2 -L '^(unit|cli|fuzz)$')
stage "sanitizer build: unit, cli and fuzz tiers"
bash scripts/fuzz.sh "${CTXPATCH_FUZZ_SECONDS:-30}"
stage "libFuzzer harnesses"
echo "test.sh: total $SECONDS s"
