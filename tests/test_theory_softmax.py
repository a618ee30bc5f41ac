"""Chapter 4's claims: the SymPy softmax results, the Jacobian against autograd,
the saturation experiment and its widget, and the vanishing gradient."""
import math

import numpy as np
import pytest
import sympy as sp
import torch

import attnlib
from attnlib.book.theory import softmax as theory
from attnlib.book.seeded import SeededNormal
from attnlib.book.widgets import DIMS, SaturationDemo, draw_query_and_keys, saturation_summary


def numpy_softmax(x):
    ex = np.exp(x - x.max())
    return ex / ex.sum()


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_softmax_ignores_a_common_shift(n):
    assert theory.shift_difference(n) == [0] * n


def test_softmax_sums_to_one():
    assert sp.simplify(sp.Add(*theory.softmax(theory.logits(4), theory.T)) - 1) == 0


def test_two_logit_weight_is_logistic_in_gap_over_temperature():
    gap = sp.Symbol("Delta", real=True)
    logistic = 1 / (1 + sp.exp(-gap / theory.T))
    assert sp.simplify(theory.two_logit_weight(gap) - logistic) == 0


def test_temperature_limits_are_one_hot_and_uniform():
    cold, hot = theory.temperature_limits(4)
    assert cold == [1, 0, 0, 0]
    assert hot == [sp.Rational(1, 4)] * 4


@pytest.mark.parametrize("n", [2, 3])
def test_symbolic_jacobian_equals_closed_form(n):
    assert theory.jacobian_residual(n) == sp.zeros(n, n)


def test_symbolic_jacobian_matches_torch_autograd_at_a_point():
    z = theory.logits(3)
    point = {zi: v for zi, v in zip(z, [0.3, -1.2, 2.0])}
    symbolic = np.array(theory.jacobian(3).subs(point).evalf(), dtype=float)
    autograd = torch.autograd.functional.jacobian(
        lambda x: torch.softmax(x, -1), torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    )
    np.testing.assert_allclose(symbolic, autograd.numpy(), atol=1e-14)


def test_closed_form_jacobian_matches_autograd_through_attnlib():
    # with identity keys and scale 1 the weights are softmax(query row)
    gen = torch.Generator().manual_seed(3)
    z = 3 * torch.randn(2, 6, dtype=torch.float64, generator=gen)
    keys = torch.eye(6, dtype=torch.float64)
    for row in z:
        def weights_of(x):
            return attnlib.attention_weights(x[None, :], keys, scale=1.0)[0]

        autograd = torch.autograd.functional.jacobian(weights_of, row)
        closed = theory.jacobian_from_weights(weights_of(row))
        torch.testing.assert_close(closed, autograd, atol=1e-14, rtol=0)


def test_closed_form_jacobian_is_batched():
    weights = torch.softmax(torch.randn(4, 3, 5, dtype=torch.float64), -1)
    batched = theory.jacobian_from_weights(weights)
    assert batched.shape == (4, 3, 5, 5)
    torch.testing.assert_close(batched[2, 1], theory.jacobian_from_weights(weights[2, 1]))


@pytest.mark.parametrize("n", [2, 3, 5])
def test_jacobian_abs_sum_identity_holds_on_simplex(n):
    assert theory.jacobian_abs_sum_residual(n) == 0


