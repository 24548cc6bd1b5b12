"""Hostile tokenizer files (SentencePiece .model and tokenizer.json), each with the exact error
code `ctxpatch tokenize FILE --text-file text.txt` must exit with (CP_OK: it must succeed).

Stdlib only, deterministic. Used by make_corpus.py: make(outdir) -> [(file name, code name)].
Every case is a working tokenizer except for the one defect its name describes; the limit
cases come in pairs, at the limit (accepted) and one past it (refused). text.txt (35 'a's and a
'b', the input of the ReDoS finding) is the text every case is run on.
"""
import json
import os
import struct

# Limits of tokenizers/spm.h and tokenizers/pieces.h (keep in step).
SPM_MAX_PIECE_BYTES = 1024
SPM_MAX_PIECES = 1 << 19
SPM_MAX_SELFTEST_BYTES = 1 << 16
SPM_MAX_SELFTEST_SAMPLES = 1024
TK_GROWTH_FACTOR = 16
TK_GROWTH_SLACK = 1024

TEXT = "a" * 35 + "b"


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field_bytes(num, data):
    return varint(num << 3 | 2) + varint(len(data)) + data


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def spm_piece(text, score, ptype=1):
    """ModelProto.SentencePiece: 1 piece, 2 score (float), 3 type (1 normal, 2 unknown, 3 control)."""
    raw = text.encode() if isinstance(text, str) else text
    return field_bytes(1, raw) + varint(2 << 3 | 5) + struct.pack("<f", score) + field_varint(3, ptype)


def spm_model(extra_pieces=(), self_test=()):
    """A Unigram ModelProto: <unk> <s> </s>, the letters a b and U+2581, then extra_pieces;
    self_test: (input, expected) samples in ModelProto.self_test_data."""
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("a", -1.0, 1), ("b", -2.0, 1), ("\u2581", -3.0, 1)]
    body = b"".join(field_bytes(1, spm_piece(*p)) for p in pieces)
    body += b"".join(field_bytes(1, spm_piece(p, -5.0)) for p in extra_pieces)
    body += field_bytes(2, field_varint(3, 1))  # TrainerSpec.model_type = UNIGRAM
    if self_test:
        samples = b"".join(field_bytes(1, field_bytes(1, i.encode()) + field_bytes(2, e.encode())) for i, e in self_test)
        body += field_bytes(4, samples)
    return body


def many_pieces(n):
    """n distinct pieces: 'c' followed by the number in base 26 (letters c..z only: a and b are taken)."""
    out = []
    for i in range(n):
        s = ""
        while True:
            s = chr(ord("c") + i % 24) + s
            i //= 24
            if not i:
                break
        out.append("c" + s)
    return out


def hf(normalizer=None, pre_tokenizer=None, decoder=None, added=()):
    """A tokenizer.json: a Unigram model over a, b, U+2581 and the given stages."""
    return json.dumps({
        "added_tokens": list(added),
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "decoder": decoder,
        "model": {"type": "Unigram", "unk_id": 0,
                  "vocab": [["<unk>", 0], ["a", -1], ["b", -2], ["\u2581", -3]]},
    }).encode()


def seq(key, steps):
    return {"type": "Sequence", key: steps}


def write_case(outdir, cases, name, content, code):
    """Writes one case file and records the code it must get."""
    with open(os.path.join(outdir, name), "wb") as f:
        f.write(content)
    cases.append((name, code))


