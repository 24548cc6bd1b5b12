"""Hostile safetensors files, each with the exact error code cp_st_open must return.

Stdlib only, deterministic. Used by make_corpus.py: make(outdir) -> [(file name, code name)].
Every file is valid except for the one defect its name describes, so the expected code checks
that the reader finds that defect (and does not stop earlier for another reason).
"""
import json
import os
import struct

F32_ONE = struct.pack("<f", 1.0)


def st_bytes(header, data=b"", header_len=None):
    """A file from a header (dict -> compact JSON, or raw bytes) and data bytes."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":")).encode()
    if header_len is None:
        header_len = len(header)
    return struct.pack("<Q", header_len) + header + data


def entry(dtype="F32", shape=(1,), begin=0, end=4):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


def one(e=None, data=F32_ONE, name=b"w"):
    """A single-tensor file whose entry is `e` (a dict, or raw JSON text for the entry) and whose
    name is `name` (raw bytes between the quotes, so it may be invalid UTF-8 or an escape)."""
    if e is None:
        e = entry()
    raw = json.dumps(e, separators=(",", ":")) if isinstance(e, dict) else e
    return st_bytes(b'{"' + name + b'":' + raw.encode() + b"}", data)


def make(outdir):
    cases = []

    def add(name, content, code):
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(content)
        cases.append((name, code))

    # File and header length.
    add("empty.safetensors", b"", "CP_EST_TOO_SMALL")
    add("seven_bytes.safetensors", b"\x02\x00\x00\x00\x00\x00\x00", "CP_EST_TOO_SMALL")
    add("header_len_2p64_minus_1.safetensors", st_bytes(b"{}", header_len=2**64 - 1), "CP_EST_HEADER_TOO_LARGE")
    add("header_len_100000001.safetensors", st_bytes(b"{}", header_len=100000001), "CP_EST_HEADER_TOO_LARGE")
    add("header_past_eof.safetensors", st_bytes(b"{}", header_len=4096), "CP_EST_HEADER_PAST_EOF")
    add("header_past_eof_by_one.safetensors", st_bytes(b"{}", header_len=3), "CP_EST_HEADER_PAST_EOF")
    add("header_len_100000000_past_eof.safetensors", st_bytes(b"{}", header_len=100000000),
        "CP_EST_HEADER_PAST_EOF")

    # Encoding and the first byte (checked before JSON, like the reference).
    add("utf8_invalid_in_key.safetensors", one(name=b"w\xff"), "CP_EST_HEADER_UTF8")
    add("utf8_overlong_slash.safetensors", one(name=b"\xc0\xaf"), "CP_EST_HEADER_UTF8")
    add("utf8_encoded_surrogate.safetensors", one(name=b"\xed\xa0\x80"), "CP_EST_HEADER_UTF8")
    add("utf8_truncated_sequence.safetensors", st_bytes(b'{"w\xe2\x82"}'), "CP_EST_HEADER_UTF8")
    add("bom.safetensors", st_bytes(b"\xef\xbb\xbf{}     "), "CP_EST_HEADER_NOT_OBJECT")
    add("header_array.safetensors", st_bytes(b"[]      "), "CP_EST_HEADER_NOT_OBJECT")
    add("header_leading_space.safetensors", st_bytes(b" {}"), "CP_EST_HEADER_NOT_OBJECT")
    add("header_len_zero.safetensors", st_bytes(b""), "CP_EST_HEADER_NOT_OBJECT")

    # JSON well-formedness.
    add("json_missing_value.safetensors", st_bytes(b'{"w":}'), "CP_EST_HEADER_JSON")
    add("json_unterminated.safetensors", st_bytes(b'{"w":{"dtype":"F32"'), "CP_EST_HEADER_JSON")
    add("json_text_after_object.safetensors", st_bytes(b"{}x"), "CP_EST_HEADER_JSON")
    add("json_nul_padding.safetensors", st_bytes(b"{}\0\0\0\0\0\0"), "CP_EST_HEADER_JSON")
    add("json_nested_too_deep.safetensors", st_bytes(b'{"w":' + b"[" * 10000 + b"]" * 10000 + b"}"),
        "CP_EST_HEADER_JSON")
    add("json_lone_surrogate_escape.safetensors", one(name=b"\\ud800"), "CP_EST_HEADER_JSON")

    # Names and metadata.
    dup = b'{"w":' + json.dumps(entry()).encode() + b',"w":' + json.dumps(entry(begin=4, end=8)).encode() + b"}"
    add("duplicate_name.safetensors", st_bytes(dup, F32_ONE * 2), "CP_EST_DUPLICATE_NAME")
    add("duplicate_name_escaped.safetensors", st_bytes(dup.replace(b',"w":', b',"\\u0077":', 1), F32_ONE * 2),
        "CP_EST_DUPLICATE_NAME")
    add("metadata_number_value.safetensors", st_bytes({"__metadata__": {"format": "pt", "step": 1}, "w": entry()},
                                                      F32_ONE), "CP_EST_METADATA")
    add("metadata_not_object.safetensors", st_bytes({"__metadata__": "pt", "w": entry()}, F32_ONE),
        "CP_EST_METADATA")
    add("metadata_duplicate_key.safetensors",
        st_bytes(b'{"__metadata__":{"format":"pt","format":"np"},"w":' + json.dumps(entry()).encode() + b"}",
                 F32_ONE), "CP_EST_METADATA")

    # dtype.
    add("dtype_F4.safetensors", one(entry(dtype="F4")), "CP_EST_DTYPE")
    add("dtype_c64.safetensors", one(entry(dtype="c64", end=8), F32_ONE * 2), "CP_EST_DTYPE")
    add("dtype_lowercase_f32.safetensors", one(entry(dtype="f32")), "CP_EST_DTYPE")
    add("dtype_U16_unsupported.safetensors", one(entry(dtype="U16", end=2), b"\0\0"), "CP_EST_DTYPE")
    add("dtype_not_string.safetensors", one('{"dtype":32,"shape":[1],"data_offsets":[0,4]}'), "CP_EST_DTYPE")

    # shape.
    add("shape_negative.safetensors", one('{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}'), "CP_EST_SHAPE")
    add("shape_fraction.safetensors", one('{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}'), "CP_EST_SHAPE")
    add("shape_float_integral.safetensors", one('{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}'),
        "CP_EST_SHAPE")
    add("shape_1e300.safetensors", one('{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}'), "CP_EST_SHAPE")
    add("shape_2p64.safetensors", one('{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}'),
        "CP_EST_SHAPE")
    add("shape_2p63.safetensors", one('{"dtype":"U8","shape":[9223372036854775808,0],"data_offsets":[0,0]}', b""),
        "CP_EST_SHAPE")
    add("shape_9_dims.safetensors", one(entry(shape=(1,) * 9)), "CP_EST_SHAPE")
    add("shape_not_array.safetensors", one('{"dtype":"F32","shape":4,"data_offsets":[0,4]}'), "CP_EST_SHAPE")
    add("shape_string_dim.safetensors", one('{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}'), "CP_EST_SHAPE")
    add("shape_2p40_x_2p40.safetensors", one(entry(shape=(2**40, 2**40))), "CP_EST_SHAPE_OVERFLOW")
    add("shape_times_dtype_overflow.safetensors", one(entry(shape=(2**62,))), "CP_EST_SHAPE_OVERFLOW")

    # data_offsets.
    add("offsets_reversed.safetensors", one(entry(begin=4, end=0)), "CP_EST_OFFSETS")
    add("offsets_three.safetensors", one('{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}'), "CP_EST_OFFSETS")
    add("offsets_one.safetensors", one('{"dtype":"F32","shape":[1],"data_offsets":[4]}'), "CP_EST_OFFSETS")
    add("offsets_negative.safetensors", one('{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}'), "CP_EST_OFFSETS")
    add("offsets_float.safetensors", one('{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}'), "CP_EST_OFFSETS")
    add("offsets_not_array.safetensors", one('{"dtype":"F32","shape":[1],"data_offsets":"0-4"}'), "CP_EST_OFFSETS")
    add("offsets_size_mismatch.safetensors", one(entry(shape=(2,), end=4)), "CP_EST_OFFSETS_SIZE")
    add("offsets_size_mismatch_scalar.safetensors", one(entry(shape=(), end=8), F32_ONE * 2), "CP_EST_OFFSETS_SIZE")

    # Layout of the data section.
    add("hole_between.safetensors", st_bytes({"a": entry(), "b": entry(begin=8, end=12)}, F32_ONE * 3),
        "CP_EST_HOLE")
    add("hole_at_start.safetensors", one(entry(begin=4, end=8), F32_ONE * 2), "CP_EST_HOLE")
    add("overlap.safetensors", st_bytes({"a": entry(shape=(2,), end=8), "b": entry(begin=4, end=8)}, F32_ONE * 2),
        "CP_EST_OVERLAP")
    add("overlap_same_range.safetensors", st_bytes({"a": entry(), "b": entry()}, F32_ONE), "CP_EST_OVERLAP")
    add("trailing_bytes.safetensors", one(data=F32_ONE * 2), "CP_EST_TRAILING")
    add("trailing_no_tensors.safetensors", st_bytes(b"{}      ", b"\0"), "CP_EST_TRAILING")
    add("offsets_past_eof.safetensors", one(entry(shape=(1000,), end=4000), F32_ONE * 2), "CP_EST_TRUNCATED")
    add("offsets_past_eof_2p62.safetensors", one(entry(dtype="U8", shape=(2**62,), end=2**62), F32_ONE),
        "CP_EST_TRUNCATED")
    add("truncated_data.safetensors", one(entry(shape=(4,), end=16), F32_ONE * 3), "CP_EST_TRUNCATED")

    # Entries.
    add("entry_not_object.safetensors", one("[1,2]"), "CP_EST_ENTRY")
    add("entry_missing_offsets.safetensors", one('{"dtype":"F32","shape":[1]}'), "CP_EST_ENTRY")
    add("entry_extra_key.safetensors", one('{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}'),
        "CP_EST_ENTRY")
    add("entry_duplicate_key.safetensors", one('{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}'),
        "CP_EST_ENTRY")
    add("entry_name_with_nul.safetensors", one(name=b"w\\u0000x"), "CP_EST_ENTRY")
    return cases
