"""How the course judges an answer: outside the student's kernel, on plain data.

This file travels in the autograder bundle with ``tasks.py``, the chapter's tasks of the
question bank (``grading_bank.py``) and their keys (``grading_keys.json``, never the course
seed). The grader (``course_judge.py``, an otter plugin that runs in otter's own process)
reads who submitted and computes that student's references *before* the notebook runs, then
removes the bank and the keys from the disk the notebook's code can read. The notebook runs in
its own kernel as usual; at its end a cell (``kernel_cell``) writes each answer variable to
``course_answers.json`` as plain JSON data (numbers, bools, nested lists, SymPy as its
``srepr`` string). The grader reads that file with ``read_answers``, which builds numbers,
arrays and SymPy expressions of its own from it (SymPy with ``parse_sympy``, a parser of a few
constructors, never ``eval``), and compares them with ``matches``: no object of the student's,
and none of the student's patched modules, takes part in the judging.

Matching is strict about kinds: a string, bytes or a bool never matches a number, a float array
never matches a bool mask, a list of the wrong length never matches a tuple. A SymPy answer
matches when its value agrees with the reference's, within the task's ``rtol`` (at least
``VALUE_RTOL``), at ``SYMPY_POINTS`` points drawn in (0.1, 0.9) for each symbol: float
coefficients that are right to that precision pass, whatever their last bit.
"""
from __future__ import annotations

import ast
import json
import math
import os
import random
import re

import numpy as np
import sympy as sp

REFERENCES = "references.json"   # the build's record of every student's answers (never in the bundle)
BANK = "grading_bank.py"         # the chapter's tasks only
KEYS = "grading_keys.json"       # the chapter's task keys, and whether the numbers are per student
SUPPORT_FILES = ("grading.py", "tasks.py", BANK, KEYS)
PRIVATE_FILES = (BANK, KEYS)     # removed from the disk before the student's code runs
ANSWERS = "course_answers.json"  # what the kernel hands the grader: plain data
# Gradescope writes who submitted next to the submission's folder; otter run writes it empty,
# and assignments/grade.py names the student in this variable of the grader's own process.
STUDENT_VARIABLE = "ATTNLIB_STUDENT"
# A SymPy answer (or its value, ``Task.also_at``) agrees with the reference at least this closely.
VALUE_RTOL = 1e-9
SYMPY_POINTS = 5
# What the grader reads at most: bigger or deeper answers are unreadable, not a hang.
MAX_ANSWERS_BYTES = 4 * 2**20
MAX_DEPTH = 8
MAX_SYMPY_CHARS = 20_000
MAX_SYMPY_NODES = 4_000


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


def form_of(reference) -> dict:
    """The kind of ``reference`` (what ``decode`` gives) without its values, for the visible test:
    ``attnlib.book.exercises.assignment.form_problem`` checks an answer against it."""
    if isinstance(reference, tuple):
        return {"kind": "tuple", "items": [form_of(item) for item in reference]}
    if isinstance(reference, sp.Basic):
        return {"kind": "sympy"}
    if isinstance(reference, bool):
        return {"kind": "bool"}
    if isinstance(reference, (int, float)):
        return {"kind": "number"}
    if isinstance(reference, np.ndarray):
        return {"kind": "array", "dtype": "bool" if reference.dtype == bool else "number", "ndim": reference.ndim}
    raise ValueError(f"a reference answer should be a number, a bool, a SymPy expression, an array or a tuple "
                     f"of those, got {type(reference).__name__}")


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


def _points(symbols: list[str]):
    """``SYMPY_POINTS`` and a few spare values of ``symbols`` in (0.1, 0.9), the same every time."""
    rng = random.Random(20261204)
    for _ in range(4 * SYMPY_POINTS):
        yield {name: rng.uniform(0.1, 0.9) for name in symbols}


def _value(expression: sp.Basic, at: dict[str, float]) -> complex | None:
    by_name = {s.name: s for s in expression.free_symbols}
    try:
        value = complex(expression.evalf(subs={by_name[n]: v for n, v in at.items() if n in by_name}))
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None
    return value if math.isfinite(value.real) and math.isfinite(value.imag) else None


