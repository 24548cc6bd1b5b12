#!/usr/bin/python3
"""Reference goldens for the PyTorch zip reader, computed by PyTorch itself (torch 1.13).

Run with Debian's /usr/bin/python3 (it has torch); the outputs are committed:

  tests/goldens/fixtures/<group>_<stem>.json   one per third-party fixture under
                                               ../shared/fixtures/third_party/{burn,candle}/*.pt
  tests/goldens/pytorch/<case>.pt + .json      small checkpoints written here by torch.save

Each JSON: {"file", "reference", "expect": "ok" | "CP_E...", "skipped", "tensors": [
  {"name", "dtype" (safetensors spelling), "shape", "values" (flat, row-major)}]}.
Names flatten nested dicts/lists with '.', as ctxpatch does: dict keys as str (ints in decimal,
True/False/None spelled as Python does), list/tuple positions in decimal; non-tensor leaves are
counted in "skipped". Float values are exact (JSON repr of the value widened to float64;
non-finite as the strings "inf", "-inf", "nan"); ints beyond 2^53 are decimal strings; bool as 0/1.

The reference loader is torch.load(path, weights_only=True). torch 1.13's weights-only unpickler
lacks a few opcodes newer torch accepts (BINFLOAT, and the protocol-4 STACK_GLOBAL/FRAME/MEMOIZE);
for such files the reference is torch.load with a pickle module whose find_class admits only
torch 1.13's weights-only allowlist, recorded in "reference".

Expected refusals come from torch's own view of the file: not a zip and torch cannot load it ->
CP_EPT_ZIP; not a zip but torch loads it (the legacy format) -> CP_EPT_LEGACY.
"""
import collections
import io
import json
import math
import os
import pickle
import shutil
import sys
import tempfile
import types
import zipfile

import torch
from torch._weights_only_unpickler import _get_allowed_globals

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.environ.get("CTXPATCH_FIXTURES", os.path.join(os.path.dirname(ROOT), "shared", "fixtures"))
OUT_FIXTURES = os.path.join(ROOT, "tests", "goldens", "fixtures")
OUT_OWN = os.path.join(ROOT, "tests", "goldens", "pytorch")

DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


class AllowlistUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if f"{module}.{name}" not in _get_allowed_globals():
            raise pickle.UnpicklingError(f"global {module}.{name} is not on the allowlist")
        return super().find_class(module, name)


allowlist_pickle = types.SimpleNamespace(Unpickler=AllowlistUnpickler, load=pickle.load,
                                         __name__="allowlist_pickle")


def torch_load(path):
    try:
        return torch.load(path, weights_only=True), "torch 1.13 torch.load(weights_only=True)"
    except pickle.UnpicklingError as e:
        if "Unsupported operand" not in str(e):
            raise
        return (torch.load(path, pickle_module=allowlist_pickle),
                "torch 1.13 torch.load with a find_class limited to the weights_only allowlist "
                "(its weights_only unpickler lacks an opcode this file uses)")


def key_str(k):
    if isinstance(k, str):
        return k
    if isinstance(k, bool) or k is None:
        return repr(k)
    if isinstance(k, int):
        return str(k)
    raise TypeError(f"unsupported key {k!r}")


def flatten(obj):
    tensors, skipped = [], 0

    def walk(o, prefix):
        nonlocal skipped
        items = o.items() if isinstance(o, dict) else enumerate(o)
        for k, v in items:
            name = key_str(k) if prefix is None else prefix + "." + key_str(k)
            if isinstance(v, torch.Tensor):
                tensors.append((name, v))
            elif isinstance(v, (dict, list, tuple)):
                walk(v, name)
            else:
                skipped += 1

    assert isinstance(obj, dict), type(obj)
    walk(obj, None)
    return tensors, skipped


def json_value(x, dtype):
    if dtype == torch.bool:
        return int(x)
    if dtype.is_floating_point:
        x = float(x)
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    x = int(x)
    return x if abs(x) < 2**53 else str(x)


def describe(t):
    t = t.detach()
    flat = t.contiguous().reshape(-1)
    if t.dtype.is_floating_point:
        flat = flat.to(torch.float64)
    return {
        "name": None,
        "dtype": DTYPES[t.dtype],
        "shape": list(t.shape),
        "values": [json_value(x, t.dtype) for x in flat.tolist()],
    }


def golden_for(path, rel):
    g = {"file": rel}
    if not zipfile.is_zipfile(path):
        try:
            torch.load(path, weights_only=True)
            g.update(reference="torch 1.13 loads it as the legacy non-zip format", expect="CP_EPT_LEGACY")
        except Exception as e:  # noqa: BLE001 - any refusal by torch
            g.update(reference=f"torch 1.13 refuses it ({type(e).__name__})", expect="CP_EPT_ZIP")
        return g
    obj, ref = torch_load(path)
    tensors, skipped = flatten(obj)
    out = []
    for name, t in tensors:
        d = describe(t)
        d["name"] = name
        out.append(d)
    g.update(reference=ref, expect="ok", skipped=skipped, tensors=out)
    return g


