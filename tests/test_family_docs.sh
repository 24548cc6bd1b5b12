#!/usr/bin/env bash
# The family lists agree (issue 31, "Done when"): every model_type ctxpatch reads (the list its
# refusal of an unknown model_type prints, i.e. the family table's) is named in README's family
# paragraph, in the first column of docs/gguf.md's family table and of docs/onnx.md's model_type
# table; and every name those first columns give is one ctxpatch reads. A new family adds one row
# to each doc.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

mkdir -p "$work/none"
echo '{"model_type": "no_such_family", "hidden_size": 8}' >"$work/none/config.json"
printf '\010\0\0\0\0\0\0\0{}      ' >"$work/none/model.safetensors" # no tensors: the config decides
msg=$("$bin" inspect "$work/none" 2>&1)
list=$(sed -n 's/.*unsupported model type .* (supported: \([^)]*\))$/\1/p' <<<"$msg")
[ -n "$list" ] && ok || bad "no supported model_type list in: $msg"

"$py" - "$src" "$list" >"$work/out.txt" 2>&1 <<'PY'
import re, sys
src, listed = sys.argv[1], [t.strip() for t in sys.argv[2].split(",") if t.strip()]
def first_cells(path, header):
    """model_type names in the first column of the table whose header row starts with `header`."""
    lines, names, on = open(path).read().splitlines(), set(), False
    for ln in lines:
        if ln.startswith("| " + header):
            on = True
            continue
        if on and not ln.startswith("|"):
            break
        if on and not ln.startswith("|---"):
            cell = ln.split("|")[1]
            cell = re.sub(r"\(.*?\)", "", cell)          # "qwen3 (dense)"
            names |= {n for n in re.split(r"[\s,/`]+", cell) if n}
    return names
readme = open(src + "/README.md").read()
para = readme[readme.index("Families (`model_type`)"):]
para = para[:para.index("\n\n")]
in_readme = set(re.findall(r"`([a-z0-9_]+)`", para))
errors = []
for t in listed:
    if t not in in_readme:
        errors.append("README.md's family paragraph does not name `%s`" % t)
for doc, header in (("docs/gguf.md", "family (HF)"), ("docs/onnx.md", "model_type")):
    cells = first_cells(src + "/" + doc, header)
    if not cells:
        errors.append("%s: no table headed '| %s'" % (doc, header))
    for t in listed:
        if t not in cells:
            errors.append("%s: no family row names %s" % (doc, t))
    for c in sorted(cells - set(listed)):
        errors.append("%s: the family row names %s, which ctxpatch does not read" % (doc, c))
print("\n".join(errors) if errors else "%d model_types agree: %s" % (len(listed), ", ".join(listed)))
sys.exit(1 if errors else 0)
PY
[ $? = 0 ] && { ok; cat "$work/out.txt"; } || bad "$(cat "$work/out.txt")"
finish
