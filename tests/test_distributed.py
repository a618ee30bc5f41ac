"""Ring attention on 2 and 4 local gloo processes equals attention in one process.

Each ring run takes a batch of cases (both shardings, causal in both
alignments, GQA, key padding, float64 and float32, forward and backward),
so the tests pay the start-up of a ring only a few times. Every run has a
timeout: a transfer that never comes fails the test instead of hanging it.
"""
import pathlib
import subprocess
import sys
import time

import pytest
import torch

import ring_workers
from attnlib.distributed.ring import _Ring, _visible_pairs
from attnlib.problem import check_window
from attnlib.distributed import (
    ring_attention,
    run_on_local_ring,
    shard,
    shard_chunks,
    shard_positions,
    time_model,
    unshard,
)
from test_window_and_sinks import window_allowed

ROOT = pathlib.Path(__file__).resolve().parents[1]

TIMEOUT = 120.0

# shape: (batch, query heads, key/value heads, L, S, E); L and S divide into 2 x 4 chunks
CASES = [
    dict(dtype="float64", sharding="contiguous", shape=(2, 2, 2, 16, 16, 4), seed=1),
    dict(dtype="float64", sharding="zigzag", shape=(2, 2, 2, 16, 16, 4), seed=2),
    dict(dtype="float64", sharding="contiguous", causal="top_left", shape=(1, 4, 2, 16, 16, 4),
         seed=3, lse=True),
    dict(dtype="float64", sharding="zigzag", causal="top_left", shape=(1, 4, 2, 16, 16, 4),
         seed=4, lse=True),
    dict(dtype="float64", sharding="contiguous", causal="bottom_right", shape=(1, 2, 1, 16, 24, 4),
         seed=5),
    dict(dtype="float64", sharding="zigzag", causal="bottom_right", shape=(1, 2, 1, 16, 24, 4),
         seed=6),
    dict(dtype="float64", sharding="zigzag", shape=(3, 2, 2, 16, 16, 4), seed=7,
         key_lengths=[16, 5, 0], nan_in_padding=True),
    dict(dtype="float64", sharding="contiguous", causal="top_left", shape=(2, 4, 2, 16, 16, 4),
         seed=8, key_lengths=[11, 16], scale=0.3),
    dict(dtype="float64", sharding="zigzag", causal="bottom_right", shape=(2, 2, 2, 16, 24, 4),
         seed=9, key_lengths=[20, 7], backend="naive"),
    dict(dtype="float32", sharding="contiguous", causal="top_left", shape=(1, 2, 2, 32, 32, 8),
         seed=10),
    dict(dtype="float32", sharding="zigzag", causal="top_left", shape=(2, 4, 1, 32, 32, 8),
         seed=11, key_lengths=[32, 19], backend="tiled"),
    # sliding windows (in positions of the whole sequence) and sinks
    dict(dtype="float64", sharding="contiguous", causal="top_left", window=(3, 0),
         shape=(1, 4, 2, 16, 16, 4), seed=12, lse=True),
    dict(dtype="float64", sharding="zigzag", causal="bottom_right", window=(5, None),
         shape=(2, 2, 1, 16, 24, 4), seed=13, key_lengths=[24, 13]),
    dict(dtype="float64", sharding="zigzag", alignment="bottom_right", window=(2, 3),
         shape=(2, 2, 2, 16, 24, 4), seed=14, sinks=[0.5, -1.0], lse=True),
    dict(dtype="float64", sharding="contiguous", shape=(3, 2, 2, 16, 16, 4), seed=15,
         key_lengths=[16, 5, 0], sinks=[1.0, 3.0], lse=True),
    dict(dtype="float64", sharding="contiguous", window=(4, 1), shape=(1, 2, 2, 16, 16, 4), seed=16,
         sinks=[0.0, 2.0], backend="naive"),
    dict(dtype="float32", sharding="zigzag", causal="top_left", window=(6, 0),
         shape=(1, 4, 2, 32, 32, 8), seed=17, sinks=[0.3, -0.2, 1.0, 2.0], backend="tiled"),
]
QUANTITIES = ("output", "lse", "dQ", "dK", "dV", "dsinks")


