// Runs a GGUF model in llama.cpp (node-llama-cpp's prebuilt CPU binding) and prints JSON:
//   {"greedy": [ids...], "logits": [[V floats] per prompt position], "tokenize": {text: [ids]}}
// argv: MODEL GENERATE_N PROMPT_IDS(comma) THREADS [TEXT_FILE]
// Greedy decoding is temperature 0 from the prompt; logits are llama.cpp's raw logits at every
// prompt position (generateNext.logits of controlledEvaluate). Texts (one per line of TEXT_FILE)
// are tokenized by llama.cpp without special tokens.
import fs from "node:fs";
import {getLlama} from "node-llama-cpp";

const [model_path, gen_n, prompt_arg, threads_arg, text_file] = process.argv.slice(2);
const prompt = prompt_arg.split(",").map(Number);
const threads = Number(threads_arg);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
const model = await llama.loadModel({modelPath: model_path});
const out = {greedy: [], logits: [], tokenize: {}};

// F32 K/V cache and no flash attention, so llama.cpp computes in float32 like the engine.
// LLAMACPP_CTX: another context size (llama.cpp's phi3 picks longrope's list by it).
const ctx_opts = {contextSize: Number(process.env.LLAMACPP_CTX ?? 512), threads, batchSize: 512, flashAttention: false,
                  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"};
let ctx = await model.createContext(ctx_opts);
let seq = ctx.getSequence();
const res = await seq.controlledEvaluate(prompt.map((t) => [t, {generateNext: {logits: true}}]));
for (let i = 0; i < prompt.length; i++) {
  const lg = res[i].next.logits; // Map<token, logit>
  const row = new Array(model.tokens.size ?? lg.size).fill(0);
  for (const [tok, v] of lg) row[tok] = v;
  out.logits.push(row);
}
await ctx.dispose();

ctx = await model.createContext(ctx_opts);
seq = ctx.getSequence();
for await (const tok of seq.evaluate(prompt, {temperature: 0})) {
  out.greedy.push(tok);
  if (out.greedy.length >= Number(gen_n)) break;
}
await ctx.dispose();

if (text_file) {
  for (const line of fs.readFileSync(text_file, "utf8").split("\n")) {
    if (line.length) out.tokenize[line] = Array.from(model.tokenize(line, false));
  }
}
process.stdout.write(JSON.stringify(out));
await model.dispose();
await llama.dispose();
