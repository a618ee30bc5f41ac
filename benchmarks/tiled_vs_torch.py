"""The tiled path's throughput as a fraction of torch's own CPU kernel.

    python benchmarks/tiled_vs_torch.py            # n = 1024 ... 8192 (about 5 min on 2 quiet cores)
    python benchmarks/tiled_vs_torch.py --quick    # n = 512, 1024; results are not stored
    python benchmarks/tiled_vs_torch.py --sizes 4096 --dtypes float32   # a part; not stored
    python benchmarks/tiled_vs_torch.py --profile  # where one call's time goes; not stored

For each n, dtype (float32, bfloat16), causal or not, and pass (the forward
under ``torch.no_grad``, or forward plus backward), ``attnlib.tiled.attention``
and ``torch.nn.functional.scaled_dot_product_attention`` are timed in one
process on the same ``(1, 8, n, 64)`` inputs, taking turns call after call
(which goes first alternates), so that a busy spell of a shared machine falls
on both. Each prints the median of its calls and tiled's throughput as a
fraction of torch's, ``torch seconds / tiled seconds`` (higher is better;
1.0 is parity), with the CPU, the thread count and the load average. Writes
``attnlib/book/results/tiled_vs_torch.json``, which Chapter 8's table reads.

The run begins by timing the naive and the tiled path on small problems,
n = 64 to 1024 (forward, H = 8, d = 64, without and with the causal mask,
median of 21 calls taking turns), where ``backend="auto"`` chooses between
them (``tiled.AUTO_MIN_SCORES_PER_HEAD``): first, while the process is as
fresh as a reader's, since what the C allocator has kept from large
problems changes the naive path's time on small ones.

``--profile`` prints, on one thread, the share of each torch operation in
one tiled call (``torch.profiler``, forward and forward plus backward at the
first ``--sizes``, 4096 by default) and the times behind the tiled path's
choices: per ``(8, 256, 512)`` tile of scores, ``exp`` against ``exp2`` of
the scores times ``log2 e``, and the scores' matrix product in float32 and
in bfloat16; per forward call, in a fresh process (what the C allocator
keeps from earlier large problems changes the count), the minor page
faults and the time of the tiled path as it is (each unit of work reuses
its tile buffers), of the tiled path with a fresh tensor for every tile,
and of torch. It measures
thread CPU time, which other work on the machine inflates less than wall
time. The stored run ends with the same profile at n = 1024 and 4096.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from unittest import mock

import torch
import torch.nn.functional as F

import attnlib
from attnlib import tiled
from attnlib.book import stored_results
from measure import machine

RESULTS = stored_results.RESULTS / "tiled_vs_torch.json"
HEADS, WIDTH = 8, 64
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PASSES = ("forward", "forward+backward")
LENGTHS = [1024, 2048, 4096, 8192]
#: n for the naive path against the tiled path, around auto's threshold
SMALL_LENGTHS = [64, 128, 256, 512, 1024]
#: n of the stored run's profiles: the largest gap to torch, and a large problem
PROFILED_LENGTHS = [1024, 4096]
#: torch operations that are the tiles' matrix products
MATRIX_PRODUCTS = ("aten::bmm", "aten::baddbmm_", "aten::addmm_")
#: The issue's goals, tiled/torch throughput for n = 1024 ... 8192.
GOALS = {"forward": 0.9, "forward+backward": 0.7}


def _timed_call(fn, q, k, v, causal: bool, backward: bool) -> float:
    start = time.perf_counter()
    if backward:
        fn(q, k, v, is_causal=causal).sum().backward()
        for x in (q, k, v):
            x.grad = None
    else:
        with torch.no_grad():
            fn(q, k, v, is_causal=causal)
    return time.perf_counter() - start


def compare(n: int, dtype: torch.dtype, causal: bool, backward: bool, calls: int) -> dict:
    """Median seconds of tiled and torch on one problem, measured in turns."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, n, WIDTH, dtype=dtype, requires_grad=backward) for _ in range(3))
    methods = {"tiled": tiled.attention, "torch": F.scaled_dot_product_attention}
    if n < 4096 or not backward:  # the smaller sizes have warmed up the larger backward passes
        for fn in methods.values():
            _timed_call(fn, q, k, v, causal, backward)
    times = {name: [] for name in methods}
    for call in range(calls):
        order = list(methods) if call % 2 == 0 else list(methods)[::-1]
        for name in order:
            times[name].append(_timed_call(methods[name], q, k, v, causal, backward))
    tiled_s, torch_s = (statistics.median(times[name]) for name in methods)
    return {"n": n, "dtype": str(dtype).removeprefix("torch."), "causal": causal,
            "pass": PASSES[backward], "calls": calls, "tiled_seconds": tiled_s, "torch_seconds": torch_s,
            "ratio": torch_s / tiled_s, "load_average_1min": round(os.getloadavg()[0], 2)}


