// llama.cpp (node-llama-cpp, CPU) side of bench/bench_bigw.sh: loads MODEL (GGUF), evaluates the
// prompt in one batch and decodes NEW tokens greedily (F32 K/V cache, no flash attention, as
// bench/gguf_prefill.mjs). Prints {"prompt", "new", "prefill_s", "decode_s", "tokens"}: prefill_s
// is the time to the first token (the prompt pass and the first greedy step), decode_s the
// NEW - 1 steps after it; loading is excluded.
// argv: MODEL THREADS IDS_FILE NEW
import {readFileSync} from "node:fs";
import {getLlama} from "node-llama-cpp";

const [model_path, threads_arg, ids_path, new_arg] = process.argv.slice(2);
const threads = Number(threads_arg), n_new = Number(new_arg);
const ids = readFileSync(ids_path, "utf8").split(/[\s,]+/).filter((s) => s.length).map(Number);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
const model = await llama.loadModel({modelPath: model_path});
const ctx = await model.createContext({contextSize: ids.length + n_new + 16, batchSize: ids.length, threads,
                                       flashAttention: false, experimentalKvCacheKeyType: "F32",
                                       experimentalKvCacheValueType: "F32"});
const seq = ctx.getSequence();
const tokens = [];
const t0 = performance.now();
let t1 = t0;
for await (const tok of seq.evaluate(ids, {temperature: 0})) {
  if (tokens.length === 0) t1 = performance.now();
  tokens.push(tok);
  if (tokens.length >= n_new) break;
}
const t2 = performance.now();
process.stdout.write(JSON.stringify({prompt: ids.length, new: n_new, prefill_s: (t1 - t0) / 1000,
                                     decode_s: (t2 - t1) / 1000, tokens}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
