"""Helper of tests/test_gguf_vocab_modern.sh: the modern tokenizer fixtures
(../shared/fixtures/tokenizers/modern, SOURCES.md there) as tiny Llama folders, and llama.cpp's
ids on the GGUFs `convert --to gguf` wrote from them compared with the real tokenizers' ids.

  vocab_modern.py make OUT FIXTURES NAME...    a folder OUT/NAME per tokenizer, and OUT/job.json
  vocab_modern.py compare OUT FIXTURES NAME... reads OUT/ids.json (tests/gguf/llamacpp_tokenize.mjs)
  vocab_modern.py refusals OUT GPT2_JSON       folders of tokenizers llama.cpp cannot express
  vocab_modern.py pre GGUF                     prints its tokenizer.ggml.pre
  vocab_modern.py ours OUT FIXTURES NAME CTXPATCH   `ctxpatch tokenize` on OUT/NAME.gguf, 3 texts

Goldens: the llama.cpp `.inp` texts with their `.out` ids (HF AutoTokenizer's, made upstream) where
the family has them (llama-bpe, qwen2, command-r), the `llama.cpp-test-N` rows of hf-goldens.jsonl
(HF tokenizers on the tokenizer.json) where not, and every other add_special_tokens=false row of
hf-goldens.jsonl: the `extra-common-N` texts tokenized as llama.cpp's test-tokenizer-0 does
(special tokens spelled in the text are text), the `extra-<family>-N` chat texts with special-token
parsing on (HF matches added tokens in the text). Where llama.cpp itself differs from HF the text is
listed in DIFFERS with the reason, and the difference is asserted (a fix upstream shows here)."""
import gzip, json, os, struct, sys

import numpy as np

# name: (folder under FIXTURES, llama.cpp .inp/.out stem or None, model vocab_size, model, pre)
KINDS = {
    "llama-3.2": ("llama3/llama-3.2", "llama3/ggml-vocab-llama-bpe.gguf", 128256, "gpt2", "llama-bpe"),
    "llama-3-8b-instruct": ("llama3/llama-3-8b-instruct", "llama3/ggml-vocab-llama-bpe.gguf", 128256, "gpt2",
                            "llama-bpe"),
    "qwen3": ("qwen2/qwen3", "qwen2/ggml-vocab-qwen2.gguf", 151936, "gpt2", "qwen2"),
    "qwen2.5": ("qwen2/qwen2.5", "qwen2/ggml-vocab-qwen2.gguf", 151936, "gpt2", "qwen2"),
    "command-r-plus": ("command-r/command-r-plus", "command-r/ggml-vocab-command-r.gguf", 256000, "gpt2",
                       "starcoder"),
    "mistral-nemo": ("mistral-nemo", None, 131072, "gpt2", "tekken"),
    "deepseek-v3": ("deepseek/deepseek-v3", None, 129280, "gpt2", "deepseek-v3"),
    "gemma-2": ("gemma/gemma-2", None, 256000, "llama", None),
    "gemma-3": ("gemma/gemma-3", None, 262208, "llama", None),
}
NFD = "extra-common-18"  # "café" spelled with a combining acute
DIFFERS = {
    # llama.cpp applies no normalizer (llama-vocab.cpp); these tokenizer.json files have NFC, which
    # turns the NFD text into the precomposed one before BPE
    ("qwen3", NFD): "NFC", ("qwen2.5", NFD): "NFC", ("command-r-plus", NFD): "NFC",
    # tekken's letter classes hold \p{M}; llama.cpp's regex splits Devanagari and Thai words at
    # their combining marks (more, shorter tokens than HF)
    ("mistral-nemo", "extra-common-25"): "\\p{M}", ("mistral-nemo", "extra-common-26"): "\\p{M}",
}


