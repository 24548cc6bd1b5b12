// Runs a third-party decoder graph (not ctxpatch's layout) in onnxruntime-node, feeding what its
// inputs declare, and writes its first output for every position, so a test compares it with
// `ctxpatch forward` on the model recovered from the same graph (tests/test_onnx_recover.sh):
//
//   node ort_recover.mjs MODEL.onnx --ids 1,2,3 --out F [--mode pass|steps] [--threads T]
//
// Inputs: input_ids ([batch, seq]; int32 or int64 as declared), position_ids (0..n-1) and
// attention_mask (ones over past + current) when the graph has them, GroupQueryAttention's
// seqlens_k (total - 1) and total_sequence_length, every other input is a
// past cache (past_%d, past_key_values.%d.key/value) given empty: its symbolic batch dim 1, its
// other symbolic dims 0, in the declared float type.
// --mode pass   one run over all ids (the graph's sequence dim must be symbolic);
// --mode steps  one id per run, each run's present outputs fed back as the next run's past
//               (present_N -> past_N, present.N.key -> past_key_values.N.key).
// F: float32 LE [positions x width] of the first graph output (logits or, for a graph with no
// head, the last hidden state).
import {writeFileSync} from "node:fs";
import {load} from "../runtimes/load.mjs";

const ort = await load("onnxruntime-node");

function fail(msg) {
  console.error(`ort_recover: ${msg}`);
  process.exit(2);
}

const a = {model: null, ids: null, out: null, mode: "pass", threads: 2};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const k = argv[i], v = argv[i + 1];
  if (k === "--ids") a.ids = v.split(",").map((t) => (/^\d+$/.test(t) ? Number(t) : fail(`bad id '${t}'`))), i++;
  else if (k === "--out") a.out = v, i++;
  else if (k === "--mode") a.mode = v, i++;
  else if (k === "--threads") a.threads = Number(v), i++;
  else if (!k.startsWith("--") && !a.model) a.model = k;
  else fail(`unknown argument '${k}'`);
}
if (!a.model || !a.ids || !a.out || !["pass", "steps"].includes(a.mode))
  fail("usage: ort_recover.mjs MODEL.onnx --ids 1,2,3 --out F [--mode pass|steps]");

const session = await ort.InferenceSession.create(a.model, {intraOpNumThreads: a.threads, graphOptimizationLevel: "all", logSeverityLevel: 3});
const meta = Object.fromEntries(session.inputMetadata.map((m) => [m.name, m]));
const intTensor = (name, arr, dims) => {
  const t = meta[name].type;
  return t === "int32" ? new ort.Tensor("int32", Int32Array.from(arr), dims)
                       : new ort.Tensor("int64", BigInt64Array.from(arr, BigInt), dims);
};
const emptyPast = (m) => {
  const dims = m.shape.map((d) => (typeof d === "number" ? d : /batch/.test(d) ? 1 : 0));
  if (m.type === "float16") return new ort.Tensor("float16", new Uint16Array(0), dims);
  return new ort.Tensor("float32", new Float32Array(0), dims);
};
const pastOf = (present) => present.replace(/^present_/, "past_").replace(/^present\./, "past_key_values.");

async function run(ids, start, past) {
  const feeds = {};
  for (const m of session.inputMetadata) {
    if (m.name === "input_ids") feeds[m.name] = intTensor(m.name, ids, [1, ids.length]);
    else if (m.name === "position_ids") feeds[m.name] = intTensor(m.name, ids.map((_, i) => start + i), [1, ids.length]);
    else if (m.name === "seqlens_k") feeds[m.name] = new ort.Tensor("int32", Int32Array.from([start + ids.length - 1]), [1]);
    else if (m.name === "total_sequence_length") feeds[m.name] = new ort.Tensor("int32", Int32Array.from([start + ids.length]), []);
    else if (m.name === "attention_mask") feeds[m.name] = intTensor(m.name, new Array(start + ids.length).fill(1), [1, start + ids.length]);
    else feeds[m.name] = past[m.name] ?? emptyPast(m);
  }
  const res = await session.run(feeds);
  const next = {};
  for (const name of session.outputNames.slice(1)) next[pastOf(name)] = res[name];
  const y = res[session.outputNames[0]];
  return {y, next};
}

const toF32 = (t) => (t.type === "float16" ? Float32Array.from(t.data, (h) => {
  const s = h >> 15 ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
  return e === 0 ? s * f * 2 ** -24 : e === 31 ? (f ? NaN : s * Infinity) : s * (1 + f / 1024) * 2 ** (e - 15);
}) : Float32Array.from(t.data));

const rows = [];
if (a.mode === "pass") {
  const {y} = await run(a.ids, 0, {});
  rows.push(toF32(y));
} else {
  let past = {};
  for (let i = 0; i < a.ids.length; i++) {
    const {y, next} = await run([a.ids[i]], i, past);
    rows.push(toF32(y));
    past = next;
  }
}
const n = rows.reduce((s, r) => s + r.length, 0), all = new Float32Array(n);
let at = 0;
for (const r of rows) all.set(r, at), at += r.length;
writeFileSync(a.out, Buffer.from(all.buffer));
console.log(`ort_recover: ${a.ids.length} positions x ${n / a.ids.length} (${session.outputNames[0]}, ${a.mode})`);
