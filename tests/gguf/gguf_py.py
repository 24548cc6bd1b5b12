"""A small GGUF v2/v3 reader in numpy, written from ggml's docs/gguf.md for the tests (independent of
the C reader and writer): read(path) -> (version, kv {key: value}, tensors {name: (ggml_type, ne,
bytes)}, alignment, tensor data offsets). Also q8_0(x): ggml's quantize_row_q8_0_ref in numpy."""
import struct
import numpy as np

SIZES = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
BLOCK = {0: (1, 4), 1: (1, 2), 8: (32, 34), 30: (1, 2)}


def read(path):
    b = open(path, "rb").read()
    at = 0

    def take(fmt):
        nonlocal at
        v = struct.unpack_from(fmt, b, at)[0]
        at += struct.calcsize(fmt)
        return v

    def string():
        nonlocal at
        n = take("<Q")
        s = b[at:at + n]
        at += n
        return s.decode("utf-8")

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)], et
        return take(SIZES[t])

    assert b[:4] == b"GGUF"
    at = 4
    version, n_t, n_kv = take("<I"), take("<Q"), take("<Q")
    kv, types = {}, {}
    for _ in range(n_kv):
        k = string()
        t = take("<I")
        kv[k] = value(t)
        types[k] = t
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        gt, off = take("<I"), take("<Q")
        infos.append((name, gt, ne, off))
    align = kv.get("general.alignment", 32)
    data = (at + align - 1) // align * align
    tensors = {}
    for name, gt, ne, off in infos:
        blk, size = BLOCK[gt]
        n = int(np.prod(ne)) // blk * size
        tensors[name] = (gt, ne, b[data + off:data + off + n])
    return version, kv, types, tensors, [i[0] for i in infos]


def f32(t):
    gt, ne, raw = t
    shape = list(reversed(ne))
    if gt == 0:
        return np.frombuffer(raw, "<f4").reshape(shape)
    if gt == 1:
        return np.frombuffer(raw, "<f2").astype(np.float32).reshape(shape)
    if gt == 30:
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if gt == 8:
        blocks = np.frombuffer(raw, np.uint8).reshape(-1, 34)
        d = blocks[:, :2].copy().view("<f2").astype(np.float32)
        q = blocks[:, 2:].view(np.int8).astype(np.float32)
        return (d * q).reshape(shape)
    raise ValueError(gt)


def q8_0(x):
    """ggml quantize_row_q8_0_ref: per 32 values d = max|x|/127, q = roundf(x/d) (half away from 0)."""
    x = np.asarray(x, np.float32).reshape(-1, 32)
    d = (np.abs(x).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (x * inv).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
    out = np.zeros((x.shape[0], 34), np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def st_f32(path):
    """An F32 safetensors file (the family tests' folders and their GGUF -> safetensors copies) as
    {name: array}."""
    import json
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]], "<f4").reshape(e["shape"])
            for k, e in hdr.items() if k != "__metadata__"}
