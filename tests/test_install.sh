#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the installed library used as a stranger would:
# every public header compiles on its own with only the C library and other ctxpatch headers
# (no third-party type in the public API), libctxpatch.so carries its SONAME, and a small C program
# (tests/install/consumer.c) built once with pkg-config (shared, then static) and once with CMake's
# find_package opens a probe model, runs a forward pass and matches the PyTorch golden logits.
set -uo pipefail
src=$CTXPATCH_SOURCE_DIR; build=$CTXPATCH_BUILD_DIR
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
command -v pkg-config >/dev/null || { echo "skip: pkg-config not installed"; exit 77; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 && ok || { cat "$work/install.log"; bad "cmake --install"; }
libdir=$(dirname "$(find "$prefix" -name ctxpatch.pc | head -1)")/..
[ -x "$prefix/bin/ctxpatch" ] && ok || bad "no bin/ctxpatch installed"
"$prefix/bin/ctxpatch" --version | grep -E >/dev/null '^ctxpatch [0-9]+\.[0-9]+\.[0-9]+$' && ok || bad "--version first line"
"$prefix/bin/ctxpatch" --version | grep -E >/dev/null '^build: .*cuda=(on|off)' && ok || bad "--version build options"
soname=$(readelf -d "$libdir/libctxpatch.so" 2>/dev/null | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
[ "$soname" = "libctxpatch.so.0" ] && ok || bad "SONAME is '$soname', not libctxpatch.so.0"
[ -f "$libdir/libctxpatch.a" ] && ok || bad "no static libctxpatch.a"

# Public headers: standard C headers and ctxpatch's own only, and each compiles alone.
std='assert|ctype|errno|float|inttypes|limits|math|stdalign|stdarg|stdbool|stddef|stdint|stdio|stdlib|string|time'
nh=0
while IFS= read -r h; do
  nh=$((nh+1))
  rel=${h#"$prefix/include/"}
  other=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$h" | grep -Ev "<($std)\.h>|\"ctxpatch/[a-z_/]+\.h\"")
  [ -z "$other" ] && ok || bad "$rel includes outside the C library and ctxpatch: $other"
  printf '#include "%s"\n#include "%s"\n' "$rel" "$rel" >"$work/one.c"
  cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -I "$prefix/include" "$work/one.c" 2>"$work/one.err" \
    && ok || { bad "$rel does not compile alone"; head -3 "$work/one.err"; }
done < <(find "$prefix/include/ctxpatch" -name '*.h' | sort)
[ "$nh" -ge 10 ] && ok || bad "only $nh public headers installed"

# Only user-facing headers (CMakeLists.txt, CTXPATCH_INSTALLED_HEADERS): every ctxpatch header an
# installed one includes is installed too, and each installed header is reached from the umbrella
# ctxpatch/ctxpatch.h or a format reader's header (the rest stay between the floors).
inc=$prefix/include
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(ctxpatch\/[^"]*\)".*/\1/p' "$inc/$1"; }
missing=0
while IFS= read -r h; do
  for d in $(includes "${h#"$inc/"}"); do
    [ -f "$inc/$d" ] || { missing=$((missing+1)); echo "FAIL: ${h#"$inc/"} includes $d, which is not installed"; }
  done
done < <(find "$inc/ctxpatch" -name '*.h' | sort)
[ "$missing" -eq 0 ] && ok || bad "$missing includes of installed headers are not installed"
declare -A reached=()
todo=(ctxpatch/ctxpatch.h ctxpatch/formats/safetensors.h ctxpatch/formats/pytorch.h ctxpatch/formats/gguf.h
  ctxpatch/formats/onnx_graph.h)
while [ ${#todo[@]} -gt 0 ]; do
  h=${todo[0]}; todo=("${todo[@]:1}")
  [ -n "${reached[$h]:-}" ] && continue
  reached[$h]=1
  [ -f "$inc/$h" ] || { bad "$h (user-facing) is not installed"; continue; }
  todo+=($(includes "$h"))
done
stray=$(find "$inc/ctxpatch" -name '*.h' | sed "s#^$inc/##" | sort |
  while read -r h; do [ -n "${reached[$h]:-}" ] || echo "$h"; done)
[ -z "$stray" ] && ok || bad "installed but reached from no user-facing header: $stray"
echo "installed headers: $nh (${#reached[@]} reached from ctxpatch.h and the format readers)"

# Sanitizer builds need the runtime in the consumer too.
extra=()
"$prefix/bin/ctxpatch" --version | grep >/dev/null 'sanitize=on' && extra=(-fsanitize=address,undefined)
g=$src/examples/probe-models/rope-probe/golden
m=$src/examples/probe-models/rope-probe
export PKG_CONFIG_PATH=$libdir/pkgconfig
if cc -std=c11 "${extra[@]}" "$src/tests/install/consumer.c" -o "$work/consumer" $(pkg-config --cflags --libs ctxpatch) \
     -lm -Wl,-rpath,"$libdir" 2>"$work/cc.err"; then
  ok
  ldd "$work/consumer" | grep >/dev/null "libctxpatch.so.0 => $libdir" && ok || bad "consumer is not linked to the installed libctxpatch.so.0"
  "$work/consumer" "$m" "$g/ids.txt" "$g/logits.f32" && ok || bad "shared consumer: logits differ or run failed"
else
  cat "$work/cc.err"; bad "pkg-config build of the consumer (shared)"
fi
if cc -std=c11 "${extra[@]}" "$src/tests/install/consumer.c" -o "$work/consumer-static" $(pkg-config --cflags ctxpatch) \
     "$libdir/libctxpatch.a" $(pkg-config --static --libs-only-l --libs-only-L ctxpatch | sed 's/-lctxpatch//') \
     2>"$work/cc.err"; then
  ok
  ldd "$work/consumer-static" | grep >/dev/null libctxpatch && bad "static consumer still needs libctxpatch.so" || ok
  "$work/consumer-static" "$m" "$g/ids.txt" "$g/logits.f32" >/dev/null && ok || bad "static consumer: logits differ or run failed"
else
  cat "$work/cc.err"; bad "pkg-config build of the consumer (static)"
fi

# CMake package.
mkdir -p "$work/cmk"
cat >"$work/cmk/CMakeLists.txt" <<CMK
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(ctxpatch 0 REQUIRED)
add_executable(consumer $src/tests/install/consumer.c)
target_link_libraries(consumer PRIVATE ctxpatch::ctxpatch m)
target_compile_options(consumer PRIVATE ${extra[*]})
target_link_options(consumer PRIVATE ${extra[*]})
CMK
if cmake -S "$work/cmk" -B "$work/cmk/b" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmk.log" 2>&1 \
   && cmake --build "$work/cmk/b" >>"$work/cmk.log" 2>&1; then
  ok
  "$work/cmk/b/consumer" "$m" "$g/ids.txt" "$g/logits.f32" >/dev/null && ok || bad "CMake consumer: logits differ or run failed"
else
  tail -20 "$work/cmk.log"; bad "find_package(ctxpatch) build"
fi

echo "test_install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
