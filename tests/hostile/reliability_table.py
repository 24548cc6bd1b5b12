#!/usr/bin/env python3
"""Prints the hostile-corpus part of docs/reliability.md: one row per generated hostile file,
with the exact error code its reader must return (the same list test_hostile_*.c asserts).
usage: reliability_table.py CORPUS_DIR   (as written by make_corpus.py)"""
import os
import sys


def main():
    root = sys.argv[1]
    total = 0
    for group in sorted(os.listdir(root)):
        tsv = os.path.join(root, group, "expected.tsv")
        if not os.path.isfile(tsv):
            continue
        rows = [line.rstrip("\n").split("\t") for line in open(tsv, encoding="utf-8") if line.strip()]
        rows = [r for r in rows if r[1] != "CP_OK"]  # controls are valid files, not classes
        print(f"\n### {group} ({len(rows)} classes, test_hostile_{group})\n")
        print("| hostile file | refused with |")
        print("|---|---|")
        for name, code in rows:
            print(f"| `{name}` | `{code}` |")
        total += len(rows)
    print(f"\n{total} classes in the generated corpus.")


if __name__ == "__main__":
    main()
