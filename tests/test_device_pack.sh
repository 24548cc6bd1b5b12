#!/usr/bin/env bash
# The device kit's bundle is self-contained (issue 32): scripts/device-pack.sh packs this build,
# every binary and library in it resolves inside the bundle or to what the device image has
# (glibc, libstdc++/libgcc, CUDA), and the bundle still runs with the system copies of the
# libraries it bundles hidden (bind-mounted over with /dev/null in a private mount namespace),
# giving the same logits as the build itself.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

# The kit packs and runs the normal build; a sanitizer build is not what a device gets.
"$bin" --version | grep 'sanitize=on' >/dev/null && { echo "SKIP: the device kit is for the normal build, not a sanitizer one"; exit 77; }

command -v patchelf >/dev/null || { echo "SKIP: patchelf is absent (apt-get install patchelf)"; exit 77; }
build=$(dirname "$bin")
bash "$src/scripts/device-pack.sh" --build-dir "$build" --out "$work/dev" --no-archive >"$work/pack.log" 2>&1 \
  || { cat "$work/pack.log"; bad "device-pack.sh failed"; finish; exit; }
b=$work/dev/bundle
check test -x "$b/bin/ctxpatch"
check test -s "$b/lib/SOURCES"
check grep -q libcjson "$b/lib/SOURCES"
"$py" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['bundle_bytes'] > 0 and d['needs'].startswith('GLIBC_')" \
  "$work/dev/pack.json" && ok || bad "pack.json lacks its fields"

# 1. Every dependency resolves inside the bundle or to the image's own libraries.
allowed='^(ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so)'
for f in "$b"/bin/* "$b"/lib/*.so*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    case $path in
    "$b"/bin/../lib/* | "$b"/lib/*) ;;
    *) echo "$name" | grep -E "$allowed" >/dev/null || bad "$(basename "$f"): $name resolves to $path, outside the bundle" ;;
    esac
  done < <(ldd "$f")
done
ok

# 2. With the system copies hidden, the bundle runs and computes what the build computes.
model=$src/tests/goldens/engine/models/llama
ids=3,17,5,9,11,2,7,30,4,8,12,1
"$bin" forward "$model" --ids $ids --out "$work/want.f32" || bad "forward with the build failed"
cat >"$work/hidden.sh" <<EOF
set -e
while read -r name path _; do mount --bind /dev/null "\$path"; done <"$b/lib/SOURCES"
if "$bin" --version >/dev/null 2>&1; then echo "control: the build still runs with its libraries hidden"; exit 3; fi
"$b/bin/ctxpatch" forward "$model" --ids $ids --out "$work/got.f32"
EOF
if unshare -m --propagation private true 2>/dev/null; then
  unshare -m --propagation private bash "$work/hidden.sh" >"$work/hidden.log" 2>&1 && ok \
    || { cat "$work/hidden.log"; bad "the bundle does not run with the system libraries hidden"; }
  check cmp "$work/want.f32" "$work/got.f32"
else
  echo "note: no private mount namespace here (unshare -m refused); hidden-library run skipped"
fi
finish
