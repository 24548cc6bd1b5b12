#!/usr/bin/env bash
# Installs every Debian 12 package ctxpatch needs to build, test and benchmark. Idempotent.
set -euo pipefail
packages=(
  build-essential cmake pkg-config            # toolchain
  libzip-dev libcjson-dev libssl-dev           # zip archives, JSON, SHA-256
  libprotobuf-c-dev protobuf-c-compiler libonnx-dev   # ONNX graphs (schema from libonnx-dev)
  libopenblas-dev libopenblas0-pthread         # BLAS for the CPU engine (and for python3-torch)
  libicu-dev libsentencepiece-dev python3-sentencepiece  # tokenizers (Unicode, SentencePiece .model)
  python3 python3-numpy python3-torch          # golden generators and reference implementation
  hyperfine time zip                           # benchmarks and test inputs
  patchelf                                     # the device kit's bundle (scripts/device-pack.sh)
  clang libclang-rt-14-dev                     # libFuzzer harnesses (scripts/fuzz.sh)
  clang-format-14                              # tests/test_format.sh (.clang-format)
  chromium                                     # headless browser for the report test
  python3-onnx                                 # checker for exported ONNX graphs (tests/onnx)
  slurmctld slurmd slurm-client                # tests/test_slurm.sh: batch under real Slurm daemons (~1 min)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
