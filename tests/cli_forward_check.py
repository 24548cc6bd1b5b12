"""Checks `ctxpatch forward` outputs against a golden case file (stdlib only).

usage: cli_forward_check.py logits CASE.safetensors LOGITS.bin
       cli_forward_check.py stats CASE.safetensors STATS.json
       cli_forward_check.py generated CASE.safetensors "1,2,3"
       cli_forward_check.py ids CASE.safetensors input_ids|decoder_input_ids   (prints "3,17,5")
       cli_forward_check.py rule CASE.safetensors   (prints the case's rule JSON)
"""
import json
import struct
import sys


def read_case(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        fmt = {"F32": "f", "I64": "q"}[info["dtype"]]
        out[name] = list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw))
    return out


def rel_err(a, b):
    assert len(a) == len(b), (len(a), len(b))
    num = max(abs(x - y) for x, y in zip(a, b))
    den = max(abs(y) for y in b)
    return num / den if den else num


def read_rule(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))["__metadata__"]["rule"]


def main():
    if sys.argv[1] == "rule":
        print(read_rule(sys.argv[2]))
        return 0
    what, case = sys.argv[1], read_case(sys.argv[2])
    if what == "ids":
        print(",".join(str(v) for v in case[sys.argv[3]]))
        return 0
    if what == "logits":
        with open(sys.argv[3], "rb") as f:
            raw = f.read()
        got = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        e = rel_err(got, case["logits"])
    elif what == "stats":
        with open(sys.argv[3]) as f:
            mods = json.load(f)["modules"]
        pm = [v for m in mods for v in m["pmax"]]
        en = [v for m in mods for v in m["entropy"]]
        e = max(rel_err(pm, case["stats_pmax"]), rel_err(en, case["stats_entropy"]))
    elif what == "generated":
        got = [int(v) for v in sys.argv[3].split(",")]
        return 0 if got == case["generated"] else 1
    else:
        raise SystemExit("unknown check " + what)
    print("%s relative error %.3g" % (what, e))
    return 0 if e <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