def goldens(fx, name):
    folder, stem = KINDS[name][0], KINDS[name][1]
    rows = [json.loads(l) for l in open(f"{fx}/{folder}/hf-goldens.jsonl", encoding="utf-8")]
    rows = [r for r in rows if not r["add_special_tokens"]]
    out = []
    if stem:
        texts = open(f"{fx}/{stem}.inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
        ids = open(f"{fx}/{stem}.out", encoding="utf-8").read().split("\n")[:len(texts)]
        assert len(texts) == 46 == len(ids), (name, len(texts), len(ids))
        out += [(f"llama.cpp-test-{i}", t, [int(x) for x in l.split()], False) for i, (t, l) in enumerate(zip(texts, ids))]
        rows = [r for r in rows if not r["case"].startswith("llama.cpp-test")]
    return out + [(r["case"], r["text"], r["ids"], not r["case"].startswith(("llama.cpp-test", "extra-common")))
                  for r in rows]


def tiny_llama(d, V, tokenizer_json, ids):
    """A tiny Llama folder d holding tokenizer_json (bytes): a vocabulary-sized tied embedding and
    one layer of D 8 (tokenizing needs no more); ids: config.json's bos/eos/pad_token_id."""
    os.makedirs(d)
    D, F = 8, 16
    rng = np.random.default_rng(1)
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    for n, s in [("self_attn.q_proj", (D, D)), ("self_attn.k_proj", (D, D)), ("self_attn.v_proj", (D, D)),
                 ("self_attn.o_proj", (D, D)), ("mlp.gate_proj", (F, D)), ("mlp.up_proj", (F, D)),
                 ("mlp.down_proj", (D, F)), ("input_layernorm", (D,)), ("post_attention_layernorm", (D,))]:
        shapes["model.layers.0." + n + ".weight"] = s
    header, blobs, off = {}, [], 0
    for n, s in shapes.items():
        b = (rng.standard_normal(s) * 0.2).astype("<f2").tobytes()
        header[n] = {"dtype": "F16", "shape": list(s), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(f"{d}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    open(f"{d}/tokenizer.json", "wb").write(tokenizer_json)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
           "tie_word_embeddings": True, **ids}
    json.dump(cfg, open(f"{d}/config.json", "w"))


def make(out, fx, names):
    jobs = []
    for name in names:
        folder, _, V, _, _ = KINDS[name]
        tj = gzip.open(f"{fx}/{folder}/tokenizer.json.gz").read()
        added = {t["content"]: t["id"] for t in json.loads(tj)["added_tokens"]}
        tc = json.load(open(f"{fx}/{folder}/tokenizer_config.json", encoding="utf-8"))
        ids = {}
        for key in ("bos", "eos", "pad"):
            t = tc.get(f"{key}_token")
            t = t.get("content") if isinstance(t, dict) else t
            if t in added:
                ids[f"{key}_token_id"] = added[t]
        tiny_llama(f"{out}/{name}", V, tj, ids)
        rows = goldens(fx, name)
        jobs.append({"model": f"{out}/{name}.gguf", "texts": [r[1] for r in rows], "special": [r[3] for r in rows]})
    json.dump(jobs, open(f"{out}/job.json", "w"))


L3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def refusals(out, gpt2):
    """GPT-2's tokenizer.json cut to its 256 byte tokens (ids 0..255), with other pre-tokenizers,
    normalizers and model flags."""
    t = json.load(open(gpt2, encoding="utf-8"))
    t["model"]["vocab"] = {k: v for k, v in t["model"]["vocab"].items() if v < 256}
    t["model"]["merges"], t["added_tokens"] = [], []

    def seq(re):
        return {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}

    cases = {"unknown_pre": (seq("\\p{L}+|\\s+"), None, False, False),
             "smaug": (seq(L3), None, False, False),
             "qwen_ignore": (seq(L3.replace("{1,3}", "")), None, True, False),
             "spm_lower": (None, {"type": "Lowercase"}, False, True)}
    for name, (pre, norm, ignore, fallback) in cases.items():
        u = json.loads(json.dumps(t))
        u["pre_tokenizer"], u["normalizer"] = pre, norm
        u["model"]["ignore_merges"] = ignore
        u["model"]["byte_fallback"] = fallback
        tiny_llama(f"{out}/{name}", len(t["model"]["vocab"]), json.dumps(u).encode(), {})


def tokenizer_keys(path):
    """The scalar tokenizer.ggml.* keys of a GGUF ({key: value}), from its key/value section read
    as ggml's docs/gguf.md lays it out, skipping the arrays (gguf_py.read parses every array:
    seconds for these vocabularies)."""
    b = open(path, "rb").read()
    assert b[:4] == b"GGUF", path
    n_kv = struct.unpack_from("<Q", b, 16)[0]
    at, found = 24, {}
    fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def skip(t, at):
        if t == 8:
            return at + 8 + struct.unpack_from("<Q", b, at)[0]
        return at + struct.calcsize(fmt[t])

    for _ in range(n_kv):
        n = struct.unpack_from("<Q", b, at)[0]
        key = b[at + 8:at + 8 + n].decode()
        t = struct.unpack_from("<I", b, at + 8 + n)[0]
        at += 12 + n
        if t == 9:
            et, count = struct.unpack_from("<IQ", b, at)
            at += 12
            if et == 8:
                for _ in range(count):
                    at = skip(8, at)
            else:
                at += count * struct.calcsize(fmt[et])
            continue
        if key.startswith("tokenizer.ggml."):
            found[key] = b[at + 8:skip(8, at)].decode() if t == 8 else struct.unpack_from(fmt[t], b, at)[0]
        at = skip(t, at)
    return found


def compare(out, fx, names):
    got = json.load(open(f"{out}/ids.json"))
    assert len(got) == len(names)
    failed = 0
    for name, ids in zip(names, got):
        _, _, V, model, pre = KINDS[name]
        kv = tokenizer_keys(f"{out}/{name}.gguf")
        keys = (kv.get("tokenizer.ggml.model"), kv.get("tokenizer.ggml.pre"))
        if keys != (model, pre):
            failed += 1
            print(f"FAIL: {name}: tokenizer.ggml.model/pre {keys}, want {(model, pre)}")
        # add_bos_token / bos id against what HF's add_special_tokens=True adds in front of a text
        hf = {}
        for line in open(f"{fx}/{KINDS[name][0]}/hf-goldens.jsonl", encoding="utf-8"):
            r = json.loads(line)
            hf.setdefault(r["case"], {})[r["add_special_tokens"]] = r["ids"]
        plain, special = hf["llama.cpp-test-5"][False], hf["llama.cpp-test-5"][True]
        lead = special[:len(special) - len(plain)] if special[-len(plain):] == plain else special[:1]
        want_bos = (True, lead[0]) if lead else (False, kv.get("tokenizer.ggml.bos_token_id"))
        have_bos = (kv.get("tokenizer.ggml.add_bos_token"), kv.get("tokenizer.ggml.bos_token_id"))
        if have_bos != want_bos:
            failed += 1
            print(f"FAIL: {name}: add_bos_token / bos_token_id {have_bos}, HF adds {lead}")
        rows = goldens(fx, name)
        equal = differ = 0
        for (case, text, want, special), have in zip(rows, ids):
            why = DIFFERS.get((name, case))
            if (have == want) == (why is None):
                equal += why is None
                differ += why is not None
            else:
                failed += 1
                print(f"FAIL: {name} {case} ({'special parsed' if special else 'plain'}) {text[:40]!r}: "
                      f"llama.cpp {have[:16]}, HF {want[:16]}" + (f" (expected to differ: {why})" if why else ""))
        print(f"{name}: {model}/{pre}, add_bos {have_bos}: {equal} of {len(rows)} texts equal to the HF ids, "
              f"{differ} differ as stated")
    return failed


def ours(out, fx, name, ctxpatch):
    """`ctxpatch tokenize` (the GGUF reader, tokenizers/) on the GGUF of `name` for three of its
    texts (a tab, a character outside the BMP, the first .inp text): the HF ids. Gemma's
    tokenizer.json lacks the byte piece <0x09> (its tab is a piece), which SentencePiece's byte
    fallback needs (import/gguf/gguf_model.c adds it past the vocabulary)."""
    import subprocess
    rows = goldens(fx, name)
    pick = [next(r for r in rows if "\t" in r[1]), next(r for r in rows if any(ord(c) > 0xFFFF for c in r[1])), rows[0]]
    failed = 0
    for case, text, want, _ in pick:
        open(f"{out}/text.txt", "w", encoding="utf-8").write(text)
        res = subprocess.run([ctxpatch, "tokenize", f"{out}/{name}.gguf", "--text-file", f"{out}/text.txt",
                              "--no-special"], capture_output=True, text=True)
        have = [int(x) for x in res.stdout.strip().split(",") if x] if res.returncode == 0 else res.stderr.strip()
        if have != want:
            failed += 1
            print(f"FAIL: ctxpatch tokenize {name} {case} {text[:30]!r}: {str(have)[:200]}, HF {want[:16]}")
    print(f"{name}: ctxpatch tokenize on the GGUF equals HF on {len(pick) - failed} of {len(pick)} texts")
    return failed


if __name__ == "__main__":
    cmd, out, fx, names = sys.argv[1], sys.argv[2], sys.argv[3:4] and sys.argv[3], sys.argv[4:]
    if cmd == "make":
        make(out, fx, names)
    elif cmd == "refusals":
        refusals(out, fx)
    elif cmd == "ours":
        sys.exit(1 if ours(out, fx, names[0], names[1]) else 0)
    elif cmd == "pre":
        print(tokenizer_keys(out).get("tokenizer.ggml.pre"))
    else:
        sys.exit(1 if compare(out, fx, names) else 0)
