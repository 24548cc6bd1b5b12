"""Hostile byte-level BPE tokenizer.json files beside a tiny Llama, each a folder with the exact
error code `ctxpatch convert DIR OUT.gguf --to gguf` must exit with (CP_OK: it must succeed and
its own GGUF reader must read the vocabulary back). The writer applies the reader's token bounds
(tokenizers/hf_vocab.c: non-empty, at most CP_BPE_MAX_TOKEN_BYTES, no NUL, UTF-8, no token twice,
merges 'left right'); before that it wrote GGUFs `tokenize` then refused.

Stdlib only, deterministic. Used by make_corpus.py: make(outdir) -> [(folder name, code name)].
The limit cases come in pairs: at the limit (accepted), one past it (refused).
"""
import json
import os
import struct

BPE_MAX_TOKEN_BYTES = 1024  # include/ctxpatch/tokenizers/tokenizer.h (keep in step)
V, D, F, LAYERS = 16, 8, 16, 2


def safetensors(shapes):
    """A safetensors file of small deterministic F32 values."""
    header, blobs, off = {}, [], 0
    for k, (name, shape) in enumerate(shapes):
        n = 1
        for s in shape:
            n *= s
        b = struct.pack(f"<{n}f", *[((i * 7 + k * 3) % 11 - 5) * 0.02 for i in range(n)])
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def tiny_llama(folder):
    os.makedirs(folder)
    shapes = [("model.embed_tokens.weight", (V, D)), ("model.norm.weight", (D,)), ("lm_head.weight", (V, D))]
    for layer in range(LAYERS):
        shapes += [(f"model.layers.{layer}.{n}.weight", s) for n, s in [
            ("self_attn.q_proj", (D, D)), ("self_attn.k_proj", (D, D)), ("self_attn.v_proj", (D, D)),
            ("self_attn.o_proj", (D, D)), ("mlp.gate_proj", (F, D)), ("mlp.up_proj", (F, D)),
            ("mlp.down_proj", (D, F)), ("input_layernorm", (D,)), ("post_attention_layernorm", (D,))]]
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(safetensors(shapes))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": LAYERS, "num_attention_heads": 2, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
           "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 0}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)


def bpe(extra_vocab=(), added=(), merges=("a b",)):
    """A GPT-2-shaped tokenizer.json: tokens a b ab c (ids 1..4, '<|endoftext|>' 0), then extra_vocab
    (ids 5..), the given merges and added tokens."""
    vocab = {"<|endoftext|>": 0, "a": 1, "b": 2, "ab": 3, "c": 4}
    for i, t in enumerate(extra_vocab):
        vocab[t] = 5 + i
    return json.dumps({
        "added_tokens": [{"id": 0, "content": "<|endoftext|>", "special": True}] + list(added),
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "vocab": vocab, "merges": list(merges)},
    }).encode()


def make(outdir):
    cases = []

    def add(name, tokenizer_json, code):
        tiny_llama(os.path.join(outdir, name))
        with open(os.path.join(outdir, name, "tokenizer.json"), "wb") as f:
            f.write(tokenizer_json)
        cases.append((name, code))

    add("vocab_ok", bpe(), "CP_OK")
    add("token_at_limit", bpe(["d" * BPE_MAX_TOKEN_BYTES]), "CP_OK")
    add("token_past_limit", bpe(["d" * (BPE_MAX_TOKEN_BYTES + 1)]), "CP_ETOK_MODEL")
    add("token_2000_bytes", bpe(["e" * 2000]), "CP_ETOK_MODEL")  # the finding
    add("token_empty", bpe([""]), "CP_ETOK_MODEL")  # the finding
    add("token_nul", bpe(["d\u0000e"]), "CP_ETOK_MODEL")  # the finding
    add("added_token_past_limit", bpe(added=[{"id": 5, "content": "f" * (BPE_MAX_TOKEN_BYTES + 1), "special": True}]),
        "CP_ETOK_MODEL")
    add("added_token_repeats", bpe(added=[{"id": 5, "content": "ab", "special": False}]), "CP_ETOK_MODEL")
    add("merge_pair_with_space", bpe(merges=[["a b", "c"]]), "CP_ETOK_MODEL")
    return cases
