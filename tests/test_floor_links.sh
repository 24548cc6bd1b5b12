#!/usr/bin/env bash
# The floor links refuse a call that climbs: a planted object calling into a floor above is added to
# a copy of one floor's library, and that floor's own floor-check link (CMakeLists.txt,
# ctxpatch_floor: the whole library against the floors below only) must then fail naming the
# callee. Readers never use writers: import/ -> export/ fails, as do model/ -> import/ and
# engine/ -> export/. A planted call into a floor below must still link (the check is not just broken).
set -uo pipefail
build=${CTXPATCH_BUILD_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
cc=${CC:-cc}

# plant FLOOR CALLEE EXPECT: EXPECT is "fail" or "link".
plant() {
  local floor=$1 callee=$2 expect=$3
  local link="$build/CMakeFiles/ctxpatch_${floor}_floor_check.dir/link.txt"
  if [ ! -f "$link" ]; then
    echo "FAIL: no floor-check link command for $floor ($link)"; failed=$((failed + 1)); return
  fi
  printf 'int %s(void);\nint cp_planted_%s(void) { return %s(); }\n' "$callee" "$floor" "$callee" >"$work/planted.c"
  "$cc" -c "$work/planted.c" -o "$work/planted.o" || { echo "FAIL: compiling the planted call"; failed=$((failed + 1)); return; }
  cp "$build/libctxpatch_${floor}.a" "$work/libplanted.a"
  ar rcs "$work/libplanted.a" "$work/planted.o"
  local cmd
  cmd=$(sed -e "s#-o ctxpatch_${floor}_floor_check#-o $work/out#" -e "s# libctxpatch_${floor}\.a # $work/libplanted.a #" "$link")
  (cd "$build" && eval "$cmd") >"$work/log" 2>&1
  local rc=$?
  if [ "$expect" = fail ]; then
    if [ $rc -ne 0 ] && grep "undefined reference to .$callee" "$work/log" >/dev/null; then
      passed=$((passed + 1))
    else
      echo "FAIL: a call from $floor/ into $callee linked (rc $rc)"; failed=$((failed + 1))
    fi
  else
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); else
      echo "FAIL: a call from $floor/ into $callee (a floor below) did not link:"; head -5 "$work/log"
      failed=$((failed + 1))
    fi
  fi
}

plant import cp_gguf_export_check fail  # export/gguf/gguf_export.c: a reader calling a writer
plant import cp_onnx_export fail        # export/onnx/onnx_export.c
plant model cp_checkpoint_open fail     # import/: the vocabulary does no weight I/O
plant engine cp_onnx_export fail        # the engine runs models; it writes none
plant import cp_family_layout_of link   # model/ is below import/
plant export cp_checkpoint_open link    # import/ is below export/
echo "test_floor_links: $passed passed, $failed failed"
[ $failed -eq 0 ]
