"""Chapter 4's checkers accept answers computed here with NumPy and autograd, and reject wrong ones helpfully."""
import math

import numpy as np
import sympy as sp
import torch

from attnlib.book import exercises


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def median_max_weight(q, keys, scale):
    return np.median(softmax(scale * np.einsum("nd,nkd->nk", q, keys)).max(axis=-1))


def test_temperature_accepts_the_closest_t_found_here():
    rng = np.random.default_rng(7)
    q, keys = rng.standard_normal((2000, 256)), rng.standard_normal((2000, 8, 256))
    target = median_max_weight(rng.standard_normal((2000, 16)), rng.standard_normal((2000, 8, 16)), 1.0)
    medians = {t: median_max_weight(q, keys, 1 / (16 * t)) for t in (0.25, 0.5, 1.0, 2.0)}
    assert exercises.check("ex-04-temperature", min(medians, key=lambda t: abs(medians[t] - target)))


def test_temperature_explains_that_t_divides():
    feedback = exercises.check("ex-04-temperature", 4)
    assert not feedback and "T divides the scores" in feedback.message


def test_temperature_gives_the_spread_of_a_wrong_t():
    feedback = exercises.check("ex-04-temperature", 0.5)
    assert not feedback and "standard deviation 2" in feedback.message


def test_temperature_lists_the_choices():
    feedback = exercises.check("ex-04-temperature", 3)
    assert not feedback and "one of (0.25, 0.5, 1.0, 2.0)" in feedback.message


def rows_and_jacobians(seed=3):
    logits = np.random.default_rng(seed).standard_normal((300, 8)) * np.repeat([1.0, 8.0, 32.0], 100)[:, None]
    weights = softmax(logits)
    jacobians = np.stack([np.diag(a) - np.outer(a, a) for a in weights])
    return logits, weights, jacobians


def test_jacobian_bound_accepts_totals_from_explicit_jacobians():
    _, weights, jacobians = rows_and_jacobians()
    assert exercises.check("ex-04-jacobian-bound", (weights, np.abs(jacobians).sum(axis=(1, 2))))


def test_jacobian_bound_wants_absolute_values():
    _, weights, jacobians = rows_and_jacobians()
    feedback = exercises.check("ex-04-jacobian-bound", (weights, jacobians.sum(axis=(1, 2))))
    assert not feedback and "absolute values" in feedback.message


def test_jacobian_bound_wants_weights_not_logits():
    logits, _, jacobians = rows_and_jacobians()
    feedback = exercises.check("ex-04-jacobian-bound", (logits, np.abs(jacobians).sum(axis=(1, 2))))
    assert not feedback and "not the logits" in feedback.message


def test_jacobian_bound_names_the_shape_of_weights():
    feedback = exercises.check("ex-04-jacobian-bound", (np.full((4, 5), 0.2), np.zeros(4)))
    assert not feedback and "weights should have shape (n, 8), got (4, 5)" in feedback.message


def autograd_medians(seed=0, draws=2000, with_respect_to_q=False):
    gen = torch.Generator().manual_seed(seed)
    medians = {"scaled": [], "unscaled": []}
    for width in (16, 256, 1024):
        q = torch.randn(draws, 1, width, generator=gen, dtype=torch.float64)
        keys = torch.randn(draws, 8, width, generator=gen, dtype=torch.float64)
        values = torch.randn(draws, 8, 16, generator=gen, dtype=torch.float64)
        upstream = torch.randn(draws, 1, 16, generator=gen, dtype=torch.float64)
        for kind, scale in (("scaled", width**-0.5), ("unscaled", 1.0)):
            leaf = q.clone().requires_grad_()
            logits = scale * leaf @ keys.transpose(-2, -1)
            if not with_respect_to_q:
                logits = logits.detach().requires_grad_()
                leaf = logits
            ((torch.softmax(logits, -1) @ values) * upstream).sum().backward()
            medians[kind].append(float(leaf.grad.norm(dim=(-2, -1)).median()))
    return medians["scaled"], medians["unscaled"]


def test_logit_gradient_accepts_autograd_medians():
    assert exercises.check("ex-04-logit-gradient", autograd_medians())


def test_logit_gradient_notices_swapped_lists():
    scaled, unscaled = autograd_medians()
    feedback = exercises.check("ex-04-logit-gradient", (unscaled, scaled))
    assert not feedback and "swapped" in feedback.message


