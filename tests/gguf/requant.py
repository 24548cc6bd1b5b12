#!/usr/bin/env python3
"""Rewrites a GGUF file with some F32 tensors quantised (numpy; ggml's reference rounding), to
check the reader's Q8_0 / Q4_0 decoding against llama.cpp on the same bytes.

Usage: requant.py IN OUT NAME_PATTERN=TYPE ...   e.g. 'attn_=Q8_0' 'ffn_gate=Q4_0'
A matrix is quantised to the first pattern contained in its name, when it is F32 and its
innermost dimension is a multiple of 32. Metadata is copied byte for byte; tensors are laid out
in order at general.alignment (default 32).
"""
import struct
import sys

import numpy as np

TYPES = {"F32": (0, 1, 4), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(d, p, t):
    if t == 8:
        return p + 8 + struct.unpack_from("<Q", d, p)[0]
    if t == 9:
        et, n = struct.unpack_from("<IQ", d, p)
        p += 12
        for _ in range(n):
            p = skip_value(d, p, et)
        return p
    return p + SCALAR[t]


def q8_0(x):
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    q = np.clip(np.trunc(b * inv[:, None] + np.copysign(0.5, b)), -128, 127).astype(np.int8)
    out = bytearray()
    for k in range(b.shape[0]):
        out += np.float16(d[k]).tobytes() + q[k].tobytes()
    return bytes(out)


def q4_0(x):
    b = x.reshape(-1, 32)
    idx = np.abs(b).argmax(axis=1)
    mx = b[np.arange(b.shape[0]), idx]
    d = mx / -8.0
    inv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0)
    q = np.minimum(15, (b * inv[:, None] + 8.5).astype(np.int8)).astype(np.uint8)
    out = bytearray()
    for k in range(b.shape[0]):
        out += np.float16(d[k]).tobytes() + (q[k, :16] | (q[k, 16:] << 4)).astype(np.uint8).tobytes()
    return bytes(out)


def main():
    src, dst, rules = sys.argv[1], sys.argv[2], [a.split("=") for a in sys.argv[3:]]
    d = open(src, "rb").read()
    version, n_t, n_kv = struct.unpack_from("<IQQ", d, 4)
    p, align = 24, 32
    for _ in range(n_kv):
        kl = struct.unpack_from("<Q", d, p)[0]
        key = d[p + 8:p + 8 + kl].decode()
        t = struct.unpack_from("<I", d, p + 8 + kl)[0]
        if key == "general.alignment":
            align = struct.unpack_from("<I", d, p + 12 + kl)[0]
        p = skip_value(d, p + 12 + kl, t)
    kv_bytes, infos = d[24:p], []
    for _ in range(n_t):
        nl = struct.unpack_from("<Q", d, p)[0]
        name = d[p + 8:p + 8 + nl]
        p += 8 + nl
        nd = struct.unpack_from("<I", d, p)[0]
        ne = struct.unpack_from(f"<{nd}Q", d, p + 4)
        t, off = struct.unpack_from("<IQ", d, p + 4 + 8 * nd)
        p += 4 + 8 * nd + 12
        infos.append((name, ne, t, off))
    base = p + (-p) % align
    out_infos, data = b"", b""
    for name, ne, t, off in infos:
        n = int(np.prod(ne)) if ne else 1
        raw = d[base + off:base + off + n * 4] if t == 0 else None
        new_t, blob = t, raw
        for pat, tname in rules:
            if t == 0 and len(ne) == 2 and pat in name.decode() and ne[0] % 32 == 0:
                x = np.frombuffer(raw, dtype="<f4")
                new_t, blob = TYPES[tname][0], (q8_0(x) if tname == "Q8_0" else q4_0(x))
                break
        assert blob is not None, "only F32 inputs are rewritten"
        data += b"\0" * ((-len(data)) % align)
        out_infos += struct.pack("<Q", len(name)) + name + struct.pack(f"<I{len(ne)}Q", len(ne), *ne) + \
            struct.pack("<IQ", new_t, len(data))
        data += blob
    head = b"GGUF" + struct.pack("<IQQ", version, n_t, n_kv) + kv_bytes + out_infos
    open(dst, "wb").write(head + b"\0" * ((-len(head)) % align) + data)


if __name__ == "__main__":
    main()