def _same_expression(got, expected: sp.Basic, rtol: float, atol: float, also_at: dict | None) -> bool:
    """Whether ``got`` (a SymPy expression, or a number) has ``expected``'s value within ``rtol``
    (at least ``VALUE_RTOL``) at ``SYMPY_POINTS`` points of its symbols; a number where ``expected``
    has symbols is compared with ``expected`` at ``also_at``."""
    number = _scalar(got)
    if number is None and not isinstance(got, sp.Basic):
        return False
    got = sp.Float(number) if number is not None else got
    names = sorted({s.name for s in expected.free_symbols})
    if not got.free_symbols and names and also_at:
        expected = expected.subs({s: also_at[s.name] for s in expected.free_symbols if s.name in also_at})
        names = sorted({s.name for s in expected.free_symbols})
    if any(s.name not in names for s in got.free_symbols):
        return False
    tolerance = max(rtol, VALUE_RTOL)
    compared = 0
    for at in _points(names):
        reference = _value(expected, at)
        if reference is None:  # a point outside the reference's domain: try another
            continue
        answer = _value(got, at)
        if answer is None or abs(answer - reference) > tolerance * abs(reference) + atol:
            return False
        compared += 1
        if compared == SYMPY_POINTS or not names:
            return True
    return False


def matches(got, expected, rtol: float = 0.0, atol: float = 0.0, also_at: dict | None = None) -> bool:
    """Whether ``got`` is ``expected``, numbers within ``rtol`` relative or ``atol`` absolute error.

    ``expected`` is what ``decode`` gives: None, a bool, an int (matched exactly), a float, a
    SymPy expression (``also_at``: symbol name -> value, at which its value may be given instead),
    an array whose dtype says what it holds (bool, int: exactly; float), or a tuple of those,
    matched item by item (a NumPy array or tensor of that length is read as the tuple of its rows,
    each of them matched as strictly). Never raises: an answer that cannot be read does not match.
    """
    got = on_the_cpu(got)
    try:
        if isinstance(expected, tuple):
            if isinstance(got, np.ndarray) and got.ndim >= 1:  # (a, b) given as np.array([a, b]) or a tensor
                got = list(got)
            return (isinstance(got, (tuple, list)) and len(got) == len(expected)
                    and all(matches(g, e, rtol, atol, also_at) for g, e in zip(got, expected)))
        if isinstance(expected, sp.Basic):
            return _same_expression(got, expected, rtol, atol, also_at)
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



# --- the answers, from the kernel to the grader as plain data -------------------------------------

_KERNEL_CELL = """\
# The grader reads your answers from the file this cell writes (added by the grader, not yours)
def _course_answers(names, path):
    import json
    import numpy as np

    def plain(x, depth=0):
        if depth > 8:
            return {"kind": "unreadable"}
        if hasattr(x, "detach") and hasattr(x, "cpu"):
            x = x.detach().cpu().numpy()
        if x is None or x is ...:
            return {"kind": "none"}
        if isinstance(x, (bool, np.bool_)):
            return {"kind": "bool", "value": bool(x)}
        if isinstance(x, (int, np.integer)):
            return {"kind": "int", "value": int(x)}
        if isinstance(x, (float, np.floating)):
            return {"kind": "float", "value": float(x)}
        if type(x).__module__.startswith("sympy"):
            import sympy
            return {"kind": "sympy", "srepr": sympy.srepr(x)}
        if isinstance(x, (tuple, list)):
            return {"kind": "tuple", "items": [plain(item, depth + 1) for item in x]}
        if isinstance(x, np.ndarray) and x.ndim == 0:
            return plain(x.item(), depth + 1)
        if isinstance(x, np.ndarray) and x.dtype.kind in "biuf":
            return {"kind": "array", "dtype": {"b": "bool", "i": "int", "u": "int", "f": "float"}[x.dtype.kind],
                    "value": x.tolist()}
        if isinstance(x, np.ndarray) and x.dtype.kind == "O":
            return {"kind": "tuple", "items": [plain(item, depth + 1) for item in x]}
        return {"kind": "unreadable"}

    answers = {}
    for name in names:
        try:
            answers[name] = plain(globals().get(name))
        except Exception:
            answers[name] = {"kind": "unreadable"}
    with open(path, "w") as file:
        json.dump(answers, file)


_course_answers(NAMES, PATH)
"""


def kernel_cell(names: list[str]) -> str:
    """The source of the cell the grader appends to a submission: it writes the variables ``names``
    to ``ANSWERS`` as plain JSON data. What it writes is read as data only, so a notebook that
    changes this cell's work (or writes the file itself) hands in other answers, nothing more."""
    return _KERNEL_CELL.replace("NAMES, PATH", f"{list(names)!r}, {ANSWERS!r}")


class Unreadable(ValueError):
    """An answer the grader cannot read as plain data: it matches nothing."""


UNREADABLE = Unreadable("unreadable")