def small_problems(calls: int = 21) -> list[dict]:
    """Median ms of the naive and the tiled forward on ``(1, 8, n, 64)`` for each small n, in turns."""
    rows = []
    print(f"naive and tiled forward, H = {HEADS}, d = {WIDTH}, median of {calls} calls in turns:")
    for n, causal in ((n, causal) for n in SMALL_LENGTHS for causal in (False, True)):
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, HEADS, n, WIDTH) for _ in range(3))
        paths = {path: (lambda path=path: attnlib.scaled_dot_product_attention(
            q, k, v, is_causal=causal, backend=path)) for path in ("naive", "tiled")}
        times = {path: [] for path in paths}
        with torch.no_grad():
            for fn in paths.values():
                fn()
            for call in range(calls):
                for path in (list(paths) if call % 2 == 0 else list(paths)[::-1]):
                    start = time.perf_counter()
                    paths[path]()
                    times[path].append(time.perf_counter() - start)
        row = {"n": n, "causal": causal,
               **{f"{path}_ms": 1e3 * statistics.median(times[path]) for path in paths}}
        rows.append(row)
        print(f"  n={n:<4} {'causal' if causal else '':>6} naive {row['naive_ms']:7.3f} ms  "
              f"tiled {row['tiled_ms']:7.3f} ms")
    return rows


def _median_cpu_ms(fn, calls: int = 21) -> float:
    """Median thread CPU time of ``fn()`` in milliseconds."""
    times = []
    for _ in range(calls):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return 1e3 * statistics.median(times)