def test_logit_gradient_wants_the_logits_not_q():
    feedback = exercises.check("ex-04-logit-gradient", autograd_medians(with_respect_to_q=True))
    assert not feedback and "logits z, not q" in feedback.message


DELTA, T = sp.symbols("Delta T", positive=True)


def sigmoid_gap_by_bisection(fraction=0.01):
    # the x > 0 where sigma'(x) = e^-x / (1 + e^-x)^2 is `fraction` of sigma'(0) = 1/4
    low, high = 0.0, 50.0
    for _ in range(200):
        mid = (low + high) / 2
        slope = math.exp(-mid) / (1 + math.exp(-mid)) ** 2
        low, high = (mid, high) if slope > fraction / 4 else (low, mid)
    return low


def test_sigmoid_accepts_the_slope_and_the_gap_found_here():
    slope = sp.exp(-DELTA / T) / (T * (1 + sp.exp(-DELTA / T)) ** 2)
    assert exercises.check("ex-04-sigmoid", (slope, sigmoid_gap_by_bisection()))


def test_sigmoid_wants_the_chain_rule():
    slope = sp.exp(-DELTA / T) / (1 + sp.exp(-DELTA / T)) ** 2
    feedback = exercises.check("ex-04-sigmoid", (slope, sigmoid_gap_by_bisection()))
    assert not feedback and "chain rule" in feedback.message


def test_sigmoid_wants_the_derivative_not_the_weight():
    feedback = exercises.check("ex-04-sigmoid", (1 / (1 + sp.exp(-DELTA / T)), 6.0))
    assert not feedback and "the weight p_0 itself" in feedback.message


def test_sigmoid_gap_is_relative_to_the_largest_slope():
    slope = sp.exp(-DELTA / T) / (T * (1 + sp.exp(-DELTA / T)) ** 2)
    # where the slope itself is 0.01 at T = 1: a quarter of the asked fraction of 1/4
    feedback = exercises.check("ex-04-sigmoid", (slope, sigmoid_gap_by_bisection(0.04)))
    assert not feedback and "1% of the slope at Delta = 0" in feedback.message


def two_key_norm_ratios():
    # |J|_2 / (1 - p_max) for two keys, from NumPy's eigenvalues
    ratios = []
    for top in np.linspace(0.5, 0.9999, 400):
        weights = np.array([top, 1 - top])
        jacobian = np.diag(weights) - np.outer(weights, weights)
        ratios.append(np.abs(np.linalg.eigvalsh(jacobian)).max() / (1 - top))
    return np.array(ratios)


def test_jacobian_norm_accepts_the_row_sum_and_the_constant_found_here():
    rows = np.random.default_rng(5).dirichlet(np.full(8, 0.3), size=500)
    jacobians = np.stack([np.diag(p) - np.outer(p, p) for p in rows])
    row_sums = np.abs(jacobians).sum(axis=2)
    p_j = sp.Symbol("p_j", positive=True)
    row_sum = 2 * p_j - 2 * p_j**2
    assert np.allclose(row_sums, sp.lambdify(p_j, row_sum)(rows))
    norms = np.abs(np.linalg.eigvalsh(jacobians)).max(axis=1)
    assert np.all(norms <= 2 * (1 - rows.max(axis=1)) + 1e-12)
    assert exercises.check("ex-04-jacobian-norm", (row_sum, round(two_key_norm_ratios().max(), 3)))


def test_jacobian_norm_wants_the_whole_row():
    p_j = sp.Symbol("p_j")
    feedback = exercises.check("ex-04-jacobian-norm", (p_j * (1 - p_j), 2))
    assert not feedback and "diagonal entry alone" in feedback.message


def test_jacobian_norm_tells_the_total_bound_from_the_norm():
    p_j = sp.Symbol("p_j")
    feedback = exercises.check("ex-04-jacobian-norm", (2 * p_j * (1 - p_j), 4))
    assert not feedback and "largest row sum" in feedback.message


def test_jacobian_norm_rejects_a_constant_that_two_keys_break():
    p_j = sp.Symbol("p_j")
    below = float(two_key_norm_ratios().max()) - 0.1
    feedback = exercises.check("ex-04-jacobian-norm", (2 * p_j * (1 - p_j), below))
    assert not feedback and "too small" in feedback.message
