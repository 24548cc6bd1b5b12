#!/usr/bin/python3
"""Writes tests/goldens/safetensors/sample.safetensors and sample.json.

An independent safetensors writer, implemented here from the format description with struct and
json only (Debian has no python3-safetensors) and deliberately unlike ctxpatch's writer: tensors
in insertion order rather than sorted, "__metadata__" last, json.dumps' default ", "/": "
separators, and values produced by PyTorch. sample.json lists, in file order, each tensor's name,
dtype, shape and values (flattened, row-major; floats exactly as PyTorch holds them) so the C test
can compare what ctxpatch reads. Run with /usr/bin/python3 (needs torch):
    /usr/bin/python3 tests/reference/make_safetensors_golden.py
"""
import json
import os
import struct
import sys

import torch

assert sys.byteorder == "little"

DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def raw_bytes(t):
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    elif t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def main():
    torch.manual_seed(20240601)
    tensors = [
        ("model.embed.weight", torch.tensor([[1.5, -2.25, 3.140625, 0.0],
                                             [-0.0, 1e-3, 65280.0, -7.5],
                                             [0.1, 0.2, 0.3, 1e-38]]).to(torch.bfloat16)),
        ("norm.scale", torch.tensor([1.0, 65504.0, 6e-8, -0.5, 1.0 / 3.0]).to(torch.float16)),
        ("attn.mask", torch.tensor([[True, False, True], [False, False, True]])),
        ("positions", torch.tensor([0, -1, 2 ** 53 - 1, -(2 ** 53), 123456789012], dtype=torch.int64)),
        ("proj.weight", torch.randn(4, 6)),
        ("temperature", torch.tensor(0.1, dtype=torch.float32)),
        ("empty.bias", torch.zeros(0, 3)),
        ("counts", torch.tensor([[7, -8], [2 ** 31 - 1, -(2 ** 31)]], dtype=torch.int32)),
        ("bytes", torch.tensor([0, 128, 255], dtype=torch.uint8)),
        ("small", torch.tensor([-128, 0, 127], dtype=torch.int8)),
        ("shorts", torch.tensor([-32768, 32767], dtype=torch.int16)),
        ("double", torch.tensor([[0.1], [-1e300]], dtype=torch.float64)),
        ("a.scalar.flag", torch.tensor(True)),
    ]
    header = {}
    data = b""
    listing = []
    for name, t in tensors:
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
        values = t.reshape(-1).tolist() if t.dtype != torch.bfloat16 else t.float().reshape(-1).tolist()
        listing.append({"name": name, "dtype": DTYPES[t.dtype], "shape": list(t.shape), "values": values})
    metadata = {"format": "pt", "source": "make_safetensors_golden.py"}
    header["__metadata__"] = metadata
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "goldens", "safetensors")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "sample.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    with open(os.path.join(out_dir, "sample.json"), "w") as f:
        json.dump({"generator": "tests/reference/make_safetensors_golden.py (torch %s)" % torch.__version__,
                   "metadata": metadata, "tensors": listing}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
