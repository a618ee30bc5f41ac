"""What a scale does to softmax, derived in SymPy.

For logits ``z = (z_1, ..., z_n)`` and a temperature ``T > 0``

    alpha_i = exp(z_i / T) / sum_j exp(z_j / T)                  (softmax)
    d alpha_i / d z_j = alpha_i (delta_ij - alpha_j)             (T = 1)
    H(alpha) = -sum_i alpha_i ln alpha_i  <=  ln n               (entropy, nats)

Attention's ``1/sqrt(d_k)`` is the temperature ``T = sqrt(d_k)`` applied to
raw dot products. Every function returns SymPy objects that a chapter can
display and a test can check; ``jacobian_from_weights`` evaluates the
closed form on tensors so that it can be compared with autograd.
"""
from __future__ import annotations

import sympy as sp
import torch

#: A positive temperature; ``T = sqrt(d_k)`` is attention's scale.
T = sp.Symbol("T", positive=True)
#: A common shift added to every logit.
c = sp.Symbol("c", real=True)


def _check_size(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (the number of logits) must be a positive int, got {n!r}")


def logits(n: int) -> list[sp.Symbol]:
    """The real symbols ``z_1, ..., z_n``."""
    _check_size(n)
    return list(sp.symbols(f"z_1:{n + 1}", real=True))


def softmax(z: list[sp.Expr], temperature: sp.Expr = sp.Integer(1)) -> list[sp.Expr]:
    """``alpha_i = exp(z_i/T) / sum_j exp(z_j/T)`` for the given logits ``z``."""
    exps = [sp.exp(zi / temperature) for zi in z]
    total = sp.Add(*exps)
    return [e / total for e in exps]


def shift_difference(n: int) -> list[sp.Expr]:
    """``softmax(z + c) - softmax(z)`` simplified: a list of zeros (shift invariance)."""
    z = logits(n)
    shifted = softmax([zi + c for zi in z])
    return [sp.simplify(a - b) for a, b in zip(shifted, softmax(z))]


def two_logit_weight(gap: sp.Expr = sp.Symbol("Delta", real=True)) -> sp.Expr:
    """Weight of the larger of two logits ``z_1 = z_2 + Delta`` at temperature ``T``.

    Equals the logistic function ``1 / (1 + exp(-Delta/T))``: only the gap
    between logits over the temperature matters.
    """
    z2 = sp.Symbol("z_2", real=True)
    return sp.simplify(softmax([z2 + gap, z2], T)[0])


def temperature_limits(n: int = 3) -> tuple[list[sp.Expr], list[sp.Expr]]:
    """Softmax of distinct logits ``(n-1, ..., 1, 0)`` as ``T -> 0+`` and as ``T -> oo``.

    The first is one-hot on the largest logit, the second is uniform
    ``1/n``: a common positive factor keeps the ranking but moves the
    probabilities anywhere between these two ends.
    """
    _check_size(n)
    z = [sp.Integer(n - 1 - i) for i in range(n)]
    weights = softmax(z, T)
    cold = [sp.limit(w, T, 0, "+") for w in weights]
    hot = [sp.limit(w, T, sp.oo) for w in weights]
    return cold, hot


def jacobian(n: int) -> sp.Matrix:
    """``J[i, j] = d alpha_i / d z_j`` by differentiating softmax symbolically, ``(n, n)``."""
    z = logits(n)
    return sp.Matrix(softmax(z)).jacobian(z)


def jacobian_closed_form(n: int) -> sp.Matrix:
    """``alpha_i (delta_ij - alpha_j)`` written with the softmax of the same symbols."""
    alpha = softmax(logits(n))
    return sp.Matrix(n, n, lambda i, j: alpha[i] * (sp.KroneckerDelta(i, j) - alpha[j]))


def jacobian_residual(n: int) -> sp.Matrix:
    """``jacobian(n) - jacobian_closed_form(n)``, simplified: the zero matrix."""
    return sp.simplify(jacobian(n) - jacobian_closed_form(n))


def entropy(alpha: list[sp.Expr]) -> sp.Expr:
    """``H = -sum_i alpha_i ln alpha_i`` in nats."""
    return -sp.Add(*[a * sp.log(a) for a in alpha])


def uniform_entropy(n: int) -> sp.Expr:
    """Entropy of the uniform distribution over ``n`` keys: ``ln n``, the maximum."""
    _check_size(n)
    return sp.simplify(entropy([sp.Rational(1, n)] * n))


def jacobian_from_weights(weights: torch.Tensor) -> torch.Tensor:
    """The closed form ``diag(alpha) - alpha alpha^T`` on tensors.

    ``weights`` has shape ``(..., n)`` (rows of softmax weights); the result
    has shape ``(..., n, n)`` with ``[..., i, j] = d alpha_i / d z_j``.
    """
    if not isinstance(weights, torch.Tensor) or weights.ndim < 1:
        raise TypeError(f"weights must be a torch.Tensor with at least 1 dimension, got {weights!r}")
    return torch.diag_embed(weights) - weights.unsqueeze(-1) * weights.unsqueeze(-2)


def weight_symbols(n: int) -> list[sp.Symbol]:
    """Positive symbols ``p_0, ..., p_{n-1}`` standing for one row of softmax weights."""
    _check_size(n)
    return list(sp.symbols(f"p_0:{n}", positive=True))


def jacobian_abs_sum(n: int) -> tuple[sp.Expr, sp.Expr]:
    """``sum_ij |J_ij|`` in the weights, and the claimed closed form ``2 (1 - sum_i alpha_i^2)``.

    With weights in ``(0, 1)`` the diagonal ``alpha_i (1 - alpha_i)`` is
    positive and the off-diagonal ``-alpha_i alpha_j`` negative, so the sum
    of absolute values is ``trace(J) - (sum(J) - trace(J))``. On the simplex
    the two agree (:func:`jacobian_abs_sum_residual`). Because
    ``sum alpha^2 >= alpha_max^2``, it is at most ``4 (1 - alpha_max)``: a
    softmax whose top weight is near 1 passes almost no gradient.
    """
    alpha = weight_symbols(n)
    jac = sp.Matrix(n, n, lambda i, j: alpha[i] * (sp.KroneckerDelta(i, j) - alpha[j]))
    return 2 * jac.trace() - sum(jac), 2 * (1 - sp.Add(*[a**2 for a in alpha]))


def jacobian_abs_sum_residual(n: int) -> sp.Expr:
    """The difference of the two sides of :func:`jacobian_abs_sum` with ``alpha_n = 1 - rest``: 0."""
    alpha = weight_symbols(n)
    abs_sum, closed = jacobian_abs_sum(n)
    return sp.expand((abs_sum - closed).subs(alpha[-1], 1 - sp.Add(*alpha[:-1])))
