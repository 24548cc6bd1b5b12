"""Hostile PyTorch zip checkpoints: code-executing pickles, lying sizes, broken pickles and zips.

make(outdir) -> [(file name, expected CP_E... code)]. Stdlib only and deterministic: zips are
written with fixed timestamps and pickles are assembled opcode by opcode. control.pt is a
well-formed checkpoint built with the same helpers, so every other case fails for its own reason.
"""
import os
import pickle
import struct
import warnings
import zlib
import zipfile

# ---- pickle assembly ------------------------------------------------------------------------

P2 = b"\x80\x02"
STOP = b"."
MARK = b"("
EMPTY_DICT = b"}"
EMPTY_LIST = b"]"
EMPTY_TUPLE = b")"
NEWFALSE = b"\x89"
REDUCE = b"R"


def U(s):
    b = s.encode("utf-8")
    return b"X" + struct.pack("<I", len(b)) + b


def I(n):
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 65536:
        return b"M" + struct.pack("<H", n)
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    nbytes = (n.bit_length() + 8) // 8
    return b"\x8a" + bytes([nbytes]) + n.to_bytes(nbytes, "little", signed=True)


def G(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def SG(module, name):
    return U(module) + U(name) + b"\x93"


def T(*parts):
    return MARK + b"".join(parts) + b"t"


def D(*pairs):
    """Dict from (key bytes, value bytes) pairs via SETITEMS."""
    return EMPTY_DICT + MARK + b"".join(k + v for k, v in pairs) + b"u"


def ODICT():
    return G("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE


def storage(key="0", cls="FloatStorage", numel=4, module="torch"):
    return T(U("storage"), G(module, cls), U(key), U("cpu"), I(numel)) + b"Q"


def tensor(key="0", cls="FloatStorage", numel=4, offset=0, size=(4,), stride=(1,), store=None):
    st = store if store is not None else storage(key, cls, numel)
    return (G("torch._utils", "_rebuild_tensor_v2")
            + T(st, I(offset), T(*map(I, size)), T(*map(I, stride)), NEWFALSE, ODICT()) + REDUCE)


def pkl(obj):
    return P2 + obj + STOP


F32x4 = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)

# ---- zip assembly ---------------------------------------------------------------------------


def write_zip(path, entries, compress=False):
    """entries: [(name, bytes)] in order; fixed timestamps."""
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)


def write_zip64(path, entries):
    """A stored zip whose every size and offset goes through zip64 fields (as torch writes
    archives past 4 GiB), built by hand: zipfile only uses zip64 when it must."""
    out, cd = bytearray(), bytearray()
    for name, data in entries:
        nm, crc, off = name.encode(), zlib.crc32(data), len(out)
        extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, crc, 0xFFFFFFFF,
                           0xFFFFFFFF, len(nm), len(extra)) + nm + extra + data
        cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21, crc, 0xFFFFFFFF,
                          0xFFFFFFFF, len(nm), len(cextra), 0, 0, 0, 0, 0xFFFFFFFF) + nm + cextra
    cd_off, z64_off = len(out), len(out) + len(cd)
    out += cd
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries),
                       len(cd), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64_off, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path, "wb") as f:
        f.write(out)


def deflated_zeros(n, chunk=1 << 20):
    """n zero bytes deflated, fed in chunks so the generator never holds n bytes."""
    c, out, zero = zlib.compressobj(9, zlib.DEFLATED, -15), [], bytes(chunk)
    for at in range(0, n, chunk):
        out.append(c.compress(zero[: min(chunk, n - at)]))
    out.append(c.flush())
    return b"".join(out)


def raw_deflate(data):
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def zeros_crc(n, chunk=1 << 20):
    crc, zero = 0, bytes(chunk)
    for at in range(0, n, chunk):
        crc = zlib.crc32(zero[: min(chunk, n - at)], crc)
    return crc


def write_raw_deflated(path, entries):
    """entries: [(name, raw deflate bytes, declared size, crc)], written by hand so an entry's
    bytes never exist inflated here and its declared size can lie."""
    out, cd = bytearray(), bytearray()
    for name, comp, usize, crc in entries:
        nm, off = name.encode(), len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(comp), usize,
                           len(nm), 0) + nm + comp
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(comp),
                          usize, len(nm), 0, 0, 0, 0, 0, off) + nm
    cd_off = len(out)
    out += cd
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(cd), cd_off, 0)
    with open(path, "wb") as f:
        f.write(out)


