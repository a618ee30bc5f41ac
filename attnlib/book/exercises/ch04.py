"""Checkers for the exercises of Chapter 4, Softmax saturation."""
import math

import numpy as np
import sympy as sp
import torch

from ..theory import softmax as softmax_theory
from . import as_array, as_number, as_parts, checker, compare
from .symbolic import as_expression, same

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
         "a pair (weights, totals): n rows of softmax weights of length 8, and totals[i] = sum_jl |J_jl| of row i",
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


@checker("ex-04-sigmoid",
         "a pair (slope, gap): d p_0 / d Delta as a SymPy expression in Delta and T, and the positive "
         "Delta / T at which that slope is 1% of its largest value")
def _sigmoid(answer):
    (slope, _), (gap, _) = as_parts(answer, ("slope", "gap"))
    delta, temperature = sp.Symbol("Delta", real=True), softmax_theory.T
    slope = as_expression(slope, "slope", (delta, temperature))
    gap = as_number(gap, "gap")
    weight = softmax_theory.two_logit_weight(delta)
    expected_slope = sp.diff(weight, delta)
    if not same(slope, expected_slope):
        if same(slope, weight):
            return False, "that is the weight p_0 itself; its derivative with respect to Delta is asked."
        if same(slope / temperature, expected_slope):
            return False, ("the chain rule through Delta / T is missing: differentiate with respect to Delta, "
                           "not to Delta / T.")
        return False, ("that is not d p_0 / d Delta. Write p_0 = 1 / (1 + exp(-x)) with x = Delta / T, "
                       "differentiate, and compare with a finite difference at Delta = 0.")
    # x = gap: sigma(x) (1 - sigma(x)) = 1/400, a quarter of 1%; e^x solves y^2 - 398 y + 1 = 0
    expected_gap = math.log(199 + math.sqrt(199**2 - 1))
    if math.isclose(abs(gap), expected_gap, rel_tol=1e-3):
        if gap < 0:
            return False, "the slope is symmetric in Delta: give the positive gap."
        return True, "Beyond about six temperatures the two-key softmax passes almost no gradient."
    # sigma (1 - sigma) = 0.01: an absolute slope of 0.01 at T = 1, not 1% of the largest
    if math.isclose(gap, math.log(49 + math.sqrt(49**2 - 1)), rel_tol=1e-3):
        return False, "that is where the slope is 0.01 at T = 1; 1% of the slope at Delta = 0 is asked."
    if math.isclose(gap, math.log(99), rel_tol=1e-3):
        return False, "that is where the weight p_0 reaches 0.99; the gap is about the slope."
    return False, ("that is not where the slope is 1% of its largest. Find the largest slope first (where is "
                   "it?), then solve for Delta / T > 0, e.g. with sp.nsolve.")


@checker("ex-04-jacobian-norm",
         "a pair (row_sum, kappa): the sum of |J_jl| over row j as a SymPy expression in p_j, and the smallest "
         "kappa with |J|_2 <= kappa (1 - p_max) for every row of weights")
def _jacobian_norm(answer):
    (row_sum, _), (kappa, _) = as_parts(answer, ("row_sum", "kappa"))
    p = sp.Symbol("p_j", positive=True)
    row_sum = as_expression(row_sum, "row_sum", (p,))
    kappa = as_number(kappa, "kappa")
    # |p (1 - p)| on the diagonal, p p_l elsewhere; the other weights sum to 1 - p
    expected = p * (1 - p) + p * (1 - p)
    if not same(row_sum, expected):
        if same(row_sum, p * (1 - p)):
            return False, "that is the diagonal entry alone; add the absolute values of the rest of the row."
        if same(row_sum, 0):
            return False, ("that is the plain sum of the row, 0 because a shift of every logit changes no weight; "
                           "sum the absolute values.")
        return False, "write the row's entries with p_j and the other weights, and use that the weights sum to 1."
    # two keys (p, 1 - p): |J|_2 = 2 p (1 - p) = 2 p (1 - p_max), whose ratio tends to 2 as p -> 1
    if math.isclose(kappa, 2, rel_tol=1e-3):
        return True, "The row sums bound the spectral norm by 2 (1 - p_max), and two keys reach it."
    if math.isclose(kappa, 4, rel_tol=1e-3):
        return False, ("4 (1 - p_max) bounds the sum of all |J_jl|; the spectral norm needs only the largest row "
                       "sum.")
    if kappa < 2:
        return False, "too small: some rows break it. Try two keys with weights (0.999, 0.001)."
    return False, "that bound holds, but a smaller kappa does too: bound each row's sum by a multiple of 1 - p_max."
