// The merged T5 decoder ignores its past inputs when use_cache_branch is false (the contract of
// Optimum's merged graphs; older Optimum fed a dummy past of length 1 on the first step): the
// first step with empty pasts and with pasts of one position of garbage must give the same
// logits and present.* (exactly). Prints the largest difference; exit 1 when it is not 0.
//
//   node t5_dummy_past.mjs FOLDER --ids 1,2,3 --decoder-ids 0,5
import {join} from "node:path";
import {load} from "../runtimes/load.mjs";

const ort = await load("onnxruntime-node");
const argv = process.argv.slice(2);
const list = (k) => argv[argv.indexOf(k) + 1].split(",").map(Number);
const dir = join(argv[0], "onnx"), ids = list("--ids"), dec = list("--decoder-ids");
const i64 = (a) => new ort.Tensor("int64", BigInt64Array.from(a, BigInt), [1, a.length]);
const enc = await ort.InferenceSession.create(join(dir, "encoder_model.onnx"));
const dm = await ort.InferenceSession.create(join(dir, "decoder_model_merged.onnx"));
const mask = i64(ids.map(() => 1));
const hidden = (await enc.run({input_ids: i64(ids), attention_mask: mask})).last_hidden_state;
async function first(pastLen) {
  const feeds = {input_ids: i64(dec), encoder_attention_mask: mask, encoder_hidden_states: hidden,
                 use_cache_branch: new ort.Tensor("bool", [false], [1])};
  for (const m of dm.inputMetadata) {
    if (!m.name.startsWith("past_key_values.")) continue;
    const dims = [1, m.shape[1], pastLen, m.shape[3]];
    feeds[m.name] = new ort.Tensor("float32", new Float32Array(dims.reduce((a, b) => a * b)).fill(7.5), dims);
  }
  return dm.run(feeds);
}
const a = await first(0), b = await first(1);
let worst = 0, n = 0;
for (const name of Object.keys(a)) {
  if (a[name].dims.join() !== b[name].dims.join()) {
    console.log(`${name}: shape ${a[name].dims} vs ${b[name].dims}`);
    process.exit(1);
  }
  for (let i = 0; i < a[name].data.length; i++) worst = Math.max(worst, Math.abs(a[name].data[i] - b[name].data[i]));
  n++;
}
console.log(`dummy past: ${n} outputs, max |empty - dummy| = ${worst}`);
process.exit(worst === 0 && n > 1 ? 0 : 1);
