#!/usr/bin/env bash
# bench/kill9.sh with a small N on a small synthetic model: random SIGKILLs of convert and patch
# leave OUT absent, old or complete, and the next run sweeps every temporary left behind.
# (bench/kill9.sh 1000 runs the long version.)
exec bash "$CTXPATCH_SOURCE_DIR/bench/kill9.sh" 50 4
