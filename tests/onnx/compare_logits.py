#!/usr/bin/python3
"""Compares two logits files (float32 LE [positions x vocab]): max|a-b| / max|b| against a
threshold (b is the reference, e.g. `ctxpatch forward`), printing the worst position.

  compare_logits.py A B --vocab V [--tol 1e-4] [--label NAME] [--also A2 [--also A3 ...]]
  compare_logits.py --pairs FILE [--tol 1e-4]

Prints `NAME: rel_err=R worst_pos=P (max|a-b| at P, argmax a/b at P) ok|FAIL` for A and for
each --also file (against the same B, labelled NAME+2, ...); exit 0 when every R <= tol, 1 when
one is over, 2 when files cannot be compared (size, shape, non-finite values). --pairs compares
each line `A B VOCAB NAME` of FILE (NAME may hold spaces) in one process, the exit the worst of them.
"""
import argparse
import sys

import numpy as np


class Unreadable(Exception):
    pass


def load(path, vocab):
    try:
        a = np.fromfile(path, dtype="<f4")
    except OSError as e:
        raise Unreadable(f"{path}: {e.strerror}")
    if a.size == 0 or a.size % vocab:
        raise Unreadable(f"{path}: {a.size} floats is not a whole number of rows of {vocab}")
    return a.reshape(-1, vocab).astype(np.float64)


def pairs(path, tol):
    worst = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            a, b, vocab, label = line.rstrip("\n").split(" ", 3)
            try:
                rc = compare(load(a, int(vocab)), load(b, int(vocab)), tol, label)
            except Unreadable as e:
                print(f"{label}: {e}")
                rc = 2
            worst = max(worst, rc)
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", nargs="?")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--pairs")
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--label", default="logits")
    ap.add_argument("--also", action="append", default=[])
    args = ap.parse_args()
    if args.pairs:
        return pairs(args.pairs, args.tol)
    if not args.b or not args.vocab:
        ap.error("give A, B and --vocab V, or --pairs FILE")
    try:
        b = load(args.b, args.vocab)
        rcs = [compare(load(path, args.vocab), b, args.tol, args.label + ("" if k == 0 else f"+{k + 1}"))
               for k, path in enumerate([args.a] + args.also)]
    except Unreadable as e:
        sys.exit(f"compare_logits: {e}")
    return max(rcs)


def compare(a, b, tol, label):
    if a.shape != b.shape:
        print(f"{label}: shapes differ: {a.shape} vs {b.shape}")
        return 2
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        print(f"{label}: non-finite values (a: {np.count_nonzero(~np.isfinite(a))}, "
              f"b: {np.count_nonzero(~np.isfinite(b))})")
        return 2
    diff = np.abs(a - b)
    scale = np.abs(b).max()
    rel = diff.max() / scale if scale > 0 else diff.max()
    pos = int(diff.max(axis=1).argmax())
    ok = rel <= tol
    print(f"{label}: rel_err={rel:.3e} worst_pos={pos} (max|a-b|={diff[pos].max():.3e}, "
          f"argmax a/b {int(a[pos].argmax())}/{int(b[pos].argmax())}) {'ok' if ok else 'FAIL'} "
          f"(tol {tol:g}, {a.shape[0]} positions)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
