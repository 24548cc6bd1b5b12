#!/usr/bin/python3
"""Byte-level edits of an ONNX model file for tests/test_cli_check_onnx.sh: each changes only the
bytes it names and copies every other byte (no re-serialisation of the model, which would move
fields and so change the graph digest by itself). python3-onnx serialises the one message edited.

  onnx_tamper.py meta SRC DST CODE   metadata_props as a dict d, edited by the Python CODE: an
                                     entry whose value changed is re-encoded in its place, a
                                     removed key's entries are dropped, new keys are appended
  onnx_tamper.py weight SRC DST      one bit flipped in the raw_data of the largest inline float
                                     initializer (the low mantissa bit of its middle element);
                                     prints its name
  onnx_tamper.py attr SRC DST        the first main-graph node with an INT attribute in 0..62:
                                     that value + 1 (the same varint length), the node's bytes
                                     found verbatim (once) in the file; prints what changed
  onnx_tamper.py flip FILE           one bit flipped in the middle byte of FILE, in place
"""
import shutil
import sys

import onnx

from graph_digest import META, entry_key, top_fields


def encode_field(field, payload):
    out, v = bytearray(), field << 3 | 2
    for x in (v, len(payload)):
        while True:
            b = x & 0x7F
            x >>= 7
            out.append(b | (0x80 if x else 0))
            if not x:
                break
    return bytes(out) + payload


def entry(k, v):
    return encode_field(META, onnx.StringStringEntryProto(key=k, value=v).SerializeToString())


def meta(src, dst, code):
    b = open(src, "rb").read()
    fields = list(top_fields(b))
    d = {}
    for f, w, s, body, e in fields:
        if f == META and w == 2:
            p = onnx.StringStringEntryProto.FromString(b[body:e])
            d.setdefault(p.key, p.value)
    orig = dict(d)
    env = {"d": d}
    exec(code, env)
    d = env["d"]
    out, seen = bytearray(), set()
    for f, w, s, body, e in fields:
        if f == META and w == 2:
            k = entry_key(b, body, e)
            seen.add(k)
            if k not in d:
                continue
            if d[k] != orig.get(k):
                out += entry(k, d[k])
                continue
        out += b[s:e]
    for k, v in d.items():
        if k not in seen:
            out += entry(k, v)
    open(dst, "wb").write(out)


def unique(b, piece, what):
    at = b.find(piece)
    if at < 0 or b.find(piece, at + 1) >= 0:
        sys.exit(f"onnx_tamper: {what}: its bytes occur {'no' if at < 0 else 'more than one'} time in the file")
    return at


def weight(src, dst):
    b = bytearray(open(src, "rb").read())
    m = onnx.ModelProto.FromString(bytes(b))
    ts = [t for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.raw_data) >= 16]
    t = max(ts, key=lambda t: len(t.raw_data))
    at = unique(b, t.raw_data, t.name)
    b[at + (len(t.raw_data) // 8) * 4] ^= 1
    open(dst, "wb").write(b)
    print(t.name)


def attr(src, dst):
    b = bytearray(open(src, "rb").read())
    m = onnx.ModelProto.FromString(bytes(b))
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.INT and 0 <= a.i < 63:
                old = n.SerializeToString()
                a.i += 1
                new = n.SerializeToString()
                assert len(new) == len(old)
                at = unique(b, old, n.name)
                b[at:at + len(old)] = new
                open(dst, "wb").write(b)
                print(f"{n.op_type} node '{n.name}' attribute {a.name}: {a.i - 1} -> {a.i}")
                return
    sys.exit("onnx_tamper: no INT attribute in 0..62")


def flip(path):
    b = bytearray(open(path, "rb").read())
    b[len(b) // 2] ^= 1
    open(path, "wb").write(b)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"meta": meta, "weight": weight, "attr": attr, "flip": flip}[cmd](*args)
