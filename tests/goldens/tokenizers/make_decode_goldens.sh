#!/usr/bin/env bash
# Reference decodings from Hugging Face's Rust tokenizers (npm package `tokenizers` 0.23.2):
# every golden id list of the fixture goldens decoded with skip_special_tokens false and true.
#   NODE_PATH=/path/to/node_modules bash make_decode_goldens.sh FIXTURES/tokenizers > decode.jsonl
# "llama2-tokenizer.json" is spm_to_llama_json.py's output for llama2/tokenizer.model.
set -euo pipefail
fx=$1; here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 "$here/spm_to_llama_json.py" "$fx/llama2/tokenizer.model" "$tmp/llama2-tokenizer.json"
node -e '
const {Tokenizer} = require("tokenizers"); const fs = require("fs");
const [fx, tmp] = process.argv.slice(1);
const cases = [["t5/tokenizer.json", `${fx}/t5/tokenizer.json`, "t5"], ["gpt2/tokenizer.json", `${fx}/gpt2/tokenizer.json`, "gpt2"],
               ["gpt-neox/tokenizer.json", `${fx}/gpt-neox/tokenizer.json`, "gpt-neox-20b"],
               ["llama2-tokenizer.json", `${tmp}/llama2-tokenizer.json`, "llama2"]];
(async () => {
  for (const [name, path, gold] of cases) {
    const tok = Tokenizer.fromFile(path);
    let i = 0;
    for (const line of fs.readFileSync(`${fx}/goldens/${gold}.jsonl`, "utf8").split("\n")) {
      if (!line.trim()) continue;
      const ids = JSON.parse(line).ids, skip = i++ % 2 === 0;
      console.log(JSON.stringify({tokenizer: name, ids, skip_special: skip, text: await tok.decode(ids, skip)}));
    }
  }
})();' "$fx" "$tmp"