def _faults_and_cpu_ms(fn, calls: int = 5) -> tuple[int, float]:
    """Median minor page faults and thread CPU milliseconds of ``fn()`` (after one call to warm up)."""
    fn()
    faults, times = [], []
    for _ in range(calls):
        before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.thread_time()
        fn()
        times.append(time.thread_time() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return int(statistics.median(faults)), 1e3 * statistics.median(times)


def _fresh_tensor(memory, name, shape, dtype):
    """``_TileMemory.take`` as if there were no buffers: a new tensor for every tile."""
    return torch.empty(shape, dtype=dtype, device=memory.device)


def page_faults(n: int) -> dict:
    """Minor page faults and thread CPU ms of one forward call at ``n``, on one thread."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, n, WIDTH) for _ in range(3))
    def tiled_call():
        return tiled.attention(q, k, v)

    calls = {"tiled": (tiled_call, nullcontext()),
             "tiled, a fresh tensor per tile": (tiled_call, mock.patch.object(tiled._TileMemory, "take", _fresh_tensor)),
             "torch": (lambda: F.scaled_dot_product_attention(q, k, v), nullcontext())}
    print(f"forward at n = {n}, one thread: minor page faults and thread CPU ms per call (median of 5)")
    found = {}
    with torch.no_grad():
        for name, (fn, patched) in calls.items():
            with patched:
                faults, ms = _faults_and_cpu_ms(fn)
            found[name] = {"page_faults": faults, "cpu_ms": ms}
            print(f"  {name:>30} {faults:7d} faults {ms:8.1f} ms")
    return found


def page_faults_in_a_fresh_process(n: int) -> dict:
    """:func:`page_faults` in a new process, whose allocator has kept nothing from larger problems."""
    completed = subprocess.run([sys.executable, __file__, "--page-faults", str(n)], capture_output=True,
                               text=True, check=True)
    *table, found = completed.stdout.strip().splitlines()
    print("\n".join(table))
    return json.loads(found)


def profile(n: int) -> dict:
    """Where one tiled call's time goes, and the per-tile times behind its choices, on one thread.

    Prints them and returns them for the stored run.
    """
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        block_q, block_k = tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_K
        tile = torch.randn(HEADS, block_q, block_k)
        query, key = torch.randn(HEADS, block_q, WIDTH), torch.randn(HEADS, block_k, WIDTH)
        query16, key16 = query.bfloat16(), key.bfloat16()
        per_tile = {
            "clone": lambda: tile.clone(),
            "clone, exp_": lambda: tile.clone().exp_(),
            "clone, mul_(log2 e), exp2_": lambda: tile.clone().mul_(tiled.LOG2_E).exp2_(),
            "scores bmm, float32": lambda: torch.bmm(query, key.mT),
            "scores bmm, bfloat16": lambda: torch.bmm(query16, key16.mT),
        }
        print(f"one {tuple(tile.shape)} tile of scores, median thread CPU ms of 21 calls:")
        tile_ms = {}
        for name, fn in per_tile.items():
            tile_ms[name] = _median_cpu_ms(fn)
            print(f"  {name:>26} {tile_ms[name]:7.3f} ms")
        faults = page_faults_in_a_fresh_process(n)
        shares, products_ms = {}, {}
        torch.manual_seed(0)
        for backward in (False, True):
            q, k, v = (torch.randn(1, HEADS, n, WIDTH, requires_grad=backward) for _ in range(3))
            _timed_call(tiled.attention, q, k, v, False, backward)  # warm up
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                _timed_call(tiled.attention, q, k, v, False, backward)
            events = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in events)
            print(f"tiled {PASSES[backward]}, n = {n}, one thread: share of the time in each operation")
            shares[PASSES[backward]] = {}
            for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]:
                shares[PASSES[backward]][e.key] = e.self_cpu_time_total / total
                print(f"  {e.key:>32} {100 * e.self_cpu_time_total / total:5.1f}%  ({e.count} calls)")
            products_ms[PASSES[backward]] = sum(
                e.self_cpu_time_total for e in events if e.key in MATRIX_PRODUCTS) / 1e3
        print(f"the tiled forward's matrix products alone: {products_ms['forward']:.1f} ms; "
              f"torch's whole forward: {faults['torch']['cpu_ms']:.1f} ms")
    finally:
        torch.set_num_threads(threads)
    return {"n": n, "threads": 1, "tile": list(tile.shape), "tile_ms": tile_ms,
            "forward_calls": faults, "matrix_products_ms": products_ms,
            "time": "median thread CPU time of 21 calls (tile_ms), of 5 (forward_calls); "
                    "torch.profiler self time (shares)",
            "shares": shares}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 512, 1024; results are not stored")
    parser.add_argument("--calls", type=int, default=5, help="calls per method and problem (default 5)")
    parser.add_argument("--sizes", type=int, nargs="+", help="these n only; results are not stored")
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES),
                        help="these dtypes only; results are not stored unless both")
    parser.add_argument("--page-faults", type=int, metavar="N",
                        help="page faults and CPU time of forward calls at N, one thread, as JSON; not stored")
    parser.add_argument("--profile", action="store_true",
                        help="where one tiled call's time goes, on one thread; not stored")
    args = parser.parse_args()
    if args.page_faults:
        torch.set_num_threads(1)
        print(json.dumps(page_faults(args.page_faults)))
        return
    if args.profile:
        profile((args.sizes or [4096])[0])
        return
    lengths = args.sizes or ([512, 1024] if args.quick else LENGTHS)
    store = not args.quick and lengths == LENGTHS and args.dtypes == list(DTYPES)
    at_start = machine()
    small = small_problems() if store else None
    print(f"cpu: {at_start['cpu']}, {at_start['cores']} cores, torch {at_start['torch']} with "
          f"{at_start['torch_threads']} threads; load average {at_start['load_average_1min']}")
    print("tiled/torch throughput (torch s / tiled s; median of "
          f"{args.calls} interleaved calls each), H = {HEADS}, d = {WIDTH}")
    rows = []
    for name in args.dtypes:
        dtype = DTYPES[name]
        for n in lengths:
            for backward in (False, True):
                # fewer calls where one forward+backward takes seconds
                calls = max(3, args.calls // 2) if backward and n >= 4096 else args.calls
                for causal in (False, True):
                    row = compare(n, dtype, causal, backward, calls)
                    rows.append(row)
                    goal = GOALS[row["pass"]]
                    print(f"  {name:>8} n={n:<5} {row['pass']:>16} {'causal' if causal else '':>6} "
                          f"tiled {row['tiled_seconds']:7.3f} s  torch {row['torch_seconds']:7.3f} s  "
                          f"ratio {row['ratio']:.2f} ({'met' if row['ratio'] >= goal else 'below'} "
                          f"{goal})  load {row['load_average_1min']}", flush=True)
    where_time_goes = {n: profile(n) for n in PROFILED_LENGTHS} if store else None
    at_end = machine()
    print(f"load average at the end: {at_end['load_average_1min']}")
    if store:
        RESULTS.write_text(json.dumps({
            "machine": at_start, "load_average_1min_at_end": at_end["load_average_1min"],
            "heads": HEADS, "width": WIDTH, "batch": 1, "goals": GOALS,
            "time": "median seconds per call, tiled and torch taking turns in one process",
            "rows": rows, "naive_vs_tiled": small, "profiles": where_time_goes}, indent=1) + "\n")
        print(f"wrote {RESULTS.name}")


if __name__ == "__main__":
    main()
