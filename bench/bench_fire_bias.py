#!/usr/bin/env python3
"""Times the FIRE bias of python/ctxpatch_ref/nets.py (an MLP over every query-key pair) at one
prompt length for several chunk sizes, side by side in one run: the chunk bounds the
[rows, Tk, width] temporary. nets.py uses FIRE_CHUNK_PAIRS (1 << 14).

    OMP_NUM_THREADS=1 scripts/py bench/bench_fire_bias.py [--len 4096] [--repeat 3]
"""
import argparse
import time

import torch

from ctxpatch_ref import nets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--len", type=int, default=4096)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    T = a.len
    x = torch.rand(T, T, generator=g)
    W1, b1 = torch.randn(a.width, generator=g), torch.randn(a.width, generator=g)
    W2, b2 = torch.randn(a.heads, a.width, generator=g), torch.randn(a.heads, generator=g)
    ref = None
    print("pairs per chunk   best of %d (s)" % a.repeat)
    for pairs in (1 << 22, 1 << 18, 1 << 16, 1 << 14, 1 << 12):
        best = None
        for _ in range(a.repeat):
            t = time.perf_counter()
            out = nets.fire_mlp(x, W1, b1, W2, b2, pairs)
            dt = time.perf_counter() - t
            best = dt if best is None else min(best, dt)
        ref = out if ref is None else ref
        assert torch.equal(out, ref), "chunking changed the result"
        print("%15d   %8.3f" % (pairs, best))


if __name__ == "__main__":
    main()
