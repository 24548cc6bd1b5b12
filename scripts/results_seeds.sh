#!/usr/bin/env bash
# Regenerates docs/results-seeds.md: the LM-Infinite seed's phenomena where the paper measured
# them (issue 18): top-k on the RoPE probe (an independent numpy reference of the spec against
# `ctxpatch forward`, where the picks go, the single-distance ablation, the paper's k / distance /
# layer sweep through `ctxpatch verify`) and NLL against position on stories260K (original,
# LM-Infinite and its two parts, RoPE PI with and without a ceiling) with 95% intervals, plus a
# llama.cpp cross-check of one ppl window.
#
#   bash scripts/results_seeds.sh            measure (build/results-seeds-work/) and write the doc
#                                            (~110 s CPU; 6-15 min on the 2-core VM under load)
#   bash scripts/results_seeds.sh --render   rewrite the doc from the last run's numbers
#
# Knobs (environment): CTXPATCH (the binary), RESULTS_SEEDS_WINDOWS (ppl windows per length, default 16),
# RESULTS_SEEDS_SAMPLES (passkey samples per depth in the sweep, default 8).
# Needs /usr/bin/python3 with numpy (Debian python3-numpy), ../shared/fixtures (stories260K and
# the TinyStories text; exits 77 without them) and, for the cross-check, node with
# tests/runtimes/node_modules (skipped when absent).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/results_build.sh results_seeds
if [[ ! -f ../shared/fixtures/third_party/stories260K/stories260K.gguf ]]; then
  echo "results_seeds: SKIP: ../shared/fixtures/third_party is not here (stories260K, TinyStories)"
  exit 77
fi
exec scripts/py lab/results_seeds.py "$@"
