"""attnlib.book.theory.variance against closed forms written here and against exact enumeration.

The closed forms below are typed from the textbook formulas, not taken from
the module; the enumerations count every sign pattern or every sample.
"""
import itertools
import re
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from attnlib.book.theory import variance as v

d, mu_q, mu_k, sigma_q, sigma_k = v.d, v.mu_q, v.mu_k, v.sigma_q, v.sigma_k


def same(left, right) -> bool:
    return sp.simplify(sp.expand(left - right)) == 0


def test_mean_and_variance_of_the_score_general_form():
    assert same(v.score_mean(), d * mu_q * mu_k)
    assert same(v.score_variance(), d * (sigma_q**2 * sigma_k**2 + mu_q**2 * sigma_k**2 + mu_k**2 * sigma_q**2))


def test_standard_case_gives_mean_zero_and_variance_d():
    assert v.score_mean().subs(v.STANDARD) == 0
    assert v.score_variance().subs(v.STANDARD) == d


def test_each_derivation_step_is_a_true_equation_for_concrete_moments():
    # q ~ (mean 1, sd 2), k ~ (mean -3, sd 1): Var(qk) = E[q^2]E[k^2] - (E[q]E[k])^2 = 5 * 10 - 9 = 41.
    values = {mu_q: 1, sigma_q: 2, mu_k: -3, sigma_k: 1}
    raw = {sp.stats.Expectation(v.q): 1, sp.stats.Expectation(v.q**2): 5,
           sp.stats.Expectation(v.k): -3, sp.stats.Expectation(v.k**2): 10}
    for step in v.derive_product_variance()[1:]:
        assert step.equation.rhs.subs(raw).subs(values) == 41


def test_covariance_of_two_terms_vanishes_and_variances_add():
    assert v.derive_covariance_of_terms()[-1].equation.rhs == 0
    final = v.derive_variances_add(4)[-1].equation.rhs
    assert not final.atoms(sp.stats.Covariance)
    assert len(final.args) == 4 and all(isinstance(term, sp.stats.Variance) for term in final.args)


def test_product_rule_only_factors_independent_groups():
    qi, qj = v.random_coordinate("q_i"), v.random_coordinate("q_j")
    together = v.apply_independence(sp.stats.Expectation(qi * qj * v.k), dependent=(frozenset({qi, qj}),))
    assert together == sp.stats.Expectation(qi * qj) * sp.stats.Expectation(v.k)
    apart = v.apply_independence(sp.stats.Expectation(3 * qi * qj + qi))
    assert apart == 3 * sp.stats.Expectation(qi) * sp.stats.Expectation(qj) + sp.stats.Expectation(qi)


@pytest.mark.parametrize("name", ["gaussian", "rademacher", "uniform"])
def test_sympy_stats_product_moments_match_the_rule(name):
    direct = v.product_moments_by_sympy_stats(name)
    assert direct == {"mean": 0, "variance": 1}
    assert v.score_variance_for(name) == d


@pytest.mark.parametrize("name, fourth", [("gaussian", 3), ("rademacher", 1), ("uniform", sp.Rational(9, 5)),
                                          ("student_t5", 9)])
def test_coordinate_moments(name, fourth):
    # E[x^4]: 3 for N(0,1); 1 for signs; (sqrt 3)^4/5 for U(-sqrt 3, sqrt 3); 3(nu-2)/(nu-4) for unit-variance t_nu.
    assert [v.coordinate_moment(name, n) for n in (1, 2, 4)] == [0, 1, fourth]


@pytest.mark.parametrize("dimension", range(1, 7))
def test_rademacher_enumeration_matches_the_closed_forms(dimension):
    exact = v.rademacher_enumeration(dimension)
    assert exact["patterns"] == 4**dimension
    assert exact["mean"] == 0
    assert exact["variance"] == dimension
    # E[s^4] for a sum of d independent signs: d + 3 d (d - 1).
    assert exact["fourth_central_moment"] == 3 * dimension**2 - 2 * dimension
    assert v.score_fourth_central_moment_for("rademacher").subs(d, dimension) == exact["fourth_central_moment"]


def test_rademacher_enumeration_is_an_independent_count():
    # Recount d = 2 by hand-rolled loops over the 16 patterns.
    scores = [q1 * k1 + q2 * k2 for q1, q2, k1, k2 in itertools.product((-1, 1), repeat=4)]
    assert Fraction(sum(s * s for s in scores), 16) == v.rademacher_enumeration(2)["variance"]


