"""Online softmax in SymPy: merging two partial states is exact.

A block of scores ``s_j`` with values ``v_j`` is summarised, relative to a
reference ``m`` (in practice the block's maximum), by the state

    l   = sum_j exp(s_j - m)           (running sum)
    acc = sum_j exp(s_j - m) v_j       (running accumulator)

Two states over disjoint blocks merge into the state of their union with
``m = max(m_a, m_b)``, each side rescaled by ``exp(m_side - m)``; at the end
``acc / l`` is the softmax-weighted sum of the values. :func:`merge_proof`
builds the merged state symbolically and returns the differences from the
direct computation over the union, which SymPy simplifies to 0.
"""
from __future__ import annotations

import sympy as sp


def block_state(scores, values, reference):
    """``(m, l, acc)`` of one block relative to ``reference``: ``l = sum exp(s - m)``, ``acc = sum exp(s - m) v``."""
    weights = [sp.exp(s - reference) for s in scores]
    return reference, sp.Add(*weights), sp.Add(*(w * v for w, v in zip(weights, values)))


def merge_states(state_a, state_b):
    """The state of the union: ``m = max(m_a, m_b)``, both sides rescaled by ``exp(m_side - m)``."""
    m_a, l_a, acc_a = state_a
    m_b, l_b, acc_b = state_b
    m = sp.Max(m_a, m_b)
    rescale_a, rescale_b = sp.exp(m_a - m), sp.exp(m_b - m)
    return m, l_a * rescale_a + l_b * rescale_b, acc_a * rescale_a + acc_b * rescale_b


def softmax_weighted_sum(scores, values):
    """``sum_j softmax(s)_j v_j``, written without any reference point."""
    total = sp.Add(*(sp.exp(s) for s in scores))
    return sp.Add(*(sp.exp(s) * v for s, v in zip(scores, values))) / total


def merge_proof(block_a: int = 2, block_b: int = 3) -> dict[str, sp.Expr]:
    """Merge two symbolic blocks (each with its own maximum) and compare with the union.

    Returns the expressions ``merged - direct`` for ``l`` and ``acc`` (the
    direct state of the union taken relative to the merged ``m``) and
    ``acc / l - softmax-weighted sum``; each simplifies to 0 for any real
    scores and values.
    """
    scores = sp.symbols(f"s1:{block_a + block_b + 1}", real=True)
    values = sp.symbols(f"v1:{block_a + block_b + 1}", real=True)
    first, second = slice(0, block_a), slice(block_a, None)
    state_a = block_state(scores[first], values[first], sp.Max(*scores[first]))
    state_b = block_state(scores[second], values[second], sp.Max(*scores[second]))
    m, l, acc = merge_states(state_a, state_b)
    _, l_direct, acc_direct = block_state(scores, values, m)
    return {
        "l": l - l_direct,
        "acc": acc - acc_direct,
        "output": acc / l - softmax_weighted_sum(scores, values),
    }


def vanishes(expression: sp.Expr) -> bool:
    """Whether SymPy reduces ``expression`` to exactly 0 (exponentials combined first)."""
    return sp.simplify(sp.powsimp(sp.expand(expression), combine="exp")) == 0
