// Runs an exported ONNX folder (the layout `ctxpatch convert --to onnx` writes) in onnxruntime-node
// and writes what `ctxpatch forward` writes, so a test compares the two:
//
//   node ort_run.mjs FOLDER --ids 1,2,3 [--decoder-ids 0,5] [--out F] [--split N [--split-out F2]]
//                   [--generate N]
//   node ort_run.mjs FOLDER --bench --lengths 64,256 [--repeat R]
//   node ort_run.mjs --jobs FILE
//
// --out F       logits of every position (the decoder's for T5) as float32 LE [positions x vocab],
//               from one pass with an empty cache; with --split N the first N tokens go in as a
//               prefill and the rest one token per step through the cache (same array);
//               --split-out F2 writes that one to F2 instead and --out keeps the one pass, so one
//               process gives both.
// --generate N  greedy-decodes N tokens with the cache, printed comma-separated on stdout (as
//               `ctxpatch forward --generate`): decoder-only continues --ids; T5 encodes --ids once
//               and decodes from --decoder-ids (default config.json's decoder_start_token_id).
// --bench       prefill tokens/s of one pass at each length (ids i*7+3 mod vocab; T5: the encoder
//               pass plus the decoder's first step), best of R after a warm-up.
// --threads T   onnxruntime intra-op threads (default 2).
// --generate-out F  writes the --generate tokens to F instead of stdout.
// --jobs FILE   runs each non-empty line of FILE (the arguments of one run, split at spaces) in this
//               one process, so a test of many graphs pays node's and onnxruntime's start once; a
//               failing job prints `ort_run: job N: ...` and the others still run (exit 2 at the end).
// Decoder-only: onnx/model.onnx (input_ids, attention_mask, position_ids,
// past_key_values.{i}.key/value [b, Hkv, past, dh] -> logits, present.{i}.key/value).
// T5: onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx (Optimum's merged layout:
// use_cache_branch false on the first step with an empty past, true afterwards).
// Layer and head counts come from the graphs' inputs, not from config.json.
import {existsSync, readFileSync, renameSync, rmSync, writeFileSync} from "node:fs";
import {join} from "node:path";
import {load} from "../runtimes/load.mjs";

const ort = await load("onnxruntime-node");

class RunError extends Error {}

function fail(msg) {
  throw new RunError(msg);
}

function parseArgs(argv) {
  const a = {folder: null, ids: null, decoderIds: null, out: null, splitOut: null, split: 0, generate: 0, bench: false,
             lengths: [64], repeat: 3, threads: 2, generateOut: null};
  const list = (s) => s.split(",").filter((t) => t !== "").map((t) => {
    if (!/^\d+$/.test(t)) fail(`not a token id: '${t}'`);
    return Number(t);
  });
  const int = (s, name) => {
    if (!/^\d+$/.test(s ?? "")) fail(`${name} wants a non-negative integer, got '${s}'`);
    return Number(s);
  };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i], v = argv[i + 1];
    if (k === "--ids") a.ids = list(v), i++;
    else if (k === "--decoder-ids") a.decoderIds = list(v), i++;
    else if (k === "--out") a.out = v, i++;
    else if (k === "--split") a.split = int(v, k), i++;
    else if (k === "--split-out") a.splitOut = v, i++;
    else if (k === "--generate") a.generate = int(v, k), i++;
    else if (k === "--generate-out") a.generateOut = v, i++;
    else if (k === "--bench") a.bench = true;
    else if (k === "--lengths") a.lengths = list(v), i++;
    else if (k === "--repeat") a.repeat = Math.max(1, int(v, k)), i++;
    else if (k === "--threads") a.threads = Math.max(1, int(v, k)), i++;
    else if (!k.startsWith("--") && a.folder === null) a.folder = k;
    else fail(`unknown argument '${k}'`);
  }
  if (!a.folder) fail("usage: ort_run.mjs FOLDER --ids 1,2,3 [--decoder-ids ..] [--out F] [--split N] [--generate N] | --bench --lengths L,..");
  if (!a.bench && (!a.ids || !a.ids.length)) fail("--ids is required");
  if (!a.bench && !a.out && !a.generate) fail("give --out, --generate or --bench");
  if (a.splitOut && !a.split) fail("--split-out needs --split N");
  return a;
}

