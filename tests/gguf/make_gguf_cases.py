#!/usr/bin/env python3
"""Writes the GGUF reader's test files into OUT (stdlib only), and OUT/cases.tsv listing every
hostile file with the error it must get:  file<TAB>CODE<TAB>message  ("{p}" stands for the path).

Valid files: valid_minimal.gguf (no keys, no tensors), valid_tensors.gguf (metadata of every
value type, F32/F16/BF16/Q8_0/Q4_0/Q4_K/IQ2_XXS tensors with hand-chosen values; test_gguf.c
checks the decoded values), valid_v2.gguf (version 2). Hostile files: each CVE class of ggml's
GGUF reader (counts and lengths past the file, n_dims, shape and size overflow, duplicate keys and
names, alignment, offsets, nesting, unknown types) and truncation at every header field.
rewrite() builds a file again from tests/gguf/gguf_py.py's reading of one, edited (the GGUF tests'
hostile variants of written models).

Usage: make_gguf_cases.py OUT
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
          U64: "<Q", I64: "<q", F64: "<d"}
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34),
        "Q4_K": (12, 256, 144), "IQ2_XXS": (16, 256, 66), "BF16": (30, 1, 2)}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + value(t, v)


def header(n_tensors, n_kv, version=3):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def tinfo(name, ne, type_id, offset):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + \
        struct.pack("<IQ", type_id, offset)


def pad(b, align=32):
    return b + b"\0" * ((-len(b)) % align)


def gguf(kvs, tensors, align=32, version=3):
    """tensors: (name, ne, ggml type name, bytes); laid out in order, each aligned."""
    infos, data = b"", b""
    for name, ne, tname, raw in tensors:
        data = pad(data, align)
        infos += tinfo(name, ne, GGML[tname][0], len(data))
        data += raw
    return pad(header(len(tensors), len(kvs), version) + b"".join(kvs) + infos, align) + data


def rewrite(read, edit_kv=None, edit_tensors=None):
    """A GGUF file again from gguf_py.read's (version, kv, types, tensors, order), after edit_kv(kvs)
    and edit_tensors(tensors) change the lists in place: kvs [(key, type, value)], tensors
    [(name, ne, ggml type name, bytes)]. The tests' way to build a hostile variant of a written file."""
    version, kvs, types, tensors, order = read
    ids = {v[0]: k for k, v in GGML.items()}
    kl = [(k, types[k], (v[1], v[0]) if types[k] == ARR else v) for k, v in kvs.items()]
    tl = [(n, tensors[n][1], ids[tensors[n][0]], tensors[n][2]) for n in order]
    if edit_kv:
        edit_kv(kl)
    if edit_tensors:
        edit_tensors(tl)
    align = kvs.get("general.alignment", 32)
    return gguf([kv(k, t, v) for k, t, v in kl], tl, align, version)


def f16(x):
    return struct.pack("<e", x)


