"""Chapter 2's checkers accept answers derived here from the closed forms, and reject wrong ones helpfully."""
import itertools
import math
from fractions import Fraction

import pytest
import sympy as sp

from attnlib.book import exercises
from attnlib.book.exercises.symbolic import as_expression

d = sp.Symbol("d", positive=True)  # not the library's symbol: checkers match symbols by name


def score_variance(mu_q, mu_k, sigma_q, sigma_k):
    # Var(q . k) = d (sigma_q^2 sigma_k^2 + mu_q^2 sigma_k^2 + mu_k^2 sigma_q^2) under independence
    return d * (sigma_q**2 * sigma_k**2 + mu_q**2 * sigma_k**2 + mu_k**2 * sigma_q**2)


def test_unequal_scales_accepts_d():
    assert exercises.check("ex-02-unequal-scales", score_variance(0, 0, 2, sp.Rational(1, 2)))


def test_unequal_scales_rejects_the_query_variance_alone():
    feedback = exercises.check("ex-02-unequal-scales", 4 * d)
    assert not feedback and "how the two standard deviations combine" in feedback.message


def test_unequal_scales_asks_for_d_when_given_a_number():
    feedback = exercises.check("ex-02-unequal-scales", 64)
    assert not feedback and "in terms of d" in feedback.message


def test_head_width_accepts_an_eighth():
    assert exercises.check("ex-02-head-width", 64 / math.sqrt(512) ** 2)


def test_head_width_explains_the_model_width():
    feedback = exercises.check("ex-02-head-width", 1.0)
    assert not feedback and "divisor is sqrt(512)" in feedback.message


def test_head_width_explains_the_squared_divisor():
    feedback = exercises.check("ex-02-head-width", 64 / math.sqrt(512))
    assert not feedback and "c squared" in feedback.message


def bernoulli_enumeration(width):
    scores = [sum(a * b for a, b in zip(bits[:width], bits[width:]))
              for bits in itertools.product((0, 1), repeat=2 * width)]
    mean = Fraction(sum(scores), len(scores))
    return mean, sum((s - mean) ** 2 for s in scores) / len(scores)


def test_bernoulli_accepts_closed_forms_and_the_enumeration():
    half = sp.Rational(1, 2)
    assert exercises.check("ex-02-bernoulli", (d * half * half, score_variance(half, half, half, half)))
    assert exercises.check("ex-02-bernoulli", bernoulli_enumeration(3))


def test_bernoulli_points_at_the_mean_terms():
    feedback = exercises.check("ex-02-bernoulli", (d / 4, d / 16))
    assert not feedback and "non-zero means add" in feedback.message


def test_bernoulli_rejects_a_zero_mean():
    feedback = exercises.check("ex-02-bernoulli", (0, 3 * d / 16))
    assert not feedback and "the mean 0 is off" in feedback.message


def test_correlation_budget_accepts_the_roots_rounded():
    rho = sp.Symbol("rho", positive=True)
    roots = [float(sp.solve(sp.Eq(1 + (width - 1) * rho**2, 2), rho)[0]) for width in (64, 1024)]
    assert exercises.check("ex-02-correlation-budget", roots)
    assert exercises.check("ex-02-correlation-budget", [round(r, 3) for r in roots])


def test_correlation_budget_counts_d_minus_one_partners():
    feedback = exercises.check("ex-02-correlation-budget", [1 / 8, 1 / 32])
    assert not feedback and "d - 1 partners" in feedback.message


def test_correlation_budget_wants_the_positive_root():
    feedback = exercises.check("ex-02-correlation-budget", [-0.126, -0.0313])
    assert not feedback and "positive root" in feedback.message


def test_as_expression_names_the_unknown_symbols():
    with pytest.raises(ValueError, match=r"answer should be written in \['d'\] only, got the symbols \['n'\]"):
        as_expression(sp.Symbol("n") / 4, "answer", (d,))


def test_as_expression_rejects_what_is_not_an_expression():
    with pytest.raises(ValueError, match="answer should be one SymPy expression or number, got"):
        as_expression(object(), "answer", (d,))


rho = sp.Symbol("rho", real=True)  # a student's rho may carry assumptions: matched by name


def cross_correlated_moments():
    # Isserlis for jointly Gaussian q_a, k_a with unit variances and correlation rho:
    # E[q_a^2 k_a^2] = E[q_a^2] E[k_a^2] + 2 E[q_a k_a]^2 = 1 + 2 rho^2, so Var(q_a k_a) = 1 + rho^2
    return d * rho, d * (1 + 2 * rho**2 - rho**2)


def test_cross_correlation_accepts_the_moments_in_any_form():
    mean, var = cross_correlated_moments()
    assert exercises.check("ex-02-cross-correlation", (mean, var))
    assert exercises.check("ex-02-cross-correlation", (sp.Symbol("d") * sp.Symbol("rho"),
                                                       sp.Symbol("d") + sp.Symbol("d") * sp.Symbol("rho") ** 2))


def test_cross_correlation_points_at_the_dependence_for_a_zero_mean():
    feedback = exercises.check("ex-02-cross-correlation", (0, d))
    assert not feedback and "no longer independent" in feedback.message


def test_cross_correlation_names_the_missing_variance_of_the_square():
    mean, _ = cross_correlated_moments()
    feedback = exercises.check("ex-02-cross-correlation", (mean, d))
    assert not feedback and "rho q_a^2 varies too" in feedback.message


def test_cross_correlation_points_at_the_fourth_moment():
    mean, _ = cross_correlated_moments()
    feedback = exercises.check("ex-02-cross-correlation", (mean, d * (1 + 2 * rho**2)))
    assert not feedback and "E[q_a^4]" in feedback.message and "2*rho" not in feedback.message


def test_cross_correlation_wants_the_variance_to_grow_with_d():
    mean, _ = cross_correlated_moments()
    feedback = exercises.check("ex-02-cross-correlation", (mean, 1 + rho**2))
    assert not feedback and "grow with the width" in feedback.message


def test_cross_correlation_names_an_unknown_symbol():
    feedback = exercises.check("ex-02-cross-correlation", (d * sp.Symbol("r"), d))
    assert not feedback and "['d', 'rho']" in feedback.message
