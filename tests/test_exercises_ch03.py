"""Chapter 3's checkers accept answers computed here without the estimator, and reject wrong ones helpfully."""
import math
from statistics import NormalDist

import numpy as np
import sympy as sp

from attnlib.book import exercises


def moment_interval_covers(scores, value, level=0.95):
    # S^2 +- z sqrt((m4 - (N-3)/(N-1) S^4) / N), the chapter's interval, written out here
    n = len(scores)
    s2 = scores.var(ddof=1)
    m4 = np.mean((scores - scores.mean()) ** 4)
    half = NormalDist().inv_cdf((1 + level) / 2) * math.sqrt(max(m4 - (n - 3) / (n - 1) * s2**2, 0) / n)
    return s2 - half <= value <= s2 + half


def test_heavier_tails_accepts_a_count_simulated_here():
    covered = 0
    for seed in range(100):
        pair = np.random.default_rng(500 + seed).standard_t(3, size=(1000, 2, 16)) / math.sqrt(3)
        covered += moment_interval_covers((pair[:, 0] * pair[:, 1]).sum(-1), 16)
    assert covered < 90
    assert exercises.check("ex-03-heavier-tails", covered)


def test_heavier_tails_rejects_nominal_coverage():
    feedback = exercises.check("ex-03-heavier-tails", 95)
    assert not feedback and "close to the nominal 95" in feedback.message


def test_heavier_tails_points_at_the_missing_sqrt3():
    feedback = exercises.check("ex-03-heavier-tails", 10)
    assert not feedback and "divided by sqrt(3)" in feedback.message


def test_heavier_tails_wants_a_whole_count():
    feedback = exercises.check("ex-03-heavier-tails", 70.5)
    assert not feedback and "a whole number" in feedback.message


# (1 MiB minus two NumPy buffers of float64) over one pair of float64 1024-vectors
BUDGET_ROWS = (2**20 - 2 * np.getbufsize() * 8) // (2 * 1024 * 8)


def test_budget_accepts_the_hand_count():
    assert exercises.check("ex-03-budget", (BUDGET_ROWS, math.ceil(20000 / BUDGET_ROWS)))


def test_budget_reminds_of_the_numpy_reserve():
    rows = 2**20 // (2 * 1024 * 8)
    feedback = exercises.check("ex-03-budget", (rows, math.ceil(20000 / rows)))
    assert not feedback and "NumPy's buffers" in feedback.message


def test_budget_rounds_the_chunks_up():
    feedback = exercises.check("ex-03-budget", (BUDGET_ROWS, 20000 // BUDGET_ROWS))
    assert not feedback and "round N / rows up" in feedback.message


def one_sided_ratio(rho_k, width=256, n=10000, rho_q=0.3, seed=11):
    rng = np.random.default_rng(seed)

    def equicorrelated(rho):
        return math.sqrt(1 - rho) * rng.standard_normal((n, width)) + math.sqrt(rho) * rng.standard_normal((n, 1))

    return float((equicorrelated(rho_q) * equicorrelated(rho_k)).sum(-1).var(ddof=1) / width)


def test_one_sided_accepts_an_estimate_made_here():
    assert exercises.check("ex-03-one-sided", one_sided_ratio(rho_k=0.0))


def test_one_sided_rejects_correlation_on_both_sides():
    feedback = exercises.check("ex-03-one-sided", one_sided_ratio(rho_k=0.3))
    assert not feedback and "correlation on both sides" in feedback.message


def test_one_sided_points_at_the_coordinate_variance():
    feedback = exercises.check("ex-03-one-sided", 0.7)
    assert not feedback and "keep" in feedback.message and "variance 1" in feedback.message


d_model, d_k = sp.symbols("d_model d_k", positive=True)
# Var(q . k) = d_k (sigma_w^2 d_model)^2, with Xavier's sigma_w^2 = 2 / (d_model + d_k)
XAVIER = d_k * (2 / (d_model + d_k) * d_model) ** 2


def test_xavier_square_accepts_d_k():
    assert exercises.check("ex-03-xavier-square", sp.simplify(XAVIER.subs(d_model, d_k)))


def test_xavier_square_asks_for_the_substitution():
    feedback = exercises.check("ex-03-xavier-square", XAVIER)
    assert not feedback and "substitute d_model = d_k" in feedback.message


def test_xavier_square_points_at_the_weight_variance():
    feedback = exercises.check("ex-03-xavier-square", d_k / 4)
    assert not feedback and "Xavier's sigma_w^2" in feedback.message


def test_budget_wants_whole_numbers():
    feedback = exercises.check("ex-03-budget", (BUDGET_ROWS + 0.5, 358))
    assert not feedback and "rows should be a whole number" in feedback.message