def valid_tensors():
    a = struct.pack("<6f", 1, 2, 3, 4, 5, 6)                      # [2, 3]
    h = b"".join(f16(x) for x in (0.5, -1.0, 2.0, 65504.0))       # [4]
    bf = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", x))[0])[2:]
                  for x in (1.0, -2.0, 0.25, 3.0))                # [2, 2]
    # Q8_0, 2 rows of one block: d = 0.5, q = -16..15 (row 0), q = 15..-16 (row 1)
    q8 = f16(0.5) + bytes((i - 16) & 0xFF for i in range(32)) + \
        f16(0.5) + bytes((15 - i) & 0xFF for i in range(32))
    # Q4_0: d = 2, byte j holds low nibble j and high nibble 15 - j
    q4 = f16(2.0) + bytes(j | ((15 - j) << 4) for j in range(16))
    # Q4_K: d = 1, dmin = 0.5; sub-block scales 1..8, mins 1,1,1,1,2,2,2,2;
    # every 32-byte run: byte l holds low nibble l % 16 and high nibble 15 - l % 16
    scales = bytes([1, 2, 3, 4, 1, 1, 1, 1, 0x25, 0x26, 0x27, 0x28])
    qk = f16(1.0) + f16(0.5) + scales + bytes((l % 16) | ((15 - l % 16) << 4) for l in range(32)) * 4
    iq = bytes(66)
    kvs = [kv("general.architecture", STR, "llama"), kv("general.alignment", U32, 64),
           kv("t.u8", U8, 200), kv("t.i8", I8, -5), kv("t.u16", U16, 60000), kv("t.i16", I16, -300),
           kv("t.i32", I32, -70000), kv("t.f32", F32, 0.25), kv("t.bool", BOOL, 1),
           kv("t.u64", U64, 1 << 40), kv("t.i64", I64, -(1 << 40)), kv("t.f64", F64, 1.5),
           kv("t.big", U64, 1 << 63), kv("t.strs", ARR, (STR, ["a", "", "ccc"])),
           kv("t.ints", ARR, (I32, [3, -4, 5])), kv("t.nested", ARR, (ARR, [(U8, [1]), (U8, [])]))]
    return gguf(kvs, [("a", [3, 2], "F32", a), ("h", [4], "F16", h), ("bf", [2, 2], "BF16", bf),
                      ("q8", [32, 2], "Q8_0", q8), ("q4", [32], "Q4_0", q4), ("qk", [256], "Q4_K", qk),
                      ("iq", [256], "IQ2_XXS", iq), ("empty", [0, 3], "F32", b"")], align=64)


