// Greedy generation of an exported T5 folder (`ctxpatch convert --to onnx`) through
// transformers.js (@huggingface/transformers, loaded from the test runtimes' node_modules): the
// folder loads as T5ForConditionalGeneration from local files only (no network), the prompt is
// tokenized by transformers.js from the folder's tokenizer.json, and the generated token ids
// are printed as `ctxpatch forward --generate N --stop-at-eos` prints them, so a test compares.
//
//   node t5_tjs_generate.mjs FOLDER --prompt-file F [--max-new-tokens N]
// stdout: line 1 the prompt's ids (comma-separated), line 2 the generated ids, line 3 the text.
import {readFileSync} from "node:fs";
import {basename, dirname, resolve} from "node:path";
import {load} from "../runtimes/load.mjs";

const argv = process.argv.slice(2);
const arg = (k, d) => (argv.indexOf(k) >= 0 ? argv[argv.indexOf(k) + 1] : d);
const folder = resolve(argv[0] ?? ""), promptFile = arg("--prompt-file"), maxNew = Number(arg("--max-new-tokens", "10"));
if (!argv[0] || !promptFile || !(maxNew > 0)) {
  console.error("usage: t5_tjs_generate.mjs FOLDER --prompt-file F [--max-new-tokens N]");
  process.exit(2);
}
const tjs = await load("@huggingface/transformers");
tjs.env.allowRemoteModels = false;
tjs.env.allowLocalModels = true;
tjs.env.localModelPath = dirname(folder) + "/";
const tok = await tjs.AutoTokenizer.from_pretrained(basename(folder));
const model = await tjs.AutoModelForSeq2SeqLM.from_pretrained(basename(folder), {dtype: "fp32", device: "cpu"});
const inputs = tok(readFileSync(promptFile, "utf8"));
const out = await model.generate({...inputs, max_new_tokens: maxNew, do_sample: false, num_beams: 1});
// generate returns the decoder sequence: decoder_start_token_id first, then the new tokens
const ids = Array.from(out.tolist()[0], Number).slice(1);
console.log(Array.from(inputs.input_ids.tolist()[0], Number).join(","));
console.log(ids.join(","));
console.log(JSON.stringify(tok.decode(ids, {skip_special_tokens: true})));
await model.dispose();
