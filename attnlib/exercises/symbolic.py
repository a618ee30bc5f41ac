"""Reading a student's SymPy answer: the symbols they typed become the library's symbols of the same name."""
from __future__ import annotations

import sympy as sp


def as_expression(x, name: str, symbols: tuple[sp.Symbol, ...]) -> sp.Expr:
    """``x`` as a SymPy expression in ``symbols`` (matched by name, so ``sp.Symbol("d")`` counts as ``d``).

    Raises ValueError naming ``name`` when ``x`` is not an expression or uses other symbols.
    """
    try:
        expression = sp.sympify(x)
    except (sp.SympifyError, TypeError) as exc:
        raise ValueError(f"{name} should be a SymPy expression, got {x!r}") from exc
    by_name = {symbol.name: symbol for symbol in symbols}
    unknown = sorted(s.name for s in expression.free_symbols if s.name not in by_name)
    if unknown:
        raise ValueError(f"{name} should be written in {sorted(by_name)} only, got the symbols {unknown}")
    return expression.subs({s: by_name[s.name] for s in expression.free_symbols})


def same(got: sp.Expr, expected: sp.Expr) -> bool:
    """Whether two expressions are equal as functions of their symbols."""
    return sp.simplify(got - expected) == 0
