"""Chapter 4's checkers accept answers computed here with NumPy and autograd, and reject wrong ones helpfully."""
import numpy as np
import torch

from attnlib import exercises


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
