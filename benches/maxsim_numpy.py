"""The numpy MaxSim references for `evident bench maxsim`, on the inputs it writes.

    python maxsim_numpy.py DIR   (DIR holds pages.f32, offsets.u32, queries.f32, dim.txt)

Prints one JSON object: seconds for the padded colpali-engine way (pages padded into batches,
einsum, max over page tokens, sum over query tokens) and for one flat matrix product with a
per-page max (np.maximum.reduceat), and the scores of both for a cross-check.
"""
import json, sys, time
from pathlib import Path

import numpy as np

d = Path(sys.argv[1])
dim = int((d / "dim.txt").read_text())
pages = np.fromfile(d / "pages.f32", dtype=np.float32).reshape(-1, dim)
offsets = np.fromfile(d / "offsets.u32", dtype=np.uint32).astype(np.int64)
queries = np.fromfile(d / "queries.f32", dtype=np.float32).reshape(-1, dim)
n_pages = len(offsets) - 1


def padded(batch=128):
    out = np.empty(n_pages, dtype=np.float32)
    for b0 in range(0, n_pages, batch):
        b1 = min(b0 + batch, n_pages)
        lens = offsets[b0 + 1:b1 + 1] - offsets[b0:b1]
        block = np.zeros((b1 - b0, lens.max(), dim), dtype=np.float32)
        for i in range(b1 - b0):
            block[i, :lens[i]] = pages[offsets[b0 + i]:offsets[b0 + i + 1]]
        out[b0:b1] = np.einsum("nd,bsd->bns", queries, block).max(axis=2).sum(axis=1)
    return out


def flat():
    sims = pages @ queries.T
    return np.maximum.reduceat(sims, offsets[:-1], axis=0).sum(axis=1)


results = {}
for name, fn in [("padded", padded), ("flat", flat)]:
    best = float("inf")
    for _ in range(2 if n_pages > 1000 else 3):
        t = time.perf_counter()
        scores = fn()
        best = min(best, time.perf_counter() - t)
    results[name] = {"seconds": best, "scores": scores.tolist()}
print(json.dumps(results))
