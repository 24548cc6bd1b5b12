#!/usr/bin/env bash
# The C probes rebuild python/ctxpatch_ref/data.py's prompts exactly: same texts, same
# length fitting, same placement (given the same key and depth; the random draws differ).
set -uo pipefail
src=$CTXPATCH_SOURCE_DIR; py=$CTXPATCH_PYTHON
exe=$CTXPATCH_BUILD_DIR/tests/test_probes
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
CTXPATCH_SOURCE_DIR=$src "$exe" dump >"$work/probes.jsonl" || { echo "dump failed"; exit 1; }
cd "$src/examples/probe-models" && "$py" - "$work/probes.jsonl" <<'PY'
import json, random, sys
from ctxpatch_ref import bpe, data
tok = bpe.Tokenizer("tokenizer.json")
passed = failed = 0
for line in open(sys.argv[1]):
    c = json.loads(line)
    n = c["length"] - 8            # the C probes leave 8 tokens of answer room, as evaluate.py
    if c["kind"] == "passkey":
        ref = data.passkey(random.Random(0), n, tok.encode, depth=c["depth"], key=c["answer"])
        ok = ref["prompt"] == c["prompt"]
    else:
        # line names and values are random draws: compare the structure instead
        body = c["prompt"].split("Now the record start:\n\n")[1].split("\nNow the record is over.")[0]
        lines = body.rstrip("\n").split("\n")
        asked = c["prompt"].rsplit("in line ", 1)[1].split("?")[0]
        at = [l.split(":")[0][5:] for l in lines].index(asked)
        ok = (c["prompt"].startswith(data.LINES_HEAD) and
              lines[at].endswith("<%d>" % c["answer"]) and
              at == min(len(lines) - 1, int(c["depth"] * len(lines))) and
              len(tok.encode(c["prompt"])) <= n)
    if ok and len(tok.encode(c["prompt"])) != c["n_ids"]:
        ok = False
        print("token count differs from bpe.py for", c["kind"], c["length"], c["depth"])
    if ok:
        passed += 1
    else:
        failed += 1
        print("MISMATCH", c["kind"], c["length"], c["depth"])
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
