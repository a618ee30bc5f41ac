"""Checkers for the exercises of Chapter 7, The cost of attention."""
import math

import numpy as np

from .. import stored_results
from . import as_count, as_number, as_parts, checker

_GIB = 2**30


def _close(got: float, expected: float, relative: float) -> bool:
    return abs(got - expected) <= relative * abs(expected)


@checker("ex-07-layer-bytes",
         "an int: the bytes of one layer's score matrices (batch 4, 32 heads, n = 4096, bfloat16), each stored once")
def _layer_bytes(answer):
    got = as_count(answer, "answer")
    expected = 4 * 32 * 4096**2 * 2  # batch x heads x n^2 scores, 2 bytes each
    if got == expected:  # a count of bytes is exact
        share = expected / (16 * _GIB)
        return True, f"{expected / _GIB:.1f} GiB, {share:.0%} of a 16 GiB device, for one layer's scores alone."
    hints = [(expected / _GIB, "that looks like GiB; give the answer in bytes"),
             (2 * expected, "that is float32's size; a bfloat16 number takes 2 bytes"),
             (expected / 2, "a bfloat16 number takes 2 bytes, not 1"),
             (expected / 4, "count the scores of every sequence in the batch"),
             (expected / 32, "count the scores of every head")]
    hint = next((text for value, text in hints if _close(got, value, 1e-3)),
                "count the scores of one sequence and one head first, then of the whole layer, then their bytes")
    return False, f"{got:.6g} bytes is not it; {hint}."


@checker("ex-07-max-length",
         "a pair (n_24, n_48): the largest n for one float16 copy of the scores of 16 heads, batch 2, "
         "in 24 GiB and in 48 GiB")
def _max_length(answer):
    n24, n48 = (as_count(n, name) for n, name in as_parts(answer, ("n_24", "n_48")))
    per_n_squared = 2 * 16 * 2  # batch x heads x bytes of float16, for one copy
    expected24, expected48 = (math.isqrt(gib * _GIB // per_n_squared) for gib in (24, 48))
    if abs(n24 - expected24) > 1:
        hints = [(expected24 / math.sqrt(2), "that is the length for 4-byte numbers; a float16 number takes 2"),
                 (expected24 * math.sqrt(2), "that is the length for half the bytes: count 2 bytes a number "
                                             "and both sequences of the batch"),
                 (expected24 * math.sqrt(1e9 / _GIB), "a GiB is 2^30 bytes, not 10^9"),
                 (expected24 * 4, "count all 16 heads")]
        hint = next((text for value, text in hints if abs(n24 - value) <= 2),
                    "write the bytes of the scores as a function of n, set them against the budget in bytes and "
                    "take the largest whole n that fits")
        return False, f"n_24 = {n24} is not the largest length that fits; {hint}."
    if abs(n48 - expected48) > 1:
        hint = (" the memory grows with n^2, so doubling the budget does not double n."
                if abs(n48 - 2 * n24) <= 2 else " redo the same count with a budget of 48 x 2^30 bytes.")
        return False, f"n_24 is right but n_48 = {n48} is not:" + hint
    return True, f"n_48 / n_24 = {n48 / n24:.4f}, about sqrt(2): twice the memory buys only 1.41 times the length."


@checker("ex-07-extrapolate",
         "a pair (seconds, bytes): the naive path's predicted time and peak memory at n = 16384 for the "
         "stored run's problem (batch 1, 8 heads, float32, three n x n matrices alive at the peak)")
def _extrapolate(answer):
    seconds, peak = (as_number(x, name) for x, name in as_parts(answer, ("seconds", "bytes")))
    if seconds <= 0 or peak <= 0:
        return False, "a time and a memory are positive."
    results = stored_results.load("cost_of_attention.json")
    rows = [r for r in results["n_sweep"] if r["method"] == "naive"]
    lengths = np.array([r["n"] for r in rows], dtype=float)
    measured = np.array([r["best_seconds"] for r in rows])
    # The chapter fits the slope over n >= 1024; any fit close to n^2 is an honest prediction.
    fitted = lengths >= 1024
    slope = float(np.polyfit(np.log(lengths[fitted]), np.log(measured[fitted]), 1)[0])
    expected_seconds = measured[-1] * (16384 / lengths[-1]) ** slope
    expected_bytes = 3 * results["batch"] * results["heads"] * 16384**2 * 4  # three float32 n x n matrices
    if not _close(seconds, expected_seconds, 0.15):
        linear = measured[-1] * 16384 / lengths[-1]
        hint = ("that grows like n, but the time grows like n^p with the fitted slope p"
                if _close(seconds, linear, 0.15) else
                f"scale the time at n = {lengths[-1]:.0f} by (16384 / {lengths[-1]:.0f})^p with the fitted slope p")
        return False, f"your time is not the extrapolation of the stored run; {hint}."
    # the peak is a count of bytes, exact for the stated model: only the hints look nearby
    if peak != expected_bytes:
        hint = next((text for value, text in [(expected_bytes / _GIB, "that looks like GiB; give bytes"),
                                                (expected_bytes / 3, "three matrices are alive at the peak"),
                                                (expected_bytes / 2, "a float32 number takes 4 bytes")]
                     if _close(peak, value, 0.1)),
                    "count three float32 matrices of batch x heads x n^2 numbers, in bytes")
        return False, f"your peak is not the expected one; {hint}."
    return True, (
        f"about {expected_seconds:.0f} s, and {expected_bytes / _GIB:.0f} GiB at the peak, more memory than "
        f"the stored run's machine has ({results['machine']['memory_gib']} GiB)."
    )
