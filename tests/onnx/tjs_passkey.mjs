// Runs an exported ONNX folder in transformers.js (local files only, fp32, CPU) and
//   node tjs_passkey.mjs FOLDER --generate-ids 3,17,5 [--max-new-tokens N]
//       prints the greedy continuation (decoder-only) or decoder output after the start token (T5)
//       comma-separated, as `ctxpatch forward --generate N --stop-at-eos`;
//   node tjs_passkey.mjs FOLDER --passkey --lengths 512 --depths 0,0.5,1 --seed S [--samples K]
//                       [--max-new-tokens 10] --json OUT
//       builds the passkey prompts `ctxpatch verify --probe passkey` builds (the texts and
//       seeding of verify/probes.c and verify/verify_run.c, token counts from the folder's
//       tokenizer), generates the answers and writes {cells: [{length, depth, sample, answer,
//       ids, generated, text, correct}], accuracy: {LENGTH: fraction}}.
//       --prompts-only loads the tokenizer alone and writes the cells without generating.
// A folder transformers.js cannot load exits 3 with `tjs_passkey: cannot load: MESSAGE`.
import {writeFileSync} from "node:fs";
import {basename, dirname, resolve} from "node:path";
import {load} from "../runtimes/load.mjs";

const T = await load("@huggingface/transformers");

function fail(msg, code = 2) {
  console.error(`tjs_passkey: ${msg}`);
  process.exit(code);
}

function parseArgs(argv) {
  const a = {folder: null, generateIds: null, passkey: false, lengths: [], depths: [], seed: 0n, samples: 1,
             maxNew: 10, json: null, promptsOnly: false};
  const nums = (s) => (s ?? "").split(",").filter((t) => t !== "").map(Number);
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i], v = argv[i + 1];
    if (k === "--generate-ids") a.generateIds = nums(v), i++;
    else if (k === "--passkey") a.passkey = true;
    else if (k === "--prompts-only") a.promptsOnly = a.passkey = true;
    else if (k === "--lengths") a.lengths = nums(v), i++;
    else if (k === "--depths") a.depths = nums(v), i++;
    else if (k === "--seed") a.seed = BigInt(v), i++;
    else if (k === "--samples") a.samples = Number(v), i++;
    else if (k === "--max-new-tokens") a.maxNew = Number(v), i++;
    else if (k === "--json") a.json = v, i++;
    else if (!k.startsWith("--") && !a.folder) a.folder = k;
    else fail(`unknown argument '${k}'`);
  }
  const bad = (xs) => !xs.length || xs.some((x) => !Number.isFinite(x) || x < 0);
  if (!a.folder || (!a.generateIds && !a.passkey)) fail("usage: tjs_passkey.mjs FOLDER (--generate-ids IDS | --passkey --lengths L --depths D --seed S --json OUT)");
  if (a.generateIds && bad(a.generateIds)) fail("--generate-ids wants comma-separated ids");
  if (a.passkey && (bad(a.lengths) || bad(a.depths) || a.depths.some((d) => d > 1) || !a.json))
    fail("--passkey wants --lengths, --depths in [0, 1] and --json");
  return a;
}

// ---- the probe texts and seeding of verify/probes.c and verify/verify_run.c (passkey only)
const TASK = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you " +
  "about the important information there.";
const FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const keyLine = (k) => ` The pass key is ${k}. Remember it. ${k} is the pass key.`;
const QUESTION = " What is the pass key? The pass key is";
const ANSWER_ROOM = 8;
const PASSKEY_PROBE = 0n; // cp_probe_kind of passkey
const M64 = (1n << 64n) - 1n;

function nextU64(state) { // splitmix64
  state.s = (state.s + 0x9e3779b97f4a7c15n) & M64;
  let z = state.s;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}

