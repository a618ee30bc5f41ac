"""Which block sizes make the tiled path fastest on this machine.

    python benchmarks/tiled_block_sizes.py

Times ``attnlib.tiled.attention`` at n = 4096 (d = 64, 8 heads, float32)
for every pair of query and key block sizes below. The pairs take turns,
round after round, and each keeps its best time, so that a busy spell of a
shared machine does not fall on one pair only. Writes
``attnlib/book/results/tiled_block_sizes.json`` with the machine and date.
``DEFAULT_BLOCK_Q`` and ``DEFAULT_BLOCK_K`` in ``attnlib/tiled.py`` were
chosen from this run.
"""
from __future__ import annotations

import json
import time

import torch

from attnlib import tiled
from attnlib.book import stored_results
from measure import machine

RESULTS = stored_results.RESULTS / "tiled_block_sizes.json"
N, D, HEADS, ROUNDS = 4096, 64, 8, 5
BLOCK_Q = (64, 128, 256, 512)
BLOCK_K = (128, 256, 512, 1024)


def main():
    at_start = machine()
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, N, D) for _ in range(3))
    pairs = [(bq, bk) for bq in BLOCK_Q for bk in BLOCK_K]
    times = {pair: [] for pair in pairs}
    with torch.no_grad():
        tiled.attention(q, k, v)  # warm up
        for _ in range(ROUNDS):
            for bq, bk in pairs:
                start = time.perf_counter()
                tiled.attention(q, k, v, block_q=bq, block_k=bk)
                times[bq, bk].append(time.perf_counter() - start)
    rows = [{"block_q": bq, "block_k": bk, "best_seconds": min(t), "seconds": sorted(t)[len(t) // 2]}
            for (bq, bk), t in times.items()]
    for row in rows:
        print(f"block_q={row['block_q']:<4} block_k={row['block_k']:<5} best {row['best_seconds']:.3f} s  "
              f"median {row['seconds']:.3f} s")
    best = min(rows, key=lambda r: r["best_seconds"])
    print(f"fastest: block_q={best['block_q']}, block_k={best['block_k']}")
    RESULTS.write_text(json.dumps({"machine": at_start, "n": N, "d": D, "heads": HEADS, "dtype": "float32",
                                   "rounds": ROUNDS, "rows": rows}, indent=1) + "\n")
    print(f"wrote {RESULTS.name}")


if __name__ == "__main__":
    main()