def test_jacobian_abs_sum_and_bound_numerically():
    z = torch.randn(500, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for factor in [0.1, 1.0, 8.0, 32.0]:
        a = torch.softmax(factor * z, -1)
        total = theory.jacobian_from_weights(a).abs().sum(dim=(-2, -1))
        torch.testing.assert_close(total, 2 * (1 - (a**2).sum(-1)), atol=1e-13, rtol=0)
        assert bool((total <= 4 * (1 - a.max(-1).values) + 1e-13).all())


def test_uniform_entropy_is_log_n():
    assert theory.uniform_entropy(8) == sp.log(8)
    assert f"{float(theory.uniform_entropy(8)):.3f}" == "2.079"


def test_bad_n_names_the_argument():
    with pytest.raises(ValueError, match="n .*positive int"):
        theory.logits(0)


def test_bool_n_is_rejected():
    with pytest.raises(ValueError, match="n .*positive int"):
        theory.uniform_entropy(True)


def test_jacobian_from_weights_rejects_non_tensor():
    with pytest.raises(TypeError, match="weights must be a torch.Tensor"):
        theory.jacobian_from_weights([0.5, 0.5])


# The seeds' experiment -------------------------------------------------------

def test_summary_reproduces_seed_snippet():
    rng = np.random.default_rng(7)
    q, K = rng.standard_normal(128), rng.standard_normal((8, 128))
    scores = K @ q
    for scaled, expected in [(False, numpy_softmax(scores)), (True, numpy_softmax(scores / np.sqrt(128)))]:
        summary = saturation_summary(q, K, scaled)
        np.testing.assert_allclose(summary.weights, expected, atol=1e-15)
        assert summary.max_weight == pytest.approx(expected.max())
        nonzero = expected[expected > 0]
        assert summary.entropy == pytest.approx(-(nonzero * np.log(nonzero)).sum(), abs=1e-12)
        assert summary.max_entropy == pytest.approx(math.log(8))


def test_unscaled_draws_saturate_and_scaled_ones_do_not():
    # the chapter's distribution claim, at the two ends of its range of d
    def median_max_weight(d, scaled, n_draws=500):
        rng = np.random.default_rng(d)
        q = torch.from_numpy(rng.standard_normal((n_draws, 1, d)))
        K = torch.from_numpy(rng.standard_normal((n_draws, 8, d)))
        w = attnlib.attention_weights(q, K, scale=None if scaled else 1.0)
        return float(w.amax(-1).median())

    assert 0.25 < median_max_weight(4, True) < 0.4
    assert 0.25 < median_max_weight(1024, True) < 0.4
    assert median_max_weight(1024, False) > 0.999


def test_unscaled_gradient_vanishes_through_naive_path():
    gen = torch.Generator().manual_seed(0)

    def median_grad_norm(d, scaled, n_draws=500):
        q = torch.randn(n_draws, 1, d, generator=gen, dtype=torch.float64, requires_grad=True)
        K = torch.randn(n_draws, 8, d, generator=gen, dtype=torch.float64)
        V = torch.randn(n_draws, 8, 16, generator=gen, dtype=torch.float64)
        g = torch.randn(n_draws, 1, 16, generator=gen, dtype=torch.float64)
        out = attnlib.scaled_dot_product_attention(q, K, V, scale=None if scaled else 1.0, backend="naive")
        (out * g).sum().backward()
        return float(q.grad.norm(dim=(-2, -1)).median())

    scaled_1024 = median_grad_norm(1024, True)
    assert 0.8 < median_grad_norm(16, True) < 1.6 and 0.8 < scaled_1024 < 1.6
    assert median_grad_norm(1024, False) < 1e-3 * scaled_1024


# The widget -------------------------------------------------------------------

def test_widget_callbacks_follow_slider_toggle_and_button():
    demo = SaturationDemo(seed=11)
    draws = SeededNormal(11)  # the generator the book's live figure also uses
    q, K = draws.standard_normal(max(DIMS)), draws.standard_normal((8, max(DIMS)))

    def expected(d, scaled):
        scores = K[:, :d] @ q[:d]
        return numpy_softmax(scores / np.sqrt(d) if scaled else scores)

    np.testing.assert_allclose(demo.summary.weights, expected(64, True), atol=1e-14)
    demo.dim.value = 256
    np.testing.assert_allclose(demo.summary.weights, expected(256, True), atol=1e-14)
    demo.scaled.value = False
    np.testing.assert_allclose(demo.summary.weights, expected(256, False), atol=1e-14)
    assert f"{demo.summary.max_weight:.3f}" in demo.readout.value
    assert f"{demo.summary.entropy:.3f} nats" in demo.readout.value

    demo.new_draw.click()
    q, K = draws.standard_normal(max(DIMS)), draws.standard_normal((8, max(DIMS)))
    np.testing.assert_allclose(demo.summary.weights, expected(256, False), atol=1e-14)


def test_draw_query_and_keys_shapes():
    q, K = draw_query_and_keys(np.random.default_rng(0), 32, n_keys=5)
    assert q.shape == (32,) and K.shape == (5, 32)


def test_widget_rejects_a_width_it_does_not_offer():
    with pytest.raises(ValueError, match="dim must be one of"):
        SaturationDemo(dim=100)
