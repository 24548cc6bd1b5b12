#!/usr/bin/env python3
"""Rewrites a GGUF file with some F32 tensors quantised (numpy; ggml's reference rounding), to
check the reader's Q8_0 / Q4_0 / Q4_K decoding against llama.cpp on the same bytes.

Usage: requant.py IN OUT NAME_PATTERN=TYPE ...   e.g. 'attn_=Q8_0' 'ffn_gate=Q4_0' 'ffn_up=Q4_K'
A matrix is quantised to the first pattern contained in its name, when it is F32 and its
innermost dimension is a multiple of the type's block (32; 256 for Q4_K); the names quantised
are printed, one "NAME TYPE" a line. Metadata is copied byte for byte; tensors are laid out in
order at general.alignment (default 32). TYPE "retype:Q6_K" (or Q5_K) keeps an F32 tensor's bytes
and only changes its type id, which makes a file with a tensor of a type the reader refuses.

The quantisers follow ggml's reference (quantize_row_*_ref in ggml-quants.c), written here in
numpy from the block layouts: Q8_0 and Q4_0 blocks of 32 with an f16 scale; Q4_K super-blocks of
256 = 8 sub-blocks of 32, each sub-block's scale and min fitted by make_qkx2_quants (weighted
least squares over 21 trial scales), quantised to 6 bits against the super-block's f16 d and dmin,
packed in 12 bytes, then the 4-bit values recomputed from the decoded scales.
"""
import struct
import sys

import numpy as np

TYPES = {"F32": (0, 1, 4), "Q4_0": (2, 32, 18), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144)}
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


def nearest(v):
    """ggml's nearest_int: round half to even in float32."""
    return np.rint(v).astype(np.int64)


def qkx2(x, nmax=15, rmin=-1.0, rdelta=0.1, nstep=20):
    """make_qkx2_quants for every row of x [n, 32] (weights av_x + |x|, squared error): returns
    (scale [n], the_min [n] >= 0, L [n, 32]) with x ~ scale * L - the_min."""
    f = np.float32
    x = x.astype(f)
    w = (np.sqrt((x * x).sum(1) / f(32)).astype(f)[:, None] + np.abs(x)).astype(f)
    mn, mx = np.minimum(x.min(1), f(0)), x.max(1)
    sum_w, sum_x = w.sum(1), (w * x).sum(1)
    flat = mx == mn
    rng = np.where(flat, f(1), mx - mn)
    iscale = f(nmax) / rng
    scale = f(1) / iscale
    L = np.clip(nearest(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    best = (w * (scale[:, None] * L + mn[:, None] - x) ** 2).sum(1)
    for step in range(nstep + 1):
        iscale = f(rmin + rdelta * step + nmax) / rng
        la = np.clip(nearest(iscale[:, None] * (x - mn[:, None])), 0, nmax).astype(f)
        sl, sl2, sxl = (w * la).sum(1), (w * la * la).sum(1), (w * la * x).sum(1)
        D = sum_w * sl2 - sl * sl
        ok = D > 0
        Ds = np.where(ok, D, f(1))
        ts, tm = (sum_w * sxl - sum_x * sl) / Ds, (sl2 * sum_x - sl * sxl) / Ds
        pos = tm > 0
        ts = np.where(pos, sxl / np.where(sl2 > 0, sl2, f(1)), ts)
        tm = np.where(pos, f(0), tm)
        mad = (w * (ts[:, None] * la + tm[:, None] - x) ** 2).sum(1)
        take = ok & (mad < best)
        L = np.where(take[:, None], la, L)
        best, scale, mn = np.where(take, mad, best), np.where(take, ts, scale), np.where(take, tm, mn)
    L = np.where(flat[:, None], 0, L)
    scale = np.where(flat, f(0), scale)
    return scale.astype(f), (-mn).astype(f), L.astype(np.int64)


def q4_k(x):
    f = np.float32
    sb = x.astype(f).reshape(-1, 8, 32)
    n = sb.shape[0]
    scales, mins, L = qkx2(sb.reshape(-1, 32))
    scales, mins, L = scales.reshape(n, 8), mins.reshape(n, 8), L.reshape(n, 8, 32)
    ms, mm = scales.max(1), mins.max(1)
    inv_s = np.where(ms > 0, f(63) / np.where(ms > 0, ms, f(1)), f(0))
    inv_m = np.where(mm > 0, f(63) / np.where(mm > 0, mm, f(1)), f(0))
    ls = np.clip(nearest(inv_s[:, None] * scales), 0, 63)
    lm = np.clip(nearest(inv_m[:, None] * mins), 0, 63)
    packed = np.zeros((n, 12), dtype=np.int64)
    packed[:, 0:4], packed[:, 4:8] = ls[:, :4], lm[:, :4]
    packed[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    packed[:, 0:4] |= (ls[:, 4:] >> 4) << 6
    packed[:, 4:8] |= (lm[:, 4:] >> 4) << 6
    d, dmin = (ms / f(63)).astype(np.float16), (mm / f(63)).astype(np.float16)
    # The 4-bit values again, from the scales as they decode (sub-blocks with d*sc == 0 keep L).
    dj = d.astype(f)[:, None] * ls.astype(f)
    mj = dmin.astype(f)[:, None] * lm.astype(f)
    nz = dj != 0
    again = np.clip(nearest((sb + mj[:, :, None]) / np.where(nz, dj, f(1))[:, :, None]), 0, 15)
    L = np.where(nz[:, :, None], again, L).reshape(n, 4, 2, 32)
    qs = (L[:, :, 0, :] | (L[:, :, 1, :] << 4)).reshape(n, 128).astype(np.uint8)
    out = np.zeros((n, 144), dtype=np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(n, 2)
    out[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
    out[:, 4:16] = packed.astype(np.uint8)
    out[:, 16:] = qs
    return out.tobytes()


QUANT = {"Q8_0": q8_0, "Q4_0": q4_0, "Q4_K": q4_k}
RETYPE = {"retype:Q5_K": 13, "retype:Q6_K": 14}


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
            if t == 0 and len(ne) == 2 and pat in name.decode() and tname in RETYPE and ne[0] % 256 == 0:
                new_t, blob = RETYPE[tname], raw  # stored bytes shrink to the new type's: still inside
                print(name.decode(), tname)
                break
            if t == 0 and len(ne) == 2 and pat in name.decode() and ne[0] % TYPES[tname][1] == 0:
                x = np.frombuffer(raw, dtype="<f4")
                new_t, blob = TYPES[tname][0], QUANT[tname](x)
                print(name.decode(), tname)
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
