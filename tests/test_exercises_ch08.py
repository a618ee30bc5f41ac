"""Chapter 8's checkers accept answers computed here and reject plausible mistakes with a hint."""
import numpy as np
import sympy as sp
import torch

from attnlib import tiled
from attnlib.book import exercises
from attnlib.book.intermediates import largest_intermediate
from attnlib.book.theory import online_softmax

Z = sp.symbols("z0:3", real=True)
V = sp.symbols("v0:3", real=True)


def one_score_blocks():
    return [online_softmax.block_state([Z[i]], [V[i]], Z[i]) for i in range(3)]


def test_merge_order_accepts_both_groupings():
    a, b, c = one_score_blocks()
    merge = online_softmax.merge_states
    feedback = exercises.check("ex-08-merge-order", (merge(merge(a, b), c), merge(a, merge(b, c))))
    assert feedback


def add_without_rescaling(x, y):
    return sp.Max(x[0], y[0]), x[1] + y[1], x[2] + y[2]


def test_merge_order_rejects_states_added_without_rescaling():
    a, b, c = one_score_blocks()
    wrong = add_without_rescaling(add_without_rescaling(a, b), c)
    feedback = exercises.check("ex-08-merge-order", (wrong, wrong))
    assert not feedback and "rescaled" in feedback.message


def test_merge_order_explains_an_answer_that_is_not_a_state():
    feedback = exercises.check("ex-08-merge-order", (True, True))
    assert not feedback and "(m, l, acc)" in feedback.message


def float32_sums():
    scores = np.float32(100.0) + np.random.default_rng(0).normal(size=8).astype(np.float32)
    with np.errstate(over="ignore"):
        frozen = np.sum(np.exp(scores))
    running_max = scores.max()
    return frozen, np.sum(np.exp(scores - running_max)), scores


def test_why_max_accepts_the_overflow_and_the_bounded_sum():
    frozen, running, _ = float32_sums()
    assert exercises.check("ex-08-why-max", (frozen, running))


def test_why_max_rejects_a_float64_sum():
    _, running, scores = float32_sums()
    feedback = exercises.check("ex-08-why-max", (np.sum(np.exp(scores.astype(np.float64))), running))
    assert not feedback and "float64" in feedback.message


BLOCKS = [(64, 128), (tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_K), (2048, tiled.DEFAULT_BLOCK_K)]


def test_block_sizes_accepts_the_measured_largest_tensors():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, 2048, 64) for _ in range(3))
    measured = [largest_intermediate(tiled.attention, q, k, v, block_q=bq, block_k=bk)[1].nbytes for bq, bk in BLOCKS]
    assert exercises.check("ex-08-block-sizes", measured)


def test_block_sizes_rejects_tiles_alone():
    feedback = exercises.check("ex-08-block-sizes", [4 * 8 * bq * bk for bq, bk in BLOCKS])
    assert not feedback and "output is a tensor too" in feedback.message
