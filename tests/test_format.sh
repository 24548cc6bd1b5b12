#!/usr/bin/env bash
# The floors' C sources (base/ ... cli/ and include/ctxpatch/, *.c and *.h) are formatted as
# .clang-format says: `clang-format --dry-run --Werror` passes on every one of them except the
# files listed in tests/format-pending.txt, those written before .clang-format existed and not
# reformatted yet (reformatting all at once would collide with work in flight). The list only
# shrinks: a listed file that passes now, or that no longer exists, is named so it comes off.
# clang-format 14 only (Debian 12's clang-format-14): other versions lay the same options out
# differently, so without it this skips (77).
#   bash tests/test_format.sh --update-pending   rewrites the list as what fails today
set -uo pipefail
src=${CTXPATCH_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1
fmt=
for c in clang-format-14 clang-format; do
  command -v "$c" >/dev/null && "$c" --version | grep -E 'version 14\.' >/dev/null && { fmt=$c; break; }
done
[ -n "$fmt" ] || { echo "SKIP: clang-format 14 not found (Debian clang-format-14, scripts/install-deps.sh)"; exit 77; }
[ -f .clang-format ] || { echo "FAIL: .clang-format is absent"; exit 1; }
# An unreadable style makes clang-format fail every file without naming one: caught here first.
err=$("$fmt" --dump-config 2>&1 >/dev/null) || { echo "FAIL: $fmt cannot read .clang-format: ${err%%$'\n'*}"; exit 1; }
list=tests/format-pending.txt
mapfile -t files < <(find base formats tokenizers model import export engine verify patchers cli include/ctxpatch \
  -type f -name '*.[ch]' | LC_ALL=C sort)
[ "${#files[@]}" -ge 200 ] || { echo "FAIL: only ${#files[@]} C sources found under the floors"; exit 1; }

# failing FILE...: the files clang-format would change, one a line (one run over all of them;
# its own status is 1 whenever one would change).
failing() {
  { "$fmt" --dry-run --Werror "$@" 2>&1 >/dev/null || true; } |
    sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | LC_ALL=C sort -u
}

if [ "${1:-}" = "--update-pending" ]; then
  { grep '^#' "$list" 2>/dev/null; failing "${files[@]}"; } >"$list.new" && mv "$list.new" "$list"
  echo "$list: $(grep -vc '^#' "$list") of ${#files[@]} files pending"
  exit 0
fi

declare -A pending=()
if [ -f "$list" ]; then
  while read -r f; do [ -n "$f" ] && [ "${f:0:1}" != "#" ] && pending[$f]=1; done <"$list"
fi
declare -A bad_files=()
while read -r f; do [ -n "$f" ] && bad_files[$f]=1; done < <(failing "${files[@]}")

failed=0; passed=0; held=0
for f in "${files[@]}"; do
  if [ -n "${pending[$f]:-}" ]; then
    unset "pending[$f]"
    if [ -n "${bad_files[$f]:-}" ]; then held=$((held+1))
    else echo "FAIL: $f is formatted now: take it off $list"; failed=$((failed+1)); fi
  elif [ -n "${bad_files[$f]:-}" ]; then
    echo "FAIL: $f is not formatted as .clang-format says (clang-format-14 -i $f, or see --dry-run):"
    "$fmt" --dry-run "$f" 2>&1 | head -6
    failed=$((failed+1))
  else
    passed=$((passed+1))
  fi
done
for f in "${!pending[@]}"; do
  echo "FAIL: $list names $f, which is no floor's C source: take it off"; failed=$((failed+1))
done
echo "${#files[@]} files: $passed formatted, $held pending ($list), $failed failed"
[ "$failed" -eq 0 ]
