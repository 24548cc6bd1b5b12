#!/usr/bin/env bash
# Regenerates docs/results-v2.md: the probe models v2 (examples/probe-models/v2) at their training
# length against the issue's bars, and each seed's phenomenon on them through the CLI (ALiBi PI
# perplexity, LM-Infinite and RoPE PI NLL by position, FIRE with its threshold patch, the T5 seed's
# P_max temperature), every cell with its 95% interval.
#
#   bash scripts/results_v2.sh            measure (build/results-v2-work/) and write the doc
#   bash scripts/results_v2.sh --render   rewrite the doc from the last run's numbers
#
# Knobs (environment): RESULTS_V2_WINDOWS (ppl windows per length, default 8),
# RESULTS_V2_SAMPLES (retrieval prompts per depth, default 2), CTXPATCH (the binary).
# Needs /usr/bin/python3 (stdlib only), a build (made with -j2 when build/ctxpatch is missing) and
# ../shared/fixtures (the held-out TinyStories text; exits 77 without it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/results_build.sh results_v2
if [[ "${1:-}" != "--render" && ! -f "${FIXTURES:-../shared/fixtures}/third_party/text/tinystories_val_1000_eot.txt" ]]; then
  echo "results_v2: SKIP: ../shared/fixtures/third_party is not here (the held-out TinyStories text)"
  exit 77
fi
exec scripts/py lab/results_v2.py "$@"
