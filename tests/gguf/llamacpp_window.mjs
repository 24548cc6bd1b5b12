// The token window of one `ctxpatch verify --probe ppl` run, cut independently of ctxpatch (shared
// by llamacpp_nll.mjs and llamacpp_shift_nll.mjs): the corpus split at <|endoftext|>, each document
// trimmed, tokenized by llama.cpp (no special tokens) after a BOS token, the window start drawn as
// verify/ppl.c documents it (splitmix64 of seed + length * 1000003 + w, modulo n_ids - length + 1).
import fs from "node:fs";

// window 0 of `L` tokens: {ids (the whole stream), start, win}
export function corpusWindow(model, corpus_path, L, seed) {
  const ids = [];
  const bos = model.tokens.bos;
  for (const doc of fs.readFileSync(corpus_path, "utf8").split("<|endoftext|>")) {
    const t = doc.replace(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/g, "");
    if (!t.length) continue;
    if (bos != null) ids.push(bos);
    for (const x of model.tokenize(t, false)) ids.push(x);
  }
  const M = (1n << 64n) - 1n;
  let s = (seed + BigInt(L) * 1000003n + 0n) & M; // window w = 0
  s = (s + 0x9e3779b97f4a7c15n) & M;
  let z = s;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M;
  z = z ^ (z >> 31n);
  const start = Number(z % BigInt(ids.length - L + 1));
  return {ids, start, win: ids.slice(start, start + L)};
}