const i64 = (arr, dims) => new ort.Tensor("int64", BigInt64Array.from(arr, BigInt), dims);
const range = (from, n) => Array.from({length: n}, (_, i) => from + i);

// past_key_values.* inputs: name -> [heads, head_dim] from the graph's declared shape
function pastSpecs(session, pattern) {
  const specs = [];
  for (const m of session.inputMetadata) {
    const hit = m.name.match(pattern);
    if (!hit) continue;
    const dims = m.shape;
    if (!Array.isArray(dims) || dims.length !== 4 || typeof dims[1] !== "number" || typeof dims[3] !== "number")
      fail(`input ${m.name}: shape ${JSON.stringify(dims)} is not [batch, heads, past, head_dim] with fixed heads and head_dim`);
    specs.push({name: m.name, layer: Number(hit[1]), heads: dims[1], headDim: dims[3]});
  }
  if (!specs.length) fail(`no inputs matching ${pattern} in the graph`);
  return specs;
}

function emptyPast(specs) {
  const past = {};
  for (const s of specs) past[s.name] = new ort.Tensor("float32", new Float32Array(0), [1, s.heads, 0, s.headDim]);
  return past;
}

// present.X -> past_key_values.X for the next step
function nextPast(result, specs) {
  const past = {};
  for (const s of specs) {
    const p = result[s.name.replace(/^past_key_values\./, "present.")];
    if (!p) fail(`graph has no output for ${s.name.replace(/^past_key_values\./, "present.")}`);
    past[s.name] = p;
  }
  return past;
}

async function openSession(path, threads) {
  if (!existsSync(path)) fail(`${path}: no such file`);
  return ort.InferenceSession.create(path, {intraOpNumThreads: threads, interOpNumThreads: 1,
                                            executionMode: "sequential", graphOptimizationLevel: "all"});
}

// One model behind step(ids) -> {logits: Float32Array [s x V], vocab}, keeping its own cache.
// T5: encode(ids) runs the encoder once before the decoder steps.
async function openModel(folder, threads) {
  const dir = join(folder, "onnx");
  const config = existsSync(join(folder, "config.json")) ? JSON.parse(readFileSync(join(folder, "config.json"), "utf8")) : {};
  if (existsSync(join(dir, "model.onnx"))) {
    const s = await openSession(join(dir, "model.onnx"), threads);
    const specs = pastSpecs(s, /^past_key_values\.(\d+)\.(key|value)$/);
    const has = new Set(s.inputNames);
    return {
      kind: "decoder", config, startIds: null,
      reset() { this.past = emptyPast(specs); this.len = 0; },
      async step(ids) {
        const feeds = {input_ids: i64(ids, [1, ids.length]), ...this.past};
        if (has.has("attention_mask")) feeds.attention_mask = i64(new Array(this.len + ids.length).fill(1), [1, this.len + ids.length]);
        if (has.has("position_ids")) feeds.position_ids = i64(range(this.len, ids.length), [1, ids.length]);
        const r = await s.run(feeds);
        this.past = nextPast(r, specs);
        this.len += ids.length;
        return {logits: r.logits.data, vocab: r.logits.dims[2]};
      },
      release() { return s.release(); },
    };
  }
  if (existsSync(join(dir, "encoder_model.onnx")) && existsSync(join(dir, "decoder_model_merged.onnx"))) {
    const enc = await openSession(join(dir, "encoder_model.onnx"), threads);
    const dec = await openSession(join(dir, "decoder_model_merged.onnx"), threads);
    const specs = pastSpecs(dec, /^past_key_values\.(\d+)\.(?:decoder|encoder)\.(key|value)$/);
    let mask = null, hidden = null;
    return {
      kind: "t5", config, startIds: [config.decoder_start_token_id ?? 0],
      async encode(ids) {
        mask = i64(new Array(ids.length).fill(1), [1, ids.length]);
        hidden = (await enc.run({input_ids: i64(ids, [1, ids.length]), attention_mask: mask})).last_hidden_state;
      },
      reset() { this.past = emptyPast(specs); this.len = 0; },
      async step(ids) {
        const feeds = {input_ids: i64(ids, [1, ids.length]), encoder_attention_mask: mask, encoder_hidden_states: hidden,
                       use_cache_branch: new ort.Tensor("bool", [this.len > 0], [1]), ...this.past};
        const r = await dec.run(feeds);
        this.past = nextPast(r, specs);
        this.len += ids.length;
        return {logits: r.logits.data, vocab: r.logits.dims[2]};
      },
      async release() { await enc.release(); await dec.release(); },
    };
  }
  fail(`${dir}: neither model.onnx nor encoder_model.onnx + decoder_model_merged.onnx`);
}