def torch_zip(path, data_pkl, records=None, prefix="archive", extra=(), compress=False):
    records = {"0": F32x4} if records is None else records
    entries = [(f"{prefix}/data.pkl", data_pkl)]
    entries += [(f"{prefix}/data/{k}", v) for k, v in records.items()]
    entries += [(f"{prefix}/version", b"3\n")]
    entries += list(extra)
    write_zip(path, entries, compress)


def call(fn_global, *args):
    return fn_global + T(*args) + REDUCE


def one(value):
    """{'w': value}"""
    return pkl(D((U("w"), value)))


# ---- cases ----------------------------------------------------------------------------------


def make(outdir):
    cases = []

    def add(name, code, data_pkl=None, raw=None, **kw):
        path = os.path.join(outdir, name)
        if raw is not None:
            with open(path, "wb") as f:
                f.write(raw)
        else:
            torch_zip(path, data_pkl, **kw)
        cases.append((name, code))

    add("control.pt", "CP_OK", one(tensor()))

    # Code execution attempts: every global outside torch's weights_only allowlist.
    for mod, fn in [("os", "system"), ("builtins", "eval"), ("posix", "system"),
                    ("subprocess", "Popen"), ("builtins", "exec"), ("nt", "system"),
                    ("builtins", "getattr"), ("torch", "load"), ("__builtin__", "eval")]:
        add(f"global_{mod.strip('_')}_{fn.lower()}.pt", "CP_EPKL_GLOBAL",
            one(call(G(mod, fn), U("touch /tmp/ctxpatch_pwned"))))
    for mod, fn in [("os", "system"), ("builtins", "eval"), ("subprocess", "Popen"),
                    ("builtins", "exec")]:
        add(f"stack_global_{mod}_{fn.lower()}.pt", "CP_EPKL_GLOBAL",
            one(call(SG(mod, fn), U("touch /tmp/ctxpatch_pwned"))))
    # The call hides after a good tensor, inside a nested dict, through the memo.
    add("reduce_exec_nested.pt", "CP_EPKL_GLOBAL",
        pkl(D((U("ok"), tensor()),
              (U("inner"), D((U("x"), G("builtins", "exec") + b"q\x05" + b"h\x05"
                             + T(U("import os")) + REDUCE))))))
    # torch resolves dotted names with getattr on protocol 4; the allowlist compares module
    # and name separately, so this is refused.
    add("global_dotted_name.pt", "CP_EPKL_GLOBAL",
        one(call(G("torch", "_utils._rebuild_tensor_v2"), U("x"))))
    add("global_module_prefix.pt", "CP_EPKL_GLOBAL",
        one(call(G("torch._utils._rebuild_tensor_v2", "__globals__"), U("x"))))
    # INST/OBJ are protocol-0/1 calls the weights-only loader does not know.
    add("inst_opcode.pt", "CP_EPKL_OPCODE", P2 + MARK + U("id") + b"ios\nsystem\n" + STOP)
    add("reduce_on_string.pt", "CP_EPKL_TYPE", one(U("os.system") + T(U("id")) + REDUCE))
    add("reduce_args_not_tuple.pt", "CP_EPKL_TYPE", one(ODICT()[:-2] + EMPTY_LIST + REDUCE))
    add("call_sparse_rebuild.pt", "CP_EUNSUPPORTED",
        one(call(G("torch._utils", "_rebuild_sparse_tensor"), I(0))))
    add("call_storage_class.pt", "CP_EUNSUPPORTED", one(call(G("torch", "FloatStorage"), I(4))))
    add("newobj_ordereddict.pt", "CP_EPKL_TYPE",
        one(G("collections", "OrderedDict") + EMPTY_TUPLE + b"\x81"))
    add("build_on_tensor.pt", "CP_EPKL_TYPE", one(tensor() + T(I(1)) + b"b"))
    add("build_on_plain_dict.pt", "CP_EPKL_TYPE", one(EMPTY_DICT + EMPTY_DICT + b"b"))

    # Sizes that lie.
    add("storage_numel_too_big.pt", "CP_EPT_STORAGE_SIZE", one(tensor(numel=1000)))
    add("storage_numel_overflow.pt", "CP_EPT_STORAGE_SIZE", one(tensor(numel=2**62, size=(4,))))
    add("storage_wrong_dtype_size.pt", "CP_EPT_STORAGE_SIZE",
        one(tensor(cls="DoubleStorage", numel=4)))
    add("view_past_storage.pt", "CP_EPT_TENSOR_BOUNDS", one(tensor(size=(5,))))
    add("view_offset_past.pt", "CP_EPT_TENSOR_BOUNDS", one(tensor(offset=3, size=(2,))))
    add("view_stride_past.pt", "CP_EPT_TENSOR_BOUNDS", one(tensor(size=(2, 2), stride=(3, 1))))
    add("view_stride_overflow.pt", "CP_EPT_TENSOR_BOUNDS",
        one(tensor(size=(3, 3), stride=(2**62, 2**62))))
    add("view_numel_overflow.pt", "CP_EPT_TENSOR_BOUNDS",
        one(tensor(size=(2**40, 2**40), stride=(0, 0))))
    # Zero elements: any sizes are fine and nothing is read (the product of the other sizes
    # would overflow).
    add("empty_huge_dims.pt", "CP_OK",
        pkl(D((U("w"), tensor()), (U("e"), tensor(size=(0, 2**40, 2**40), stride=(1, 1, 1))))))
    add("too_many_dims.pt", "CP_EUNSUPPORTED", one(tensor(size=(1,) * 9, stride=(1,) * 9)))
    add("size_stride_mismatch.pt", "CP_EPKL_TYPE", one(tensor(size=(2, 2), stride=(1,))))
    add("negative_size.pt", "CP_EPKL_TYPE", one(tensor(size=(-1,))))
    add("rebuild_size_is_string.pt", "CP_EPKL_TYPE",
        one(G("torch._utils", "_rebuild_tensor_v2")
            + T(storage(), I(0), U("4"), T(I(1)), NEWFALSE, ODICT()) + REDUCE))
    add("persid_not_storage.pt", "CP_EPKL_TYPE",
        one(T(U("module"), G("torch", "FloatStorage"), U("0"), U("cpu"), I(4)) + b"Q"))
    add("persid_type_not_storage.pt", "CP_EPKL_TYPE",
        one(T(U("storage"), G("collections", "OrderedDict"), U("0"), U("cpu"), I(4)) + b"Q"))
    add("quantized_storage.pt", "CP_EUNSUPPORTED", one(tensor(cls="QInt8Storage")))
    add("missing_record.pt", "CP_EPT_RECORD", one(tensor(key="7")))
    add("traversal_key.pt", "CP_EPT_ENTRY_NAME", one(tensor(key="../../etc/passwd")))

    # Container misuse.
    add("setitem_on_list.pt", "CP_EPKL_SETITEM", pkl(EMPTY_LIST + U("k") + U("v") + b"s"))
    add("setitems_on_tuple.pt", "CP_EPKL_SETITEM", pkl(EMPTY_TUPLE + MARK + U("k") + U("v") + b"u"))
    add("setitems_odd.pt", "CP_EPKL_STACK", pkl(EMPTY_DICT + MARK + U("k") + U("v") + U("x") + b"u"))
    add("append_to_dict.pt", "CP_EPKL_TYPE", pkl(EMPTY_DICT + U("v") + b"a"))

    # Memo and stack.
    add("memo_get_unset.pt", "CP_EPKL_MEMO", pkl(EMPTY_DICT + b"q\x00" + b"h\x05"))
    add("memo_long_get_unset.pt", "CP_EPKL_MEMO", pkl(EMPTY_DICT + b"j\xff\xff\xff\x7f"))
    add("memo_put_huge.pt", "CP_EPKL_MEMO", pkl(EMPTY_DICT + b"r\xff\xff\xff\xff"))
    add("stack_underflow.pt", "CP_EPKL_STACK", P2 + b"s" + STOP)
    add("stack_underflow_below_mark.pt", "CP_EPKL_STACK", P2 + EMPTY_DICT + MARK + b"s" + STOP)
    add("tuple_without_mark.pt", "CP_EPKL_STACK", P2 + U("a") + b"t" + STOP)
    add("stop_on_empty_stack.pt", "CP_EPKL_STACK", P2 + STOP)
    add("deep_mark.pt", "CP_EPKL_STACK", P2 + MARK * 100000 + STOP)

    # Truncation, lengths, opcodes, protocol.
    add("huge_binunicode.pt", "CP_EPKL_TRUNCATED", pkl(EMPTY_DICT + b"X\xf0\xff\xff\xff" + b"abc"))
    add("huge_binunicode8.pt", "CP_EPKL_TRUNCATED", P2 + b"\x8d" + b"\xff" * 7 + b"\x7f" + b"ab" + STOP)
    add("huge_binbytes.pt", "CP_EPKL_TRUNCATED", P2 + b"B\xff\xff\xff\x7f" + STOP)
    add("huge_long1.pt", "CP_EPKL_TRUNCATED", P2 + b"\x8a\xff" + b"\x01" * 10 + STOP)
    add("huge_frame.pt", "CP_EPKL_TRUNCATED", b"\x80\x04\x95" + b"\xff" * 8 + EMPTY_DICT + STOP)
    good = one(tensor())
    add("truncated_pickle.pt", "CP_EPKL_TRUNCATED", good[:good.index(b"cpu") + 1])
    add("truncated_global.pt", "CP_EPKL_TRUNCATED", P2 + b"ccollections\nOrderedD")
    add("no_stop.pt", "CP_EPKL_NO_STOP", good[:-1])
    add("empty_pickle.pt", "CP_EPKL_NO_STOP", b"")
    add("unknown_opcode.pt", "CP_EPKL_OPCODE", P2 + EMPTY_DICT + b"\xff" + STOP)
    add("protocol_6.pt", "CP_EPKL_PROTOCOL", b"\x80\x06" + EMPTY_DICT + STOP)
    add("invalid_utf8.pt", "CP_EPKL_TYPE", pkl(D((b"X\x02\x00\x00\x00\xc3\x28", tensor()))))

    # Resource limits (the big pickles are deflated, so the files stay small).
    add("object_limit.pt", "CP_EPKL_LIMIT",
        pkl(D((U("l"), EMPTY_LIST + b"Na" * 4_300_000))), compress=True)
    # 2^40 flattened leaves from 40 shared levels: d_k = {'a': d_{k-1}, 'b': d_{k-1}}, each
    # level built inline inside the next and reused through the memo.
    expr = D((U("a"), I(1)), (U("b"), U("x"))) + b"r" + struct.pack("<I", 0)
    for k in range(1, 41):
        expr = (EMPTY_DICT + MARK + U("a") + expr + U("b") + b"j" + struct.pack("<I", k - 1) + b"u"
                + b"r" + struct.pack("<I", k))
    add("shared_explosion.pt", "CP_EPKL_LIMIT", pkl(D((U("root"), expr))))
    nest = EMPTY_LIST * 200 + b"a" * 199
    add("deep_containers.pt", "CP_EPT_STRUCTURE", pkl(D((U("n"), nest))))
    add("self_cycle.pt", "CP_EPT_STRUCTURE",
        P2 + EMPTY_DICT + b"q\x00" + U("me") + b"h\x00" + b"s" + STOP)

    # Not a state dict.
    add("top_level_list.pt", "CP_EPT_STRUCTURE", pkl(EMPTY_LIST + tensor() + b"a"))
    add("bare_tensor.pt", "CP_EPT_STRUCTURE", pkl(tensor()))
    add("duplicate_flat_name.pt", "CP_EPT_STRUCTURE",
        pkl(D((U("a.b"), tensor()), (U("a"), D((U("b"), tensor()))))))
    add("dict_key_tensor.pt", "CP_EPT_STRUCTURE", pkl(D((tensor(), I(1)))))

    # Archive structure.
    path = os.path.join(outdir, "missing_data_pkl.pt")
    write_zip(path, [("archive/data/0", F32x4), ("archive/version", b"3\n")])
    cases.append(("missing_data_pkl.pt", "CP_EPT_NO_PICKLE"))
    path = os.path.join(outdir, "two_data_pkl.pt")
    write_zip(path, [("a/data.pkl", good), ("b/data.pkl", good), ("a/data/0", F32x4)])
    cases.append(("two_data_pkl.pt", "CP_EPT_NO_PICKLE"))
    path = os.path.join(outdir, "duplicate_entry.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name
        write_zip(path, [("archive/data.pkl", good), ("archive/data/0", F32x4),
                         ("archive/data/0", struct.pack("<4f", 6.0, 6.0, 6.0, 6.0))])
    cases.append(("duplicate_entry.pt", "CP_EPT_ENTRY_NAME"))
    add("traversal_prefix.pt", "CP_EPT_ENTRY_NAME", good, prefix="..")
    add("byteorder_big.pt", "CP_EPT_BYTEORDER", good, extra=[("archive/byteorder", b"big")])
    add("byteorder_unknown.pt", "CP_EPT_BYTEORDER", good, extra=[("archive/byteorder", b"middle")])
    add("byteorder_little.pt", "CP_OK", good, extra=[("archive/byteorder", b"little")])
    add("deflated_ok.pt", "CP_OK", good, compress=True)
    write_zip64(os.path.join(outdir, "zip64_ok.pt"),
                [("archive/data.pkl", good), ("archive/data/0", F32x4), ("archive/version", b"3\n")])
    cases.append(("zip64_ok.pt", "CP_OK"))

    # Zip bombs: a deflated record may inflate to at most the bytes its storage needs and at
    # most 1032 times its compressed size (DEFLATE's maximum). Bounds at N (accepted) and N+1.
    def deflated(name, code, records, data_pkl):
        """records: {key: (raw deflate bytes, declared size, crc)}"""
        ents = [("archive/data.pkl", raw_deflate(data_pkl), len(data_pkl), zlib.crc32(data_pkl))]
        ents += [(f"archive/data/{k}",) + r for k, r in records.items()]
        write_raw_deflated(os.path.join(outdir, name), ents)
        cases.append((name, code))

    zeros = 256 << 20  # 16 bytes of storage, 256 MiB of record: the outside finding's shape
    deflated("bomb_record_256m.pt", "CP_EPT_RECORD",
             {"0": (deflated_zeros(zeros), zeros, zeros_crc(zeros))}, good)
    deflated("record_storage_exact.pt", "CP_OK",
             {"0": (raw_deflate(F32x4), 16, zlib.crc32(F32x4))}, good)
    deflated("record_storage_plus1.pt", "CP_EPT_RECORD",
             {"0": (raw_deflate(F32x4 + b"\0"), 17, zlib.crc32(F32x4 + b"\0"))}, good)
    # Declared sizes of 1032 times the compressed bytes and one byte more, the storage agreeing,
    # so only the ratio decides; the view reads the 16 real bytes at the start of the record.
    comp = raw_deflate(F32x4)
    n = len(comp) * 1032
    deflated("record_ratio_1032.pt", "CP_OK", {"0": (comp, n, zlib.crc32(F32x4))},
             one(tensor(numel=n // 4)))
    deflated("record_ratio_1032_plus1.pt", "CP_EPT_RECORD", {"0": (comp, n + 1, zlib.crc32(F32x4))},
             one(tensor(cls="ByteStorage", numel=n + 1)))

    # Damaged archives.
    add("legacy.pt", "CP_EPT_LEGACY",
        raw=pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
        + pickle.dumps({"protocol_version": 1001}, protocol=2))
    add("legacy_protocol4.pt", "CP_EPT_LEGACY",
        raw=pickle.dumps(0x1950A86A20F9469CFC6C, protocol=4) + pickle.dumps(1001, protocol=4))
    add("not_a_zip.pt", "CP_EPT_ZIP", raw=b"this is not a checkpoint\n" * 4)
    add("empty_file.pt", "CP_EPT_ZIP", raw=b"")
    # A bare pickle (pickle.dump, or a checkpoint stripped of its zip) is named as such.
    for proto in (2, 3, 4, 5):
        add(f"bare_pickle_protocol{proto}.pt", "CP_EPT_LEGACY",
            raw=pickle.dumps({"a": 1, "w": [1.0, 2.0]}, protocol=proto))
    add("pickle_protocol6_not_zip.pt", "CP_EPT_ZIP", raw=b"\x80\x06" + b"}." * 20)
    torch_zip(os.path.join(outdir, "_whole.tmp"), good)
    with open(os.path.join(outdir, "_whole.tmp"), "rb") as f:
        whole = f.read()
    os.remove(os.path.join(outdir, "_whole.tmp"))
    add("truncated_zip.pt", "CP_EPT_ZIP", raw=whole[: len(whole) // 2])
    add("zip_tail_cut.pt", "CP_EPT_ZIP", raw=whole[:-10])
    # Central directory claims a bigger record than the local data: libzip's consistency check.
    cd = whole.find(b"PK\x01\x02")
    forged = bytearray(whole)
    struct.pack_into("<I", forged, cd + 20, 0x7FFF)  # compressed size of data.pkl
    struct.pack_into("<I", forged, cd + 24, 0x7FFF)  # uncompressed size
    add("cd_size_lie.pt", "CP_EPT_ZIP", raw=bytes(forged))
    # Deflated data.pkl whose stream is corrupted: inflating fails.
    torch_zip(os.path.join(outdir, "_defl.tmp"), good, compress=True)
    with open(os.path.join(outdir, "_defl.tmp"), "rb") as f:
        defl = bytearray(f.read())
    os.remove(os.path.join(outdir, "_defl.tmp"))
    nl = struct.unpack_from("<H", defl, 26)[0]
    xl = struct.unpack_from("<H", defl, 28)[0]
    start = 30 + nl + xl
    for k in range(start + 2, start + 12):
        defl[k] ^= 0x5A
    add("deflate_corrupt.pt", "CP_EPT_RECORD", raw=bytes(defl))
    return cases
