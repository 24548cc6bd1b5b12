#!/usr/bin/env python3
"""Builds a Llama-2-style Hugging Face tokenizer.json from a SentencePiece BPE .model.

Stdlib only (the ModelProto is read from its protobuf wire format). It reproduces what
transformers' LlamaConverter (legacy) writes: BPE with byte_fallback and fuse_unk, merges from
SentencePieceExtractor (pairs of pieces whose concatenation is a piece, ordered by the merged
piece's score), normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, decoder
Replace/ByteFallback/Fuse/Strip, post-processor "<s> $A".

    python3 spm_to_llama_json.py tokenizer.model out/tokenizer.json

Checked once with the npm package `tokenizers` 0.23.2 (native binding of HF's Rust crate): the
output re-encodes every row of ../shared/fixtures/tokenizers/goldens/llama2.jsonl to the
golden ids (51/51), so tests may use it as a genuine Llama-2 tokenizer.json.
"""
import json
import struct
import sys


def varint(buf, pos):
    shift = value = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def fields(buf):
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = varint(buf, pos)
        elif wt == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wt == 2:
            n, pos = varint(buf, pos)
            val, pos = buf[pos:pos + n], pos + n
        elif wt == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wt}")
        yield num, wt, val


def pieces(model):
    out = []
    for num, wt, val in fields(model):
        if num == 1 and wt == 2:
            piece, score, typ = "", 0.0, 1
            for n2, w2, v2 in fields(val):
                if n2 == 1:
                    piece = v2.decode("utf-8")
                elif n2 == 2 and w2 == 5:
                    score = struct.unpack("<f", v2)[0]
                elif n2 == 3:
                    typ = v2
            out.append((piece, score, typ))
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, "rb") as f:
        ps = pieces(f.read())
    vocab = {p: i for i, (p, _, _) in enumerate(ps)}
    merges = []
    for merge, _, _ in ps:  # vocab_scores in id order, as the converter iterates them
        score = ps[vocab[merge]][1]
        local = []
        for k in range(1, len(merge)):
            left, right = merge[:k], merge[k:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)  # stable, as Python's sorted
    special = [(i, p) for i, (p, _, t) in enumerate(ps) if t in (2, 3)]  # UNKNOWN, CONTROL
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, p in special],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b, _ in merges]},
    }
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
