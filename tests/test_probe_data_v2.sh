#!/usr/bin/env bash
# The v2 probe data (examples/probe-models, issue 18): the held-out stories data.py writes are the
# ppl corpus lab/results.py gives the verify probe (stories [800, 1000), byte for byte, split
# here independently of both), the training windows never reach into them, and the v2
# tokenizer (bpe.py --natural) encodes like the project's own C tokenizer (an independent
# implementation of HF byte-level BPE) on training stories, held-out stories and the prompts, with
# every digit a token of its own (passkeys are copied digit by digit).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
pm=$src/examples/probe-models
text=$CTXPATCH_FIXTURES/third_party/text/tinystories_val_1000_eot.txt
[ -f "$text" ] || { echo "SKIP: $text is missing (the TinyStories fixture)"; exit 77; }
[ -f "$pm/v2/tokenizer.json" ] || { echo "SKIP: $pm/v2/tokenizer.json is missing"; exit 77; }
export FIXTURES=$CTXPATCH_FIXTURES

check "$py" -m ctxpatch_ref.data --held-out "$work/held.txt"
# independent split: documents between the separators, the blank ones dropped
"$py" - "$text" "$work/held.txt" <<'EOF' && ok || bad "held-out corpus differs from stories [800, 1000)"
import sys
raw = open(sys.argv[1], "rb").read()
docs = [d for d in raw.split(b"<|endoftext|>") if d.strip()]
want = b"<|endoftext|>".join(docs[800:1000])
got = open(sys.argv[2], "rb").read()
print("held-out: %d docs in the file, %d bytes written" % (len(docs), len(got)))
sys.exit(0 if got == want and len(docs) == 1000 else 1)
EOF

# the training text holds no held-out story; samples of every kind, ids for the C comparison
"$py" - "$pm" "$work" <<'EOF' && ok || bad "training text / v2 tokenizer checks"
import json, random, sys
from ctxpatch_ref import bpe, data
tok = bpe.Tokenizer(sys.argv[1] + "/v2/tokenizer.json")
train = data.train_text()
held = [data.ascii_fold(s).strip() for s in data.stories(data.HELD_OUT)]
leak = [h[:80] for h in held if h in train]     # whole stories (openings repeat)
assert not leak, "held-out story in the training text: %r" % leak[0]
digits = [t for t in tok.vocab if len(t) > 1 and any(c.isdigit() for c in t)]
assert not digits, "merged digits: %r" % digits[:5]
rng = random.Random(7)
texts = [train[:3000], data.ascii_fold("".join(data.stories((990, 1000))))[:3000],
         data.passkey(rng, 256, tok.encode)["prompt"], data.lines(rng, 256, tok.encode)["prompt"]]
src = data.Text(tok.encode, tok.bos_id)
assert src.ids.count(tok.bos_id) == 800, "one BOS a training story"
w = src.window(random.Random(3), 200)["ids"]
assert len(w) == 200 and tok.encode(tok.decode(w)) != [] and tok.decode(tok.encode(texts[0])) == texts[0]
for i, t in enumerate(texts):
    open("%s/t%d.txt" % (sys.argv[2], i), "w").write(t)
    json.dump(tok.encode(t), open("%s/t%d.ids.json" % (sys.argv[2], i), "w"))
print("v2 tokenizer: %d tokens; no held-out story in %d training chars" % (len(tok.vocab), len(train)))
EOF

for i in 0 1 2 3; do
  if "$bin" tokenize "$pm/v2/tokenizer.json" --text-file "$work/t$i.txt" --no-special --json >"$work/c$i.json"; then
    "$py" - "$work/c$i.json" "$work/t$i.ids.json" <<'EOF' && ok || bad "text $i: C tokenizer ids differ from bpe.py"
import json, sys
c = json.load(open(sys.argv[1])); c = c["ids"] if isinstance(c, dict) else c
p = json.load(open(sys.argv[2]))
print("C %d ids, bpe.py %d ids, equal %s" % (len(c), len(p), c == p))
sys.exit(0 if c == p else 1)
EOF
  else
    bad "ctxpatch tokenize text $i: exit $?"
  fi
done
finish
