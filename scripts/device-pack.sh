#!/usr/bin/env bash
# Packs what scripts/device-check.sh runs on a lent GPU machine (docs/cuda.md, "The device kit").
# That machine starts bare from its own image (CUDA 13 with cuBLAS, PyTorch, transformers,
# onnxruntime; no package registry), so everything else travels from here:
#   device/bundle/bin/   ctxpatch, test_cuda_consistency, bench_attention_cuda (sm_90a code + PTX)
#   device/bundle/lib/   every shared library those need that is not glibc, libstdc++/libgcc or
#                        CUDA's, with an $ORIGIN run path (lib/SOURCES says where each came from)
#   device/bundle.tar.xz the two folders above, compressed (the tree that travels is <= 64 MiB)
#   device/pack.json     sizes, commit, the newest glibc symbol version the binaries need
#   device/share/        Llama 3.2's tokenizer.json.gz from ../shared/fixtures (the big-model step;
#                        the fixtures do not travel, the ignored device/ folder does)
# The tracked tree (scripts, goldens, probe models, bench/) travels as the working tree itself.
#
#   bash scripts/device-pack.sh                      # builds build-device/ (CUDA, sm_90a), packs
#   bash scripts/device-pack.sh --build-dir build --out DIR --no-archive   # pack an existing build
# Then, with a device lent: run `bash scripts/device-check.sh` with carry ["device"].
set -euo pipefail
cd "$(dirname "$0")/.."
build=""
out=device
archive=1
while [ $# -gt 0 ]; do
  case $1 in
  --build-dir) build=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --no-archive) archive=0; shift ;;
  *) echo "device-pack: unknown option '$1'" >&2; exit 2 ;;
  esac
done
command -v patchelf >/dev/null || { echo "device-pack: patchelf not found (apt-get install patchelf)" >&2; exit 2; }

if [ -z "$build" ]; then
  build=build-device
  # sm_90a machine code for the lent Hopper chips, compute_90 PTX beside it. The CUDA runtime
  # and cuBLAS (13, as nvcc here) come from the image, as does the driver.
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCTXPATCH_CUDA=ON "${launcher[@]}" \
    -DCMAKE_CUDA_ARCHITECTURES="90a-real;90-virtual" >/dev/null
  # ctxpatch_cli is the program (the target named ctxpatch is the library)
  for t in ctxpatch_cli test_cuda_consistency bench_attention_cuda; do
    cmake --build "$build" -j"$(nproc)" --target "$t" >/dev/null
  done
fi
[ -x "$build/ctxpatch" ] || { echo "device-pack: $build/ctxpatch not found (build it first)" >&2; exit 2; }

# Libraries the device image provides: glibc's, the C++ runtime, and CUDA's (driver, runtime, cuBLAS).
system_lib() {
  case $(basename "$1") in
  ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*) return 0 ;;
  libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnvidia-*) return 0 ;;
  esac
  return 1
}

rm -rf "$out/bundle" "$out/bundle.tar.xz.tmp"
mkdir -p "$out/bundle/bin" "$out/bundle/lib"
bins=()
for b in ctxpatch tests/test_cuda_consistency bench_attention_cuda; do
  [ -x "$build/$b" ] || continue
  cp "$build/$b" "$out/bundle/bin/"
  bins+=("$out/bundle/bin/$(basename "$b")")
done
: >"$out/bundle/lib/SOURCES"
# ldd lists the whole closure (libopenblas -> libgfortran -> libquadmath, libicuuc -> libicudata).
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  system_lib "$lib" && continue
  name=$(basename "$lib")
  cp -L "$lib" "$out/bundle/lib/$name"
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || echo "?:")
  echo "$name $lib ${pkg%%:*}" >>"$out/bundle/lib/SOURCES"
done
for b in "${bins[@]}"; do
  strip --strip-debug "$b"
  patchelf --set-rpath '$ORIGIN/../lib' "$b"
done
for l in "$out"/bundle/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$l"; done

bytes() { du -sb "$1" | cut -f1; }
mkdir -p "$out/share"
tok=../shared/fixtures/tokenizers/modern/llama3/llama-3.2/tokenizer.json.gz
if [ -f "$tok" ]; then cp "$tok" "$out/share/llama-3.2-tokenizer.json.gz"; else
  echo "device-pack: $tok absent: the kit's big-model step will be skipped" >&2; fi
archive_bytes=0
if [ "$archive" = 1 ]; then
  tar -C "$out" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - bundle |
    xz -6 -T"$(nproc)" >"$out/bundle.tar.xz.tmp"
  mv "$out/bundle.tar.xz.tmp" "$out/bundle.tar.xz"
  archive_bytes=$(bytes "$out/bundle.tar.xz")
fi
glibc=$(for b in "${bins[@]}" "$out"/bundle/lib/*.so*; do objdump -T "$b" 2>/dev/null; done |
  grep -o 'GLIBC_[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
cat >"$out/pack.json" <<EOF
{"commit": "$commit", "build_dir": "$build", "binaries": [$(printf '"%s",' "${bins[@]##*/}" | sed 's/,$//')],
 "bundle_bytes": $(bytes "$out/bundle"), "archive_bytes": $archive_bytes, "needs": "$glibc",
 "cuda_architectures": "$(grep -s '^CMAKE_CUDA_ARCHITECTURES:' "$build/CMakeCache.txt" | cut -d= -f2)"}
EOF
echo "device-pack: $out/bundle: $(( $(bytes "$out/bundle") / 1048576 )) MiB, archive $((archive_bytes / 1048576)) MiB, needs $glibc"
if [ "$archive" = 1 ] && [ "$archive_bytes" -gt $((50 * 1048576)) ]; then
  echo "device-pack: $out/bundle.tar.xz is over 50 MiB: the tree that travels is at most 64 MiB" >&2
  exit 1
fi
