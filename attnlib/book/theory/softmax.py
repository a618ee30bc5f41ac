"""What a scale does to softmax, derived in SymPy.

For logits ``z = (z_0, ..., z_{n-1})`` (one per key, counted from 0 as
the book counts) and a temperature ``T > 0``

    p_j = exp(z_j / T) / sum_l exp(z_l / T)                      (softmax)
    d p_j / d z_l = p_j (delta_jl - p_l)                         (T = 1)
    H(p) = -sum_j p_j ln p_j  <=  ln n                           (entropy, nats)

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
    """The real symbols ``z_0, ..., z_{n-1}``."""
    _check_size(n)
    return list(sp.symbols(f"z_0:{n}", real=True))


def softmax(z: list[sp.Expr], temperature: sp.Expr = sp.Integer(1)) -> list[sp.Expr]:
    """``p_j = exp(z_j/T) / sum_l exp(z_l/T)`` for the given logits ``z``."""
    exps = [sp.exp(zi / temperature) for zi in z]
    total = sp.Add(*exps)
    return [e / total for e in exps]


def shift_difference(n: int) -> list[sp.Expr]:
    """``softmax(z + c) - softmax(z)`` simplified: a list of zeros (shift invariance)."""
    z = logits(n)
    shifted = softmax([zi + c for zi in z])
    return [sp.simplify(a - b) for a, b in zip(shifted, softmax(z))]


def two_logit_weight(gap: sp.Expr = sp.Symbol("Delta", real=True)) -> sp.Expr:
    """Weight ``p_0`` of the larger of two logits ``z_0 = z_1 + Delta`` at temperature ``T``.

    Equals the logistic sigmoid ``1 / (1 + exp(-Delta/T))``: only the gap
    between logits over the temperature matters.
    """
    z1 = sp.Symbol("z_1", real=True)
    return sp.simplify(softmax([z1 + gap, z1], T)[0])


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
    """``J[j, l] = d p_j / d z_l`` by differentiating softmax symbolically, ``(n, n)``."""
    z = logits(n)
    return sp.Matrix(softmax(z)).jacobian(z)


def jacobian_closed_form(n: int) -> sp.Matrix:
    """``p_j (delta_jl - p_l)`` written with the softmax of the same symbols."""
    p = softmax(logits(n))
    return sp.Matrix(n, n, lambda j, l: p[j] * (sp.KroneckerDelta(j, l) - p[l]))


def jacobian_residual(n: int) -> sp.Matrix:
    """``jacobian(n) - jacobian_closed_form(n)``, simplified: the zero matrix."""
    return sp.simplify(jacobian(n) - jacobian_closed_form(n))


def entropy(weights: list[sp.Expr]) -> sp.Expr:
    """``H = -sum_j p_j ln p_j`` in nats."""
    return -sp.Add(*[p * sp.log(p) for p in weights])


def uniform_entropy(n: int) -> sp.Expr:
    """Entropy of the uniform distribution over ``n`` keys: ``ln n``, the maximum."""
    _check_size(n)
    return sp.simplify(entropy([sp.Rational(1, n)] * n))


def jacobian_from_weights(weights: torch.Tensor) -> torch.Tensor:
    """The closed form ``diag(p) - p p^T`` on tensors.

    ``weights`` has shape ``(..., n)`` (rows of softmax weights); the result
    has shape ``(..., n, n)`` with ``[..., j, l] = d p_j / d z_l``.
    """
    if not isinstance(weights, torch.Tensor) or weights.ndim < 1:
        raise TypeError(f"weights must be a torch.Tensor with at least 1 dimension, got {weights!r}")
    return torch.diag_embed(weights) - weights.unsqueeze(-1) * weights.unsqueeze(-2)


def weight_symbols(n: int) -> list[sp.Symbol]:
    """Positive symbols ``p_0, ..., p_{n-1}`` standing for one row of softmax weights."""
    _check_size(n)
    return list(sp.symbols(f"p_0:{n}", positive=True))


def jacobian_abs_sum(n: int) -> tuple[sp.Expr, sp.Expr]:
    """``sum_jl |J_jl|`` in the weights, and the claimed closed form ``2 (1 - sum_j p_j^2)``.

    With weights in ``(0, 1)`` the diagonal ``p_j (1 - p_j)`` is positive
    and the off-diagonal ``-p_j p_l`` negative, so the sum of absolute
    values is ``trace(J) - (sum(J) - trace(J))``. On the simplex the two
    agree (:func:`jacobian_abs_sum_residual`). Because
    ``sum p^2 >= p_max^2``, it is at most ``4 (1 - p_max)``: a softmax whose
    top weight is near 1 passes almost no gradient.
    """
    p = weight_symbols(n)
    jac = sp.Matrix(n, n, lambda j, l: p[j] * (sp.KroneckerDelta(j, l) - p[l]))
    return 2 * jac.trace() - sum(jac), 2 * (1 - sp.Add(*[pj**2 for pj in p]))


def jacobian_abs_sum_residual(n: int) -> sp.Expr:
    """The difference of the two sides of :func:`jacobian_abs_sum` with ``p_{n-1} = 1 - rest``: 0."""
    p = weight_symbols(n)
    abs_sum, closed = jacobian_abs_sum(n)
    return sp.expand((abs_sum - closed).subs(p[-1], 1 - sp.Add(*p[:-1])))
