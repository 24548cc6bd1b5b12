#!/usr/bin/env python3
"""Independent checks for `ctxpatch inspect/convert`, using PyTorch as the reference reader.

usage: cli_convert_check.py inspect SOURCE.bin INSPECT.json
       cli_convert_check.py convert SOURCE.bin OUT_DIR
The safetensors output is parsed here from the format's spec (Debian has no python
safetensors), independently of the C reader."""
import json
import os
import struct
import sys

import torch

DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
      torch.uint8: "U8", torch.bool: "BOOL"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    if (8 + n) % 8:
        fail(f"{path}: header not padded to 8 bytes")
    if header.get("__metadata__", {}).get("format") != "pt":
        fail(f"{path}: __metadata__.format is not 'pt'")
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], blob[8 + n + b:8 + n + end])
    return out


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def main():
    mode, src, target = sys.argv[1:4]
    sd = torch.load(src, map_location="cpu", weights_only=True)
    if mode == "inspect":
        d = json.load(open(target))
        names = [t["name"] for t in d["tensors"]]
        if sorted(names) != sorted(sd):
            fail(f"tensor names differ: {sorted(set(names) ^ set(sd))}")
        for t in d["tensors"]:
            ref = sd[t["name"]]
            if t["shape"] != list(ref.shape) or t["dtype"] != DT[ref.dtype]:
                fail(f"{t['name']}: {t['dtype']}{t['shape']} vs torch {ref.dtype}{list(ref.shape)}")
        if d["parameter_count"] != sum(v.numel() for v in sd.values()):
            fail("parameter_count differs from torch")
        if d["tensor_count"] != len(sd):
            fail("tensor_count differs from torch")
    else:
        files = [f for f in os.listdir(target) if f.endswith(".safetensors")]
        got = {}
        for f in files:
            for k, v in read_safetensors(os.path.join(target, f)).items():
                if k in got:
                    fail(f"{k} in two shards")
                got[k] = v
        if len(files) > 1:
            idx = json.load(open(os.path.join(target, "model.safetensors.index.json")))
            if sorted(idx["weight_map"]) != sorted(sd):
                fail("index weight_map names differ")
            if idx["metadata"]["total_size"] != sum(len(v[2]) for v in got.values()):
                fail("index total_size wrong")
        if sorted(got) != sorted(sd):
            fail("converted tensor names differ")
        for k, ref in sd.items():
            dt, shape, data = got[k]
            if dt != DT[ref.dtype] or shape != list(ref.shape) or data != tensor_bytes(ref):
                fail(f"{k}: converted bytes differ from torch")
    print(f"ok: {mode} {src} matches torch ({len(sd)} tensors)")


if __name__ == "__main__":
    main()
