// The runtime side of ctxpatch's runtime check (docs/certificate.md, "Runtime check"): runs token
// prompts through the runtime an artifact ships to and prints its logits at the asked positions.
// ctxpatch spawns it (no shell) as
//
//   node ctxpatch_runtime.mjs NODE_MODULES llama.cpp|onnxruntime MODEL REQUEST
//
// NODE_MODULES  a node_modules folder holding node-llama-cpp + @node-llama-cpp/linux-x64 (llama.cpp)
//               or onnxruntime-node (onnxruntime); nothing is downloaded or built
// MODEL         the .gguf file, or the ONNX artifact folder (onnx/model.onnx, decoder-only)
// REQUEST       a JSON file {"threads": T, "vocab": V, "prompts": [{"ids": [...], "positions": [...]}]}
//
// Output on stdout: one JSON line {"runtime", "version", "vocab", "rows"} and then, after its
// newline, rows x vocab float32 little-endian: the logits of each prompt at each asked position,
// prompts in order, positions in order. Errors: one line on stderr, exit 2.
import {readFileSync} from "node:fs";
import {createRequire} from "node:module";
import {join, resolve} from "node:path";
import {pathToFileURL} from "node:url";

function fail(msg) {
  process.stderr.write(`${msg}\n`);
  process.exit(2);
}

const [modulesArg, kind, model, requestPath] = process.argv.slice(2);
if (!requestPath) fail("usage: ctxpatch_runtime.mjs NODE_MODULES llama.cpp|onnxruntime MODEL REQUEST");
const nodeModules = resolve(modulesArg); // createRequire wants an absolute path
const require = createRequire(join(nodeModules, "__resolve__.js"));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);
const version = (name) => JSON.parse(readFileSync(join(nodeModules, name, "package.json"), "utf8")).version;

let req;
try {
  req = JSON.parse(readFileSync(requestPath, "utf8"));
} catch (e) {
  fail(`${requestPath}: ${e.message}`);
}
const vocab = req.vocab, threads = Math.max(1, req.threads | 0);
const rows = req.prompts.reduce((n, p) => n + p.positions.length, 0);
const out = new Float32Array(rows * vocab);
let row = 0;

function put(get) { // get(v) -> logit v of the current row
  for (let v = 0; v < vocab; v++) out[row * vocab + v] = get(v);
  row++;
}

async function llamaCpp() {
  const {getLlama} = await load("node-llama-cpp");
  const llama = await getLlama({gpu: false, build: "never", logLevel: "error", progressLogs: false});
  const m = await llama.loadModel({modelPath: model});
  if (m.tokens.size !== undefined && m.tokens.size !== vocab) fail(`${model}: llama.cpp reads ${m.tokens.size} tokens, the engine ${vocab}`);
  for (const p of req.prompts) {
    // F32 K/V cache, no flash attention: llama.cpp computes in float32 like the engine.
    const ctx = await m.createContext({contextSize: p.ids.length + 1, threads, batchSize: Math.min(p.ids.length, 512),
                                       flashAttention: false, experimentalKvCacheKeyType: "F32",
                                       experimentalKvCacheValueType: "F32", ignoreMemorySafetyChecks: true});
    const want = new Set(p.positions);
    const res = await ctx.getSequence().controlledEvaluate(p.ids.map((t, i) => want.has(i) ? [t, {generateNext: {logits: true}}] : t));
    for (const i of p.positions) {
      const lg = res[i]?.next?.logits;
      if (!lg) fail(`${model}: llama.cpp returned no logits at position ${i}`);
      const dense = new Float32Array(vocab).fill(-Infinity);
      for (const [tok, v] of lg) if (tok < vocab) dense[tok] = v;
      put((v) => dense[v]);
    }
    await ctx.dispose();
  }
  const release = llama.llamaCppRelease?.release;
  await m.dispose();
  await llama.dispose();
  return `node-llama-cpp ${version("node-llama-cpp")}${release ? ` (llama.cpp ${release})` : ""}`;
}

async function onnxRuntime() {
  const ort = await load("onnxruntime-node");
  const s = await ort.InferenceSession.create(join(model, "onnx", "model.onnx"),
    {intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential", graphOptimizationLevel: "all"});
  const i64 = (a, dims) => new ort.Tensor("int64", BigInt64Array.from(a, BigInt), dims);
  const has = new Set(s.inputNames);
  for (const p of req.prompts) {
    const n = p.ids.length, feeds = {input_ids: i64(p.ids, [1, n])};
    for (const meta of s.inputMetadata) { // an empty cache: one pass over the whole prompt
      const hit = meta.name.match(/^past_key_values\.\d+\.(key|value)$/);
      if (hit) feeds[meta.name] = new ort.Tensor("float32", new Float32Array(0), [1, meta.shape[1], 0, meta.shape[3]]);
    }
    if (has.has("attention_mask")) feeds.attention_mask = i64(new Array(n).fill(1), [1, n]);
    if (has.has("position_ids")) feeds.position_ids = i64(Array.from({length: n}, (_, i) => i), [1, n]);
    const r = await s.run(feeds);
    const V = r.logits.dims[2];
    if (V !== vocab) fail(`${model}: onnxruntime gives ${V} logits per position, the engine ${vocab}`);
    for (const i of p.positions) put((v) => r.logits.data[i * V + v]);
  }
  await s.release();
  return `onnxruntime-node ${version("onnxruntime-node")}`;
}

let ver;
try {
  if (kind === "llama.cpp") ver = await llamaCpp();
  else if (kind === "onnxruntime") ver = await onnxRuntime();
  else fail(`unknown runtime '${kind}'`);
} catch (e) {
  fail(`${kind}: ${String(e.message ?? e).split("\n")[0]}`);
}
process.stdout.write(JSON.stringify({runtime: kind, version: ver, vocab, rows}) + "\n");
process.stdout.write(Buffer.from(out.buffer));
