#!/usr/bin/env bash
# Regenerates docs/results.md from scratch with the ctxpatch CLI: the probe models (original vs
# each seed's method), the T5 seed's single tau vs the temperature schedule at 1x..16x (passkey,
# needle, ppl) and the pretrained stories260K on ppl at 1x..8x, every cell with its 95% interval.
#
#   bash scripts/results.sh            measure and write docs/results.md (~835 s CPU: 46 min on the
#                                      2-core VM under load 12-33, roughly 7-10 min idle)
#   bash scripts/results.sh --render   rewrite docs/results.md from the last run's numbers
#
# Knobs (environment): RESULTS_SAMPLES (samples per probe x length x depth cell, default 2),
# RESULTS_WINDOWS (ppl windows per length, default 8), RESULTS_WORK (scratch folder, default
# build/results-work), CTXPATCH (the binary, default build/ctxpatch), FIXTURES (default
# ../shared/fixtures; when it is missing the sections that need it are skipped with a message).
# Needs /usr/bin/python3 (stdlib only) and a build; builds build/ with -j2 when ctxpatch is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/results_build.sh results
fix="${FIXTURES:-../shared/fixtures}"
if [[ ! -d "$fix/third_party" ]]; then
  echo "results: SKIP: $fix is not reachable; the stories260K section and the ppl tables are skipped"
fi
work="${RESULTS_WORK:-build/results-work}"
if [[ "${1:-}" != "--render" && -d "$work" ]]; then
  # start from scratch, but never empty a folder this script did not make
  if [[ -n "$(ls -A "$work")" && ! -f "$work/state.pickle" && "$work" != build/results-work ]]; then
    echo "results: $work is not empty and holds no earlier run (state.pickle): refusing to clear it" >&2
    exit 2
  fi
  rm -rf "$work"
fi
scripts/py lab/results.py "$@"
