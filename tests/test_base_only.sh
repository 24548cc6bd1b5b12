#!/usr/bin/env bash
# One home each (docs/conventions.md): above base/, arrays grow through CP_ARRAY_RESERVE /
# CP_ARRAY_RESIZE and out-of-memory errors go through CP_CHECK_ALLOC, CP_CHECK_ALLOC_GOTO or cp_nomem
# (include/ctxpatch/base/alloc.h). A `realloc(` or a hand-set `cp_error_set(CP_ENOMEM, ...)` in a
# .c/.h/.cpp/.cu file of any floor above base fails here, comments aside. ALLOW lists the real
# exceptions, one line each with its reason; keep it tiny.
set -uo pipefail
exec "$CTXPATCH_PYTHON" - "$CTXPATCH_SOURCE_DIR" <<'EOF_PY'
import os, re, sys
src = sys.argv[1]
floors = ["formats", "tokenizers", "model", "import", "export", "engine", "verify", "patchers", "cli"]
ALLOW = {  # "path relative to the source root": "reason"
}
rules = [
    ("realloc", re.compile(r"\brealloc(?:array)?\s*\("), "grow it with CP_ARRAY_RESERVE / CP_ARRAY_RESIZE"),
    ("hand-set CP_ENOMEM", re.compile(r"\bcp_error_setv?\s*\(\s*CP_ENOMEM\b"), "use CP_CHECK_ALLOC(_GOTO) or cp_nomem"),
]
def code_only(text):
    """The text with comments and string literals blanked (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else "")); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)
files = failed = 0
for floor in floors:
    for d in (os.path.join(src, floor), os.path.join(src, "include", "ctxpatch", floor)):
        for root, _, names in os.walk(d):
            for f in sorted(names):
                if not f.endswith((".c", ".h", ".cpp", ".cu")):
                    continue
                path = os.path.join(root, f)
                rel = os.path.relpath(path, src)
                files += 1
                if rel in ALLOW:
                    continue
                code = code_only(open(path, encoding="utf-8").read())
                for what, pat, fix in rules:
                    for m in pat.finditer(code):
                        line = code.count("\n", 0, m.start()) + 1
                        failed += 1
                        print(f"FAIL: {rel}:{line}: {what} above base/ ({fix}, include/ctxpatch/base/alloc.h)")
print(f"test_base_only: {files} files scanned, {failed} failures")
sys.exit(1 if failed or files < 100 else 0)
EOF_PY
