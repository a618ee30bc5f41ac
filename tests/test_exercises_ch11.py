"""Chapter 11's checkers accept answers computed here and reject plausible mistakes with a hint."""
import math

import numpy as np
import torch

from attnlib import tiled
from attnlib.book import exercises, stored_results
from attnlib.distributed import shard_positions


def counted_pairs(sharding):
    """Causal pairs per rank for n = 32, W = 4, counted position by position."""
    counts = []
    for rank in range(4):
        queries = shard_positions(32, rank, 4, sharding)
        keys = torch.arange(32)
        counts.append(int((keys[None, :] <= queries[:, None]).sum()))
    return counts


def test_causal_work_accepts_the_counted_pairs():
    assert exercises.check("ex-11-causal-work", (counted_pairs("contiguous"), counted_pairs("zigzag")))


def test_causal_work_rejects_counts_without_the_mask():
    full = [32 * 8] * 4
    feedback = exercises.check("ex-11-causal-work", (full, counted_pairs("zigzag")))
    assert not feedback and "j <= i" in feedback.message


def test_causal_work_rejects_a_wrong_split_with_the_right_total():
    swapped = counted_pairs("contiguous")[::-1]
    feedback = exercises.check("ex-11-causal-work", (swapped, counted_pairs("zigzag")))
    assert not feedback and "split" in feedback.message


def test_causal_work_rejects_a_non_finite_answer_with_a_sentence():
    feedback = exercises.check("ex-11-causal-work", ([math.nan] * 4, counted_pairs("zigzag")))
    assert not feedback and "finite" in feedback.message


def fused_flops():
    rows = stored_results.load("peers_nvidia_h200.json")["rows"]
    row = next(r for r in rows if r.get("d") == 128 and r.get("n") == 16384
               and r["dtype"] == "bfloat16" and not r["causal"])
    return row["fused"] * 1e12


def crossing(heads, kv_heads, bandwidth):
    """Where 4 H L^2 d / F meets 2 H_kv L d s / beta, found by bisection on the two times."""
    width, flops = 128, fused_flops()
    low, high = 1.0, 1e7
    for _ in range(200):
        mid = (low + high) / 2
        compute = 4 * heads * mid**2 * width / flops
        transfer = 2 * kv_heads * mid * width * 2 / bandwidth
        low, high = (low, mid) if compute > transfer else (mid, high)
    return low


def test_infiniband_accepts_the_crossing_of_the_two_times():
    assert exercises.check("ex-11-infiniband", crossing(32, 8, 50e9))


def test_infiniband_rejects_forgetting_the_grouped_heads():
    feedback = exercises.check("ex-11-infiniband", crossing(32, 32, 50e9))
    assert not feedback and "8 key/value heads" in feedback.message


def test_infiniband_rejects_bits_for_bytes():
    feedback = exercises.check("ex-11-infiniband", crossing(32, 8, 400e9))
    assert not feedback and "bits" in feedback.message


def test_infiniband_feedback_never_shows_the_answer():
    right = crossing(32, 8, 50e9)
    feedback = exercises.check("ex-11-infiniband", 3 * right)
    assert not feedback and f"{right:.4g}" not in feedback.message


def test_backward_bytes_accepts_three_and_rejects_bfloat16_accumulators():
    k_v, accumulators = 2 * torch.finfo(torch.bfloat16).bits / 8, 2 * torch.finfo(torch.float32).bits / 8
    assert exercises.check("ex-11-backward-bytes", (k_v + accumulators) / k_v)
    feedback = exercises.check("ex-11-backward-bytes", (k_v + k_v) / k_v)
    assert not feedback and "float32" in feedback.message


def test_backward_bytes_rejects_inf():
    feedback = exercises.check("ex-11-backward-bytes", np.inf)
    assert not feedback and "finite" in feedback.message


def _merge_inputs():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(n, width, generator=generator, dtype=torch.float64)
            for n, width in ((3, 8), (10, 8), (10, 4))]


def test_merge_by_hand_accepts_one_call_over_all_keys():
    q, k, v = _merge_inputs()
    out, lse = tiled.attention(q[None], k[None], v[None], return_lse=True)
    assert exercises.check("ex-11-merge-by-hand", (out[0], lse[0]))


def test_merge_by_hand_names_the_plain_average_and_the_max():
    q, k, v = _merge_inputs()
    (out_a, lse_a), (out_b, lse_b) = (tiled.attention(q[None], k[None, b], v[None, b], return_lse=True)
                                      for b in (slice(0, 4), slice(4, 10)))
    right_lse = torch.logaddexp(lse_a, lse_b)[0]
    averaged = exercises.check("ex-11-merge-by-hand", ((out_a[0] + out_b[0]) / 2, right_lse))
    assert not averaged and "average" in averaged.message
    largest = exercises.check("ex-11-merge-by-hand", (out_a[0], torch.maximum(lse_a, lse_b)[0]))
    assert not largest and "larger" in largest.message
