"""The backward pass of attention, derived in SymPy from the softmax Jacobian.

For one head, with ``Q (L, d)``, ``K (S, d)``, ``V (S, dv)`` (``S`` keys), the
scores ``Z = scale * Q K^T``, the weights ``P = softmax(Z)`` row by row, the
output ``O = P V`` and ``dO (L, dv)`` the gradient arriving at the output
(the names below, ``dS`` among them, are the code's: ``dS`` is the book's
``dZ``, the gradient of the scores):

    dV = P^T dO                  (S, dv)
    dP = dO V^T                  (L, S)
    D  = rowsum(dO * O)          (L,)     equal to rowsum(P * dP)
    dS = P * (dP - D)            (L, S)   row i is J_i dP_i, J_i row i's softmax Jacobian
    dQ = scale * dS K            (L, d)
    dK = scale * dS^T Q          (S, d)

(``*`` is the entrywise product.) :func:`gradients_by_formulas` builds
these on symbolic matrices, :func:`gradients_by_differentiation` lets SymPy
differentiate the loss ``sum(dO * O)``, whose gradient with respect to
``O`` is ``dO``, and :func:`formula_residuals` returns their differences,
which :func:`vanishes` reduces to 0. :func:`attention_gradients` applies
the five formulas to tensors, so that they can be compared with autograd.
"""
from __future__ import annotations

import sympy as sp
import torch

from ...naive import stable_softmax
from . import softmax as softmax_theory

#: The scale multiplying ``Q K^T`` (``1/sqrt(d)`` in practice), kept as a symbol.
tau = sp.Symbol("tau", positive=True)
#: The soft-cap ``c`` in ``c * tanh(z / c)``.
cap = sp.Symbol("c", positive=True)


