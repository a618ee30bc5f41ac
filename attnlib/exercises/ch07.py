"""Checkers for the exercises of Chapter 7, The cost of attention."""
import math

import numpy as np
import torch

from .. import stored_results
from . import as_array, checker

_GIB = 2**30


def _bytes_per_number(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def _score_bytes(batch: int, heads: int, n: int, dtype: torch.dtype, copies: int = 1) -> int:
    """Bytes of ``copies`` stored copies of the ``batch x heads x n x n`` scores."""
    return copies * batch * heads * n * n * _bytes_per_number(dtype)


def _longest(budget_bytes: int, batch: int, heads: int, dtype: torch.dtype) -> int:
    """The largest n whose one copy of the scores fits in the budget: floor(sqrt(budget / (B H bytes)))."""
    return math.isqrt(budget_bytes // _score_bytes(batch, heads, 1, dtype))


def _close(got: float, expected: float, relative: float) -> bool:
    return abs(got - expected) <= relative * abs(expected)


@checker("ex-07-layer-bytes",
         "an int: the bytes of one layer's score matrices (batch 4, 32 heads, n = 4096, bfloat16), each stored once")
def _layer_bytes(answer):
    got = float(as_array(answer, "answer", ()))
    expected = _score_bytes(4, 32, 4096, torch.bfloat16)
    if _close(got, expected, 1e-6):
        share = expected / (16 * _GIB)
        return True, f"{expected / _GIB:.1f} GiB, {share:.0%} of a 16 GiB device, for one layer's scores alone."
    if _close(got * _GIB, expected, 1e-3):
        return False, "that looks like GiB; give the answer in bytes."
    hint = "count batch x heads x n^2 scores, times the bytes of one number"
    if _close(got, 2 * expected, 1e-6):
        hint = "that is float32's size; a bfloat16 number takes 2 bytes"
    return False, f"your count is {got / expected:.3g} times the right one; {hint}."


@checker("ex-07-max-length",
         "a pair (n_24, n_48): the largest n for one float16 copy of the scores of 16 heads, batch 2, "
         "in 24 GiB and in 48 GiB")
def _max_length(answer):
    n24, n48 = (float(as_array(n, name, ())) for n, name in zip(answer, ("n_24", "n_48")))
    expected24, expected48 = (_longest(gib * _GIB, 2, 16, torch.float16) for gib in (24, 48))
    if abs(n24 - expected24) > 1:
        return False, (
            f"n_24 = {n24:.0f} needs {n24**2 / expected24**2:.3g} times the memory it should; "
            "n^2 x copies x batch x heads x bytes per number (float16: 2) must fit in 24 x 2^30 bytes."
        )
    if abs(n48 - expected48) > 1:
        return False, (
            f"n_24 is right but n_48 = {n48:.0f} is not: the memory grows with n^2, "
            "so doubling the budget does not double n."
        )
    return True, f"n_48 / n_24 = {n48 / n24:.4f}, about sqrt(2): twice the memory buys only 1.41 times the length."


@checker("ex-07-extrapolate",
         "a pair (seconds, bytes): the naive path's predicted time and peak memory at n = 16384 for the "
         "stored run's problem (batch 1, 8 heads, float32, three n x n matrices alive at the peak)")
def _extrapolate(answer):
    seconds, peak = (float(as_array(x, name, ())) for x, name in zip(answer, ("seconds", "bytes")))
    results = stored_results.load("cost_of_attention.json")
    rows = [r for r in results["n_sweep"] if r["method"] == "naive"]
    lengths = np.array([r["n"] for r in rows], dtype=float)
    measured = np.array([r["best_seconds"] for r in rows])
    # The chapter fits the slope over n >= 1024; any fit close to n^2 is an honest prediction.
    fitted = lengths >= 1024
    slope = float(np.polyfit(np.log(lengths[fitted]), np.log(measured[fitted]), 1)[0])
    expected_seconds = measured[-1] * (16384 / lengths[-1]) ** slope
    expected_bytes = _score_bytes(results["batch"], results["heads"], 16384, torch.float32, copies=3)
    if not _close(seconds, expected_seconds, 0.15):
        return False, (
            f"your time is {seconds / expected_seconds:.3g} times the extrapolation of the stored run; "
            f"scale the time at n = {lengths[-1]:.0f} by (16384 / {lengths[-1]:.0f})^p with the fitted slope p."
        )
    if not _close(peak, expected_bytes, 0.1):
        return False, (
            f"your peak is {peak / expected_bytes:.3g} times the expected one; count three float32 "
            "matrices of batch x heads x n^2 numbers, in bytes."
        )
    return True, (
        f"about {expected_seconds:.0f} s, and {expected_bytes / _GIB:.0f} GiB at the peak, more memory than "
        f"the stored run's machine has ({results['machine']['memory_gib']} GiB)."
    )