// logits of every position of `ids`: one pass (split 0) or a prefill of `split` then single steps
async function allLogits(model, ids, split) {
  model.reset();
  const chunks = split > 0 && split < ids.length ? [ids.slice(0, split), ...ids.slice(split).map((t) => [t])] : [ids];
  const parts = [];
  for (const c of chunks) parts.push((await model.step(c)).logits);
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) out.set(p, at), at += p.length;
  return out;
}

function argmaxLast(logits, vocab) {
  let best = 0;
  const base = logits.length - vocab;
  for (let v = 1; v < vocab; v++) if (logits[base + v] > logits[base + best]) best = v;
  return best;
}

async function generate(model, prompt, n) {
  model.reset();
  const out = [];
  let r = await model.step(prompt);
  for (let i = 0; i < n; i++) {
    out.push(argmaxLast(r.logits, r.vocab));
    if (i + 1 < n) r = await model.step([out[i]]);
  }
  return out;
}

function writeAtomic(path, data) {
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    writeFileSync(tmp, typeof data === "string" ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, {force: true});
    fail(`${path}: ${e.message}`);
  }
}

async function bench(a) {
  const config = existsSync(join(a.folder, "config.json")) ? JSON.parse(readFileSync(join(a.folder, "config.json"), "utf8")) : {};
  const vocab = config.vocab_size ?? 32;
  for (const len of a.lengths) {
    const ids = range(0, len).map((i) => (i * 7 + 3) % vocab);
    const model = await openModel(a.folder, a.threads);
    // T5: the prefill is the encoder pass plus the decoder's first step
    const prefill = async () => model.kind === "t5" ? (await model.encode(ids), allLogits(model, model.startIds, 0))
                                                    : allLogits(model, ids, 0);
    await prefill(); // warm-up
    let best = Infinity;
    for (let r = 0; r < a.repeat; r++) {
      const t0 = process.hrtime.bigint();
      await prefill();
      best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
    }
    await model.release();
    console.log(`bench len=${len} prefill_s=${best.toFixed(6)} tokens_per_s=${(len / best).toFixed(1)} threads=${a.threads}`);
  }
}

async function runOne(argv) {
  const a = parseArgs(argv);
  if (a.bench) return bench(a);
  const model = await openModel(a.folder, a.threads);
  try {
    if (model.kind === "t5") await model.encode(a.ids);
    const positions = model.kind === "t5" ? (a.decoderIds ?? model.startIds) : a.ids;
    if (a.out) writeAtomic(a.out, await allLogits(model, positions, a.splitOut ? 0 : a.split));
    if (a.splitOut) writeAtomic(a.splitOut, await allLogits(model, positions, a.split));
    if (a.generate) {
      const tokens = (await generate(model, positions, a.generate)).join(",");
      if (a.generateOut) writeAtomic(a.generateOut, tokens + "\n");
      else console.log(tokens);
    }
  } finally {
    await model.release();
  }
}

// An error of ours (RunError) is one line; anything else (onnxruntime's) keeps its message too.
const message = (e) => (e instanceof RunError ? e.message : `${e?.message ?? e}`.split("\n")[0]);

const argv = process.argv.slice(2);
if (argv[0] === "--jobs") {
  if (argv.length !== 2) {
    console.error("ort_run: usage: ort_run.mjs --jobs FILE");
    process.exit(2);
  }
  let failed = 0;
  const lines = readFileSync(argv[1], "utf8").split("\n").filter((l) => l.trim() !== "");
  for (const [n, line] of lines.entries()) {
    try {
      await runOne(line.trim().split(/\s+/));
    } catch (e) {
      console.error(`ort_run: job ${n + 1}: ${message(e)}`);
      failed++;
    }
  }
  process.exit(failed ? 2 : 0);
} else {
  try {
    await runOne(argv);
  } catch (e) {
    console.error(`ort_run: ${message(e)}`);
    process.exit(2);
  }
}
