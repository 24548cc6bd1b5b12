"""The content digest of a GGUF file, written from the GGUF v3 layout (ggml's docs/gguf.md), not
from ctxpatch's reader: SHA-256 over every key/value entry whose key does not start with the
skipped prefix (whole and in file order), then the tensor infos, then the bytes from the aligned
data offset to the end of the file. `patch --to gguf` stores it as ctxpatch.content_sha256
(skipping "ctxpatch."); `check` recomputes it (docs/ci.md).

usage: content_digest.py FILE.gguf [PREFIX]   prints the digest and the stored value"""
import hashlib
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def parse(d):
    pos = 0

    def u32():
        nonlocal pos
        pos += 4
        return struct.unpack_from("<I", d, pos - 4)[0]

    def u64():
        nonlocal pos
        pos += 8
        return struct.unpack_from("<Q", d, pos - 8)[0]

    def string():
        nonlocal pos
        n = u64()
        pos += n
        return d[pos - n:pos]

    def value(t):
        nonlocal pos
        if t == STRING:
            return string()
        if t == ARRAY:
            elem, n = u32(), u64()
            return [value(elem) for _ in range(n)]
        size = SCALAR[t]
        pos += size
        return d[pos - size:pos]

    assert d[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    u32()  # version
    n_t, n_kv = u64(), u64()
    kvs = {}
    entries = []
    for _ in range(n_kv):
        start = pos
        key = string().decode()
        v = value(u32())
        entries.append((key, start, pos))
        kvs[key] = v
    info_off = pos
    for _ in range(n_t):
        string()
        nd = u32()
        pos += 8 * nd + 4 + 8
    info_end = pos
    align = struct.unpack("<I", kvs["general.alignment"])[0] if "general.alignment" in kvs else 32
    data_off = (info_end + align - 1) // align * align
    return kvs, entries, info_off, info_end, data_off


def digest(path, prefix="ctxpatch."):
    d = open(path, "rb").read()
    kvs, entries, info_off, info_end, data_off = parse(d)
    h = hashlib.sha256()
    for key, a, b in entries:
        if not key.startswith(prefix):
            h.update(d[a:b])
    h.update(d[info_off:info_end])
    h.update(d[data_off:])
    stored = kvs.get("ctxpatch.content_sha256")
    return h.hexdigest(), stored.decode() if isinstance(stored, bytes) else None


if __name__ == "__main__":
    have, stored = digest(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "ctxpatch.")
    print(have, stored or "-")