function sampleSeed(seed, probe, length, depth, sample) {
  let h = seed ^ 0x243f6a8885a308d3n;
  for (const p of [probe, BigInt(length), BigInt(depth), BigInt(sample)]) {
    h ^= (p + 0x9e3779b97f4a7c15n + ((h << 6n) & M64) + (h >> 2n)) & M64;
    h = (h * 0xff51afd7ed558ccdn) & M64;
    h ^= h >> 33n;
  }
  return h;
}

function passkeyPrompt(tok, nTokens, depth, seed) {
  const state = {s: seed};
  const key = 1n + nextU64(state) % 50000n;
  const count = (s) => tok.encode(s, {add_special_tokens: false}).length;
  const line = keyLine(key);
  const budget = nTokens - ANSWER_ROOM, nFixed = count(TASK + line + QUESTION), per = count(FILLER);
  if (budget < nFixed || per <= 0) fail(`length ${nTokens} cannot hold the passkey prompt's ${nFixed} fixed tokens`);
  const n = Math.trunc((budget - nFixed) / per);
  const at = Math.min(n, Math.round(depth * n)); // llround of a non-negative value
  return {text: TASK + FILLER.repeat(at) + line + FILLER.repeat(n - at) + QUESTION, answer: key};
}

function correct(text, answer) { // the first integer in the text (cp_probe_correct for passkey)
  const m = text.match(/\d+/);
  return m !== null && BigInt(m[0].slice(0, 13)) === answer;
}

// ---- transformers.js
async function open(folder, tokenizerOnly) {
  T.env.allowRemoteModels = false;
  T.env.allowLocalModels = true;
  T.env.localModelPath = dirname(resolve(folder)) + "/";
  const name = basename(resolve(folder));
  try {
    const tok = await T.AutoTokenizer.from_pretrained(name);
    if (tokenizerOnly) return {tok};
    const config = await T.AutoConfig.from_pretrained(name);
    const seq2seq = Boolean(config.is_encoder_decoder);
    const Model = seq2seq ? T.AutoModelForSeq2SeqLM : T.AutoModelForCausalLM;
    const model = await Model.from_pretrained(name, {dtype: "fp32", device: "cpu"});
    return {tok, model, seq2seq};
  } catch (e) {
    fail(`cannot load: ${String(e?.message ?? e).split("\n")[0]}`, 3);
  }
}

async function generate(m, ids, maxNew) {
  const input = new T.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]);
  const mask = new T.Tensor("int64", new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
  const out = await m.model.generate({input_ids: input, attention_mask: mask, max_new_tokens: maxNew, do_sample: false});
  const all = Array.from(out.data, Number);
  return all.slice(m.seq2seq ? 1 : ids.length); // T5: after the decoder start token
}

const a = parseArgs(process.argv.slice(2));
const m = await open(a.folder, a.promptsOnly);
if (a.generateIds) {
  console.log((await generate(m, a.generateIds, a.maxNew)).join(","));
} else {
  const cells = [], accuracy = {};
  for (const length of a.lengths) {
    let ok = 0;
    for (let d = 0; d < a.depths.length; d++)
      for (let k = 0; k < a.samples; k++) {
        const p = passkeyPrompt(m.tok, length, a.depths[d], sampleSeed(a.seed, PASSKEY_PROBE, length, d, k));
        const ids = m.tok.encode(p.text);
        const generated = a.promptsOnly ? [] : await generate(m, ids, a.maxNew);
        const text = generated.length ? m.tok.decode(generated, {skip_special_tokens: true}) : "";
        const c = !a.promptsOnly && correct(text, p.answer);
        ok += c;
        cells.push({length, depth: a.depths[d], sample: k, answer: Number(p.answer), prompt: p.text, ids, generated, text,
                    correct: c});
      }
    accuracy[length] = ok / (a.depths.length * a.samples);
  }
  writeFileSync(a.json, JSON.stringify({transformers_js: T.env.version, cells, accuracy}, null, 1) + "\n");
  for (const [l, acc] of Object.entries(accuracy)) console.log(`passkey length ${l}: accuracy ${acc}`);
}