def make(outdir):
    cases = []
    add = lambda name, content, code: write_case(outdir, cases, name, content, code)  # noqa: E731
    with open(os.path.join(outdir, "text.txt"), "w") as f:
        f.write(TEXT)

    # 1. SentencePiece: what libsentencepiece recurses or allocates on is bounded first.
    add("spm_ok.model", spm_model(), "CP_OK")
    add("spm_piece_150000.model", spm_model(["a" * 150000]), "CP_ETOK_MODEL")  # the finding: SIGSEGV
    add("spm_piece_at_limit.model", spm_model(["c" * SPM_MAX_PIECE_BYTES]), "CP_OK")
    add("spm_piece_past_limit.model", spm_model(["c" * (SPM_MAX_PIECE_BYTES + 1)]), "CP_ETOK_MODEL")
    add("spm_pieces_at_limit.model", spm_model(many_pieces(SPM_MAX_PIECES - 6)), "CP_OK")
    add("spm_pieces_past_limit.model", spm_model(many_pieces(SPM_MAX_PIECES - 5)), "CP_ETOK_MODEL")
    add("spm_selftest_at_limit.model", spm_model(self_test=[("b" * SPM_MAX_SELFTEST_BYTES, " ".join(["\u2581"] + ["b"] * SPM_MAX_SELFTEST_BYTES))]), "CP_OK")
    add("spm_selftest_past_limit.model", spm_model(self_test=[("b" * (SPM_MAX_SELFTEST_BYTES + 1), "")]), "CP_ETOK_MODEL")
    sample = ("b", "\u2581 b")
    add("spm_samples_at_limit.model", spm_model(self_test=[sample] * SPM_MAX_SELFTEST_SAMPLES), "CP_OK")
    add("spm_samples_past_limit.model", spm_model(self_test=[sample] * (SPM_MAX_SELFTEST_SAMPLES + 1)), "CP_ETOK_MODEL")

    # 2. ReDoS: a catastrophic-backtracking regex on the 35 a's and b of text.txt (the finding
    # never returned); bounded by ICU's match time limit, refused with CP_ETOK_LIMIT.
    redos = {"Regex": "(a+)+$"}
    add("redos_split.json", hf(pre_tokenizer={"type": "Split", "pattern": redos, "behavior": "Isolated"}), "CP_ETOK_LIMIT")
    add("redos_split_in_sequence.json", hf(pre_tokenizer=seq("pretokenizers", [
        {"type": "WhitespaceSplit"}, {"type": "Split", "pattern": redos, "behavior": "Removed", "invert": True}])),
        "CP_ETOK_LIMIT")
    add("redos_replace.json", hf(normalizer={"type": "Replace", "pattern": redos, "content": "b"}), "CP_ETOK_LIMIT")
    add("regex_ok.json", hf(pre_tokenizer={"type": "Split", "pattern": {"Regex": "a+"}, "behavior": "Isolated"}), "CP_OK")

    # 3. Text growth: each step at most 16x its input + 1024 bytes and 16x the chain's input
    # + 1024 (36 bytes of text: 1600), so chained steps cannot compound.
    limit = TK_GROWTH_FACTOR * len(TEXT) + TK_GROWTH_SLACK
    a_to_aa = {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}
    add("grow_replace_chain_40.json", hf(normalizer=seq("normalizers", [a_to_aa] * 40)), "CP_ETOK_LIMIT")  # the finding
    regex_a = {"type": "Replace", "pattern": {"Regex": "a"}, "content": "aa"}
    add("grow_regex_replace_chain.json", hf(normalizer=seq("normalizers", [regex_a] * 40)), "CP_ETOK_LIMIT")
    b_to = lambda n: {"type": "Replace", "pattern": {"String": "b"}, "content": "a" * n}
    add("grow_replace_at_limit.json", hf(normalizer=b_to(limit - 35)), "CP_OK")
    add("grow_replace_past_limit.json", hf(normalizer=b_to(limit - 35 + 1)), "CP_ETOK_LIMIT")
    prepend = lambda n: seq("normalizers", [{"type": "NFC"}, {"type": "Prepend", "prepend": "a" * n}])
    add("grow_prepend_at_limit.json", hf(normalizer=prepend(limit - len(TEXT))), "CP_OK")
    add("grow_prepend_past_limit.json", hf(normalizer=prepend(limit - len(TEXT) + 1)), "CP_ETOK_LIMIT")
    bytelevel = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}
    add("grow_bytelevel_chain_64.json", hf(pre_tokenizer=seq("pretokenizers", [bytelevel] * 64)), "CP_ETOK_LIMIT")
    # Decoders: run with --decode (ids 1 = "a"): 40 chained Replace a -> aa.
    add("decode_grow_replace_chain_40.json", hf(decoder=seq("decoders", [
        {"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}] * 40)), "CP_ETOK_LIMIT")
    add("decode_replace_ok.json", hf(decoder={"type": "Replace", "pattern": {"String": "a"}, "content": "aa"}), "CP_OK")
    return cases
