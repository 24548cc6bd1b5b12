#!/usr/bin/env bash
# Reference ids for the probe models' tokenizer (examples/probe-models/tokenizer.json) from
# Hugging Face's Rust tokenizers (npm package `tokenizers`, 0.23.2 when these were made):
#   NODE_PATH=/path/to/node_modules bash make_probe_goldens.sh > probe.jsonl
# Texts: prompts + answers of the three probe kinds (python/ctxpatch_ref/data.py), two
# lengths each, plus a few edge strings.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); root=$here/../../..; pm=$root/examples/probe-models
texts=$(mktemp); trap 'rm -f "$texts"' EXIT
for kind in passkey lines copy; do
  for len in 256 4096; do
    "$root/scripts/py" -m ctxpatch_ref.data --kind $kind --len $len --seed 7 --n 1 --tokenizer "$pm/tokenizer.json" |
      /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(json.dumps(d["prompt"] + d["answer"]))'
  done
done >"$texts"
printf '%s\n' '"<s>The pass key is 12345.</s>"' '""' '"  multiple   spaces\n\n and\ttabs "' >>"$texts"
node -e '
const {Tokenizer} = require("tokenizers"); const fs = require("fs");
(async () => {
  const tok = Tokenizer.fromFile(process.argv[1]);
  let i = 0;
  for (const line of fs.readFileSync(process.argv[2], "utf8").split("\n")) {
    if (!line) continue;
    const text = JSON.parse(line), add = i++ % 2 === 1;
    const enc = await tok.encode(text, null, {addSpecialTokens: add});
    console.log(JSON.stringify({text, ids: Array.from(enc.getIds()), add_special_tokens: add,
                                origin: "HF tokenizers (npm) on examples/probe-models/tokenizer.json"}));
  }
})();' "$pm/tokenizer.json" "$texts"
