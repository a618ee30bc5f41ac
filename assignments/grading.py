"""What the hidden tests of the autograder use to compare an answer with the reference.

This file travels in the autograder bundle only; it holds no answer. The reference
answers are written into the hidden tests when the assignments are built.
"""
from __future__ import annotations

import numpy as np
import sympy as sp


def _plain(x):
    """A tensor as a NumPy array on the CPU (a student may compute on a GPU); anything else unchanged."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        return x.detach().cpu().numpy()
    return x


def _same_expression(got, expected: sp.Expr) -> bool:
    if not isinstance(got, (sp.Expr, int, float)) or isinstance(got, bool):
        return False
    got = sp.sympify(got)
    by_name = {s.name: s for s in expected.free_symbols}
    if any(s.name not in by_name for s in got.free_symbols):
        return False
    return sp.simplify(got.subs({s: by_name[s.name] for s in got.free_symbols}) - expected) == 0


def matches(got, expected, rtol: float) -> bool:
    """Whether ``got`` equals ``expected`` up to the relative tolerance ``rtol`` (0: exactly).

    ``expected`` is a number, a bool, None, a SymPy expression, a list (an array of numbers) or a
    tuple (answers compared one by one). Never raises: an answer that cannot be read does not match.
    """
    got = _plain(got)
    try:
        if isinstance(expected, tuple):
            return len(got) == len(expected) and all(matches(g, e, rtol) for g, e in zip(got, expected))
        if isinstance(expected, sp.Expr):
            return _same_expression(got, expected)
        if expected is None or isinstance(expected, bool):
            return (got is None) if expected is None else (isinstance(got, (bool, np.bool_)) and got == expected)
        array, reference = np.asarray(got, dtype=float), np.asarray(expected, dtype=float)
        return (array.shape == reference.shape and bool(np.isfinite(array).all())
                and bool(np.allclose(array, reference, rtol=rtol, atol=0)))
    except Exception:  # an answer of the wrong kind is a wrong answer, not a crash of the grader
        return False
