#!/usr/bin/env bash
# transformers.js against the modern tokenizer.json files (../shared/fixtures/tokenizers/modern):
# it encodes every row of each hf-goldens.jsonl (tests/tokenizer_tjs.mjs), and its ids are compared
# with the goldens (HF tokenizers, the Rust crate), which test_tokenizer_modern holds ctxpatch's ids
# equal to on every row; one long mixed text per file also goes through `ctxpatch tokenize` and is
# compared with transformers.js directly. transformers.js may differ from HF only where a text holds
# a numeric character outside ASCII (general category N: ½ Ⅻ ① 𝟙) and the tokenizer has a Digits
# pre-tokenizer (Command R+): Rust's char::is_numeric splits those off, the JS runtime does not
# (SOURCES.md saw the same with tokenizers.js). Every such row is listed; any other difference fails. Skips (77) without
# the fixtures or the npm runtimes (scripts/install-test-runtimes.sh).
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
mod=$CTXPATCH_FIXTURES/tokenizers/modern
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
[ -d "$mod" ] || { echo "SKIP: $mod absent"; exit 77; }
[ -d "$nm/@huggingface/transformers" ] && command -v node >/dev/null ||
  { echo "SKIP: @huggingface/transformers not installed in $nm (scripts/install-test-runtimes.sh)"; exit 77; }
export CTXPATCH_NODE_MODULES=$nm

for rel in llama3/llama-3-8b-instruct llama3/llama-3.2 qwen2/qwen2.5 qwen2/qwen3 gemma/gemma-2 gemma/gemma-3 \
  mistral-nemo command-r/command-r-plus deepseek/deepseek-v3; do
  name=${rel//\//_}; d=$work/$name
  mkdir -p "$d" && gzip -dc "$mod/$rel/tokenizer.json.gz" >"$d/tokenizer.json" &&
    cp "$mod/$rel/tokenizer_config.json" "$d/" || { bad "$rel: unpack"; continue; }
  node "$src/tests/tokenizer_tjs.mjs" "$d" "$mod/$rel/hf-goldens.jsonl" >"$d/tjs.jsonl" 2>"$d/err" ||
    { bad "$rel: transformers.js: $(tail -1 "$d/err")"; continue; }
  # the long mixed check text (llama.cpp's last test text), through the CLI
  "$py" - "$mod/$rel/hf-goldens.jsonl" "$d" <<'PY' || bad "$rel: pick text"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
i = max(range(len(rows)), key=lambda k: (not rows[k]["add_special_tokens"], len(rows[k]["text"])))
open(f"{sys.argv[2]}/long.txt", "w", encoding="utf-8").write(rows[i]["text"])
open(f"{sys.argv[2]}/long.row", "w").write(str(i))
PY
  "$bin" tokenize "$d" --text-file "$d/long.txt" --no-special >"$d/ours.txt" || bad "$rel: ctxpatch tokenize"
  "$py" - "$mod/$rel/hf-goldens.jsonl" "$d" "$rel" <<'PY' && ok || bad "$rel: transformers.js"
import json, sys, unicodedata
goldens, d, rel = sys.argv[1:]
rows = [json.loads(l) for l in open(goldens, encoding="utf-8")]
tjs = [json.loads(l)["ids"] for l in open(f"{d}/tjs.jsonl")]
assert len(tjs) == len(rows), (len(tjs), len(rows))
tok = json.load(open(f"{d}/tokenizer.json", encoding="utf-8"))
has_digits = '"Digits"' in json.dumps(tok.get("pre_tokenizer"))
same, unexplained = 0, []
for r, t in zip(rows, tjs):
    if t == r["ids"]:
        same += 1
        continue
    numeric = any(ord(c) > 127 and unicodedata.category(c).startswith("N") for c in r["text"])
    why = "non-ASCII numeric under Digits" if numeric and has_digits else None
    print(f"  {rel}: transformers.js differs on {r['case']} (add_special {r['add_special_tokens']}):"
          f" {r['text'][:40]!r}: {why or 'UNEXPLAINED'}")
    if not why:
        unexplained.append(r["case"])
i = int(open(f"{d}/long.row").read())
ours = [int(x) for x in open(f"{d}/ours.txt").read().strip().split(",") if x]
print(f"{rel}: transformers.js equals HF tokenizers on {same} / {len(rows)} rows; "
      f"ctxpatch tokenize equals transformers.js on the long text: {ours == tjs[i]}")
assert not unexplained, unexplained
assert ours == tjs[i] == rows[i]["ids"], (ours[:20], tjs[i][:20])
PY
done
finish
