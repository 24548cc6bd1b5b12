// transformers.js (the test runtimes' @huggingface/transformers) encodes every text of a
// hf-goldens.jsonl with the tokenizer.json + tokenizer_config.json in a local folder, with and
// without add_special_tokens as the row says; prints one JSON line per row: {"i", "ids"}.
// Usage: node tokenizer_tjs.mjs FOLDER GOLDENS.jsonl  (helper of test_tokenizer_transformersjs.sh)
import {readFileSync} from "node:fs";
import {basename, dirname} from "node:path";
import {load} from "./runtimes/load.mjs";

const [dir, goldens] = process.argv.slice(2);
const {AutoTokenizer, env} = await load("@huggingface/transformers");
env.allowRemoteModels = false;
env.localModelPath = dirname(dir);
const tok = await AutoTokenizer.from_pretrained(basename(dir));
const rows = readFileSync(goldens, "utf8").split("\n").filter(l => l).map(l => JSON.parse(l));
rows.forEach((r, i) => {
  const ids = tok.encode(r.text, {add_special_tokens: r.add_special_tokens});
  process.stdout.write(JSON.stringify({i, ids: Array.from(ids, Number)}) + "\n");
});
