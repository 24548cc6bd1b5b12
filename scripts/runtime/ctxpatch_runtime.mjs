// The runtime side of ctxpatch's runtime check (docs/certificate.md, "Runtime check"): runs token
// prompts through the runtime an artifact ships to and prints its logits at the asked positions.
// ctxpatch spawns it (no shell) as
//
//   node ctxpatch_runtime.mjs NODE_MODULES llama.cpp|onnxruntime MODEL REQUEST
//
// NODE_MODULES  a node_modules folder holding node-llama-cpp + @node-llama-cpp/linux-x64 (llama.cpp)
//               or onnxruntime-node (onnxruntime); nothing is downloaded or built
// MODEL         the .gguf file, the ONNX artifact folder (onnx/model.onnx, decoder-only) or a
//               .onnx graph file (a third-party graph and its in-place rewrite)
// REQUEST       a JSON file {"threads": T, "vocab": V, "prompts": [{"ids": [...], "positions": [...]}]}
//
// Output on stdout: one JSON line {"runtime", "version", "vocab", "rows"} and then, after its
// newline, rows x vocab float32 little-endian: the logits of each prompt at each asked position,
// prompts in order, positions in order. Errors: one line on stderr, exit 2; a graph with no logits
// output: one line on stderr, exit 3.
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

// One pass over the whole prompt, feeding what the graph's inputs declare: input_ids (int32 or
// int64), attention_mask (ones), position_ids (0..n-1), GroupQueryAttention's seqlens_k and
// total_sequence_length, and any other input as an empty past cache (its symbolic batch dim 1, its
// other symbolic dims 0, in its declared float type).
function feedsFor(ort, s, ids) {
  const n = ids.length, feeds = {};
  const int = (m, a, dims) => (m.type === "int32" ? new ort.Tensor("int32", Int32Array.from(a), dims)
                                                  : new ort.Tensor("int64", BigInt64Array.from(a, BigInt), dims));
  for (const m of s.inputMetadata) {
    if (m.name === "input_ids") feeds[m.name] = int(m, ids, [1, n]);
    else if (m.name === "attention_mask") feeds[m.name] = int(m, new Array(n).fill(1), [1, n]);
    else if (m.name === "position_ids") feeds[m.name] = int(m, Array.from({length: n}, (_, i) => i), [1, n]);
    else if (m.name === "seqlens_k") feeds[m.name] = new ort.Tensor("int32", Int32Array.from([n - 1]), [1]);
    else if (m.name === "total_sequence_length") feeds[m.name] = new ort.Tensor("int32", Int32Array.from([n]), []);
    else {
      const dims = (m.shape ?? []).map((d) => (typeof d === "number" ? d : /batch/.test(d) ? 1 : 0));
      feeds[m.name] = m.type === "float16" ? new ort.Tensor("float16", new Uint16Array(0), dims)
                                           : new ort.Tensor("float32", new Float32Array(0), dims);
    }
  }
  return feeds;
}

const halfToFloat = (h) => {
  const sgn = h >> 15 ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
  return e === 0 ? sgn * f * 2 ** -24 : e === 31 ? (f ? NaN : sgn * Infinity) : sgn * (1 + f / 1024) * 2 ** (e - 15);
};

// MODEL: ctxpatch's ONNX folder (onnx/model.onnx), or a .onnx graph file (patch IN.onnx OUT.onnx
// compares onnxruntime on IN and on OUT themselves). A graph whose output ("logits", else its first)
// is not [1, n, vocab] gives no logits to compare: exit 3 with the reason (the check is "not checked").
async function onnxRuntime() {
  const ort = await load("onnxruntime-node");
  const file = model.endsWith(".onnx") ? model : join(model, "onnx", "model.onnx");
  const s = await ort.InferenceSession.create(file,
    {intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential", graphOptimizationLevel: "all"});
  const outName = s.outputNames.includes("logits") ? "logits" : s.outputNames[0];
  for (const p of req.prompts) {
    const n = p.ids.length;
    const r = await s.run(feedsFor(ort, s, p.ids));
    const t = r[outName], d = t.dims;
    if (d.length !== 3 || d[0] !== 1 || d[1] !== n || d[2] !== vocab) {
      process.stderr.write(`${file}: the graph's output '${outName}' is [${d.join(", ")}], not the logits [1, ${n}, ${vocab}]\n`);
      process.exit(model.endsWith(".onnx") ? 3 : 2); // ctxpatch's own export always has logits
    }
    const data = t.type === "float16" ? Float32Array.from(t.data, halfToFloat) : t.data;
    for (const i of p.positions) put((v) => data[i * vocab + v]);
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
