"""Rotary position embeddings and the variance argument, derived with SymPy.

RoPE (:func:`attnlib.positions.rope`) turns each plane of two coordinates of
a query at position ``m`` by ``m * theta`` and the same plane of a key at
position ``n`` by ``n * theta``. For one plane, with ``R(a)`` the rotation
by ``a``,

    (R(m theta) q) . (R(n theta) k) = q^T R((n - m) theta) k,

so the score depends on the positions only through the offset
``phi = (n - m) theta``. The moments of that score follow from the
expansion of a polynomial in the coordinates and two facts: ``q`` is
independent of ``k``, and ``E[x_i x_j] = mu_i mu_j + Sigma_ij`` for either
vector. :func:`rotated_score_moments` applies exactly these to the
expanded polynomial, monomial by monomial; nothing is typed in.
"""
from __future__ import annotations

import sympy as sp

#: The rotation angle between the query's and the key's plane, (n - m) * theta.
phi = sp.Symbol("phi", real=True)
#: Positions of the query and the key, and the plane's frequency.
m, n = sp.symbols("m n", integer=True)
theta = sp.Symbol("theta", positive=True)
#: The two coordinates of one plane of q and of k.
q1, q2, k1, k2 = sp.symbols("q1 q2 k1 k2", real=True)


def rotation(angle: sp.Expr) -> sp.Matrix:
    """The 2 x 2 rotation by ``angle``: ``[[cos, -sin], [sin, cos]]``."""
    return sp.Matrix([[sp.cos(angle), -sp.sin(angle)], [sp.sin(angle), sp.cos(angle)]])


def rotated_score() -> sp.Expr:
    """``(R(m theta) q) . (R(n theta) k)`` for one plane, expanded in ``q1, q2, k1, k2``."""
    q, k = sp.Matrix([q1, q2]), sp.Matrix([k1, k2])
    return sp.expand(((rotation(m * theta) * q).T * (rotation(n * theta) * k))[0])


def relative_score() -> sp.Expr:
    """``q^T R((n - m) theta) k``: the score written with the offset alone."""
    q, k = sp.Matrix([q1, q2]), sp.Matrix([k1, k2])
    return sp.expand((q.T * rotation((n - m) * theta) * k)[0])


def relative_form_residual() -> sp.Expr:
    """:func:`rotated_score` minus :func:`relative_score`, simplified (0: they are equal)."""
    return sp.simplify(sp.expand_trig(rotated_score() - relative_score()))


def _expectation(polynomial: sp.Expr, mean_q, cov_q, mean_k, cov_k) -> sp.Expr:
    """``E[polynomial]`` for independent ``q`` and ``k`` with the given first two moments.

    Each monomial factors into a q part and a k part (independence); each
    part has degree at most 2 and its expectation is ``1``, ``mu_i`` or
    ``mu_i mu_j + Sigma_ij``.
    """
    def moment(exponents, mean, cov):
        factors = [i for i, power in enumerate(exponents) for _ in range(power)]
        if not factors:
            return sp.Integer(1)
        if len(factors) == 1:
            return mean[factors[0]]
        if len(factors) == 2:
            i, j = factors
            return mean[i] * mean[j] + cov[i, j]
        raise ValueError(f"moments above the second are not needed here, got degree {len(factors)}")

    total = sp.Integer(0)
    for (a1, a2, b1, b2), coefficient in sp.Poly(polynomial, q1, q2, k1, k2).terms():
        total += coefficient * moment((a1, a2), mean_q, cov_q) * moment((b1, b2), mean_k, cov_k)
    return total


def rotated_score_moments(mean_q, cov_q, mean_k, cov_k) -> tuple[sp.Expr, sp.Expr]:
    """Mean and variance of ``q^T R(phi) k`` over one plane, as functions of ``phi``.

    ``mean_q``, ``mean_k``: 2-vectors; ``cov_q``, ``cov_k``: 2 x 2 covariance
    matrices (SymPy Matrices or nested lists); ``q`` and ``k`` independent.
    """
    mean_q, mean_k = sp.Matrix(mean_q), sp.Matrix(mean_k)
    cov_q, cov_k = sp.Matrix(cov_q), sp.Matrix(cov_k)
    score = sp.expand((sp.Matrix([q1, q2]).T * rotation(phi) * sp.Matrix([k1, k2]))[0])
    mean = _expectation(score, mean_q, cov_q, mean_k, cov_k)
    second = _expectation(sp.expand(score**2), mean_q, cov_q, mean_k, cov_k)
    return sp.simplify(sp.trigsimp(mean)), sp.simplify(sp.trigsimp(sp.expand(second - mean**2)))
