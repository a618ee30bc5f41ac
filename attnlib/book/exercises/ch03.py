"""Checkers for the exercises of Chapter 3, The variance of q . k, measured by Monte Carlo."""
import math

import numpy as np
import sympy as sp

from .. import montecarlo as mc
from ..theory import variance
from . import as_count, as_number, as_parts, checker, compare
from .symbolic import as_expression, same

@checker("ex-03-heavier-tails",
         "an integer: how many of 100 moment intervals (d = 16, N = 1000, Student-t df = 3 / sqrt(3)) contain 16",
         self_check=True)
def _heavier_tails(answer):
    count = as_count(answer, "answer")
    if count > 100:
        return False, f"the answer counts intervals out of 100, got {count}."
    width, samples = 16, 1000

    def draw_student_t3(rng, rows):
        # df = 3 has variance 3: dividing by sqrt(3) makes it 1, so Var(q . k) = d as for the other laws.
        pair = rng.standard_t(3, size=(rows, 2, width)) / math.sqrt(3)
        return pair[:, 0], pair[:, 1]

    # Our own 200 repetitions on seeds the student is unlikely to use; the allowance is about
    # three standard deviations of the difference of two binomial counts.
    sampler = mc.PairSampler("student_t3", width, draw_student_t3, 2 * width * mc.FLOAT_BYTES)
    runs = [mc.estimate_score_variance(width, samples, sampler, seed=10_000 + s) for s in range(200)]
    expected = 100 * sum(run.covers(width) for run in runs) / len(runs)
    allowance = 3 * math.sqrt(100 * 1.5 * (expected / 100) * (1 - expected / 100)) + 1
    if abs(count - expected) <= allowance:
        return True, (f"{count} of 100 is in line with our own coverage: far fewer than 95, "
                      "because the interval needs a finite fourth moment.")
    if count >= 90:
        return False, (f"{count} of 100 is close to the nominal 95, which light tails would give. Check that "
                       "df = 3 and that the interval is the moment one at N = 1000.")
    if count <= 10:
        return False, (f"{count} of 100 is almost none. Check that the coordinates are divided by sqrt(3), "
                       "so that Var(q . k) really is 16, and that you count intervals containing 16.")
    return False, (f"{count} of 100 is not in line with our own coverage. Check the law (df = 3, divided by "
                   "sqrt(3)), d = 16, N = 1000, 100 repetitions on different seeds, and the moment interval.")


@checker("ex-03-budget",
         "a pair (rows, chunks): Gaussian pairs per chunk at d = 1024 with a 1 MiB budget, and chunks for N = 20000")
def _budget(answer):
    rows, chunks = (as_count(x, name) for x, name in as_parts(answer, ("rows", "chunks")))
    budget, n_samples = 2**20, 20000
    expected_rows = mc.chunk_rows(mc.independent_pairs("gaussian", 1024), n_samples, budget)
    expected_chunks = math.ceil(n_samples / expected_rows)
    pair_bytes = 2 * 1024 * mc.FLOAT_BYTES
    if rows != expected_rows:
        if rows == budget // pair_bytes:
            return False, (f"{rows} rows would use the whole budget; part of it is kept for NumPy's buffers "
                           "(mc.NUMPY_BUFFER_RESERVE).")
        return False, (f"{rows} rows per chunk is off. Hint: count the bytes of one pair of 1024-vectors in "
                       "float64, and what the estimator keeps back from the budget.")
    if chunks != expected_chunks:
        return False, f"{chunks} chunks is off. Hint: the last chunk may be partial, so round N / rows up."
    return True, f"{rows} pairs per chunk, {chunks} chunks."


@checker("ex-03-one-sided",
         "a number: your estimate of Var(q . k) / d at d = 256 (N >= 10000) with rho = 0.3 within q, none within k",
         self_check=True)
def _one_sided(answer):
    width = 256
    correlated = variance.derive_correlated_score_variance()[-1].equation.rhs.subs(variance.STANDARD)
    expected = float(correlated.subs({variance.rho_q: sp.Rational(3, 10), variance.rho_k: 0, variance.d: width}))
    # Var(S^2)/sigma^4 is about (kurtosis - 1)/N = 2.5e-4 at N = 10000: 0.07 is four standard errors.
    got = as_number(answer, "answer")
    passed, message = compare("Var(q . k) / d", np.array(got), np.array(expected / width), 0.07)
    if passed:
        return True, message + " With rho_k = 0 the term d(d - 1) rho_q rho_k vanishes."
    if got > 10:
        return False, message + (" Did you divide by d? If so, check that k's coordinates are independent: "
                                 "correlation on both sides adds d(d - 1) rho_q rho_k.")
    return False, message + (" Check that each coordinate of q keeps variance 1: "
                             "sqrt(1 - rho) z_i + sqrt(rho) c has variance (1 - rho) + rho.")


@checker("ex-03-xavier-square",
         "the SymPy expression of Var(q . k) under Xavier initialisation with d_model = d_k, in variance.d_k",
         self_check=True)
def _xavier_square(answer):
    got = as_expression(answer, "answer", (variance.d_k, variance.d_model))
    xavier = variance.derive_projected_score_variance("xavier")[-1].equation.rhs
    expected = xavier.subs(variance.d_model, variance.d_k)
    if variance.d_model in got.free_symbols:
        return False, f"you have {got}; substitute d_model = d_k so that only d_k remains."
    if same(got, expected):
        return True, "With equal widths Xavier's weight variance is 1/d_model, the LeCun value."
    return False, (f"you have {got}. Start from the projected variance d_k (sigma_w^2 d_model)^2 with "
                   "Xavier's sigma_w^2 = 2 / (d_model + d_k).")
