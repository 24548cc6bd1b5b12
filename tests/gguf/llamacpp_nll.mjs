// llama.cpp's NLL of one `ctxpatch verify --probe ppl` window, built independently of ctxpatch:
// the corpus split at <|endoftext|>, each document trimmed, tokenized by llama.cpp (node-llama-cpp,
// no special tokens) after a BOS token, the window start drawn as verify/ppl.c documents it
// (splitmix64 of seed + length * 1000003 + w, modulo n_ids - length + 1), then the mean NLL per
// token of tokens 1..length-1 from llama.cpp's logits (F32 K/V cache, no flash attention).
// argv: MODEL CORPUS LENGTH SEED THREADS   prints {"n_ids", "start", "nll"}
import {getLlama} from "node-llama-cpp";

import {corpusWindow} from "./llamacpp_window.mjs";

const [model_path, corpus_path, length_arg, seed_arg, threads_arg] = process.argv.slice(2);
const L = Number(length_arg), seed = BigInt(seed_arg), threads = Number(threads_arg);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
const model = await llama.loadModel({modelPath: model_path});

const {ids, start, win} = corpusWindow(model, corpus_path, L, seed);

const ctx = await model.createContext({contextSize: L, threads, batchSize: L, flashAttention: false,
                                       experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
const res = await ctx.getSequence().controlledEvaluate(win.map((t) => [t, {generateNext: {logits: true}}]));
let sum = 0;
for (let t = 1; t < L; t++) {
  const lg = res[t - 1].next.logits; // Map<token, logit>
  let mx = -Infinity;
  for (const v of lg.values()) mx = Math.max(mx, v);
  let zs = 0;
  for (const v of lg.values()) zs += Math.exp(v - mx);
  sum += mx + Math.log(zs) - lg.get(win[t]);
}
process.stdout.write(JSON.stringify({n_ids: ids.length, start, nll: sum / (L - 1)}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
