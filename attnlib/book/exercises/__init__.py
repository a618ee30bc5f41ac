"""Checkers for the chapters' exercises, and the student edition of the book.

A student computes an answer in a notebook (in Colab or locally) and runs

    attnlib.book.exercises.check("ex-01-row-two", answer)

which prints whether the answer is right and, when it is not, names the likely
mistake (the units, a factor of 2, the wrong head) without giving the value.
A checker marked *self-check* accepts a range (a Monte Carlo estimate, a
student's own draw) or has few possible answers, so that guesses can find what
it accepts: it is a practice aid, never a grade, and says so.
An answer that is not finite, or not an answer at all, is turned away with a
sentence naming what was expected. The checkers know the book's numbers only;
graded assignments with other numbers are built outside this package
(``assignments/`` in the book's repository), so that nothing installed here
answers them. Each checker is registered under the label of its exercise in the chapter,
with a ``prompt`` that says what ``answer`` must be; the checkers of chapter
NN live in ``attnlib/book/exercises/chNN.py`` and are registered on import.

:func:`student_notebook` turns a chapter into its student edition: no
solutions, and a check cell after each exercise that has a checker. The
book's repository writes that edition with its markup converted for Jupyter
(``make student-edition``, through ``tools/jupyter_edition.py``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch



@dataclass(frozen=True)
class Feedback:
    """The verdict on one answer; ``check`` prints it when it is made."""

    exercise: str
    passed: bool
    message: str
    self_check: bool = False

    def __str__(self) -> str:
        mark = "correct" if self.passed else "not yet"
        note = " (A self-check: a few guesses can pass it, so it never counts for a grade.)" if self.self_check else ""
        return f"{self.exercise}: {mark}. {self.message}{note}"

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        """Show nothing as a cell's value: the verdict was printed once already."""


class UnreadableAnswer(ValueError):
    """An answer that cannot be graded; its message is a sentence for the student."""


@dataclass(frozen=True)
class Checker:
    label: str
    prompt: str
    grade: Callable[[Any], tuple[bool, str]]
    self_check: bool = False


CHECKERS: dict[str, Checker] = {}


def checker(label: str, prompt: str, self_check: bool = False):
    """Register ``grade(answer) -> (passed, message)`` for exercise ``label`` (``self_check``: see above)."""

    def register(grade):
        CHECKERS[label] = Checker(label, prompt, grade, self_check)
        return grade

    return register


def check(exercise: str, answer: Any) -> Feedback:
    """Grade ``answer`` to ``exercise`` (a label such as ``"ex-01-row-two"``) and print the verdict."""
    if exercise not in CHECKERS:
        raise ValueError(f"exercise must be one of {sorted(CHECKERS)}, got {exercise!r}")
    expected = CHECKERS[exercise].prompt
    try:
        passed, message = CHECKERS[exercise].grade(answer)
    except UnreadableAnswer as exc:
        passed, message = False, f"{exc}. Expected: {expected}."
    except Exception as exc:  # a student's answer can be anything; say what was expected instead of crashing
        passed, message = False, f"could not read the answer ({type(exc).__name__}: {exc}). Expected: {expected}."
    feedback = Feedback(exercise, passed, message, CHECKERS[exercise].self_check)
    print(feedback)
    return feedback


def _describe(x) -> str:
    if isinstance(x, (np.ndarray, torch.Tensor)):
        return f"an array of shape {tuple(x.shape)}"
    text = repr(x)
    return text if len(text) <= 60 else f"a {type(x).__name__}"


