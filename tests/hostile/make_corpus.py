#!/usr/bin/env python3
"""Writes the hostile-input corpus: malformed or malicious checkpoint files, each paired with the
exact ctxpatch error code the readers must return. Stdlib only, deterministic.

Layout written under OUT:
  OUT/<group>/<case file>       the hostile file (or folder)
  OUT/<group>/expected.tsv      "<case file>\t<CP_E... code name>" per line
Groups are the modules hostile_*.py beside this script; each defines make(outdir) -> [(name, code)].
"""
import importlib.util
import os
import shutil
import sys


def main():
    out = sys.argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    total = 0
    for fname in sorted(os.listdir(here)):
        if not (fname.startswith("hostile_") and fname.endswith(".py")):
            continue
        group = fname[len("hostile_"):-3]
        spec = importlib.util.spec_from_file_location(fname[:-3], os.path.join(here, fname))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        gdir = os.path.join(out, group)
        os.makedirs(gdir)
        cases = mod.make(gdir)
        names = [n for n, _ in cases]
        assert len(names) == len(set(names)), f"{group}: duplicate case names"
        with open(os.path.join(gdir, "expected.tsv"), "w") as f:
            for name, code in cases:
                assert os.path.exists(os.path.join(gdir, name)), f"{group}/{name} not written"
                f.write(f"{name}\t{code}\n")
        total += len(cases)
        print(f"{group}: {len(cases)} cases")
    print(f"hostile corpus: {total} files in {out}")


if __name__ == "__main__":
    main()
