# Sourced by the GGUF tests after tests/harness.sh: whether llama.cpp (node-llama-cpp) can run here.
# Sets lc=1 (tests/gguf/llamacpp_run.mjs copied to $work/run.mjs, node_modules linked beside it) when
# node-llama-cpp and its linux-x64 prebuilt are in $CTXPATCH_NODE_MODULES (default
# tests/runtimes/node_modules, installed by scripts/install-test-runtimes.sh), else lc=0 with a
# note; PYTHONPATH reaches tests/gguf (gguf_py.py); w=$work.
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
lc=0
if [ -d "$nm/node-llama-cpp" ] && [ -d "$nm/@node-llama-cpp/linux-x64" ] && command -v node >/dev/null; then
  lc=1; cp "$src/tests/gguf/llamacpp_run.mjs" "$work/run.mjs"; ln -s "$nm" "$work/node_modules"
else
  echo "note: node-llama-cpp not in $nm (set CTXPATCH_NODE_MODULES): llama.cpp checks skipped"
fi
export PYTHONPATH=$src/tests/gguf${PYTHONPATH:+:$PYTHONPATH}
w=$work