def read_answers(path, names: list[str]) -> dict:
    """Name -> answer (None when missing, ``UNREADABLE`` when it cannot be read), from the JSON file
    ``path`` the kernel wrote: a regular file (no link) of at most ``MAX_ANSWERS_BYTES``."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return {name: None for name in names}
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(MAX_ANSWERS_BYTES + 1)
    try:
        if len(data) > MAX_ANSWERS_BYTES:
            raise Unreadable("too big")
        found = json.loads(data)
    except (ValueError, RecursionError):
        return {name: UNREADABLE for name in names}
    if type(found) is not dict:
        return {name: UNREADABLE for name in names}
    answers = {}
    for name in names:
        try:
            answers[name] = plain_answer(found.get(name, {"kind": "none"}))
        except (Unreadable, ValueError, TypeError, KeyError, OverflowError, RecursionError, SyntaxError):
            answers[name] = UNREADABLE
    return answers


def _numbers(value, kind: str, depth: int = 0):
    """``value`` if it is a number of ``kind`` (bool, int, float) or nested lists of them."""
    if type(value) is list and depth <= MAX_DEPTH:
        for item in value:
            _numbers(item, kind, depth + 1)
        return value
    allowed = {"bool": (bool,), "int": (int,), "float": (int, float)}[kind]
    if type(value) not in allowed:
        raise Unreadable(f"not a {kind}")
    return value


def plain_answer(data, depth: int = 0):
    """An answer from its plain data (``kernel_cell``'s): None, a bool, an int, a float, a tuple of
    answers, a NumPy array of bools, ints or floats, or a SymPy expression (``parse_sympy``)."""
    if type(data) is not dict or depth > MAX_DEPTH:
        raise Unreadable("not an answer")
    kind = data.get("kind")
    if kind == "none":
        return None
    if kind in ("bool", "int", "float"):
        value = _numbers(data["value"], kind)
        if type(value) is list:
            raise Unreadable("a list where a number is")
        return float(value) if kind == "float" else value
    if kind == "tuple" and type(data.get("items")) is list:
        return tuple(plain_answer(item, depth + 1) for item in data["items"])
    if kind == "array" and data.get("dtype") in ("bool", "int", "float"):
        value = _numbers(data["value"], data["dtype"])
        return np.asarray(value, dtype={"bool": bool, "int": np.int64, "float": float}[data["dtype"]])
    if kind == "sympy" and type(data.get("srepr")) is str:
        return parse_sympy(data["srepr"])
    raise Unreadable("not an answer")


# SymPy's srepr, read by building each node with one of these and nothing else
_SYMPY_CLASSES = {"Add": sp.Add, "Mul": sp.Mul, "Pow": sp.Pow}
_SYMPY_FUNCTIONS = {name: getattr(sp, name) for name in (
    "exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "Abs", "sign",
    "Max", "Min", "erf", "floor", "ceiling")}
_SYMPY_CONSTANTS = {"pi": sp.pi, "E": sp.E, "I": sp.I, "oo": sp.oo, "zoo": sp.zoo, "nan": sp.nan,
                    "EulerGamma": sp.EulerGamma}
_ASSUMPTIONS = {"positive", "negative", "nonnegative", "nonpositive", "real", "integer", "nonzero", "finite",
                "rational", "complex", "commutative"}
_SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,29}")
_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_BIG = 10 ** 40       # integers past this are not an answer to any exercise
_BIG_POWER = 64       # nor powers past this


def _integer(node: ast.AST) -> int:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_integer(node.operand)
    if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) <= _BIG:
        return node.value
    raise Unreadable("not an integer")


def _sympy_node(node: ast.AST) -> sp.Basic:
    if isinstance(node, ast.Name) and node.id in _SYMPY_CONSTANTS:
        return _SYMPY_CONSTANTS[node.id]
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise Unreadable("not a SymPy node")
    name, args, keywords = node.func.id, node.args, {k.arg: k.value for k in node.keywords}
    if name == "Integer" and len(args) == 1 and not keywords:
        return sp.Integer(_integer(args[0]))
    if name == "Rational" and len(args) == 2 and not keywords:
        return sp.Rational(_integer(args[0]), _integer(args[1]))
    if name == "Float" and len(args) == 1 and isinstance(args[0], ast.Constant) and set(keywords) <= {"precision"}:
        text = args[0].value
        precision = _integer(keywords["precision"]) if "precision" in keywords else 53
        if type(text) is not str or not _DECIMAL.fullmatch(text) or not 1 <= precision <= 1000:
            raise Unreadable("not a Float")
        return sp.Float(text, precision=precision)
    if name == "Symbol" and len(args) == 1 and isinstance(args[0], ast.Constant):
        if type(args[0].value) is not str or not _SYMBOL_NAME.fullmatch(args[0].value):
            raise Unreadable("not a symbol's name")
        flags = {}
        for key, value in keywords.items():
            if key not in _ASSUMPTIONS or not (isinstance(value, ast.Constant) and type(value.value) is bool):
                raise Unreadable("not an assumption")
            flags[key] = value.value
        return sp.Symbol(args[0].value, **flags)
    if keywords:
        raise Unreadable("keywords where none are read")
    parts = [_sympy_node(arg) for arg in args]
    if name in _SYMPY_CLASSES:
        if name == "Pow" and (len(parts) != 2 or (parts[1].is_number and not abs(parts[1]) <= _BIG_POWER)):
            raise Unreadable("a power too large")
        return _SYMPY_CLASSES[name](*parts)
    if name in _SYMPY_FUNCTIONS:
        return _SYMPY_FUNCTIONS[name](*parts)
    raise Unreadable("not a SymPy node")


def parse_sympy(text: str) -> sp.Basic:
    """The SymPy expression whose ``srepr`` is ``text``, built node by node from a few constructors
    (numbers, symbols, +, *, **, elementary functions); anything else is ``Unreadable``. Never
    evaluates the text as code."""
    if type(text) is not str or len(text) > MAX_SYMPY_CHARS:
        raise Unreadable("not a SymPy expression")
    tree = ast.parse(text, mode="eval")
    if sum(1 for _ in ast.walk(tree)) > MAX_SYMPY_NODES:
        raise Unreadable("too large an expression")
    return _sympy_node(tree.body)


def _given(answer) -> str:
    """What ``answer`` (plain data) is, in the grader's own words."""
    if answer is None:
        return "nothing"
    if answer is UNREADABLE:
        return "something the grader cannot read"
    if isinstance(answer, tuple):
        return f"a tuple or list of {len(answer)}"
    if isinstance(answer, np.ndarray):
        return f"a {answer.ndim}-d array of {'bools' if answer.dtype == bool else 'numbers'}"
    if isinstance(answer, bool):
        return "a bool"
    if isinstance(answer, (int, float)):
        return "a number"
    return "a SymPy expression"


def describe_form(form: dict) -> str:
    """``form`` (``form_of``'s) in words: "a tuple of 2 (a number, a number)"."""
    kind = form["kind"]
    if kind == "tuple":
        return f"a tuple of {len(form['items'])} ({', '.join(describe_form(item) for item in form['items'])})"
    if kind == "array":
        return f"a {form['ndim']}-d array of {'bools' if form['dtype'] == 'bool' else 'numbers'}"
    return {"number": "a number", "bool": "a bool", "sympy": "a SymPy expression or its value"}[kind]


def _fits(answer, form: dict) -> bool:
    kind = form["kind"]
    if kind == "tuple":
        items = list(answer) if isinstance(answer, tuple) or (
            isinstance(answer, np.ndarray) and answer.ndim >= 1) else None
        return items is not None and len(items) == len(form["items"]) and all(
            _fits(item, item_form) for item, item_form in zip(items, form["items"]))
    if kind == "array":
        array = _array(answer)
        return (array is not None and array.ndim == form["ndim"]
                and (array.dtype == bool) == (form["dtype"] == "bool"))
    if kind == "bool":
        return isinstance(answer, (bool, np.ndarray)) and np.asarray(answer).shape == () and np.asarray(
            answer).dtype == bool
    if kind == "number":
        return _scalar(answer) is not None
    return isinstance(answer, sp.Basic) or _scalar(answer) is not None


def is_filled_in(answer) -> bool:
    """Whether ``answer`` (plain data) is an answer at all: something, with no NaN in it."""
    if answer is None or answer is UNREADABLE:
        return False
    if isinstance(answer, tuple):
        return len(answer) > 0 and all(is_filled_in(item) for item in answer)
    if isinstance(answer, float):
        return not math.isnan(answer)
    if isinstance(answer, np.ndarray) and answer.dtype.kind == "f":
        return not bool(np.isnan(answer).any())
    return True


def form_message(name: str, answer, form: dict) -> str | None:
    """What the visible check says of ``answer`` (plain data) when it is not filled in or not of
    ``form``, None when it is: words of the grader's own, never a value or a text of the answer's."""
    if not is_filled_in(answer):
        return f"{name} is not filled in: replace ... by your answer, without NaN (got {_given(answer)})"
    if not _fits(answer, form):
        return f"{name} should be {describe_form(form)}, got {_given(answer)}"
    return None