def _check_size(name: str, n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be a positive int, got {n!r}")


def _matrix(name: str, rows: int, columns: int) -> sp.Matrix:
    """Real symbols ``name_ij`` in a ``rows x columns`` matrix, counted from 0 as the book counts."""
    return sp.Matrix(rows, columns, lambda i, j: sp.Symbol(f"{name}_{i}{j}", real=True))


def attention_symbols(queries: int = 2, keys: int = 3, width: int = 2,
                      value_width: int = 2) -> dict[str, sp.Matrix]:
    """Symbolic ``Q (L, d)``, ``K (S, d)``, ``V (S, dv)`` and ``dO (L, dv)``, keyed by those names.

    Their entries are ``q_ia``, ``k_ja``, ``v_ja`` and ``dO_ia`` (the gradient arriving at
    the output), ``a`` a coordinate.
    """
    for name, n in (("queries", queries), ("keys", keys), ("width", width),
                    ("value_width", value_width)):
        _check_size(name, n)
    return {"Q": _matrix("q", queries, width), "K": _matrix("k", keys, width),
            "V": _matrix("v", keys, value_width), "dO": _matrix("dO", queries, value_width)}


def row_softmax(scores: sp.Matrix) -> sp.Matrix:
    """Softmax of each row of ``scores`` (Chapter 4's ``softmax`` row by row)."""
    return sp.Matrix([softmax_theory.softmax(list(scores.row(i))) for i in range(scores.rows)])


def forward(symbols: dict[str, sp.Matrix]) -> dict[str, sp.Matrix]:
    """The forward pass: scores ``S = tau Q K^T``, weights ``P`` and output ``O = P V``."""
    scores = tau * symbols["Q"] * symbols["K"].T
    weights = row_softmax(scores)
    return {"S": scores, "P": weights, "O": weights * symbols["V"]}


def loss(symbols: dict[str, sp.Matrix]) -> sp.Expr:
    """``sum(dO * O)``: a scalar whose gradient with respect to ``O`` is ``dO``."""
    return sum(symbols["dO"].multiply_elementwise(forward(symbols)["O"]))


def gradients_by_differentiation(symbols: dict[str, sp.Matrix]) -> dict[str, sp.Matrix]:
    """``dQ``, ``dK`` and ``dV``: SymPy's derivative of :func:`loss` by every entry."""
    objective = loss(symbols)
    return {f"d{name}": symbols[name].applyfunc(lambda x: sp.diff(objective, x))
            for name in ("Q", "K", "V")}


def gradients_by_formulas(symbols: dict[str, sp.Matrix]) -> dict[str, sp.Matrix]:
    """The steps of the module docstring, in order: ``dV, dP, D, dS, dQ, dK``.

    ``D`` is an ``(L, 1)`` column, subtracted from every entry of its row of ``dP``.
    """
    passed = forward(symbols)
    weights, output = passed["P"], passed["O"]
    query, key, value, grad_output = (symbols[name] for name in ("Q", "K", "V", "dO"))
    grad_weights = grad_output * value.T
    row_term = grad_output.multiply_elementwise(output) * sp.ones(output.cols, 1)
    grad_scores = weights.multiply_elementwise(grad_weights - row_term * sp.ones(1, weights.cols))
    return {"dV": weights.T * grad_output, "dP": grad_weights, "D": row_term, "dS": grad_scores,
            "dQ": tau * grad_scores * key, "dK": tau * grad_scores.T * query}


def vanishes(expression: sp.Expr) -> bool:
    """Whether ``expression``, a rational function of exponentials, is exactly 0.

    Each ``exp(r x)``, ``r`` a rational factor (SymPy writes ``exp(x)^2``
    as ``exp(2 x)``), becomes ``E_x^r`` with a positive symbol ``E_x`` for
    each exponent ``x``; the result is then a rational function, which
    ``cancel`` reduces to 0 exactly when it is 0.
    """
    standing_for: dict[sp.Expr, sp.Symbol] = {}
    replaced = {}
    for power in expression.atoms(sp.exp):
        factor, exponent = sp.expand(power.args[0]).as_content_primitive()
        if exponent.could_extract_minus_sign():
            factor, exponent = -factor, -exponent
        replaced[power] = standing_for.setdefault(exponent, sp.Dummy(positive=True)) ** factor
    return sp.cancel(sp.together(expression.xreplace(replaced))) == 0


def formula_residuals(symbols: dict[str, sp.Matrix]) -> dict[str, bool]:
    """For ``dQ``, ``dK``, ``dV``: whether formula minus SymPy's derivative is 0 in every entry."""
    derived = gradients_by_differentiation(symbols)
    formulas = gradients_by_formulas(symbols)
    return {name: all(vanishes(x) for x in formulas[name] - derived[name]) for name in derived}


def jacobian_vector_product(n: int) -> tuple[sp.Matrix, sp.Matrix]:
    """One row's ``J dP`` with Chapter 4's ``J = diag(p) - p p^T``, and ``p * (dP - p.dP)``.

    ``p_0..p_{n-1}`` are the row's weights and ``dP_0..dP_{n-1}`` the gradient
    arriving at them (a row of ``dP``); the two ``(n, 1)`` columns are equal
    (:func:`jacobian_vector_product_residual`), and the second costs one dot
    product instead of an ``n x n`` matrix.
    """
    weights = sp.Matrix(softmax_theory.weight_symbols(n))
    grad_weights = sp.Matrix(sp.symbols(f"dP_0:{n}", real=True))
    jacobian = sp.diag(*weights) - weights * weights.T
    dot = (weights.T * grad_weights)[0]
    return jacobian * grad_weights, weights.multiply_elementwise(grad_weights - dot * sp.ones(n, 1))


def jacobian_vector_product_residual(n: int) -> sp.Matrix:
    """The difference of the two sides of :func:`jacobian_vector_product`, expanded: zeros."""
    product, closed_form = jacobian_vector_product(n)
    return sp.expand(product - closed_form)


def row_term_identity(keys: int = 3, value_width: int = 2) -> tuple[sp.Expr, sp.Expr]:
    """``sum_j P_j dP_j`` and ``sum_a dO_a O_a`` for one query row: the same number.

    The row has scores ``z_0..z_{S-1}``, values ``v_ja`` and incoming gradient
    ``dO_0..dO_{dv-1}``; ``dP_j = sum_a dO_a v_ja`` and ``O_a = sum_j P_j v_ja``, so
    both sums are ``sum_j sum_a P_j dO_a v_ja``.
    """
    _check_size("keys", keys)
    _check_size("value_width", value_width)
    weights = softmax_theory.softmax(list(sp.symbols(f"z_0:{keys}", real=True)))
    values = _matrix("v", keys, value_width)
    grad_output = sp.symbols(f"dO_0:{value_width}", real=True)
    grad_weights = [sum(grad_output[a] * values[j, a] for a in range(value_width)) for j in range(keys)]
    output = [sum(weights[j] * values[j, a] for j in range(keys)) for a in range(value_width)]
    return (sp.Add(*(p * dp for p, dp in zip(weights, grad_weights))),
            sp.Add(*(do * o for do, o in zip(grad_output, output))))


def softcap_slope() -> sp.Expr:
    """``d/dz c tanh(z / c)``, by SymPy: ``1 - tanh(z / c)^2``, the factor on ``dS`` with a cap.

    ``z`` is the scaled score the cap receives."""
    z = sp.Symbol("z", real=True)
    return sp.diff(cap * sp.tanh(z / cap), z)


def attention_gradients(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        grad_output: torch.Tensor, scale: float,
                        mask: torch.Tensor | None = None, softcap: float | None = None):
    """``(dQ, dK, dV)`` of ``O = softmax(cap(scale Q K^T) + mask) V``, by the five formulas.

    Shapes ``query (..., L, d)``, ``key (..., S, d)``, ``value (..., S, dv)``,
    ``grad_output (..., L, dv)``; ``mask`` is bool (True: may attend),
    broadcastable to ``(..., L, S)``. A row with no allowed key has weights 0
    and so gradients 0. Keys and values must be finite: unlike the library's
    paths, this reference does not hide padding that holds NaN.
    """
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
        raise TypeError(f"mask must be a bool tensor or None, got {getattr(mask, 'dtype', mask)!r}")
    raw = scale * query @ key.mT
    scores = raw if softcap is None else softcap * torch.tanh(raw / softcap)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = stable_softmax(scores)  # P, rows of 0 where no key is allowed
    output = weights @ value  # O
    grad_value = weights.mT @ grad_output  # dV = P^T dO
    grad_weights = grad_output @ value.mT  # dP = dO V^T
    row_term = (grad_output * output).sum(dim=-1, keepdim=True)  # D = rowsum(dO * O)
    grad_scores = weights * (grad_weights - row_term)  # dS = P * (dP - D)
    if softcap is not None:
        grad_scores = grad_scores * (1 - torch.tanh(raw / softcap) ** 2)  # through the cap
    return scale * grad_scores @ key, scale * grad_scores.mT @ query, grad_value
