// Tokenizes texts with llama.cpp (node-llama-cpp's prebuilt CPU binding), several models in one
// process (loading the binding is most of the cost). argv: JOB_JSON, a list of
//   {"model": GGUF path, "texts": [strings], "special": [bools]}
// Prints a JSON list, per job the ids of each text: model.tokenize(text, special[i]), which adds
// no BOS; special false tokenizes as llama.cpp's test-tokenizer-0 does (control tokens spelled in
// the text are plain text), true parses them as tokens (as HF matches added tokens).
import fs from "node:fs";
import {getLlama} from "node-llama-cpp";

const jobs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
const out = [];
for (const job of jobs) {
  const model = await llama.loadModel({modelPath: job.model, vocabOnly: true});
  out.push(job.texts.map((t, i) => Array.from(model.tokenize(t, job.special?.[i] ?? false))));
  await model.dispose();
}
process.stdout.write(JSON.stringify(out));
await llama.dispose();