def test_square_root_is_the_only_exponent_that_keeps_the_variance_fixed():
    assert v.scaling_exponent() == [sp.Rational(1, 2)]
    by_divisor = {divisor: v.derive_scaled_variance(divisor)[-1].equation.rhs
                  for divisor in (1, sp.sqrt(d), d, sp.log(d))}
    assert by_divisor[1] == d and by_divisor[sp.sqrt(d)] == 1
    assert same(by_divisor[d], 1 / d) and same(by_divisor[sp.log(d)], d / sp.log(d) ** 2)
    assert sp.limit(by_divisor[d], d, sp.oo) == 0 and sp.limit(by_divisor[sp.log(d)], d, sp.oo) == sp.oo


def test_correlated_coordinates_closed_form():
    rho_q, rho_k = v.rho_q, v.rho_k
    result = v.derive_correlated_score_variance()[-1].equation.rhs
    assert same(result.subs(v.STANDARD), d + d * (d - 1) * rho_q * rho_k)


def test_correlated_general_form_against_the_trace_formula():
    # Independent q ~ (mu_q 1, Sq), k ~ (mu_k 1, Sk): Var(q.k) = tr(Sq Sk) + mu_k^T Sq mu_k + mu_q^T Sk mu_q.
    values = {d: 5, v.rho_q: sp.Rational(1, 3), v.rho_k: sp.Rational(-1, 7), mu_q: 2, mu_k: sp.Rational(1, 2),
              sigma_q: 3, sigma_k: sp.Rational(5, 4)}
    n = 5
    equicorrelated = lambda rho, sigma: sigma**2 * ((1 - rho) * sp.eye(n) + rho * sp.ones(n, n))
    sq = equicorrelated(values[v.rho_q], values[sigma_q])
    sk = equicorrelated(values[v.rho_k], values[sigma_k])
    mq, mk = values[mu_q] * sp.ones(n, 1), values[mu_k] * sp.ones(n, 1)
    expected = (sq * sk).trace() + (mk.T * sq * mk)[0] + (mq.T * sk * mq)[0]
    assert v.derive_correlated_score_variance()[-1].equation.rhs.subs(values) == expected


def test_unequal_variances():
    delta = sp.Symbol("delta")
    assert same(v.two_level_profile_variance(delta), d * (1 + delta**2))
    assert same(v.two_level_profile_variance(delta, aligned=False), d * (1 - delta**2))
    sq, sk = sp.IndexedBase("sigma_q"), sp.IndexedBase("sigma_k")
    assert v.anisotropic_score_variance() == sp.Sum(sq[v.a] ** 2 * sk[v.a] ** 2, (v.a, 0, d - 1))


def test_fourth_central_moment_standard_case():
    beta_q, beta_k = sp.symbols("beta_q beta_k", positive=True)
    assert same(v.score_fourth_central_moment(), d * (beta_q * beta_k - 3) + 3 * d**2)
    assert same(v.score_fourth_central_moment_for("gaussian"), 3 * d**2 + 6 * d)
    assert same(v.score_fourth_central_moment_for("student_t5"), 3 * d**2 + 78 * d)


def test_fourth_central_moment_with_nonzero_means_against_enumeration():
    # Coordinates in {0, 1} with P(1) = 1/2 (mean 1/2): every raw moment is 1/2. Enumerate d = 3 exactly.
    dimension, half = 3, sp.Rational(1, 2)
    general = v.derive_score_fourth_central_moment()[-1].equation.rhs
    moments = {sp.stats.Expectation(x**n): half for x in (v.q, v.k) for n in range(1, 5)}
    moments.update({sp.stats.Expectation(x): half for x in (v.q, v.k)})
    predicted = general.subs(moments).subs(d, dimension)
    scores = [sum(a * b for a, b in zip(bits[:dimension], bits[dimension:]))
              for bits in itertools.product((0, 1), repeat=2 * dimension)]
    mean = Fraction(sum(scores), len(scores))
    exact = sum((s - mean) ** 4 for s in scores) / len(scores)
    assert predicted == sp.Rational(exact.numerator, exact.denominator)