# A control: the ring is not told about the padding, so its results must differ.
CONTROL = dict(CASES[7], withhold_mask_from_ring=True)


def check_report(world_size, report):
    for rank, rows in enumerate(report):
        for case, row in zip(CASES, rows):
            where = f"rank {rank} of {world_size}, case {case}"
            for name in (name for name in QUANTITIES if name in row):
                assert row[name + " matches -inf"], f"{name} is not -inf where it should be: {where}"
                if case["dtype"] == "float64":
                    assert row[name] < 1e-10, f"{name} error {row[name]:.2e}: {where}"
                else:
                    bound = 2 * row[name + " one process"] + 1e-6
                    assert row[name] <= bound, f"{name} error {row[name]:.2e} > {bound:.2e}: {where}"


@pytest.mark.parametrize("world_size", [2, 4])
def test_ring_equals_one_process(world_size):
    report = run_on_local_ring(ring_workers.compare_cases, world_size, CASES + [CONTROL],
                               timeout=TIMEOUT)
    check_report(world_size, report)
    control = [rows[-1] for rows in report]
    assert max(row["output"] for row in control) > 1e-2, "the comparison cannot see a missing mask"


def test_every_rank_rejects_a_bad_call_together():
    started = time.monotonic()
    report = run_on_local_ring(ring_workers.bad_calls, 2, timeout=TIMEOUT)
    expected = {
        "unequal shard shapes": ("ValueError", "query shape must be the same on every rank"),
        "mismatched dtypes": ("TypeError", "query dtype must be the same on every rank"),
        "odd shard under zigzag": ("ValueError", "query shard length must be even under zigzag"),
        "float mask on one rank": ("TypeError", "attn_mask must be a bool key-padding mask"),
        "mask with a query axis": ("ValueError", "broadcastable to (..., Hq, 1, S_shard)"),
        "different causal settings": ("ValueError", "is_causal must be the same on every rank"),
        "different windows": ("ValueError", "window must be the same on every rank"),
        "different sinks": ("ValueError", "sinks must be the same on every rank"),
        "sinks of the wrong shape": ("ValueError", "sinks must have shape (Hq,) = (2,)"),
        "a window right of the causal diagonal": ("ValueError", "which is_causal=True forbids"),
    }
    for rank, raised in enumerate(report):
        for name, (kind, words) in expected.items():
            assert raised[name] is not None, f"rank {rank} accepted: {name}"
            got_kind, message, _ = raised[name]
            assert (got_kind, words in message) == (kind, True), f"rank {rank}, {name}: {message}"
        assert raised["then a good call"] == (1, 2, 8, 4)
    assert "rank 0 (1, 2, 8, 4), rank 1 (1, 2, 6, 4)" in report[0]["unequal shard shapes"][1]
    assert report[0]["float mask on one rank"][1].startswith("rank 1: ")
    assert "rank 0 (2, 0), rank 1 (3, 0)" in report[0]["different windows"][1]
    assert time.monotonic() - started < TIMEOUT / 2, "rejecting took as long as a timeout"


