#!/usr/bin/python3
"""Compares two logits files (float32 LE [positions x vocab]): max|a-b| / max|b| against a
threshold (b is the reference, e.g. `ctxpatch forward`), printing the worst position.

  compare_logits.py A B --vocab V [--tol 1e-4] [--label NAME]

Prints `NAME: rel_err=R worst_pos=P (max|a-b| at P, argmax a/b at P) ok|FAIL`; exit 0 when
R <= tol, 1 when over, 2 when the files cannot be compared (size, shape, non-finite values).
"""
import argparse
import sys

import numpy as np


def load(path, vocab):
    a = np.fromfile(path, dtype="<f4")
    if a.size == 0 or a.size % vocab:
        sys.exit(f"compare_logits: {path}: {a.size} floats is not a whole number of rows of {vocab}")
    return a.reshape(-1, vocab).astype(np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--label", default="logits")
    args = ap.parse_args()
    a, b = load(args.a, args.vocab), load(args.b, args.vocab)
    if a.shape != b.shape:
        print(f"{args.label}: shapes differ: {a.shape} vs {b.shape}")
        return 2
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        print(f"{args.label}: non-finite values (a: {np.count_nonzero(~np.isfinite(a))}, "
              f"b: {np.count_nonzero(~np.isfinite(b))})")
        return 2
    diff = np.abs(a - b)
    scale = np.abs(b).max()
    rel = diff.max() / scale if scale > 0 else diff.max()
    pos = int(diff.max(axis=1).argmax())
    ok = rel <= args.tol
    print(f"{args.label}: rel_err={rel:.3e} worst_pos={pos} (max|a-b|={diff[pos].max():.3e}, "
          f"argmax a/b {int(a[pos].argmax())}/{int(b[pos].argmax())}) {'ok' if ok else 'FAIL'} "
          f"(tol {args.tol:g}, {a.shape[0]} positions)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
