"""One ring step on local CPU processes: computing with a block against passing it on.

    python benchmarks/ring_attention.py            # about 2 min on 2 cores

Starts 2 gloo processes (one torch thread each) with
``attnlib.distributed.run_on_local_ring``. For each block length ``L_b``
(queries per rank = keys per visiting block), float32, 8 heads of width 64,
every rank times, round after round:

- compute: ``tiled.attention`` of its queries against one block, with lse;
- transfer: one exchange of a key/value block with its neighbours
  (``pass_around``: send to the next rank, receive from the previous one);
- step: the two overlapped, as ``ring_attention`` does them;
- ring: a whole ``ring_attention`` forward call over the 2 ranks, per step.

Each repetition takes the slower rank (a step ends when both have), each
quantity its best repetition. A line ``t = alpha + bytes / beta`` fitted to
the transfers (least squares, neither term negative) gives gloo's latency
and bandwidth on this machine. Writes
``attnlib/book/results/ring_cpu_gloo.json`` with the machine and the date.
"""
from __future__ import annotations

import json
import time

import numpy as np
import torch
from scipy.optimize import nnls
import torch.distributed as dist

from attnlib import tiled
from attnlib.book import stored_results
from attnlib.distributed import pass_around, ring_attention, run_on_local_ring
from attnlib.distributed.time_model import block_bytes, block_flops
from measure import machine

RESULTS = stored_results.RESULTS / "ring_cpu_gloo.json"
WORLD_SIZE, HEADS, WIDTH, REPEATS = 2, 8, 64, 11
BLOCK_LENGTHS = (128, 256, 512, 1024, 2048)


def slowest_rank(seconds: float) -> float:
    longest = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    return float(longest)


def timed(work) -> float:
    dist.barrier()
    start = time.perf_counter()
    work()
    return slowest_rank(time.perf_counter() - start)


def measure_rank(rank: int, world_size: int, block_lengths) -> list[dict]:
    rows = []
    for block_len in block_lengths:
        generator = torch.Generator().manual_seed(rank)
        q, k, v = (torch.randn(1, HEADS, block_len, WIDTH, generator=generator) for _ in range(3))

        def compute():
            tiled.attention(q, k, v, return_lse=True)

        def transfer():
            pass_around([k, v]).wait()

        def step():
            exchange = pass_around([k, v])
            compute()
            exchange.wait()

        def ring():
            ring_attention(q, k, v, backend="tiled")

        parts = {"compute": compute, "transfer": transfer, "step": step, "ring": ring}
        times = {name: [] for name in parts}
        with torch.no_grad():
            for work in parts.values():
                work()  # warm up
            for _ in range(REPEATS):
                for name, work in parts.items():
                    times[name].append(timed(work))
        rows.append({"block_len": block_len, "bytes": block_bytes(block_len, HEADS, WIDTH, 4),
                     "flops": block_flops(block_len, HEADS, WIDTH),
                     **{f"{name}_seconds": min(t) for name, t in times.items()}})
        rows[-1]["ring_seconds"] /= world_size  # per step
    return rows


def main():
    at_start = machine()
    rows = run_on_local_ring(measure_rank, WORLD_SIZE, BLOCK_LENGTHS, timeout=1800)[0]
    sizes = np.array([r["bytes"] for r in rows])
    transfer = np.array([r["transfer_seconds"] for r in rows])
    # least squares with alpha, 1/beta >= 0: on a busy machine a free fit can go negative
    (latency, per_byte), _ = nnls(np.stack([np.ones_like(sizes), sizes], axis=1), transfer)
    fit = {"latency_seconds": float(latency), "bytes_per_second": float(1 / per_byte),
           "flops_per_second": float(max(r["flops"] / r["compute_seconds"] for r in rows))}
    print(f"{'L_b':>5} {'compute ms':>11} {'transfer ms':>12} {'step ms':>8} {'ring ms/step':>13}")
    for r in rows:
        print(f"{r['block_len']:5d} {1e3 * r['compute_seconds']:11.2f} {1e3 * r['transfer_seconds']:12.2f} "
              f"{1e3 * r['step_seconds']:8.2f} {1e3 * r['ring_seconds']:13.2f}")
    print(f"gloo: latency {1e6 * fit['latency_seconds']:.0f} us, {fit['bytes_per_second'] / 1e9:.2f} GB/s; "
          f"tiled on one thread: {fit['flops_per_second'] / 1e9:.1f} GFLOP/s")
    RESULTS.write_text(json.dumps({
        "machine": at_start, "world_size": WORLD_SIZE, "heads": HEADS, "width": WIDTH,
        "dtype": "float32", "threads_per_rank": 1, "repeats": REPEATS,
        "what": "seconds per ring step, best repetition of the slower rank; non-causal",
        "rows": rows, "fit": fit}, indent=1) + "\n")
    print(f"wrote {RESULTS.name}")


if __name__ == "__main__":
    main()