def hostile():
    """Yields (file, code, message, bytes)."""
    H = header(0, 0)
    yield "trunc_magic", "CP_EGGUF_TRUNCATED", "{p}: offset 0: magic needs 4 bytes, 2 left", b"GG"
    yield "bad_magic", "CP_EGGUF_MAGIC", '{p}: offset 0: magic is 0x46554746, not "GGUF"', b"FGUF" + H[4:]
    yield "trunc_version", "CP_EGGUF_TRUNCATED", "{p}: offset 4: version needs 4 bytes, 2 left", b"GGUF\3\0"
    yield "version1", "CP_EGGUF_VERSION", "{p}: offset 4: version 1; versions 2 and 3 are read", header(0, 0, 1)
    yield "version_bigendian", "CP_EGGUF_VERSION", \
        "{p}: offset 4: version 50331648 (a big-endian file); versions 2 and 3 are read", header(0, 0, 3 << 24)
    yield "trunc_n_tensors", "CP_EGGUF_TRUNCATED", "{p}: offset 8: n_tensors needs 8 bytes, 3 left", H[:11]
    yield "trunc_n_kv", "CP_EGGUF_TRUNCATED", "{p}: offset 16: n_kv needs 8 bytes, 7 left", H[:23]
    yield "n_kv_huge", "CP_EGGUF_LIMIT", "{p}: offset 16: n_kv 4611686018427387904 cannot fit in the 0 bytes left", \
        header(0, 1 << 62)
    yield "n_tensors_huge", "CP_EGGUF_LIMIT", \
        "{p}: offset 8: n_tensors 4611686018427387904 cannot fit in the 0 bytes left", header(1 << 62, 0)
    body = struct.pack("<Q", 1 << 63) + b"x" * 6
    yield "key_len_huge", "CP_EGGUF_LIMIT", \
        "{p}: offset 24: key 0: length 9223372036854775808 is past the 6 bytes left", header(0, 1) + body
    yield "trunc_key_len", "CP_EGGUF_TRUNCATED", "{p}: offset 65: key 1 needs 8 bytes, 0 left", \
        header(0, 2) + kv("a", STR, "x" * 20)
    yield "trunc_value_type", "CP_EGGUF_TRUNCATED", "{p}: offset 36: value type of 'abcd' needs 4 bytes, 2 left", \
        header(0, 1) + s("abcd") + b"\0\0"
    yield "trunc_value", "CP_EGGUF_TRUNCATED", "{p}: offset 37: value of 'a' needs 8 bytes, 1 left", \
        header(0, 1) + s("a") + struct.pack("<I", U64) + b"\0"
    yield "trunc_string", "CP_EGGUF_LIMIT", "{p}: offset 37: value of 'a': length 100 is past the 3 bytes left", \
        header(0, 1) + s("a") + struct.pack("<IQ", STR, 100) + b"abc"
    yield "unknown_type", "CP_EGGUF_TYPE", "{p}: offset 33: key 'a': unknown value type 13", \
        header(0, 1) + s("a") + struct.pack("<I", 13) + b"\0" * 8
    yield "bad_bool", "CP_EGGUF_TYPE", "{p}: offset 37: key 'a': bool value 2 is neither 0 nor 1", \
        header(0, 1) + s("a") + struct.pack("<IB", BOOL, 2)
    yield "unknown_elem_type", "CP_EGGUF_TYPE", "{p}: offset 37: key 'a': unknown array element type 99", \
        header(0, 1) + s("a") + struct.pack("<IIQ", ARR, 99, 0)
    yield "trunc_array_type", "CP_EGGUF_TRUNCATED", \
        "{p}: offset 37: array element type of 'a' needs 4 bytes, 1 left", header(0, 1) + s("a") + struct.pack("<IB", ARR, 0)
    yield "trunc_array_count", "CP_EGGUF_TRUNCATED", \
        "{p}: offset 41: array count of 'a' needs 8 bytes, 2 left", header(0, 1) + s("a") + struct.pack("<II", ARR, U32) + b"\0\0"
    yield "array_count_huge", "CP_EGGUF_LIMIT", \
        "{p}: offset 41: key 'a': 4611686018427387904 elements of u32 cannot fit in the 0 bytes left", \
        header(0, 1) + s("a") + struct.pack("<IIQ", ARR, U32, 1 << 62)
    yield "array_strings_huge", "CP_EGGUF_LIMIT", \
        "{p}: offset 41: key 'a': 2305843009213693952 elements of string cannot fit in the 8 bytes left", \
        header(0, 1) + s("a") + struct.pack("<IIQ", ARR, STR, 1 << 61) + s("")
    nested = (U8, [7])
    for _ in range(4):
        nested = (ARR, [nested])
    yield "array_nesting", "CP_EGGUF_LIMIT", "{p}: offset 85: key 'a[0][0][0][0]': arrays nested deeper than 4", \
        header(0, 1) + kv("a", ARR, nested)
    yield "dup_key", "CP_EGGUF_DUPLICATE", "{p}: key 'a' appears twice", header(0, 2) + kv("a", U8, 1) + kv("a", U8, 2)
    yield "empty_key", "CP_EGGUF_NAME", "{p}: offset 24: key 0 '' is empty", header(0, 1) + s("") + struct.pack("<IB", U8, 0) + b"\0" * 4
    yield "nul_key", "CP_EGGUF_NAME", "{p}: offset 24: key 0 'a?b' is holding a NUL byte", header(0, 1) + kv(b"a\0b", U8, 0)
    # The message names the key with its invalid byte masked (it once printed the raw 0xff).
    yield "utf8_key", "CP_EGGUF_NAME", "{p}: offset 24: key 0 'a?' is not valid UTF-8", \
        header(0, 1) + kv(b"a\xff", U8, 0)
    for name, t, v, msg in [("align_3", U32, 48, "general.alignment 48 is not a power of two up to 65536"),
                            ("align_0", U32, 0, "general.alignment 0 is not a power of two up to 65536"),
                            ("align_big", U32, 1 << 20, "general.alignment 1048576 is not a power of two up to 65536"),
                            ("align_type", U64, 32, "key 'general.alignment' is u64, expected u32")]:
        yield name, "CP_EGGUF_ALIGNMENT", "{p}: offset 53: " + msg, header(0, 1) + kv("general.alignment", t, v)
    long = "tensor_name_long"  # 16 bytes, so every later field of the info is reachable
    T = header(1, 0)
    info = tinfo(long, [32, 2], 0, 0)
    for cut, field, need, at in [(26, "n_dims of tensor 'tensor_name_long'", 4, 48),
                                 (31, "ne[0] of tensor 'tensor_name_long'", 8, 52),
                                 (47, "type of tensor 'tensor_name_long'", 4, 68),
                                 (53, "offset of tensor 'tensor_name_long'", 8, 72)]:
        left = cut - (at - 24)
        yield "trunc_" + field.split()[0].replace("[0]", ""), "CP_EGGUF_TRUNCATED", \
            f"{{p}}: offset {at}: {field} needs {need} bytes, {left} left", T + info[:cut]
    yield "trunc_padding", "CP_EGGUF_TRUNCATED", "{p}: offset 80: padding before the data section needs 16 bytes, 0 left", \
        T + info
    yield "name_long", "CP_EGGUF_LIMIT", "{p}: offset 24: tensor 0 name '" + "x" * 64 + "' is too long", \
        pad(header(1, 0) + tinfo("x" * 64, [1], 0, 0)) + b"\0" * 32
    def one(ne, type_id, offset=0, extra=b"\0" * 64, name="t"):
        return pad(header(1, 0) + tinfo(name, ne, type_id, offset)) + extra
    yield "n_dims_5", "CP_EGGUF_TENSOR", "{p}: offset 33: tensor 't' has 5 dimensions, at most 4", one([1] * 5, 0)
    yield "ne_negative", "CP_EGGUF_TENSOR", "{p}: offset 37: tensor 't': ne[0] is negative", one([1 << 63], 0)
    yield "numel_overflow", "CP_EGGUF_TENSOR", "{p}: offset 45: tensor 't': element count overflows", one([1 << 32, 1 << 32], 0)
    yield "bytes_overflow", "CP_EGGUF_TENSOR", "{p}: offset 53: tensor 't': byte size overflows", one([1 << 31, 1 << 31], 0)
    yield "type_removed", "CP_EGGUF_TENSOR", "{p}: offset 45: tensor 't': unknown ggml type 4", one([32], 4)
    yield "type_unknown", "CP_EGGUF_TENSOR", "{p}: offset 45: tensor 't': unknown ggml type 1000", one([32], 1000)
    yield "block_partial", "CP_EGGUF_TENSOR", \
        "{p}: offset 45: tensor 't': ne[0] = 33 is not a multiple of Q8_0's block of 32", one([33], 8)
    yield "offset_misaligned", "CP_EGGUF_OFFSET", \
        "{p}: tensor 't': offset 4 is not a multiple of the alignment 32", one([4], 0, offset=4)
    yield "offset_past_end", "CP_EGGUF_OFFSET", \
        "{p}: tensor 't': bytes [64, +16) run past the 64-byte data section at offset 64", one([4], 0, offset=64)
    yield "data_truncated", "CP_EGGUF_OFFSET", \
        "{p}: tensor 't': bytes [0, +256) run past the 64-byte data section at offset 64", one([64], 0)
    two = pad(header(2, 0) + tinfo("a", [16], 0, 0) + tinfo("b", [16], 0, 32)) + b"\0" * 96
    yield "overlap", "CP_EGGUF_OFFSET", "{p}: tensors 'a' and 'b' overlap in the data section", two
    hidden = pad(header(3, 0) + tinfo("a", [16], 0, 0) + tinfo("e", [0], 0, 32) + tinfo("b", [8], 0, 32)) + b"\0" * 96
    yield "overlap_past_empty", "CP_EGGUF_OFFSET", "{p}: tensors 'a' and 'b' overlap in the data section", hidden
    dup = pad(header(2, 0) + tinfo("a", [4], 0, 0) + tinfo("a", [4], 0, 32)) + b"\0" * 64
    yield "dup_tensor", "CP_EGGUF_DUPLICATE", "{p}: tensor 'a' appears twice", dup


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    files = {"valid_minimal.gguf": header(0, 0), "valid_tensors.gguf": valid_tensors(),
             "valid_v2.gguf": gguf([kv("general.name", STR, "v2")], [("a", [3, 2], "F32", bytes(24))], version=2)}
    rows = []
    for name, code, msg, data in hostile():
        files[name + ".gguf"] = data
        rows.append(f"{name}.gguf\t{code}\t{msg}\n")
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    with open(os.path.join(out, "cases.tsv"), "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(rows)


if __name__ == "__main__":
    main()
