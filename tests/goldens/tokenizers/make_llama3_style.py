#!/usr/bin/env python3
"""Llama-3-style tokenizer.json from GPT-2's: same vocabulary and merges, but Llama-3's
pre-tokenizer (Split on its regex, Isolated, then ByteLevel without regex), ignore_merges, and a
"<|begin_of_text|> $A" post-processor with added special tokens. Stdlib only.

    python3 make_llama3_style.py ../shared/fixtures/tokenizers/gpt2/tokenizer.json out.json

gpt2-llama3-style.jsonl holds the ids Hugging Face's own Rust tokenizers (npm package
`tokenizers` 0.23.2, make_llama3_goldens.js) gives for that file on the texts of the gpt2 and
gpt-neox goldens, with and without special tokens.
"""
import json
import sys

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

src, dst = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    tok = json.load(f)
n = len(tok["model"]["vocab"])
tok["added_tokens"] = [
    {"id": n, "content": "<|begin_of_text|>", "single_word": False, "lstrip": False, "rstrip": False,
     "normalized": False, "special": True},
    {"id": n + 1, "content": "<|end_of_text|>", "single_word": False, "lstrip": False, "rstrip": False,
     "normalized": False, "special": True},
]
tok["normalizer"] = None
tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
tok["post_processor"] = {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [n], "tokens": ["<|begin_of_text|>"]}}}]}
tok["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
tok["model"]["ignore_merges"] = True
with open(dst, "w", encoding="utf-8") as f:
    json.dump(tok, f, ensure_ascii=False)
