"""A ring of local processes: ``W`` CPU processes joined by a ``gloo`` group.

:func:`run_on_local_ring` is how the chapter, the tests and the benchmark
run ring attention on one machine. The processes meet through a
``FileStore`` in a fresh temporary directory, not a TCP port, so two runs
never collide; the process group's timeout makes a transfer that never
comes fail, and a deadline for the whole run terminates what is left.

The processes are started by a fork server (where the platform has one)
that has imported torch and attnlib once, so each rank starts in a fraction
of a second instead of importing torch again; elsewhere they are spawned.
Either way a worker runs in a fresh process, so it must be an importable
function (defined in a module, not in a notebook), and what it returns
travels back by pickling: return numbers, lists or NumPy arrays.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import queue
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..attention import scaled_dot_product_attention
from .ring import gather_sequence, ring_attention
from .sharding import shard


@contextlib.contextmanager
def _stdout_discarded():
    """File descriptor 1 points to the null device, for C++ code that writes to it directly.

    The gloo of torch 2.8 and 2.9 writes "[Gloo] Rank r is connected to N peer ranks. Expected
    number of connected peer ranks is : N" with ``std::cout`` when a process group connects
    (gloo/transport/tcp/context.cc, ``printConnectivityInfo``, January 2024); no log level
    (``TORCH_CPP_LOG_LEVEL``, ``GLOO_LOG_LEVEL``) reaches it. Gloo made it an INFO log line in
    September 2025 (commit d97133a), silent by default in later torch. A notebook shows whatever
    reaches the worker's descriptor 1, so that descriptor is redirected, not ``sys.stdout``.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def _run_rank(worker, rank, world_size, store_path, timeout, threads, results, args):
    torch.set_num_threads(threads)
    try:
        store = dist.FileStore(store_path, world_size)
        with _stdout_discarded():  # errors still reach stderr and the parent's traceback
            dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                    timeout=datetime.timedelta(seconds=timeout))
            # A rank whose worker returns at once would otherwise close its sockets under a
            # peer still connecting (gloo: "connectFullMesh failed ... closed by peer").
            dist.barrier()
        try:
            results.put((rank, True, worker(rank, world_size, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:  # the parent re-raises it with this rank's traceback
        results.put((rank, False, traceback.format_exc()))


def run_on_local_ring(worker, world_size: int, *args, timeout: float = 120.0, threads: int = 1):
    """Run ``worker(rank, world_size, *args)`` in ``world_size`` new processes joined by gloo.

    Returns the workers' results, rank 0 first. ``timeout`` (seconds) bounds
    every collective and transfer and the whole run, start-up included;
    ``threads`` is each process's torch thread count. A worker that raises
    makes this raise ``RuntimeError`` with its traceback; a run past the
    deadline raises ``TimeoutError``. Either way no process is left behind.
    """
    if "forkserver" in mp.get_all_start_methods():
        context = mp.get_context("forkserver")
        context.set_forkserver_preload([__name__])
    else:
        context = mp.get_context("spawn")
    results = context.Queue()
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="attnlib-ring-") as folder:
        store_path = os.path.join(folder, "store")
        processes = [context.Process(target=_run_rank, daemon=True,
                                     args=(worker, rank, world_size, store_path, timeout, threads,
                                           results, args))
                     for rank in range(world_size)]
        for process in processes:
            process.start()
        collected = {}
        try:
            while len(collected) < world_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(world_size)) - set(collected))
                    raise TimeoutError(f"ranks {missing} did not finish within timeout={timeout} s")
                try:
                    rank, finished, payload = results.get(timeout=min(left, 1.0))
                except queue.Empty:
                    dead = [r for r, p in enumerate(processes)
                            if r not in collected and p.exitcode not in (None, 0)]
                    if dead:
                        raise RuntimeError(f"rank {dead[0]} died with exit code "
                                           f"{processes[dead[0]].exitcode} before reporting") from None
                    continue
                if not finished:
                    raise RuntimeError(f"rank {rank} of {world_size} failed:\n{payload}")
                collected[rank] = payload
        finally:
            for process in processes:
                process.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
            for process in processes:
                if process.is_alive():
                    process.terminate()
                    process.join()
    return [collected[rank] for rank in range(world_size)]


def ring_matches_one_process(rank: int, world_size: int, cases: list[dict]) -> list[dict]:
    """The chapter's worker: ring attention on shards of seeded problems, against one process.

    For each case every rank draws the same whole ``q, k, v`` (float64,
    ``case["shape"] = (B, H, n, E)``) from ``case["seed"]``, keeps its shard,
    runs :func:`ring_attention` forward and backward, and gathers the output
    and gradient shards back into whole sequences. Rank 0 also runs the
    naive path on the whole problem in one process and reports, per case,
    the largest absolute differences of the output and the gradients.
    """
    report = []
    for case in cases:
        generator = torch.Generator().manual_seed(case["seed"])
        whole = [torch.randn(*case["shape"], generator=generator, dtype=torch.float64)
                 for _ in range(3)]
        upstream = torch.randn(*case["shape"], generator=generator, dtype=torch.float64)
        sharding, causal = case["sharding"], case["is_causal"]
        shards = [shard(x, rank, world_size, sharding).requires_grad_() for x in whole]
        output = ring_attention(*shards, is_causal=causal, sharding=sharding)
        output.backward(shard(upstream, rank, world_size, sharding))
        gathered = [gather_sequence(x.detach(), sharding) for x in [output] + [s.grad for s in shards]]
        if rank != 0:
            continue
        whole = [x.requires_grad_() for x in whole]
        reference = scaled_dot_product_attention(*whole, is_causal=causal, backend="naive")
        reference.backward(upstream)
        expected = [reference] + [x.grad for x in whole]
        report.append({name: float((got - want).detach().abs().max())
                       for name, got, want in zip(("output", "dQ", "dK", "dV"), gathered, expected)})
    return report
