"""Checkers for the exercises of Chapter 4, Softmax saturation."""
import math

import numpy as np
import torch

from ..theory import softmax as softmax_theory
from . import as_array, as_number, as_parts, checker, compare

_TEMPERATURES = (0.25, 0.5, 1.0, 2.0)
_GRADIENT_WIDTHS = (16, 256, 1024)


@checker("ex-04-temperature",
         "a number: the T in {0.25, 0.5, 1, 2} whose median maximum weight at d = 256 is closest to unscaled d = 16",
         self_check=True)
def _temperature(answer):
    got = as_number(answer, "answer")
    # Scaled scores are standard normal, so scale 1/(sqrt(d) T) gives them standard deviation 1/T;
    # unscaled scores at d = 16 have standard deviation sqrt(16).
    expected = 1 / math.sqrt(16)
    if math.isclose(got, expected):
        return True, "Scores with standard deviation 1/T = 4 spread like unscaled scores at d = 16."
    if math.isclose(got, 1 / expected):
        return False, "T divides the scores: a larger T makes them flatter, not sharper."
    if not any(math.isclose(got, t) for t in _TEMPERATURES):
        return False, f"T should be one of {_TEMPERATURES}, got {got}."
    return False, f"T = {got} gives scores of standard deviation {1 / got:g}; what is it for unscaled scores at d = 16?"


@checker("ex-04-jacobian-bound",
         "a pair (weights, totals): n rows of softmax weights of length 8, and totals[i] = sum_ij |J_ij| of row i",
         self_check=True)
def _jacobian_bound(answer):
    weights, totals = answer
    weights = as_array(weights, "weights", (None, 8))
    totals = as_array(totals, "totals", weights.shape[:1])
    if np.any(weights < 0) or not np.allclose(weights.sum(axis=1), 1, atol=1e-6):
        return False, "each row of weights should be non-negative and sum to 1: pass the softmax, not the logits."
    # Row i of diag(a) - a a^T has |a_i (1 - a_i)| on the diagonal and a_i a_j elsewhere: 2 a_i (1 - a_i) in all.
    expected = 2 * (1 - (weights**2).sum(axis=1))
    passed, message = compare("the totals", totals, expected, 1e-6)
    if not passed:
        return False, message + " Sum the absolute values of all 8 x 8 entries of each row's Jacobian."
    # 2(1 - sum a^2) <= 2(1 - a_max^2) <= 4(1 - a_max), so matching totals obey the bound.
    return True, message + f" All {len(totals)} equal 2(1 - sum a^2), which never exceeds 4(1 - a_max)."


@checker("ex-04-logit-gradient",
         "a pair (scaled, unscaled): the median norms of dL/dz at d = 16, 256, 1024, with scale 1/sqrt(d) and 1",
         self_check=True)
def _logit_gradient(answer):
    scaled, unscaled = (as_array(x, name, (3,)) for x, name in as_parts(answer, ("scaled", "unscaled")))
    if np.any(scaled <= 0) or np.any(unscaled <= 0):
        return False, "norms are positive; recheck what you took the median of."

    def median_logit_gradient(width: int, scale: float, draws: int = 2000, seed: int = 1) -> float:
        """Median Frobenius norm of dL/dz, L = <softmax(z) V, g>, z = scale q K^T, over draws with 8 keys."""
        gen = torch.Generator().manual_seed(seed)
        q = torch.randn(draws, 1, width, generator=gen, dtype=torch.float64)
        keys = torch.randn(draws, 8, width, generator=gen, dtype=torch.float64)
        values = torch.randn(draws, 8, 16, generator=gen, dtype=torch.float64)
        upstream = torch.randn(draws, 1, 16, generator=gen, dtype=torch.float64)
        weights = torch.softmax(scale * q @ keys.transpose(-2, -1), dim=-1)
        # dL/dalpha = g V^T; the Jacobian is symmetric, so dL/dz = J dL/dalpha.
        grad_weights = upstream @ values.transpose(-2, -1)
        grad_logits = (softmax_theory.jacobian_from_weights(weights) @ grad_weights.unsqueeze(-1)).squeeze(-1)
        return float(np.median(grad_logits.norm(dim=(-2, -1)).numpy()))

    expected_scaled = np.array([median_logit_gradient(w, w**-0.5) for w in _GRADIENT_WIDTHS])
    expected_unscaled = np.array([median_logit_gradient(w, 1.0) for w in _GRADIENT_WIDTHS])
    # Medians of 2000 draws: across seeds their log10 has a standard deviation of about 0.005 scaled
    # and up to 0.15 unscaled (d = 1024, where the top weight's gap varies widely); the tolerances are
    # about 7 and 3 standard deviations of the difference of two runs.
    ok_s, msg_s = compare("log10 of the scaled medians", np.log10(scaled), np.log10(expected_scaled), 0.05)
    ok_u, msg_u = compare("log10 of the unscaled medians", np.log10(unscaled), np.log10(expected_unscaled), 0.7)
    if ok_s and ok_u:
        return True, "Scaled, the logit gradient keeps its size at every d; unscaled it collapses."
    if not ok_s and np.allclose(np.log10(scaled), np.log10(expected_unscaled), atol=0.7):
        return False, "your two lists look swapped: pass (scaled, unscaled)."
    if not ok_s:
        return False, msg_s + " Scaled by 1/sqrt(d), the logit gradient should barely change with d."
    if np.all(unscaled > expected_unscaled):
        return False, msg_u + (" Take the gradient with respect to the logits z, not q: dL/dq carries an "
                               "extra factor K, whose rows have length about sqrt(d).")
    return False, msg_u + " Unscaled, z = q K^T and the gradient shrinks as the softmax saturates."
