#!/usr/bin/env python3
"""Writes models whose names carry terminal escapes, control bytes and invalid UTF-8, for
test_cli_hostile_names.sh (stdlib only, deterministic).

Usage: make_hostile_names.py SRC OUT [GGUF ONNX]
  SRC   a tiny Llama folder (config.json + model.safetensors; a tokenizer is copied along)
  GGUF  that model converted by `ctxpatch convert --to gguf` (optional); ONNX likewise --to onnx

Written under OUT:
  st_names/      loads: an extra tensor and __metadata__ keys and values with ESC sequences, BEL,
                 C1 CSI (U+009B) and DEL; an architectures entry likewise
  st_model_type/ refused: model_type "llama" + ESC sequences
  st_dtype/      refused: a tensor whose name and dtype carry ESC sequences
  st_utf8/       refused: a header with an invalid UTF-8 tensor name
  gguf_names.gguf  loads: a metadata key and an extra tensor with ESC and C1 in their names (names
                 must be UTF-8); string values and general.name with ESC, C1 and invalid UTF-8
                 bytes (0xff, a lone continuation byte, a truncated sequence)
  gguf_arch.gguf   refused: general.architecture with ESC and invalid UTF-8
  onnx_node/     the ONNX export (ONNX) with a node output renamed to hostile bytes of the same length
  onnx_init/     likewise an initializer name
"""
import json
import os
import re
import shutil
import struct
import sys

ESC = "\x1b[31mRED\x1b[0m\x07\x1b]0;title\x07\x9b2J\x7f"  # SGR, BEL, OSC title, C1 CSI, DEL
BAD = b"\xff\x80\xc3\x1b[2J\xe2\x82"  # invalid UTF-8 (0xff, lone continuation, cut sequences) + ESC


def read_st(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def write_st(path, header_bytes, data):
    header_bytes += b" " * ((-(8 + len(header_bytes))) % 8)
    open(path, "wb").write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)


def st_case(src, out, name, edit_header=None, edit_config=None, raw_header=None):
    d = os.path.join(out, name)
    os.makedirs(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), d)
    cfg = json.load(open(os.path.join(src, "config.json")))
    if edit_config:
        edit_config(cfg)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))  # ensure_ascii: ESC as \u001b
    hdr, data = read_st(os.path.join(src, "model.safetensors"))
    if edit_header:
        data = edit_header(hdr, data)
    hb = raw_header(hdr) if raw_header else json.dumps(hdr, separators=(",", ":")).encode()
    write_st(os.path.join(d, "model.safetensors"), hb, data)


def add_tensor(name, dtype="F32"):
    def edit(hdr, data):
        hdr[name] = {"dtype": dtype, "shape": [1], "data_offsets": [len(data), len(data) + 4]}
        return data + struct.pack("<f", 1.0)
    return edit


def names_header(hdr, data):
    hdr["__metadata__"] = {"format": "pt", "note" + ESC: "value" + ESC}
    return add_tensor("extra." + ESC)(hdr, data)


def utf8_header(hdr):
    # A valid header, then the placeholder name swapped for invalid UTF-8 bytes of any length.
    return json.dumps(hdr, separators=(",", ":")).encode().replace(b"PLACEHOLDER", BAD)


# --- GGUF: re-laid-out with extra metadata, every string a raw byte string -------------------

def gguf_rewrite(src, dst, extra_kv, replace_kv, extra_tensor=None):
    b = open(src, "rb").read()
    at = 4
    version, n_t, n_kv = struct.unpack_from("<IQQ", b, at)
    at += 20
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    align = 32

    def skip_value(t, at):
        if t == 8:
            return at + 8 + struct.unpack_from("<Q", b, at)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, at)
            at += 12
            for _ in range(n):
                at = skip_value(et, at)
            return at
        return at + sizes[t]

    kvs = []
    for _ in range(n_kv):
        start = at
        kl = struct.unpack_from("<Q", b, at)[0]
        key = b[at + 8:at + 8 + kl]
        at += 8 + kl
        t = struct.unpack_from("<I", b, at)[0]
        at = skip_value(t, at + 4)
        if key == b"general.alignment":
            align = struct.unpack_from("<I", b, at - 4)[0]
        kvs.append(replace_kv.get(key, b[start:at]))
    infos_start = at
    for _ in range(n_t):
        at += 8 + struct.unpack_from("<Q", b, at)[0]
        nd = struct.unpack_from("<I", b, at)[0]
        at += 4 + 8 * nd + 4 + 8
    infos = b[infos_start:at]
    data = b[at + (-at) % align:]
    if extra_tensor:  # one F32 element, named extra_tensor
        data += b"\0" * ((-len(data)) % align)
        infos += gstr(extra_tensor) + struct.pack("<IQIQ", 1, 1, 0, len(data))
        data += struct.pack("<f", 1.0)
        n_t += 1
    kvs += extra_kv
    head = b"GGUF" + struct.pack("<IQQ", version, n_t, len(kvs)) + b"".join(kvs) + infos
    open(dst, "wb").write(head + b"\0" * ((-len(head)) % align) + data)


def gstr(x):
    return struct.pack("<Q", len(x)) + x


def gkv_str(key, value):
    return gstr(key) + struct.pack("<I", 8) + gstr(value)


def main():
    src, out = sys.argv[1], sys.argv[2]
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    st_case(src, out, "st_names", edit_header=names_header,
            edit_config=lambda c: c.update(architectures=["Llama" + ESC + "ForCausalLM"]))
    st_case(src, out, "st_model_type", edit_config=lambda c: c.update(model_type="llama" + ESC))
    st_case(src, out, "st_dtype", edit_header=add_tensor("bad." + ESC, "F" + ESC))
    st_case(src, out, "st_utf8", edit_header=add_tensor("PLACEHOLDER"), raw_header=utf8_header)
    if len(sys.argv) > 3:
        esc = ESC.encode()
        extra = [gkv_str(b"hostile." + esc, b"value " + esc + BAD),  # keys must be UTF-8
                 gkv_str(b"general.description", esc + BAD)]
        gguf_rewrite(sys.argv[3], os.path.join(out, "gguf_names.gguf"), extra,
                     {b"general.name": gkv_str(b"general.name", b"name" + esc + BAD)}, b"extra." + esc)
        gguf_rewrite(sys.argv[3], os.path.join(out, "gguf_arch.gguf"), [],
                     {b"general.architecture": gkv_str(b"general.architecture", b"llama" + esc + BAD)})
    if len(sys.argv) > 4:
        # Same-length replacements keep every protobuf length prefix valid: a node output renamed
        # everywhere (the graph still holds together), and an initializer (recovery refuses it).
        for name, old in (("onnx_node", rb"/Range_[0-9]+"), ("onnx_init", rb"model\.layers\.0\.attn\.q\.weight")):
            d = os.path.join(out, name)
            shutil.copytree(sys.argv[4], d)
            graph = os.path.join(d, "onnx", "model.onnx")
            blob = open(graph, "rb").read()
            found = re.search(old, blob)  # the first Range node's output, whatever its number
            assert found, old
            old = found.group(0)
            open(graph, "wb").write(blob.replace(old, (BAD + ESC.encode() + b"." * len(old))[:len(old)]))
    print("hostile names written to", out)


if __name__ == "__main__":
    main()
