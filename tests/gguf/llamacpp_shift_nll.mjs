// llama.cpp's NLL of one `ctxpatch verify --probe ppl` window (the window as llamacpp_nll.mjs
// draws it) run past the context with llama.cpp's own context shift: a context of N_CTX cells,
// the window fed BATCH tokens at a time, and before a batch that would fill the cache
// (n_past + batch >= n_ctx, llama.cpp tools/main/main.cpp) the first KEEP tokens kept and the
// (n_past - KEEP) / 2 after them erased by eraseContextTokenRanges, which is llama.cpp removing
// those cells and shifting the later ones' positions (re-rotating their cached keys). Each
// token's logits come from the cache as it stood when its batch ran. F32 K/V cache, no flash
// attention. argv: MODEL CORPUS LENGTH SEED THREADS N_CTX KEEP BATCH
// prints {"n_ids", "start", "nll", "shifts"}
import {getLlama} from "node-llama-cpp";

import {corpusWindow} from "./llamacpp_window.mjs";

const args = process.argv.slice(2);
const [model_path, corpus_path] = args;
const [L, , threads, n_ctx, keep, batch] = args.slice(2).map(Number);
const seed = BigInt(args[3]);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
const model = await llama.loadModel({modelPath: model_path});

const {ids, start, win} = corpusWindow(model, corpus_path, L, seed);

const ctx = await model.createContext({contextSize: n_ctx, threads, batchSize: batch, flashAttention: false,
                                       experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
if (ctx.contextSize !== n_ctx) throw new Error(`context of ${ctx.contextSize} cells, asked ${n_ctx}`);
const seq = ctx.getSequence();
let sum = 0, shifts = 0;
for (let s0 = 0; s0 < L; s0 += batch) {
  const b = Math.min(batch, L - s0);
  const n_past = seq.nextTokenIndex;
  if (n_past + b >= n_ctx) {
    const discard = Math.floor((n_past - keep) / 2);
    await seq.eraseContextTokenRanges([{start: keep, end: keep + discard}]);
    if (seq.nextTokenIndex !== n_past - discard) throw new Error("eraseContextTokenRanges did not shift");
    shifts++;
  }
  const res = await seq.controlledEvaluate(win.slice(s0, s0 + b).map((t) => [t, {generateNext: {logits: true}}]));
  for (let r = 0; r < b; r++) {
    const t = s0 + r + 1;
    if (t >= L) break;
    const lg = res[r].next.logits; // Map<token, logit>
    let mx = -Infinity;
    for (const v of lg.values()) mx = Math.max(mx, v);
    let zs = 0;
    for (const v of lg.values()) zs += Math.exp(v - mx);
    sum += mx + Math.log(zs) - lg.get(win[t]);
  }
}
process.stdout.write(JSON.stringify({n_ids: ids.length, start, nll: sum / (L - 1), shifts}));
await ctx.dispose();
await model.dispose();
await llama.dispose();