def write_json(path, g):
    with open(path, "w") as f:
        json.dump(g, f, indent=1, ensure_ascii=False)
        f.write("\n")


def fixture_goldens():
    third = os.path.join(FIXTURES, "third_party")
    if not os.path.isdir(third):
        print(f"fixtures folder {third} absent; fixture goldens not regenerated")
        return
    os.makedirs(OUT_FIXTURES, exist_ok=True)
    for group in ("burn", "candle"):
        for fname in sorted(os.listdir(os.path.join(third, group))):
            if not fname.endswith(".pt"):
                continue
            rel = f"{group}/{fname}"
            g = golden_for(os.path.join(third, rel), rel)
            write_json(os.path.join(OUT_FIXTURES, f"{group}_{fname[:-3]}.json"), g)
            print(f"{rel}: {g['expect']}, {len(g.get('tensors', []))} tensors")


def repack_deflated(src, dst):
    """Same entries, same order, every one compressed; fixed timestamps for determinism."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zi = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            zout.writestr(zi, zin.read(info.filename), compresslevel=9)


def own_cases():
    g = torch.Generator().manual_seed(1234)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    cases = {}
    cases["transposed"] = lambda: {
        "t": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        "permuted": (torch.arange(24, dtype=torch.float16) / 8).reshape(2, 3, 4).permute(2, 0, 1),
    }
    base = torch.arange(20, dtype=torch.float64) * 0.5
    cases["view_offset"] = lambda: {
        "contig_offset": base[5:9],
        "strided_offset": base.reshape(4, 5)[1:, ::2],
        "step": base[1::3],
        "scalar_view": base[7],
    }
    w = randn(4, 4)
    cases["shared"] = lambda: {"w": w, "w_t": w.t(), "row": w[2], "col": w[:, 1], "flat": w.view(16)}
    cases["nested"] = lambda: collections.OrderedDict([
        ("model", {"encoder": {"weight": randn(2, 3), "bias": randn(3)},
                   "head": collections.OrderedDict([("w", randn(3, 1, dtype=torch.bfloat16))])}),
        ("step", 7), ("lr", 0.125), ("name", "tiny"), ("flag", True), ("none", None),
        ("list", [torch.tensor([1, -2, 2**31 - 1], dtype=torch.int32), 3, "x"]),
        ("tuple", (torch.tensor([-32768, 5], dtype=torch.int16),)),
        ("\u00fc", torch.tensor([True, False, True])),
        (5, torch.tensor([0, 255, 7], dtype=torch.uint8)),
        ("empty", torch.zeros(0, 3)),
        ("big", torch.tensor([2**62 + 1, -(2**63)], dtype=torch.int64)),
        ("special", torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0])),
    ])

    def module_state():
        torch.manual_seed(7)
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).to(torch.bfloat16)
        return m.state_dict()  # an OrderedDict with _metadata, pickled with BUILD

    cases["module"] = module_state
    cases["parameter"] = lambda: {
        "p": torch.nn.Parameter(randn(2, 3)),
        "frozen": torch.nn.Parameter(randn(3), requires_grad=False),
    }
    memo_base = torch.arange(70, dtype=torch.int32)
    cases["memo"] = lambda: {f"v{i:02d}": memo_base[i] for i in range(70)}  # > 256 memo slots
    cases["empty_dict"] = lambda: {}
    return cases


def own_goldens():
    if os.path.isdir(OUT_OWN):
        shutil.rmtree(OUT_OWN)
    os.makedirs(OUT_OWN)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in own_cases().items():
            path = os.path.join(OUT_OWN, name + ".pt")
            torch.save(make(), path)
        # protocol 4: FRAME, MEMOIZE, SHORT_BINUNICODE, STACK_GLOBAL
        torch.save({"a": torch.arange(6, dtype=torch.float32).reshape(2, 3), "n": 1},
                   os.path.join(OUT_OWN, "protocol4.pt"), pickle_protocol=4)
        # every entry deflated: data == NULL, bytes through cp_pt_read
        src = os.path.join(tmp, "compressed.pt")
        torch.manual_seed(3)
        w = torch.randn(3, 5)
        torch.save({"w": w, "w_t": w.t(), "tail": w[1:, 2:], "p": torch.nn.Parameter(torch.randn(2))}, src)
        repack_deflated(src, os.path.join(OUT_OWN, "compressed.pt"))
    for fname in sorted(os.listdir(OUT_OWN)):
        if fname.endswith(".pt"):
            path = os.path.join(OUT_OWN, fname)
            g = golden_for(path, fname)
            write_json(path[:-3] + ".json", g)
            print(f"pytorch/{fname}: {g['expect']}, {len(g.get('tensors', []))} tensors, "
                  f"{os.path.getsize(path)} bytes")


def main():
    torch.set_num_threads(1)
    fixture_goldens()
    own_goldens()


if __name__ == "__main__":
    sys.exit(main())
