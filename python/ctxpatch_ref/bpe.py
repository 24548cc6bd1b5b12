#!/usr/bin/env python3
"""Byte-level BPE for the probe models (stdlib only): learns merges from the training text and
writes a Hugging Face tokenizer.json (model "BPE", pre-tokenizer ByteLevel with
add_prefix_space false and the GPT-2 split regex, decoder ByteLevel), and encodes with it.

Digits are never merged (no merge has a digit on either side), so a 5-digit key is 5 tokens
after its own space token: the models copy keys digit by digit.

The training text is ASCII; the GPT-2 regex's \\p{L} / \\p{N} classes are written here as their
ASCII subsets, which split ASCII text identically. encode() refuses non-ASCII input.

Usage: scripts/py -m ctxpatch_ref.bpe --out tokenizer.json [--merges 300]
       scripts/py -m ctxpatch_ref.bpe --natural --merges 1000 --out v2/tokenizer.json   # the v2 models'
(--natural: the merges are learned on the synthetic corpus plus the training stories of
data.py, so natural text is not spelled out in bytes and single letters.)
"""
import argparse
import collections
import json
import os
import re

N_NATURAL = 2000                # synthetic samples beside the stories (v2): the names of lines become tokens
SPECIALS = ["<pad>", "</s>", "<s>"]       # ids 0, 1, 2 (T5 convention: pad 0, eos 1)
SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}
DIGITS = {B2U[b] for b in b"0123456789"}


def pretokenize(text):
    if not text.isascii():
        raise ValueError("probe tokenizer: non-ASCII text")
    return ["".join(B2U[b] for b in m.encode("ascii")) for m in SPLIT.findall(text)]


def learn(texts, n_merges):
    words = collections.Counter()
    for t in texts:
        words.update(pretokenize(t))
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, f in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                if a[-1] in DIGITS or b[0] in DIGITS or a[0] in DIGITS or b[-1] in DIGITS:
                    continue
                pairs[(a, b)] += f
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        for w in words:
            s = seqs[w]
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def tokenizer_json(merges):
    vocab = collections.OrderedDict()
    for s in SPECIALS:
        vocab[s] = len(vocab)
    for b in range(256):
        vocab[B2U[b]] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    bl = collections.OrderedDict([("type", "ByteLevel"), ("add_prefix_space", False),
                                  ("trim_offsets", True), ("use_regex", True)])
    return collections.OrderedDict([
        ("version", "1.0"), ("truncation", None), ("padding", None),
        ("added_tokens", [collections.OrderedDict([
            ("id", i), ("content", s), ("single_word", False), ("lstrip", False),
            ("rstrip", False), ("normalized", False), ("special", True)])
            for i, s in enumerate(SPECIALS)]),
        ("normalizer", None),
        ("pre_tokenizer", bl),
        ("post_processor", collections.OrderedDict([("type", "ByteLevel"), ("add_prefix_space", False),
                                                    ("trim_offsets", False), ("use_regex", True)])),
        ("decoder", bl),
        ("model", collections.OrderedDict([
            ("type", "BPE"), ("dropout", None), ("unk_token", None),
            ("continuing_subword_prefix", None), ("end_of_word_suffix", None),
            ("fuse_unk", False), ("byte_fallback", False), ("ignore_merges", False),
            ("vocab", vocab), ("merges", ["%s %s" % m for m in merges])])),
    ])


class Tokenizer:
    """Encoder/decoder over a tokenizer.json written by this script (or any byte-level BPE with
    "a b" merges and this pre-tokenizer)."""

    def __init__(self, path):
        with open(path) as f:
            j = json.load(f)
        m = j["model"]
        self.vocab = m["vocab"]
        self.inv = {v: k for k, v in self.vocab.items()}
        self.specials = {t["id"]: t["content"] for t in j["added_tokens"]}
        self.ranks = {tuple(s.split(" ")) if isinstance(s, str) else tuple(s): i
                      for i, s in enumerate(m["merges"])}
        self.cache = {}
        self.pad_id, self.eos_id, self.bos_id = 0, 1, 2

    def _bpe(self, word):
        s = list(word)
        while len(s) > 1:
            best, bi = None, -1
            for i in range(len(s) - 1):
                r = self.ranks.get((s[i], s[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            pair = (s[bi], s[bi + 1])
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == pair:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            s = out
        return [self.vocab[t] for t in s]

    def encode(self, text):
        ids = []
        for w in pretokenize(text):
            r = self.cache.get(w)
            if r is None:
                r = self.cache[w] = self._bpe(w)
            ids.extend(r)
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            if i in self.specials:
                continue
            out.extend(U2B[c] for c in self.inv[i])
        return out.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--merges", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--natural", action="store_true", help="learn on the training stories too (v2)")
    a = ap.parse_args()
    from ctxpatch_ref import data
    merges = learn(data.corpus(a.seed, n=N_NATURAL if a.natural else 400, natural=a.natural), a.merges)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(tokenizer_json(merges), f, indent=1, ensure_ascii=False)
        f.write("\n")
    t = Tokenizer(a.out)
    for s in data.corpus(a.seed + 1, 50):
        assert t.decode(t.encode(s)) == s
    print("wrote %s: %d tokens, %d merges" % (a.out, len(t.vocab), len(merges)))


if __name__ == "__main__":
    main()
