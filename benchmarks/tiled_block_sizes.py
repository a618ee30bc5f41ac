"""Which block sizes make the tiled path fastest on this machine.

    python benchmarks/tiled_block_sizes.py

Times ``attnlib.tiled.attention`` at n = 4096 (d = 64, 8 heads, float32)
for every pair of query and key block sizes below, each in a fresh process
(see ``measure.py``), and writes ``results/tiled_block_sizes.json`` with the
machine and date. ``DEFAULT_BLOCK_Q`` and ``DEFAULT_BLOCK_K`` in
``attnlib/tiled.py`` come from this run.
"""
from __future__ import annotations

import json
import pathlib

from measure import machine, measure

RESULTS = pathlib.Path(__file__).parent / "results" / "tiled_block_sizes.json"
N, D, HEADS = 4096, 64, 8
BLOCK_Q = (64, 128, 256, 512)
BLOCK_K = (128, 256, 512, 1024)


def main():
    rows = []
    for block_q in BLOCK_Q:
        for block_k in BLOCK_K:
            row = measure("tiled", N, D, HEADS, block_q=block_q, block_k=block_k)
            rows.append(row)
            print(f"block_q={block_q:<4} block_k={block_k:<5} best {row['best_seconds']:.3f} s  "
                  f"median {row['seconds']:.3f} s", flush=True)
    best = min(rows, key=lambda r: r["best_seconds"])
    print(f"fastest: block_q={best['block_q']}, block_k={best['block_k']}")
    RESULTS.write_text(json.dumps({"machine": machine(), "n": N, "d": D, "heads": HEADS,
                                   "dtype": "float32", "rows": rows}, indent=1) + "\n")
    print(f"wrote {RESULTS.name}")


if __name__ == "__main__":
    main()