BANDS = [  # (L, S, is_causal, alignment, window)
    (24, 24, True, "top_left", (3, 0)), (24, 24, False, "top_left", (2, 5)),
    (24, 48, True, "bottom_right", (7, None)), (48, 24, False, "bottom_right", (0, 0)),
    (24, 48, True, "bottom_right", None), (24, 48, False, "top_left", (None, 4)),
    (24, 24, False, "top_left", None),
]


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("L, S, causal, alignment, window", BANDS)
def test_chunk_pairs_cover_the_band_once_without_dense_masks(sharding, world_size, L, S, causal,
                                                              alignment, window):
    """Each ring step's local calls, put back in whole-sequence positions, tile the allowed pattern.

    No pair that sees nothing is visited, every allowed (i, j) is computed
    exactly once, and no pair needs a mask: the local call's ``is_causal`` or
    ``window`` says it all.
    """
    covered = torch.zeros(L, S, dtype=torch.int64)
    for rank in range(world_size):
        ring = _Ring(None, rank, world_size, sharding, 1.0, causal, alignment, False, "tiled", L, S,
                     window)
        for source in range(world_size):
            for queries, keys, (mask, local_causal, local_alignment, local_window) in _visible_pairs(
                    ring, source, None):
                assert mask is None
                check_window(local_window, local_causal)  # a window the local call accepts
                offset = keys.length - queries.length if local_alignment == "bottom_right" else 0
                local = torch.ones(queries.length, keys.length, dtype=torch.bool)
                if local_causal:
                    local &= window_allowed(queries.length, keys.length, None, 0, offset)
                if local_window is not None:
                    local &= window_allowed(queries.length, keys.length, *local_window, offset)
                assert local.any(), "a pair that sees nothing was visited"
                covered[queries.start:queries.start + queries.length,
                        keys.start:keys.start + keys.length] += local
    case = dict(shape=(1, 1, 1, L, S, 1), causal=alignment if causal else None, alignment=alignment,
                window=window)
    assert torch.equal(covered, ring_workers.allowed_keys(case, L, S)[0, 0].to(torch.int64))


def test_a_narrow_window_skips_the_pairs_it_does_not_reach():
    """Contiguous shards of 16 on 4 ranks, window of 4 keys: only the diagonal and the pair below it."""
    visited = 0
    for rank in range(4):
        ring = _Ring(None, rank, 4, "contiguous", 1.0, True, "top_left", False, "tiled", 64, 64, (3, 0))
        visited += sum(1 for source in range(4) for _ in _visible_pairs(ring, source, None))
    assert visited == 4 + 3


def test_uninitialised_process_group_is_named():
    x = torch.ones(1, 1, 4, 2)
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_attention(x, x, x)


