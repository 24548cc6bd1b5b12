"""Minimal, deterministic file writers: safetensors (own writer, Debian ships no python
safetensors), PyTorch zip checkpoints, JSON. Writes are atomic (temp file + rename)."""
import collections
import io
import json
import os
import struct

import numpy as np
import torch

# torch dtype -> (safetensors dtype name, numpy view dtype used for the raw bytes)
_DTYPES = {
    torch.float32: ("F32", np.float32),
    torch.float16: ("F16", np.float16),
    torch.bfloat16: ("BF16", None),  # numpy has no bf16: bytes via an int16 view
    torch.float64: ("F64", np.float64),
    torch.int64: ("I64", np.int64),
    torch.int32: ("I32", np.int32),
}


def tensor_bytes(t):
    """Little-endian raw bytes of a contiguous CPU tensor."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy()
    else:
        arr = t.numpy()
    return arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()


def safetensors_bytes(tensors, metadata=None):
    """tensors: ordered mapping name -> torch tensor; metadata: dict str -> str.

    Layout: u64 little-endian header length N, N bytes of JSON header (padded with spaces so
    that the data starts at a multiple of 8), then the tensors' bytes in header order."""
    header = collections.OrderedDict()
    if metadata:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
        header["__metadata__"] = collections.OrderedDict(metadata)
    blobs = []
    offset = 0
    for name, t in tensors.items():
        dtype_name = _DTYPES[t.dtype][0]
        raw = tensor_bytes(t)
        assert len(raw) == t.numel() * t.element_size()
        header[name] = collections.OrderedDict(
            [("dtype", dtype_name), ("shape", list(t.shape)), ("data_offsets", [offset, offset + len(raw)])])
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-(8 + len(hjson))) % 8
    hjson += b" " * pad
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


def read_safetensors(path):
    """Reader used only by the self-checks (round trip of our own writer)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = collections.OrderedDict()
    rev = {v[0]: k for k, v in _DTYPES.items()}
    for name, info in header.items():
        s, e = info["data_offsets"]
        dt = rev[info["dtype"]]
        raw = bytearray(data[base + s:base + e])
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return meta, out


def torch_zip_bytes(tensors):
    """torch.save of an OrderedDict state dict to memory (zip format, archive prefix 'archive/').
    Each tensor is cloned so that it owns its storage (no shared or oversized storages)."""
    sd = collections.OrderedDict((k, v.detach().clone().contiguous()) for k, v in tensors.items())
    buf = io.BytesIO()
    torch.save(sd, buf)
    return buf.getvalue()


def json_bytes(obj, indent=2):
    return (json.dumps(obj, indent=indent) + "\n").encode("utf-8")


def write_atomic(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
