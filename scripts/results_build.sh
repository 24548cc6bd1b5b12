# Sourced by the scripts/results*.sh generators: builds build/ctxpatch (no CUDA, -j2) when no
# binary is given (CTXPATCH) and none is built. $1: the caller's name for the message.
if [[ -z "${CTXPATCH:-}" && ! -x build/ctxpatch ]]; then
  echo "$1: building build/ctxpatch"
  cmake -S . -B build -DCTXPATCH_CUDA=OFF >/dev/null
  cmake --build build -j2 --target ctxpatch_cli >/dev/null  # the CLI (target ctxpatch is the library)
fi
