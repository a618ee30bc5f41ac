"""What a question bank is made of, and how one is loaded and run.

A question bank is a Python file that the instructor keeps outside the public repository
(``make assignments BANK=path/to/bank.py``). It defines

    PUBLIC_PRACTICE  True only for a bank whose answers anyone can compute (the example bank
                     shipped with the book, ``assignments/example_bank.py``); a graded build
                     of such a bank says so on every assignment
    TASKS            a list of ``Task``: the exercises graded for credit, each with a rule that
                     draws its numbers from ranges with the course seed and the student, the
                     constraints those numbers must meet, a reference solution and, where one
                     exists, a second computation of the answer that the build compares with it
    WRITTEN_POINTS   optional, label -> points of an exercise's written part (default: catalogue's)

An exercise with a checker but no task in the bank keeps the book's numbers, which the book's
public solutions answer: it is practice in the assignment, with attnlib's check and no points.

The bank travels in the autograder bundle (``grading_bank.py``, with this file), so that the
grader computes each student's reference when it grades that student's notebook.
"""
from __future__ import annotations

import importlib.util
import pathlib
import random
import re
from dataclasses import dataclass
from typing import Callable

SETUP = """\
import math
import numpy as np
import sympy as sp
import torch
import attnlib
import attnlib.book.exercises
from attnlib import tiled
from attnlib.book import montecarlo as mc, stored_results
from attnlib.heads import MultiHeadAttention, kv_cache_bytes
from attnlib.book.theory import online_softmax, variance"""

CHAPTER_SETUP = {
    "01": """\
# The worked example of the chapter: three queries, keys and values
Q = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)""",
    "10": """\
from attnlib.book.theory import backward, softmax as softmax_theory
# Chapter 1's worked example, whose backward pass the chapter follows
Q = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)""",
}

AUTO_POINTS = 2      # an answer the autograder checks against the course's reference
# Redrawing until the numbers differ from the book's gives up after this many tries: a range
# that holds almost only the book's numbers is a mistake in the bank, not bad luck.
MAX_DRAWS = 100


_IDENTITY = re.compile(r"[A-Za-z0-9@._+-]{1,200}")


def student_key(identity: str) -> str:
    """A student's identity (a Gradescope email or student id) as the draws and the grader use it."""
    if not isinstance(identity, str) or not _IDENTITY.fullmatch(identity.strip()):
        raise ValueError(f"a student should be named by an email or id of letters, digits and @ . _ + -, "
                         f"got {identity!r}")
    return identity.strip().lower()


@dataclass(frozen=True)
class Task:
    """One graded exercise of a bank.

    ``draw(rng)`` returns the exercise's numbers for a student of a course; ``book`` holds the
    chapter's own, which a draw never returns. ``check(params)`` states the constraints those
    numbers must meet (an ``assert`` with a message per constraint), so that a range that breaks
    one fails the build instead of grading against a wrong key. ``numbers`` (the sentence that
    gives the student's numbers), ``prompt`` (what the answer is, said with them) and
    ``solution`` (Python source that sets ``answer`` after the chapter's setup) are formatted
    with the numbers. ``second(params)``, where an independent computation exists (a formula,
    not the solution's library calls), gives the answer again, and the build requires the two to
    match for every drawn variant. An answer matches the reference within ``rtol`` relative or
    ``atol`` absolute error (both 0: exactly); ``also_at`` lets a SymPy answer be given as its
    value with those symbols substituted.
    """
    label: str
    draw: Callable[[random.Random], dict]
    book: dict
    numbers: str
    prompt: str
    solution: str
    check: Callable[[dict], None] | None = None
    second: Callable[[dict], object] | None = None
    rtol: float = 0.0
    atol: float = 0.0
    also_at: dict | None = None
    points: int = AUTO_POINTS

    def params(self, course_seed: int, student: str = "") -> dict:
        """The numbers of this task for ``student`` (a ``student_key``) in the course ``course_seed``,
        never the book's; ``student`` "" gives the whole course the same numbers (practice)."""
        key = f"{course_seed}:{student}:{self.label}" if student else f"{course_seed}:{self.label}"
        rng = random.Random(key)
        for _ in range(MAX_DRAWS):
            params = self.draw(rng)
            self.constrain(params)
            if params != self.book:
                return params
        raise ValueError(f"task {self.label}: draw should give numbers other than the book's {self.book}, "
                         f"got only those in {MAX_DRAWS} draws; widen its ranges")

    def constrain(self, params: dict) -> None:
        """Raise, naming the task, when ``params`` break a constraint that ``check`` states."""
        if self.check is None:
            return
        try:
            self.check(params)
        except AssertionError as broken:
            raise ValueError(f"task {self.label}: its draw should meet the task's constraints, got {params}, "
                             f"which breaks one: {broken or 'an assert of its check'}; fix the ranges of the "
                             "draw") from None

    def code(self, params: dict) -> str:
        return self.solution.format(**params)


@dataclass(frozen=True)
class Bank:
    path: pathlib.Path
    public_practice: bool
    tasks: dict[str, Task]
    written_points: dict[str, int]


def load_bank(path: pathlib.Path) -> Bank:
    """The question bank in the Python file ``path``."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"bank should be the path of a question bank (a .py file), got {str(path)!r}, "
                         "which is not a file; assignments/example_bank.py is the template")
    spec = importlib.util.spec_from_file_location(f"question_bank_{abs(hash(str(path.resolve())))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [name for name in ("PUBLIC_PRACTICE", "TASKS") if not hasattr(module, name)]
    if missing:
        raise ValueError(f"bank {path} should define PUBLIC_PRACTICE and TASKS, got no {' and no '.join(missing)}")
    by_label = {task.label: task for task in module.TASKS}
    if len(by_label) != len(module.TASKS):
        raise ValueError(f"bank {path} should have one task per label, got a label twice")
    return Bank(path, bool(module.PUBLIC_PRACTICE), by_label, dict(getattr(module, "WRITTEN_POINTS", {})))


EXAMPLE_BANK = pathlib.Path(__file__).resolve().parent / "example_bank.py"


def setup_code(chapter: str) -> str:
    """The imports and the chapter's own objects that every solution of chapter ``chapter`` ("07") may use."""
    return "\n\n".join(part for part in (SETUP, CHAPTER_SETUP.get(chapter, "")) if part)


def run(task: Task, params: dict) -> object:
    """The reference answer of ``task`` with ``params``, computed in a fresh namespace."""
    namespace: dict = {}
    exec(setup_code(task.label[3:5]), namespace)
    exec(task.code(params), namespace)
    return namespace["answer"]
