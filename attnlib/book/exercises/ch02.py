"""Checkers for the exercises of Chapter 2, The variance of q . k, derived symbolically."""
import math

import numpy as np
import sympy as sp

from ..theory import variance
from ..theory.variance import d, mu_k, mu_q, sigma_k, sigma_q
from . import as_array, as_parts, checker, compare
from .symbolic import as_expression, same


@checker("ex-02-unequal-scales",
         "Var(q . k) as a SymPy expression in d, for zero means, sigma_q = 2 and sigma_k = 1/2")
def _unequal_scales(answer):
    got = as_expression(answer, "answer", (d,))
    expected = variance.score_variance().subs({mu_q: 0, mu_k: 0, sigma_q: 2, sigma_k: sp.Rational(1, 2)})
    if same(got, expected):
        return True, "Only the product sigma_q * sigma_k enters when the means are zero."
    if not got.free_symbols:
        return False, f"you have the number {got}; the variance grows with the width, so write it in terms of d."
    return False, (f"you have {got}. Write the variance of one product q_a k_a with zero means, then add up "
                   "the d coordinates: recheck how the two standard deviations combine.")


@checker("ex-02-head-width", "a number: the variance of q . k / sqrt(512) when q . k runs over d_k = 64 coordinates")
def _head_width(answer):
    head, model = 64, 512
    expected = float(variance.derive_scaled_variance(sp.sqrt(model))[-1].equation.rhs.subs(d, head))
    got = as_array(answer, "answer", ())
    # the answer is a ratio of whole numbers: float32's rounding (1e-7 relative) is all a right answer can be off
    passed, message = compare("the variance", got, np.array(expected), 1e-5 * expected)
    if passed:
        return True, message + " The softmax sees logits flatter than intended."
    if np.isclose(got, 1.0, atol=1e-3):
        return False, message + " The dot products run over one head's 64 coordinates, but the divisor is sqrt(512)."
    if np.isclose(got, head / math.sqrt(model), atol=1e-3) or np.isclose(got, math.sqrt(head / model), atol=1e-3):
        return False, message + " Dividing a score by c divides its variance by c squared."
    return False, message + " In the standard case Var(q . k) = d over the coordinates of one head."


def _read_value_at(expression, width):
    return float(expression.subs(d, width)) if expression.free_symbols else float(expression)


@checker("ex-02-bernoulli",
         "a pair (mean, variance) of q . k for 0/1 coordinates: SymPy expressions in d, or their values at d = 3")
def _bernoulli(answer):
    mean, var = (as_expression(x, name, (d,)) for x, name in as_parts(answer, ("mean", "variance")))
    half = sp.Rational(1, 2)
    values = {mu_q: half, mu_k: half, sigma_q: half, sigma_k: half}
    expected_mean, expected_var = variance.score_mean().subs(values), variance.score_variance().subs(values)
    symbolic = bool(mean.free_symbols or var.free_symbols)
    where = "as a function of d" if symbolic else "at d = 3"
    if not (same(mean, expected_mean) if symbolic else np.isclose(_read_value_at(mean, 3), float(expected_mean.subs(d, 3)))):
        return False, f"the mean {mean} is off {where}. Hint: start from the mean of one product q_a k_a of independent coordinates."
    if not (same(var, expected_var) if symbolic else np.isclose(_read_value_at(var, 3), float(expected_var.subs(d, 3)))):
        hint = ("non-zero means add mu_q^2 sigma_k^2 + mu_k^2 sigma_q^2 per coordinate"
                if np.isclose(_read_value_at(var, 3), 3 / 16) else "use the variance of eq-score-moments with mu = sigma = 1/2")
        return False, f"the variance {var} is off {where}. Hint: {hint}."
    return True, f"mean and variance match {where}."


@checker("ex-02-correlation-budget",
         "a pair (rho_64, rho_1024): the positive correlations that make Var(q . k / sqrt(d)) = 2 at d = 64 and 1024")
def _correlation_budget(answer):
    got = as_array(answer, "answer", (2,))
    widths = np.array([64, 1024])
    # 1 + (d - 1) rho^2 = 2: the scaled variance with rho_q = rho_k = rho in the standard case.
    expected = 1 / np.sqrt(widths - 1)
    passed, message = compare("rho", got, expected, 3e-4)
    if passed:
        return True, message + " The wider the head, the less correlation the scale tolerates."
    if np.any(got <= 0):
        return False, message + " Take the positive root."
    if np.allclose(got, 1 / np.sqrt(widths), atol=3e-4):
        return False, message + " Each coordinate has d - 1 partners, not d: recheck the count of cross terms."
    if np.allclose(got, 1 / (widths - 1), atol=3e-4):
        return False, message + " Both vectors carry rho, so the extra term holds rho squared."
    return False, message + (" Write the scaled variance with correlated coordinates as the chapter derives it, "
                             "set it equal to 2 and solve for rho.")


@checker("ex-02-cross-correlation",
         "a pair (mean, variance) of q . k for Gaussian coordinates and a key correlated with its query: "
         "SymPy expressions in `d` and `rho`")
def _cross_correlation(answer):
    rho = sp.Symbol("rho")
    mean, var = (as_expression(x, name, (d, rho)) for x, name in as_parts(answer, ("mean", "variance")))
    # one term q_a k_a = rho q_a^2 + sqrt(1 - rho^2) q_a xi_a, its two parts uncorrelated:
    # mean rho; variance rho^2 Var(q_a^2) + (1 - rho^2) Var(q_a xi_a), with Var(q_a^2) = E[q_a^4] - 1 = 2
    expected_mean = d * rho
    expected_var = d * (rho**2 * (3 - 1) + (1 - rho**2))
    if not same(mean, expected_mean):
        if same(mean, 0):
            return False, ("the mean is off: q and k are no longer independent, and the part rho q_a^2 "
                           "of one term has a mean of its own.")
        if not mean.has(d):
            return False, "the mean is off: it should grow with the width; add up the d terms."
        return False, "the mean is off. Hint: split k_a into its two parts and take the mean of each product."
    if same(var, expected_var):
        return True, ("mean and variance both match. After dividing by sqrt(d) the variance stays bounded, "
                      "the mean does not.")
    if not var.has(d):
        return False, "the mean matches; the variance should grow with the width: the d terms' variances add."
    if same(var, d) or same(var, d * (1 - rho**2)):
        return False, ("the mean matches; the variance misses a part: rho q_a^2 varies too, it is not "
                       "a constant.")
    if same(var, d * (1 + 2 * rho**2)):
        return False, ("the mean matches; the variance is off. Hint: recheck Var(q_a^2), which is E[q_a^4] "
                       "minus the square of E[q_a^2], and the factor that the second part carries.")
    return False, ("the mean matches; the variance is off. Hint: find Var(rho q_a^2), "
                   "Var(sqrt(1 - rho^2) q_a xi_a) and the covariance of the two parts.")
