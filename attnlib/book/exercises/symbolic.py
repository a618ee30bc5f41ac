"""Reading a student's SymPy answer: the symbols they typed become the library's symbols of the same name."""
from __future__ import annotations

import numbers

import sympy as sp

from . import UnreadableAnswer

# An answer to these exercises fits in a line; anything much longer is not one, and simplifying
# it could take minutes.
_MOST_OPERATIONS = 200


def as_expression(x, name: str, symbols: tuple[sp.Symbol, ...]) -> sp.Expr:
    """``x`` as a SymPy expression in ``symbols`` (matched by name, so ``sp.Symbol("d")`` counts as ``d``).

    Raises UnreadableAnswer naming ``name`` when ``x`` is not one expression or number (an array, a
    string, a list), is not finite, is far too long to be an answer, or uses other symbols.
    """
    if isinstance(x, bool) or not isinstance(x, (sp.Expr, numbers.Number)):
        raise UnreadableAnswer(f"{name} should be one SymPy expression or number, got an object of type {type(x).__name__}")
    expression = sp.sympify(x)
    if expression.has(sp.nan, sp.zoo, sp.oo, -sp.oo) or (expression.is_number and not expression.is_finite):
        raise UnreadableAnswer(f"{name} should be finite, got {expression}")
    if sp.count_ops(expression) > _MOST_OPERATIONS:
        raise UnreadableAnswer(f"{name} has more than {_MOST_OPERATIONS} operations; simplify it first")
    by_name = {symbol.name: symbol for symbol in symbols}
    unknown = sorted(s.name for s in expression.free_symbols if s.name not in by_name)
    if unknown:
        raise UnreadableAnswer(f"{name} should be written in {sorted(by_name)} only, got the symbols {unknown}")
    return expression.subs({s: by_name[s.name] for s in expression.free_symbols})


def same(got: sp.Expr, expected: sp.Expr) -> bool:
    """Whether two expressions are equal as functions of their symbols."""
    return sp.simplify(got - expected) == 0
