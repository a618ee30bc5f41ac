"""Checkers for the chapters' exercises, and the student edition of the book.

A student computes an answer in a notebook (in Colab or locally) and runs

    attnlib.exercises.check("ex-01-row-two", answer)

which says whether the answer is right and, when it is not, what is off.
Each checker is registered under the label of its exercise in the chapter,
with a ``prompt`` that says what ``answer`` must be; the checkers of chapter
NN live in ``attnlib/exercises/chNN.py`` and are registered on import.

``python -m attnlib.exercises student-edition OUT`` writes the chapters
without their solutions, with a check cell after each exercise that has a
checker.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch



@dataclass(frozen=True)
class Feedback:
    """The verdict on one answer."""

    exercise: str
    passed: bool
    message: str

    def __str__(self) -> str:
        mark = "correct" if self.passed else "not yet"
        return f"{self.exercise}: {mark}. {self.message}"

    def __bool__(self) -> bool:
        return self.passed


@dataclass(frozen=True)
class Checker:
    label: str
    prompt: str
    grade: Callable[[Any], tuple[bool, str]]


CHECKERS: dict[str, Checker] = {}


def checker(label: str, prompt: str):
    """Register ``grade(answer) -> (passed, message)`` for exercise ``label``."""

    def register(grade):
        CHECKERS[label] = Checker(label, prompt, grade)
        return grade

    return register


def check(exercise: str, answer: Any) -> Feedback:
    """Grade ``answer`` to ``exercise`` (a label such as ``"ex-01-row-two"``) and print the verdict."""
    if exercise not in CHECKERS:
        raise ValueError(f"exercise must be one of {sorted(CHECKERS)}, got {exercise!r}")
    try:
        passed, message = CHECKERS[exercise].grade(answer)
    except Exception as exc:  # a student's answer can be anything; say what was expected instead of crashing
        passed, message = False, f"could not read the answer ({type(exc).__name__}: {exc}). Expected: {CHECKERS[exercise].prompt}"
    feedback = Feedback(exercise, passed, message)
    print(feedback)
    return feedback


def as_array(x, name: str, shape: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=float)
    if array.shape != shape:
        raise ValueError(f"{name} should have shape {shape}, got {array.shape}")
    return array


def compare(name: str, got: np.ndarray, expected: np.ndarray, tolerance: float) -> tuple[bool, str]:
    error = np.abs(got - expected)
    if np.all(error <= tolerance):
        return True, f"{name} matches to within {tolerance:g}."
    worst = np.unravel_index(np.argmax(error), error.shape)
    return False, (
        f"{name} is off by {error[worst]:.3g} at index {tuple(int(i) for i in worst)} "
        f"(you have {got[worst]:.4f}); recheck that entry."
    )


# --- the student edition -----------------------------------------------------

_SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}.*?^(?P=fence)[ \t]*$\n?", re.M | re.S)
_EXERCISE_LABEL = re.compile(r"^(?:`{3,}|:{3,})\{exercise\}.*?\n:label:\s*(\S+)", re.M | re.S)


def strip_solutions(markdown: str) -> str:
    """Remove every ``{solution}`` directive from a markdown cell's source."""
    return _SOLUTION.sub("", markdown).rstrip() + "\n"


def _check_cell(label: str) -> dict:
    source = (
        f"# {label}: {CHECKERS[label].prompt}\n"
        "import attnlib.exercises\n"
        "answer = ...\n"
        f"attnlib.exercises.check({label!r}, answer)"
    )
    return {"cell_type": "code", "id": f"check-{label}", "execution_count": None, "metadata": {"tags": ["student"]},
            "outputs": [], "source": source.splitlines(keepends=True)}


def student_notebook(notebook: dict) -> dict:
    """A copy of ``notebook`` without solutions, and with a check cell after each checked exercise."""
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            cells.append(cell)
            continue
        source = "".join(cell["source"])
        cells.append({**cell, "source": strip_solutions(source).splitlines(keepends=True)})
        cells += [_check_cell(label) for label in _EXERCISE_LABEL.findall(source) if label in CHECKERS]
    return {**notebook, "cells": cells}


def write_student_edition(chapters: pathlib.Path, out: pathlib.Path) -> list[pathlib.Path]:
    """Write the student edition of every ``chapters/NN_*.ipynb`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(chapters.glob("[0-9][0-9]_*.ipynb")):
        target = out / path.name
        notebook = student_notebook(json.loads(path.read_text()))
        target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m attnlib.exercises")
    sub = parser.add_subparsers(dest="command", required=True)
    edition = sub.add_parser("student-edition", help="write the chapters without solutions")
    edition.add_argument("out", type=pathlib.Path)
    edition.add_argument("--chapters", type=pathlib.Path, default=pathlib.Path("chapters"))
    args = parser.parse_args(argv)
    for path in write_student_edition(args.chapters, args.out):
        print(f"wrote {path}")



# Each chapter's checkers register themselves on import; they need the helpers above.
from . import ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09  # noqa: E402,F401
