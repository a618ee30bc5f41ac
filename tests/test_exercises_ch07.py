"""Chapter 7's checkers accept answers computed here and reject plausible mistakes with a hint."""
import numpy as np
import torch

from attnlib.book import exercises, stored_results

GIB = 2**30


def layer_bytes(dtype):
    return torch.empty(4, 32, 4096, 4096, dtype=dtype, device="meta").nbytes


def test_layer_bytes_accepts_the_count_in_bytes():
    assert exercises.check("ex-07-layer-bytes", layer_bytes(torch.bfloat16))


def test_layer_bytes_rejects_gib_and_float32():
    in_gib = exercises.check("ex-07-layer-bytes", layer_bytes(torch.bfloat16) / GIB)
    assert not in_gib and "bytes" in in_gib.message
    float32 = exercises.check("ex-07-layer-bytes", layer_bytes(torch.float32))
    assert not float32 and "2 bytes" in float32.message


def longest_that_fits(budget_bytes, bytes_per_n_squared):
    # Bisection on n^2 * bytes <= budget, independent of the square-root formula.
    low, high = 0, 10**6
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if middle**2 * bytes_per_n_squared <= budget_bytes else (low, middle - 1)
    return low


def test_max_length_accepts_the_longest_n_for_each_budget():
    per_n_squared = 1 * 2 * 16 * 2  # copies x batch x heads x bytes of float16
    answer = tuple(longest_that_fits(gib * GIB, per_n_squared) for gib in (24, 48))
    feedback = exercises.check("ex-07-max-length", answer)
    assert feedback and "1.41" in feedback.message


def test_max_length_rejects_float32_and_a_doubled_length():
    per_n_squared = 1 * 2 * 16 * 4
    float32 = exercises.check("ex-07-max-length", tuple(longest_that_fits(g * GIB, per_n_squared) for g in (24, 48)))
    assert not float32 and "4-byte numbers" in float32.message
    n24 = longest_that_fits(24 * GIB, 64)
    doubled = exercises.check("ex-07-max-length", (n24, 2 * n24))
    assert not doubled and "n^2" in doubled.message


def naive_sweep():
    rows = [r for r in stored_results.load("cost_of_attention.json")["n_sweep"] if r["method"] == "naive"]
    return np.array([r["n"] for r in rows], dtype=float), np.array([r["best_seconds"] for r in rows])


def test_extrapolate_accepts_a_quadratic_law_from_the_largest_measurement():
    lengths, seconds = naive_sweep()
    three_float32_matrices = 3 * 8 * 16384**2 * 4
    assert exercises.check("ex-07-extrapolate", (seconds[-1] * (16384 / lengths[-1]) ** 2, three_float32_matrices))


def test_extrapolate_rejects_a_linear_law_and_one_matrix():
    lengths, seconds = naive_sweep()
    linear = exercises.check("ex-07-extrapolate", (seconds[-1] * 16384 / lengths[-1], 3 * 8 * 16384**2 * 4))
    assert not linear and "fitted slope" in linear.message
    one_matrix = exercises.check("ex-07-extrapolate", (seconds[-1] * (16384 / lengths[-1]) ** 2, 8 * 16384**2 * 4))
    assert not one_matrix and "three matrices" in one_matrix.message
