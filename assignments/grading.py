"""How the hidden tests of the autograder compare an answer with the course's reference.

This file travels in the autograder bundle with ``references.json``, the course's reference
answers, which the build writes with ``encode``. A hidden test names its exercise and never its
value (``matches_reference(answer, label)``), so that no failure text, not even with otter's
``show_hidden``, shows the answer.

Matching is strict about kinds: a string, bytes or a bool never matches a number, a float array
never matches a bool mask, a list of the wrong length never matches a tuple.
"""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import sympy as sp

REFERENCES = "references.json"
# A SymPy answer given as its value (``Task.also_at``) is a float at best this close.
VALUE_RTOL = 1e-9


def on_the_cpu(x):
    """A tensor as a NumPy array on the CPU (a student may compute on a GPU); anything else unchanged."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        return x.detach().cpu().numpy()
    return x


# --- the references, as JSON ---------------------------------------------------------------

def encode(value) -> dict:
    """``value`` (a reference answer) as JSON data that ``decode`` turns back into the same kind."""
    value = on_the_cpu(value)
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (bool, np.bool_)):
        return {"kind": "bool", "value": bool(value)}
    if isinstance(value, sp.Basic):
        return {"kind": "sympy", "srepr": sp.srepr(value)}
    if isinstance(value, tuple):
        return {"kind": "tuple", "items": [encode(item) for item in value]}
    if isinstance(value, (int, np.integer)):
        return {"kind": "int", "value": int(value)}
    if isinstance(value, (float, np.floating)):
        return {"kind": "float", "value": float(value)}
    array = np.asarray(value)
    kinds = {"b": "bool", "i": "int", "u": "int", "f": "float"}
    if array.dtype.kind not in kinds:
        raise ValueError(f"a reference answer should be None, a bool, a number, a SymPy expression, an array "
                         f"or a tuple of those, got {type(value).__name__} of dtype {array.dtype}")
    return {"kind": "array", "dtype": kinds[array.dtype.kind], "value": array.tolist()}


def decode(data: dict):
    kind = data["kind"]
    if kind == "none":
        return None
    if kind == "sympy":
        return sp.sympify(data["srepr"])
    if kind == "tuple":
        return tuple(decode(item) for item in data["items"])
    if kind == "array":
        return np.asarray(data["value"], dtype={"bool": bool, "int": np.int64, "float": float}[data["dtype"]])
    return data["value"]


# --- matching --------------------------------------------------------------------------------

def _scalar(got) -> float | int | None:
    """``got`` as a Python number when it is one (a NumPy or SymPy number, a 0-d array), else None; never a bool."""
    if isinstance(got, (bool, np.bool_)):
        return None
    if isinstance(got, (int, np.integer)):
        return int(got)
    if isinstance(got, (float, np.floating)):
        return float(got)
    if isinstance(got, np.ndarray) and got.ndim == 0 and got.dtype.kind in "iuf":
        return got.item()
    if isinstance(got, sp.Basic) and got.is_number and got.is_real:
        return int(got) if got.is_Integer else float(got)
    return None


def _array(got) -> np.ndarray | None:
    """``got`` as an array when it is array-like with numbers or bools in it, else None."""
    if isinstance(got, (str, bytes, dict, set)) or got is None:
        return None
    try:
        array = np.asarray(got)
    except Exception:  # ragged lists and other shapes that are no array
        return None
    return array if array.dtype.kind in "biuf" else None


def _same_expression(got, expected: sp.Expr, rtol: float, also_at: dict | None) -> bool:
    number = _scalar(got)
    if number is None and not isinstance(got, sp.Expr):
        return False
    got = sp.sympify(got)
    by_name = {s.name: s for s in expected.free_symbols}
    if not got.free_symbols and expected.free_symbols and also_at:
        value = expected.subs({by_name[name]: v for name, v in also_at.items() if name in by_name})
        return not value.free_symbols and math.isclose(float(got), float(value), rel_tol=max(rtol, VALUE_RTOL))
    if any(s.name not in by_name for s in got.free_symbols):
        return False
    return sp.simplify(got.subs({s: by_name[s.name] for s in got.free_symbols}) - expected) == 0


def matches(got, expected, rtol: float = 0.0, atol: float = 0.0, also_at: dict | None = None) -> bool:
    """Whether ``got`` is ``expected``, numbers within ``rtol`` relative or ``atol`` absolute error.

    ``expected`` is what ``decode`` gives: None, a bool, an int (matched exactly), a float, a
    SymPy expression (``also_at``: symbol name -> value, at which its value may be given instead),
    an array whose dtype says what it holds (bool, int: exactly; float), or a tuple of those,
    matched item by item. Never raises: an answer that cannot be read does not match.
    """
    got = on_the_cpu(got)
    try:
        if isinstance(expected, tuple):
            return (isinstance(got, (tuple, list)) and len(got) == len(expected)
                    and all(matches(g, e, rtol, atol, also_at) for g, e in zip(got, expected)))
        if isinstance(expected, sp.Basic):
            return _same_expression(got, expected, rtol, also_at)
        if expected is None:
            return got is None
        if isinstance(expected, bool):
            is_bool = isinstance(got, (bool, np.bool_)) or (isinstance(got, np.ndarray) and got.shape == ()
                                                             and got.dtype == bool)
            return is_bool and bool(got) == expected
        if isinstance(expected, (int, float)):
            number = _scalar(got)
            if number is None or not math.isfinite(number):
                return False
            if isinstance(expected, int):
                return number == expected
            return math.isclose(number, expected, rel_tol=rtol, abs_tol=atol)
        array = _array(got)
        if array is None or array.shape != expected.shape:
            return False
        if expected.dtype == bool:
            return array.dtype == bool and bool(np.array_equal(array, expected))
        if array.dtype == bool:  # a bool mask where numbers are asked
            return False
        if expected.dtype.kind == "i":
            return bool(np.array_equal(array, expected))
        return bool(np.isfinite(array).all()) and bool(np.allclose(array, expected, rtol=rtol, atol=atol))
    except Exception:  # an answer of the wrong kind is a wrong answer, not a crash of the grader
        return False


def matches_reference(got, label: str) -> bool:
    """Whether ``got`` matches the course's reference answer to exercise ``label``."""
    references = json.loads(pathlib.Path(__file__).with_name(REFERENCES).read_text())
    reference = references[label]
    return matches(got, decode(reference["answer"]), reference["rtol"], reference["atol"], reference["also_at"])
