#!/usr/bin/python3
"""The graph digest of an ONNX model file (metadata_props ctxpatch.graph_sha256) recomputed from
the recipe in docs/onnx.md "The graph digest", with python3-onnx and hashlib only (nothing of
ctxpatch's C code): the independent side of tests/test_cli_check_onnx.sh.

  graph_digest.py MODEL.onnx          prints the digest (64 lowercase hex digits)
  graph_digest.py --stored MODEL.onnx exit 1 unless it equals the model's ctxpatch.graph_sha256

Recipe: SHA-256 over (1) the file's bytes without the top-level metadata_props fields (ModelProto
field 14) whose entry's key begins with "ctxpatch.", then (2) for each distinct external data
location of the main graph's and its subgraphs' tensors (initializers; TENSOR / TENSORS
attributes; through GRAPH / GRAPHS attributes), in ascending byte order: 0x00, the location,
0x00, the hex SHA-256 of the bytes of that file the tensors use (the union of their [offset,
offset + length) ranges, ascending, each byte once: the whole file's SHA-256 where they cover it).
"""
import hashlib
import os
import sys

import onnx

META = 14


def varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def top_fields(b):
    """(field, wire, start, body, end) of each top-level field of a serialised message."""
    i = 0
    while i < len(b):
        start = i
        tag, i = varint(b, i)
        field, wire = tag >> 3, tag & 7
        body = i
        if wire == 0:
            _, i = varint(b, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, body = varint(b, i)
            i = body + n
        else:
            raise ValueError(f"offset {start}: wire type {wire}")
        if i > len(b):
            raise ValueError(f"offset {start}: past the end")
        yield field, wire, start, body, i


def entry_key(b, body, end):
    return onnx.StringStringEntryProto.FromString(b[body:end]).key


def is_own(b, f):
    field, wire, _, body, end = f
    return field == META and wire == 2 and entry_key(b, body, end).startswith("ctxpatch.")


def tensors(g):
    A = onnx.AttributeProto
    yield from g.initializer
    for node in g.node:
        for a in node.attribute:
            if a.type == A.TENSOR:
                yield a.t
            elif a.type == A.TENSORS:
                yield from a.tensors
            elif a.type == A.GRAPH:
                yield from tensors(a.g)
            elif a.type == A.GRAPHS:
                for s in a.graphs:
                    yield from tensors(s)


# Bits per element of each TensorProto.DataType with a fixed size (onnx.proto's numbering).
BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64, 15: 128,
        16: 16, 17: 8, 18: 8, 19: 8, 20: 8}


def nbytes(t):
    numel = 1
    for d in t.dims:
        numel *= d
    if t.data_type in (21, 22, 23):  # 4-bit types: two per byte
        return (numel + 1) // 2
    return numel * BITS[t.data_type] // 8


def ranges(b):
    """{location: [(offset, length), ...]} of the external tensors."""
    m = onnx.ModelProto.FromString(b)
    out = {}
    for t in tensors(m.graph):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            kv = {}
            for e in t.external_data:
                kv[e.key] = e.value
            length = int(kv["length"]) if "length" in kv else nbytes(t)
            out.setdefault(kv["location"], []).append((int(kv.get("offset", 0)), length))
    return out


def used_sha256(path, spans):
    """SHA-256 of the union of the spans' bytes of the file at path, ascending offset."""
    h = hashlib.sha256()
    end = 0
    with open(path, "rb") as fh:
        for off, length in sorted(spans):
            start = max(off, end)
            if off + length > start:
                fh.seek(start)
                h.update(fh.read(off + length - start))
                end = off + length
    return h.hexdigest()


def digest(path):
    b = open(path, "rb").read()
    h = hashlib.sha256()
    for f in top_fields(b):
        if not is_own(b, f):
            h.update(b[f[2]:f[4]])
    spans = ranges(b)
    for loc in sorted(spans, key=lambda s: s.encode()):
        fd = used_sha256(os.path.join(os.path.dirname(path), loc), spans[loc])
        h.update(b"\0" + loc.encode() + b"\0" + fd.encode())
    return h.hexdigest()


def stored(path):
    m = onnx.load(path, load_external_data=False)
    return [p.value for p in m.metadata_props if p.key == "ctxpatch.graph_sha256"]


if __name__ == "__main__":
    if sys.argv[1] == "--stored":
        want, got = digest(sys.argv[2]), stored(sys.argv[2])
        if got != [want]:
            sys.exit(f"{sys.argv[2]}: ctxpatch.graph_sha256 {got} is not the recipe's {want}")
    else:
        print(digest(sys.argv[1]))
