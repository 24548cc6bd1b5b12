#!/usr/bin/env bash
# The floors hold: a file of one floor includes only headers of its own floor or of floors below it
# (public "ctxpatch/<floor>/x.h" and private "<floor>/x.h" alike), and formats/ and tokenizers/,
# which stand side by side, include neither each other. The link order (one static library per
# floor) catches calls that climb; this catches headers that do.
set -uo pipefail
exec "$CTXPATCH_PYTHON" - "$CTXPATCH_SOURCE_DIR" <<'EOF_PY'
import os, re, sys
src = sys.argv[1]
below = {  # floor -> floors it may include (itself included)
    "base": {"base"},
    "formats": {"base", "formats"},
    "tokenizers": {"base", "tokenizers"},
    "model": {"base", "formats", "tokenizers", "model"},
    "import": {"base", "formats", "tokenizers", "model", "import"},
    "export": {"base", "formats", "tokenizers", "model", "import", "export"},
    "engine": {"base", "formats", "model", "import", "engine"},
    "verify": {"base", "formats", "tokenizers", "model", "import", "engine", "verify"},
    "patchers": {"base", "formats", "tokenizers", "model", "import", "export", "engine", "verify", "patchers"},
    "cli": {"base", "formats", "tokenizers", "model", "import", "export", "engine", "verify", "patchers", "cli"},
}
inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
passed = failed = 0
def check(path, floor):
    global passed, failed
    for name in inc.findall(open(path, encoding="utf-8").read()):
        parts = name.split("/")
        target = parts[1] if parts[0] == "ctxpatch" and len(parts) > 2 else parts[0]
        if parts[0] == "ctxpatch" and len(parts) == 2:
            target = None  # the umbrella header ctxpatch/ctxpatch.h: users only
        if target not in below:
            if target is None and floor != "cli":
                failed += 1; print(f"FAIL: {path}: includes the umbrella {name}")
            continue
        if target in below[floor]:
            passed += 1
        else:
            failed += 1; print(f"FAIL: {os.path.relpath(path, src)} ({floor}) includes {name} ({target})")
for floor in below:
    for d in (os.path.join(src, floor), os.path.join(src, "include", "ctxpatch", floor)):
        for root, _, files in os.walk(d):
            for f in sorted(files):
                if f.endswith((".c", ".h", ".cpp", ".cu")):
                    check(os.path.join(root, f), floor)
print(f"test_floors: {passed} passed, {failed} failed")
sys.exit(1 if failed or passed < 100 else 0)
EOF_PY
