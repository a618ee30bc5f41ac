"""How the hidden tests of the autograder compare an answer with the student's reference.

This file travels in the autograder bundle with the question bank (``grading_bank.py``), the
bank's ``tasks.py`` and the course (``grading_course.json``: the course seed, and whether the
numbers are per student). When it grades a notebook, the grader finds who submitted it
(Gradescope's ``submission_metadata.json``, or ``ATTNLIB_STUDENT`` from
``assignments/grade.py``), requires the notebook's ``student_id`` to be that student, draws
that student's numbers and computes the reference with the bank's solution. A hidden test
names its exercise and never its value (``matches_reference(answer, label, student_id)``), so
that no failure text, not even with otter's ``show_hidden``, shows the answer.

A hidden test loads this file by its path (``load``), never by importing the name ``grading``,
so that a notebook that puts a module of that name into ``sys.modules`` does not replace it;
the same goes for ``tasks.py``. What a notebook's code can still do in the grader's process is
for ``assignments/scan.py`` to flag.

Matching is strict about kinds: a string, bytes or a bool never matches a number, a float array
never matches a bool mask, a list of the wrong length never matches a tuple.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import pathlib
import sys

import numpy as np
import sympy as sp

REFERENCES = "references.json"   # the build's record of every student's answers (never in the bundle)
BANK = "grading_bank.py"
COURSE = "grading_course.json"
SUPPORT_FILES = ("grading.py", "tasks.py", BANK, COURSE)
# Who submitted: Gradescope writes the metadata next to the submission's folder; otter run
# writes it empty, and assignments/grade.py names the student in this variable instead.
METADATA = "submission_metadata.json"
STUDENT_VARIABLE = "ATTNLIB_STUDENT"
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


# --- the student, and their reference -------------------------------------------------------------

def load(path: pathlib.Path, name: str):
    """The module in the file ``path``, executed afresh under ``name``: never one taken from ``sys.modules``,
    though it is put there (replacing whatever was), as dataclasses look their module up in it."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def submitters(folder: pathlib.Path) -> set[str]:
    """The identities (emails, student ids) of whoever submitted, as ``tasks.student_key`` writes them."""
    tasks = load(folder / "tasks.py", "course_tasks")
    metadata_path = folder.parent / METADATA
    metadata = json.loads(metadata_path.read_text()) if metadata_path.is_file() else {}
    found = {str(user[field]) for user in metadata.get("users", []) for field in ("email", "sid")
             if user.get(field)}
    if not found and os.environ.get(STUDENT_VARIABLE):
        found = {os.environ[STUDENT_VARIABLE]}
    return {tasks.student_key(identity) for identity in found}


def student_of(declared, folder: pathlib.Path) -> str:
    """The student whose numbers grade this notebook: ``declared`` (the notebook's ``student_id``),
    which must be one of the submitters; "" when the course gives everyone the same numbers."""
    course = json.loads((folder / COURSE).read_text())
    if not course["per_student"]:
        return ""
    who = submitters(folder)
    if not who:
        raise AssertionError("no submission metadata names the student: grade on Gradescope, or with "
                             "assignments/grade.py, which names each student")
    tasks = load(folder / "tasks.py", "course_tasks")
    if not isinstance(declared, str) or tasks.student_key(declared) not in who:
        raise AssertionError(f"student_id should be yours, got {declared!r}: these numbers are another "
                             "student's")
    return tasks.student_key(declared)


def reference_of(label: str, student: str, folder: pathlib.Path):
    """The task of ``label`` and its reference answer for ``student``, computed with the bank in ``folder``."""
    course = json.loads((folder / COURSE).read_text())
    tasks = load(folder / "tasks.py", "tasks")  # "tasks": the bank's ``from tasks import Task`` finds it
    task = tasks.load_bank(folder / BANK).tasks[label]
    return task, decode(encode(tasks.run(task, task.params(course["course_seed"], student))))


def matches_reference(got, label: str, declared=None) -> bool:
    """Whether ``got`` matches the reference answer to exercise ``label`` for the student who submitted."""
    folder = pathlib.Path(__file__).resolve().parent
    task, reference = reference_of(label, student_of(declared, folder), folder)
    return matches(got, reference, task.rtol, task.atol, task.also_at)
