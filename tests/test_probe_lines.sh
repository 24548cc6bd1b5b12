#!/usr/bin/env bash
# The probe models' line-retrieval data (ctxpatch_ref.data), lab/lines_errors.py and a continued
# lab/train.py run's replay
# (issue 18).
# - data.lines draws as many lines as the length holds, so short prompts hold one line and need no
#   lookup; min_lines makes every sample a lookup (at least that many lines, the asked one's value
#   the answer, its name once in the record) and min_lines 1 draws what data.py drew before it had
#   the option (the SHA-1 of 200 prompts from data.py at commit cb48e06, pinned below), so the
#   committed models' replays still draw their batches.
# - train.py --resume FOLDER --lines-min 2 --lookup-weight 10 records a replay that rebuilds the
#   same weights byte for byte (the folder it resumed from and both options are in it; before, the
#   replay named examples/probe-models/<model> whatever folder was resumed). T5 trains with the
#   weighted loss too.
# - lines_errors.py sorts wrong answers into another line's value (with its offset) and a value in
#   no line, on answers planted here from the prompts' own lines.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
pm=$src/examples/probe-models

"$py" - "$pm" <<'EOF' && ok || bad "data.lines min_lines"
import hashlib, random, re, sys
from ctxpatch_ref import bpe, data
tok = bpe.Tokenizer(sys.argv[1] + "/v2/tokenizer.json")
def draw(seed, **kw):
    r = random.Random(seed)
    return [data.lines(r, r.randint(32, 246), tok.encode, **kw) for _ in range(200)]
base, two = draw(5), draw(5, min_lines=2)
# data.lines of commit cb48e06 (before min_lines), same seed, lengths and tokenizer
BEFORE = "c39d901053dcebf75c25e85f2947422153fcaf4b"
got = hashlib.sha1("\x00".join(s["prompt"] for s in base).encode()).hexdigest()
assert got == BEFORE, "the default lines stream changed: sha1 %s, before %s" % (got, BEFORE)
count = lambda s: len(re.findall(r"^line .*: REGISTER_CONTENT is <\d+>$", s["prompt"], re.M))
n1 = sum(count(s) == 1 for s in base)
assert n1 > 50, "expected many one-line samples by default, got %d of 200" % n1
for s in two:
    assert count(s) >= 2, "a min_lines 2 sample holds %d lines" % count(s)
    name = s["prompt"].rsplit("in line ", 1)[1].split("?")[0]
    rows = [l for l in s["prompt"].split("\n") if l.startswith("line %s:" % name)]
    assert len(rows) == 1 and rows[0].endswith("<%d>" % s["key"]) and s["answer"] == " <%d>" % s["key"], rows
print("default: %d of 200 samples hold one line; min_lines 2: at least 2 in all 200" % n1)
EOF

"$py" - "$pm" "$work" <<'EOF' && ok || bad "planted eval answers"
import json, re, sys
from ctxpatch_ref import bpe, data
tok = bpe.Tokenizer(sys.argv[1] + "/v2/tokenizer.json")
S = data.eval_set("lines", 248, 4, 0, tok.encode)
vals = lambda s: [int(v) for v in re.findall(r"REGISTER_CONTENT is <(\d+)>", s["prompt"])]
v1 = vals(S[1])
ans = [[0, 0, S[0]["key"], " <%d>" % S[0]["key"], True],
       [1, 0, S[1]["key"], " <%d>" % v1[v1.index(S[1]["key"]) + 1], False],   # the next line's value
       [2, 0, S[2]["key"], " <%d>" % (max(vals(S[2])) + 1), False]]            # in no line
json.dump({"cells": [{"task": "lines", "length": 256, "rule": "none", "n_set": 4, "answers": ans}]},
          open(sys.argv[2] + "/ev.json", "w"))
EOF
"$py" "$src/lab/lines_errors.py" --eval "$work/ev.json" --tokenizer "$pm/v2/tokenizer.json" >"$work/le.txt" 2>&1
grep -q '^| 256 | 7-8 | 1/3 | 1 (+1) | 1 |$' "$work/le.txt" && ok || bad "lines_errors.py: $(cat "$work/le.txt")"

"$py" -c "import torch" 2>/dev/null || { echo "SKIP (rest): $py has no torch (Debian python3-torch)"; finish; exit; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$src"
rel=$("$py" -c "import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))" "$work" "$src")
common=(--model rope-probe --size 16,1,2,32 --batch 2 --mix 0.4,0.5,0.1 --tokenizer examples/probe-models/v2/tokenizer.json)
check "$py" "$src/lab/train.py" "${common[@]}" --steps 6 --out "$rel/a" >"$work/log" 2>&1
check "$py" "$src/lab/train.py" "${common[@]}" --steps 6 --resume "$rel/a" --lines-min 2 --lookup-weight 10 --out "$rel/b" >>"$work/log" 2>&1
replay=$("$py" -c "import json, sys; print(json.load(open(sys.argv[1]))['replay'])" "$work/b/train_log.json")
echo "replay: $replay"
case "$replay" in *"--lines-min 2 --lookup-weight 10"*"--resume $rel/a"*) ok ;; *) bad "replay lacks --lines-min 2 --lookup-weight 10 / --resume $rel/a" ;; esac
# the replay as recorded (scripts/py runs $CTXPATCH_PYTHON), its output redirected (argparse keeps
# the last --out)
check $replay --out "$rel/c" >>"$work/log" 2>&1
# the weight sits on the target that is the value's first digit, for the decoder and T5
PYTHONPATH=$src/lab${PYTHONPATH:+:$PYTHONPATH} "$py" - "$pm" <<'EOF' && ok || bad "make_batch lookup weight"
import random, sys
import train   # lab/train.py
from ctxpatch_ref import bpe
tok = bpe.Tokenizer(sys.argv[1] + "/v2/tokenizer.json")
ids, tgt, wt = train.make_batch(random.Random(1), tok, 6, False, "cpu", mix=(0, 1, 0), lines_min=2, lookup_weight=10)
for b in range(6):
    at = (wt[b] == 40).nonzero().flatten().tolist()
    assert len(at) == 1 and tok.decode([int(tgt[b, at[0]])]).isdigit(), (b, at)
    assert tok.decode([int(tgt[b, at[0] - 1])]) == " <" and (wt[b] == 4).sum() >= 6
enc, km, din, dout, dw = train.make_batch(random.Random(1), tok, 6, True, "cpu", mix=(0, 1, 0), lines_min=2, lookup_weight=10)
for b in range(6):
    at = (dw[b] == 10).nonzero().flatten().tolist()
    assert len(at) == 1 and tok.decode([int(dout[b, at[0]])]).isdigit() and at[0] == 1, (b, at)
assert len(train.make_batch(random.Random(1), tok, 2, True, "cpu", mix=(0, 1, 0))) == 4
print("lookup weight on the first digit of 6 + 6 samples")
EOF
cmp "$work/b/model.safetensors" "$work/c/model.safetensors" && ok || { bad "the replay built other weights"; tail -5 "$work/log"; }
check "$py" "$src/lab/train.py" --model t5-probe --size 16,1,2,32 --batch 4 --mix 0.2,0.7,0.1 --steps 3 \
  --tokenizer examples/probe-models/v2/tokenizer.json --lines-min 2 --lookup-weight 10 --out "$rel/t5" >>"$work/log" 2>&1
finish