@pytest.mark.parametrize("n_samples", [2, 3, 4, 5])
def test_variance_of_the_sample_variance_against_enumeration(n_samples):
    # Scores of Rademacher vectors with d = 2: -2, 0, 2 with probabilities 1/4, 1/2, 1/4.
    values, probs = (-2, 0, 2), (Fraction(1, 4), Fraction(1, 2), Fraction(1, 4))
    first = second = Fraction(0)
    for sample in itertools.product(range(3), repeat=n_samples):
        weight = np.prod([probs[j] for j in sample])
        xs = [values[j] for j in sample]
        mean = Fraction(sum(xs), n_samples)
        s2 = sum((x - mean) ** 2 for x in xs) / (n_samples - 1)
        first += weight * s2
        second += weight * s2 * s2
    exact = second - first**2
    formula = v.sample_variance_variance(sp.Integer(8), sp.Integer(2), sp.Integer(n_samples))  # mu_4 = 3*4-4
    assert first == 2 and formula == sp.Rational(exact.numerator, exact.denominator)


@pytest.mark.parametrize("init, expected", [
    ("pytorch_default", v.d_k / 9),
    ("lecun", v.d_k),
    ("xavier", 4 * v.d_k * v.d_model**2 / (v.d_model + v.d_k) ** 2),
])
def test_projection_initialisation_sets_the_score_variance(init, expected):
    steps = v.derive_projected_score_variance(init)
    assert same(steps[-2].equation.rhs, v.d_k * v.d_model**2 * v.sigma_w**4)
    assert same(steps[-1].equation.rhs, expected)


# Bad input: one test per case, each naming the argument.

def test_enumeration_rejects_non_integer_dimension():
    with pytest.raises(TypeError, match="dimension must be an integer"):
        v.rademacher_enumeration(2.5)


def test_enumeration_rejects_dimension_below_one():
    with pytest.raises(ValueError, match="dimension must be between 1 and 8"):
        v.rademacher_enumeration(0)


def test_enumeration_rejects_dimension_too_large_to_enumerate():
    with pytest.raises(ValueError, match="dimension must be between 1 and 8"):
        v.rademacher_enumeration(9)


def test_unknown_distribution_is_rejected():
    with pytest.raises(ValueError, match="distribution must be one of"):
        v.coordinate_moment("cauchy", 2)


def test_student_t_is_rejected_by_the_direct_sympy_stats_product():
    with pytest.raises(ValueError, match="distribution must be gaussian, rademacher or uniform"):
        v.product_moments_by_sympy_stats("student_t5")


def test_unknown_initialisation_is_rejected():
    with pytest.raises(ValueError, match="init must be one of"):
        v.derive_projected_score_variance("orthogonal")


def test_steps_latex_puts_each_reason_under_its_equation():
    steps = v.derive_product_variance()
    latex = v.steps_latex(steps)
    rows = latex.removeprefix(r"\begin{aligned}").removesuffix(r"\end{aligned}").split(r" \\[4pt] ")
    assert len(rows) == len(steps)
    for row, step in zip(rows, steps):
        equation, *reason = row.split(r" \\ ")
        assert equation.count("&=") == 1
        shown = [re.fullmatch(r"&\\qquad \\text\{(.*)\}", line).group(1) for line in reason]
        assert " ".join(shown) == f"({step.reason})"
        assert all(len(line) <= v.LINE_WIDTH for line in shown)


def test_steps_latex_wraps_a_long_reason_onto_lines_of_its_own():
    step = v.Step("given the input, the terms of the projection are independent",
                  sp.Eq(sp.Symbol("a"), sp.Symbol("b")))
    reason = v.steps_latex([step]).split(r" \\ ")[1:]
    assert len(reason) == 3 and reason[0] == r"&\qquad \text{(given the input, the terms of}"


def test_equation_latex_breaks_a_long_sum_into_lines_of_its_terms():
    x = sp.symbols("x1:13")
    long_sum = sum(x)
    latex = v.equation_latex(sp.Symbol("y"), long_sum, width=20)
    lines = latex.removeprefix(r"\begin{aligned}").removesuffix(r"\end{aligned}").split(r" \\ ")
    assert len(lines) > 1
    assert lines[0].startswith("y &= ") and all(line.startswith(r"&\quad + ") for line in lines[1:])
    # every term appears exactly once
    shown = re.findall(r"x_\{\d+\}", " ".join(lines))
    assert sorted(shown) == sorted(f"x_{{{i}}}" for i in range(1, 13))


def test_equation_latex_keeps_a_short_equation_on_one_line():
    assert v.equation_latex(sp.Symbol("y"), sp.Symbol("x") + 1) == r"\begin{aligned}y &= x + 1\end{aligned}"
