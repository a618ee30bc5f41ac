"""Checkers for the exercises of Chapter 9, A fused kernel in Triton."""

import numpy as np
import sympy as sp

from . import as_array, checker, compare
from .symbolic import as_expression, same


@checker("ex-09-causal-tiles",
         "a pair (counts, fraction): an 8 x 3 array of (unmasked, masked, skipped) key tiles per query block "
         "for L = S = 1024, BLOCK_M = 128, BLOCK_N = 64, causal; and the fraction of the 128 tile pairs visited")
def _causal_tiles(answer):
    counts, fraction = answer
    # the book's L = S = 1024, BLOCK_M = 128, BLOCK_N = 64 only, counted as the kernel does: tiles
    # before the first row's visible keys are whole, those up to the last row's masked, the rest skipped
    n, block_m, block_n = 1024, 128, 64
    expected = np.array([((start + 1) // block_n,
                          (start + block_m) // block_n - (start + 1) // block_n,
                          n // block_n - (start + block_m) // block_n)
                         for start in range(0, n, block_m)])
    got = as_array(counts, "counts", expected.shape)
    for block, (row, right) in enumerate(zip(got, expected)):
        if np.array_equal(row, right):
            continue
        if row.sum() != right.sum():
            return False, f"block {block}: your counts add up to {row.sum():.0f}, not to the {right.sum()} key tiles."
        return False, (f"block {block}: you have {tuple(int(x) for x in row)}; its first row sees keys "
                       f"0..{128 * block} and its last row keys 0..{128 * block + 127}.")
    visited = expected[:, :2].sum() / expected.sum()
    got_fraction = float(as_array(fraction, "fraction", ()))
    if abs(got_fraction - visited) <= 1e-3:
        return True, f"{expected[:, :2].sum()} of {expected.sum()} tile pairs are visited."
    near_half = abs(got_fraction - 0.5) < 1e-3
    hint = " Half is the triangle; the diagonal tiles are computed whole." if near_half else ""
    return False, f"the counts are right but the fraction {got_fraction:.4f} is not: visited tiles / all tiles.{hint}"


_N, _B_Q, _B_K = sp.symbols("n b_q b_k", positive=True)


@checker("ex-09-causal-fraction",
         "one SymPy expression in n, b_q and b_k: the fraction of the (n / b_q)(n / b_k) tile pairs that a "
         "causal call over n tokens computes, for b_q a multiple of b_k and n a multiple of b_q")
def _causal_fraction(answer):
    got = as_expression(answer, "answer", (_N, _B_Q, _B_K))
    # block u (u = 0, ..., n / b_q - 1) visits (u + 1) b_q / b_k tiles; summed and divided by all of them
    expected = (_N + _B_Q) / (2 * _N)
    if same(got, expected):
        return True, "it holds for every n, b_q and b_k of that form, and tends to 1/2 as n / b_q grows."
    if same(got, sp.Rational(1, 2)):
        return False, "1/2 is the triangle of (query, key) pairs; the tiles the diagonal crosses are computed whole."
    if same(got, (_N + _B_K) / (2 * _N)):
        return False, ("the band of masked tiles is as wide as a query block, not a key tile: "
                       "the last row of block u sees keys up to (u + 1) b_q - 1.")
    book_sizes = {_N: 1024, _B_Q: 128, _B_K: 64}
    if sp.simplify(got.subs(book_sizes) - expected.subs(book_sizes)) == 0:
        return False, ("right for n = 1024, b_q = 128, b_k = 64 only; "
                       "write the count for general n, b_q and b_k.")
    return False, ("count the tiles that block u visits, sum over the n / b_q blocks, "
                   "and divide by the (n / b_q)(n / b_k) tile pairs.")


@checker("ex-09-gqa-heads",
         "the 8 numbers out[0, :, 0, 0], one per query head, for 8 query heads, 2 key/value heads, "
         "value head 0 all 0 and value head 1 all 1")
def _gqa_heads(answer):
    got = as_array(answer, "answer", (8,))
    query_heads, kv_heads = 8, 2
    expected = np.array([h // (query_heads // kv_heads) for h in range(query_heads)], dtype=float)
    passed, message = compare("the output per head", got, expected, 1e-3)
    if not passed and np.allclose(got, np.arange(query_heads) % kv_heads, atol=1e-3):
        message += " That is head h % 2; the kernel groups consecutive query heads."
    return passed, message


@checker("ex-09-key-lengths",
         "a triple: fused.key_lengths of the padding mask, of the mask with a hole, and of the per-head mask "
         "(each the lengths it returns, or None)")
def _key_lengths(answer):
    padding, with_hole, per_head = answer
    if padding is None:
        return False, "the padding mask is a prefix j < length in every row: it is pure key lengths."
    lengths = as_array(padding, "padding", (2,))
    passed, message = compare("the padding mask's lengths", lengths, np.array([7.0, 3.0]), 0)
    if not passed:
        return False, message
    if with_hole is not None:
        return False, "the mask with a hole was accepted; stopping at a length would let key 2 of sequence 0 in."
    if per_head is not None:
        return False, "the per-head mask was accepted; one length per sequence cannot differ between heads."
    return True, "only the padding mask becomes lengths (7, 3); the other two need the mask loaded tile by tile."