@pytest.mark.parametrize("sharding", ["contiguous", "zigzag"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shard_and_unshard_are_inverse(sharding, world_size):
    length = 4 * world_size
    whole = torch.arange(2 * length).reshape(2, length, 1)
    shards = [shard(whole, rank, world_size, sharding, dim=1) for rank in range(world_size)]
    assert torch.equal(unshard(shards, sharding, dim=1), whole)
    held = torch.cat([shard_positions(length, rank, world_size, sharding) for rank in range(world_size)])
    assert sorted(held.tolist()) == list(range(length))
    for rank, part in enumerate(shards):
        assert torch.equal(part[0, :, 0], shard_positions(length, rank, world_size, sharding))


def test_zigzag_pairs_an_early_chunk_with_a_late_one():
    assert [(c.start, c.length) for c in shard_chunks(16, 1, 4, "zigzag")] == [(2, 2), (12, 2)]
    assert [(c.start, c.length) for c in shard_chunks(16, 1, 4, "contiguous")] == [(4, 4)]


@pytest.mark.parametrize("sharding, length, pieces", [("contiguous", 10, 4), ("zigzag", 12, 8)])
def test_a_length_that_does_not_divide_is_refused(sharding, length, pieces):
    with pytest.raises(ValueError, match=f"sequence length must be divisible by {pieces}.*got {length}"):
        shard(torch.zeros(length, 2), 0, 4, sharding)


def test_unshard_refuses_shards_of_unequal_shape():
    with pytest.raises(ValueError, match="shards must all have one shape"):
        unshard([torch.zeros(3, 2), torch.zeros(2, 2)])


def test_a_failing_worker_is_reported_with_its_rank():
    with pytest.raises(RuntimeError, match="rank 1 of 2 failed(.|\n)*a worker's own error"):
        run_on_local_ring(ring_workers.raises, 2, timeout=TIMEOUT)


QUIET_WRITE = """
import os
from attnlib.distributed.local import _stdout_discarded
os.write(1, b"before\\n")
with _stdout_discarded():
    os.write(1, b"[Gloo] Rank 0 is connected to 1 peer ranks.\\n")
    print("a print inside", flush=True)
os.write(1, b"after\\n")
print("a print after")
"""


def test_what_cpp_writes_to_descriptor_1_while_a_group_starts_is_discarded():
    """torch 2.8/2.9's gloo writes its connection lines with std::cout (see _stdout_discarded),
    which this machine's torch no longer does: the redirection is checked with os.write, the
    same system call; the descriptor is back afterwards."""
    result = subprocess.run([sys.executable, "-c", QUIET_WRITE], capture_output=True, text=True, check=True)
    assert result.stdout == "before\nafter\na print after\n", result.stdout


def test_the_workers_descriptor_1_is_back_after_the_group_starts():
    """In a subprocess whose descriptor 1 is captured: a worker's own output after
    init_process_group still arrives, and nothing else does (no [Gloo] line)."""
    code = ("import sys; sys.path.insert(0, 'tests'); import ring_workers\n"
            "from attnlib.distributed import run_on_local_ring\n"
            "print(run_on_local_ring(ring_workers.writes_to_descriptor_1, 2, timeout=120))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert sorted(result.stdout.splitlines()) == sorted(
        ["[0, 1]", "rank 0 of 2 writes to descriptor 1", "rank 1 of 2 writes to descriptor 1"]), result.stdout


def test_a_worker_past_the_deadline_fails_instead_of_hanging():
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="did not finish within timeout=2"):
        run_on_local_ring(ring_workers.sleeps, 2, 600, timeout=2)
    assert time.monotonic() - started < 30


def test_a_ring_on_a_subgroup_addresses_its_peers_by_global_rank():
    errors = run_on_local_ring(ring_workers.ring_on_subgroups, 4, timeout=TIMEOUT)
    assert max(errors) < 1e-10, errors


def crossing_by_bisection(heads, kv_heads, flops, bandwidth, latency, width):
    """Where compute (4 H L^2 d / F) overtakes transfer (alpha + 2 H_kv L d s / beta), s = 2."""
    low, high = 0.0, 1e9
    for _ in range(200):
        mid = (low + high) / 2
        compute = 4 * heads * mid**2 * width / flops
        transfer = latency + 2 * kv_heads * mid * width * 2 / bandwidth
        low, high = (low, mid) if compute > transfer else (mid, high)
    return low


@pytest.mark.parametrize("latency", [0.0, 5e-6])
@pytest.mark.parametrize("heads, kv_heads", [(32, 32), (32, 8)])
def test_the_crossover_is_where_compute_overtakes_transfer(heads, kv_heads, latency):
    flops, bandwidth, width = 485e12, 450e9, 128
    model = time_model.compute_bound_block(heads, kv_heads, 2, flops, bandwidth, latency, width=width)
    expected = crossing_by_bisection(heads, kv_heads, flops, bandwidth, latency, width)
    assert abs(model - expected) <= 1e-9 * expected
    at = time_model.step_seconds(model, heads, kv_heads, width, 2, flops, bandwidth, latency)
    assert abs(at["compute"] - at["transfer"]) <= 1e-9 * at["step"]


def test_half_a_block_doubles_the_crossover():
    full, half = (time_model.compute_bound_block(32, 32, 2, 485e12, 450e9, causal_half=h)
                  for h in (False, True))
    assert abs(half - 2 * full) <= 1e-9 * full


def test_a_negative_latency_is_refused():
    with pytest.raises(ValueError, match="latency must be at least 0"):
        time_model.compute_bound_block(32, 32, 2, 485e12, 450e9, latency=-1e-3)
