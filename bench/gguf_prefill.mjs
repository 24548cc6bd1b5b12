// llama.cpp prefill timing for bench/bench_gguf.sh: loads MODEL once, then for each prompt length
// evaluates that many token ids in one batch in a fresh context (F32 K/V cache, no flash attention,
// as tests/gguf/llamacpp_run.mjs) and prints {"L": seconds, ...} (best of REPEATS).
// argv: MODEL THREADS VOCAB REPEATS L1,L2,...
import {getLlama} from "node-llama-cpp";

const [model_path, threads_arg, vocab_arg, repeats_arg, lengths_arg] = process.argv.slice(2);
const threads = Number(threads_arg), vocab = Number(vocab_arg), repeats = Number(repeats_arg);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
const model = await llama.loadModel({modelPath: model_path});
const out = {};
let seed = 7;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
for (const L of lengths_arg.split(",").map(Number)) {
  const ids = Array.from({length: L}, (_, i) => (i === 0 ? 1 : 3 + Math.floor(rand() * (vocab - 3))));
  let best = Infinity;
  for (let r = 0; r < repeats; r++) {
    const ctx = await model.createContext({contextSize: L + 16, batchSize: L, threads, flashAttention: false,
                                           experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
    const seq = ctx.getSequence();
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(ids);
    best = Math.min(best, (performance.now() - t0) / 1000);
    await ctx.dispose();
  }
  out[L] = best;
}
process.stdout.write(JSON.stringify(out));
await model.dispose();
await llama.dispose();
