"""Chapter 9's checkers accept answers computed here and reject plausible mistakes with a hint."""
import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F

import attnlib
from attnlib import fused
from attnlib.book import exercises


def causal_tiles_by_brute_force(n=1024, block_m=128, block_n=64):
    # Classify every (query block, key tile) by the causal mask itself.
    allowed = np.tril(np.ones((n, n), dtype=bool))
    counts = []
    for i in range(0, n, block_m):
        kinds = [allowed[i:i + block_m, j:j + block_n] for j in range(0, n, block_n)]
        counts.append((sum(t.all() for t in kinds), sum(t.any() and not t.all() for t in kinds),
                       sum(not t.any() for t in kinds)))
    counts = np.array(counts)
    return counts, counts[:, :2].sum() / counts.sum()


def test_causal_tiles_accepts_the_brute_force_count():
    assert exercises.check("ex-09-causal-tiles", causal_tiles_by_brute_force())


def test_causal_tiles_rejects_half_the_work():
    counts, _ = causal_tiles_by_brute_force()
    feedback = exercises.check("ex-09-causal-tiles", (counts, 0.5))
    assert not feedback and "diagonal tiles" in feedback.message


def test_causal_tiles_rejects_counts_that_miss_tiles():
    counts, fraction = causal_tiles_by_brute_force()
    counts[3, 2] -= 1
    feedback = exercises.check("ex-09-causal-tiles", (counts, fraction))
    assert not feedback and "block 3" in feedback.message


N, B_Q, B_K = sp.symbols("n b_q b_k", positive=True)


@pytest.mark.parametrize("n, b_q, b_k", [(1024, 128, 64), (512, 64, 64), (768, 256, 32), (96, 32, 16)])
def test_causal_fraction_accepts_the_formula_that_the_brute_force_count_gives(n, b_q, b_k):
    # a student's derivation: block u visits (u + 1) b_q / b_k tiles; the sum over u, over all tiles
    blocks = N / B_Q
    u = sp.symbols("u", integer=True, nonnegative=True)
    derived = sp.summation((u + 1) * B_Q / B_K, (u, 0, blocks - 1)) / (blocks * N / B_K)
    counts, fraction = causal_tiles_by_brute_force(n, b_q, b_k)
    assert float(derived.subs({N: n, B_Q: b_q, B_K: b_k})) == pytest.approx(fraction)
    assert exercises.check("ex-09-causal-fraction", derived)


def test_causal_fraction_rejects_the_triangle_and_a_band_one_key_tile_wide():
    feedback = exercises.check("ex-09-causal-fraction", sp.Rational(1, 2))
    assert not feedback and "diagonal" in feedback.message
    feedback = exercises.check("ex-09-causal-fraction", (N + B_K) / (2 * N))
    assert not feedback and "as wide as a query block" in feedback.message


def test_causal_fraction_rejects_the_number_for_the_book_sizes_without_giving_the_formula():
    feedback = exercises.check("ex-09-causal-fraction", sp.Rational(9, 16))
    assert not feedback and "general n" in feedback.message
    assert "(n + b_q)" not in feedback.message and "b_q/(2" not in feedback.message


def test_gqa_heads_accepts_torch_sdpa_on_constant_values():
    torch.manual_seed(0)
    q, k = torch.randn(1, 8, 5, 16), torch.randn(1, 2, 7, 16)
    v = torch.stack([torch.zeros(7, 16), torch.ones(7, 16)])[None]
    out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert exercises.check("ex-09-gqa-heads", out[0, :, 0, 0])


def test_gqa_heads_rejects_interleaved_heads():
    feedback = exercises.check("ex-09-gqa-heads", np.arange(8) % 2)
    assert not feedback and "h % 2" in feedback.message


def masks():
    padding = attnlib.padding_mask(torch.tensor([7, 3]), 10).expand(2, 4, 6, 10)
    with_hole = padding.clone()
    with_hole[0, :, :, 2] = False
    per_head = padding.clone()
    per_head[:, 1, :, 0] = False
    return padding, with_hole, per_head


def test_key_lengths_accepts_what_key_lengths_returns():
    # key_lengths is plain torch: it runs without Triton.
    assert exercises.check("ex-09-key-lengths", tuple(fused.key_lengths(m) for m in masks()))


def test_key_lengths_rejects_a_mask_with_a_hole_taken_for_lengths():
    feedback = exercises.check("ex-09-key-lengths", (torch.tensor([7, 3]), torch.tensor([7, 3]), None))
    assert not feedback and "hole" in feedback.message