def as_array(x, name: str, shape: tuple[int | None, ...], *, finite: bool = True) -> np.ndarray:
    """``x`` as a float array of ``shape`` (``None`` matches any length), on the CPU.

    Raises UnreadableAnswer naming ``name`` for a wrong shape, for what is not a number,
    and, unless ``finite`` is False, for nan or inf.
    """
    what = "a number" if not shape else "an array of numbers"
    if x is None or x is ... or isinstance(x, (str, bytes, dict, set)):
        raise UnreadableAnswer(f"{name} should be {what}, got {_describe(x)}")
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
    if np.asarray(x).dtype.kind in "bUSO" and not _is_sympy_number(x):  # bools, strings, objects: not numbers
        raise UnreadableAnswer(f"{name} should be {what}, got {_describe(x)} of {np.asarray(x).dtype}")
    array = np.asarray(x, dtype=float)
    if array.ndim != len(shape) or any(want is not None and got != want for got, want in zip(array.shape, shape)):
        wanted = "(" + ", ".join("n" if n is None else str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
        raise UnreadableAnswer(f"{name} should have shape {wanted}, got {array.shape}")
    if np.isnan(array).any() or (finite and not np.isfinite(array).all()):
        raise UnreadableAnswer(f"{name} should hold finite numbers, got {'nan' if np.isnan(array).any() else 'inf'}")
    return array


def _is_sympy_number(x) -> bool:
    """Whether ``x`` is a SymPy number, or an array-like of them (NumPy sees objects)."""
    import sympy as sp

    return all(isinstance(item, sp.Basic) and item.is_number for item in np.ravel(np.asarray(x, dtype=object)))


def as_mask(x, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``x`` as a bool array of ``shape``: a float 0/1 array is an additive mask in attnlib, not a bool one."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if not isinstance(x, np.ndarray) or x.dtype != bool:
        raise UnreadableAnswer(f"{name} should be a bool array (True = may attend), got {_describe(x)}"
                               + (f" of {x.dtype}" if isinstance(x, np.ndarray) else ""))
    if x.shape != shape:
        raise UnreadableAnswer(f"{name} should have shape {shape}, got {x.shape}")
    return x


def as_parts(x, names: tuple[str, ...]) -> list[tuple[Any, str]]:
    """``(part, name)`` for each part of ``x``, which must be a tuple or list of exactly one part per name
    (not a string, no extra part); a 1-D array or tensor of one number per name is read as its entries,
    as the graded course reads it."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray) and x.ndim == 1 and len(x) == len(names) and x.dtype.kind in "iuf":
        x = list(x)
    if not isinstance(x, (tuple, list)) or len(x) != len(names):
        raise UnreadableAnswer(f"answer should be a tuple ({', '.join(names)}), got {_describe(x)}")
    return list(zip(x, names))


def as_shape(x, name: str) -> tuple[int, ...]:
    """``x`` as a shape: a tuple, list or torch.Size of whole numbers (not strings, not bools)."""
    if not isinstance(x, (tuple, list)) or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool)
                                                   for n in x):
        raise UnreadableAnswer(f"{name} should be a tuple of ints, got {_describe(x)}")
    return tuple(int(n) for n in x)


def as_number(x, name: str, *, finite: bool = True) -> float:
    """``x`` as one float; see ``as_array``."""
    return float(as_array(x, name, (), finite=finite))


def as_count(x, name: str) -> int:
    """``x`` as a non-negative whole number; see ``as_array``."""
    value = as_number(x, name)
    if value != round(value) or value < 0:
        raise UnreadableAnswer(f"{name} should be a whole number of at least 0, got {value:g}")
    return int(value)


def compare(name: str, got: np.ndarray, expected: np.ndarray, tolerance: float) -> tuple[bool, str]:
    """Whether ``got`` matches ``expected`` entry by entry; the message names the worst entry, never its value."""
    error = np.abs(got - expected)
    if np.all(error <= tolerance):
        return True, f"{name} matches to within {tolerance:g}."
    if got.ndim == 0:
        return False, f"{name} does not match (you have {float(got):.4g})."
    worst = np.unravel_index(np.argmax(error), error.shape)
    return False, (
        f"{name} does not match at index {tuple(int(i) for i in worst)} "
        f"(you have {got[worst]:.4g}); recheck that entry."
    )


# --- the student edition -----------------------------------------------------

_SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}.*?^(?P=fence)[ \t]*$\n?", re.M | re.S)
_EXERCISE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{exercise\}.*?^(?P=fence)[ \t]*$\n?", re.M | re.S)
_LABEL = re.compile(r"^:label:\s*(\S+)", re.M)
# The book's introduction to its exercises speaks of solutions and of this edition; the student
# edition says what its reader does instead.
_EXERCISES_INTRODUCTION = re.compile(r"^(## Exercises[ \t]*\n)(.*?)(?=^(?:`{3,}|:{3,})\{exercise\}|\Z)", re.M | re.S)
STUDENT_INTRODUCTION = (
    "An exercise followed by a check cell can be checked by attnlib: put your answer in place of `...` "
    "in that cell and run it. It says whether the answer is right and, if not, what to look at again, "
    "without giving the answer away.\n\n"
)


def strip_solutions(markdown: str) -> str:
    """Remove every ``{solution}`` directive from a markdown cell's source."""
    return _SOLUTION.sub("", markdown).rstrip() + "\n"


def _check_cell(label: str) -> dict:
    source = (
        f"# {label}: {CHECKERS[label].prompt}\n"
        "import attnlib.book.exercises\n"
        "answer = ...\n"
        f"attnlib.book.exercises.check({label!r}, answer)"
    )
    return {"cell_type": "code", "id": f"check-{label}", "execution_count": None, "metadata": {"tags": ["student"]},
            "outputs": [], "source": source.splitlines(keepends=True)}


def _markdown_cell(cell: dict, source: str, part: int) -> dict:
    cell_id = cell.get("id")
    return {**cell, **({"id": f"{cell_id}-{part}"} if cell_id and part else {}),
            "source": source.splitlines(keepends=True)}


def split_at_exercises(markdown: str) -> list[tuple[str, str | None]]:
    """``markdown`` cut after each ``{exercise}`` directive: ``(text, label)`` pieces, label None for the rest."""
    pieces, start = [], 0
    for match in _EXERCISE.finditer(markdown):
        label = _LABEL.search(match.group(0))
        pieces.append((markdown[start:match.end()], label.group(1) if label else None))
        start = match.end()
    if markdown[start:].strip() or not pieces:
        pieces.append((markdown[start:], None))
    return pieces


def student_notebook(notebook: dict) -> dict:
    """A copy of ``notebook`` without solutions, with a check cell right after each checked exercise."""
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            cells.append(cell)
            continue
        source = _EXERCISES_INTRODUCTION.sub(lambda m: m.group(1) + "\n" + STUDENT_INTRODUCTION,
                                             strip_solutions("".join(cell["source"])))
        pieces = split_at_exercises(source)
        for part, (text, label) in enumerate(pieces):
            cells.append(_markdown_cell(cell, text.strip("\n") + "\n", part))
            if label in CHECKERS:
                cells.append(_check_cell(label))
    return {**notebook, "cells": cells}


# Each chapter's checkers register themselves on import; they need the helpers above.
from . import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12, ch13, ch14  # noqa: E402,F401
