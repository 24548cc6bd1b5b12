#!/usr/bin/env python3
"""Reference ids for SentencePiece .model files, made by SentencePiece itself.

Run with Debian's python3-sentencepiece:
    /usr/bin/python3 tests/goldens/tokenizers/make_spm_goldens.py ../shared/fixtures/tokenizers tests/goldens/tokenizers
Writes t5-spm.jsonl: every text of goldens/t5.jsonl encoded by t5/spiece.model with
sentencepiece (add_special_tokens=True appends EOS, as transformers' T5Tokenizer does).
The Hugging Face goldens differ from SentencePiece on one tie (SOURCES.md: "!!!!!!"); these
rows record what SentencePiece does, so the .model path is checked against its own library.
"""
import json
import sys

import sentencepiece as spm

fixtures, out_dir = sys.argv[1], sys.argv[2]
sp = spm.SentencePieceProcessor(model_file=f"{fixtures}/t5/spiece.model")
with open(f"{fixtures}/goldens/t5.jsonl", encoding="utf-8") as f, \
        open(f"{out_dir}/t5-spm.jsonl", "w", encoding="utf-8") as out:
    for line in f:
        row = json.loads(line)
        ids = sp.encode(row["text"])
        if row["add_special_tokens"]:
            ids = ids + [sp.eos_id()]
        out.write(json.dumps({"text": row["text"], "ids": ids, "add_special_tokens": row["add_special_tokens"],
                              "origin": f"sentencepiece {spm.__version__} on t5/spiece.model",
                              "case": row.get("case")}, ensure_ascii=True) + "\n")
