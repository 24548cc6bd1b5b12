// Runs one ONNX model file in onnxruntime-node on inputs given as raw little-endian files and
// writes every output as raw float32 (tests/test_onnx_rewrite.sh):
//
//   node ort_feed.mjs MODEL.onnx SPEC.json OUTDIR
//
// SPEC.json: {"inputs": {"NAME": {"type": "int64"|"int32"|"float32"|"float16", "dims": [...],
//             "file": "PATH"}}, "outputs": ["NAME", ...]}
// OUTDIR/NAME.bin: the output as float32 LE (float16 outputs converted), OUTDIR/NAME.json: dims.
import {readFileSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import {load} from "../runtimes/load.mjs";

const ort = await load("onnxruntime-node");
const [model, specPath, outDir] = process.argv.slice(2);
if (!outDir) {
  console.error("usage: ort_feed.mjs MODEL.onnx SPEC.json OUTDIR");
  process.exit(2);
}
const spec = JSON.parse(readFileSync(specPath, "utf8"));

function half(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * f * 2 ** -24;
  if (e === 31) return f ? NaN : s * Infinity;
  return s * (1 + f / 1024) * 2 ** (e - 15);
}

const feeds = {};
for (const [name, t] of Object.entries(spec.inputs)) {
  const buf = readFileSync(t.file);
  const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
  const arr = {int64: BigInt64Array, int32: Int32Array, float32: Float32Array, float16: Uint16Array}[t.type];
  if (!arr) throw new Error(`input ${name}: type ${t.type}`);
  feeds[name] = new ort.Tensor(t.type, new arr(ab), t.dims);
}
const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1, graphOptimizationLevel: "all", logSeverityLevel: 3});
const results = await session.run(feeds, spec.outputs);
for (const name of spec.outputs) {
  const r = results[name];
  let data = r.data;
  if (r.type === "float16") data = Float32Array.from(data instanceof Uint16Array ? data : new Uint16Array(data.buffer), half);
  else if (r.type !== "float32") throw new Error(`output ${name}: type ${r.type}`);
  const safe = name.replace(/[^A-Za-z0-9_.-]/g, "_");
  writeFileSync(join(outDir, `${safe}.bin`), Buffer.from(Float32Array.from(data).buffer));
  writeFileSync(join(outDir, `${safe}.json`), JSON.stringify(r.dims));
}
