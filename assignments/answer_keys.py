"""The answer key of a bank, checked before anything is built.

For each task and each student of the roster (and, for a bank graded for credit, a few hundred
synthetic students more, so that a range bug is found before a late joiner meets it), the key is
refused when
- the drawn numbers break the task's constraints (``Task.check``);
- its second computation (``Task.second``) disagrees with its solution;
- the public example bank's solution answers it (a bank graded for credit);
- its answer's form differs between students (the visible check tests the form);
- its solution, run with the numbers *as the notebook prints them* in "Your numbers" and the
  prompt (a number printed rounded, ``{rho:.2f}``), gives an answer outside the tolerance.

It reports, for each task, how many pairs of roster students share a scoring answer (an answer
within the tolerance for both: one can hand in the other's value), and refuses more pairs than the
instructor's bound. It warns (refuses, with ``strict``) on a task with no ``check`` or no
``second``, a tolerance looser than ``LOOSE_RTOL``, a bank task graded for credit that prints the
book's question (no ``question``), and a number its solution uses that the notebook never prints.
"""
from __future__ import annotations

import json
import pathlib
import string
import sys
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import sympy as sp

import grading
import tasks

# A relative tolerance looser than this lets wrong answers through (a factor, a rounding the
# exercise does not allow) and draws of a range share answers: the build warns.
LOOSE_RTOL = 1e-3
# Synthetic students whose numbers are checked too, for a bank graded for credit.
SYNTHETIC_STUDENTS = 200


@dataclass
class Shared:
    """How many roster students' answers to one task score for another's."""
    label: str
    students: int
    distinct: int
    pairs: int        # pairs of students each of whose answers scores for the other
    sharing: int      # students with at least one such classmate

    def line(self) -> str:
        return (f"{self.label}: {self.students} students, {self.distinct} distinct answers, {self.pairs} pairs "
                f"share a scoring answer ({self.sharing} students have such a classmate)")


@dataclass
class Checked:
    """The checked key of a bank: label -> student -> the encoded reference, and what the build reports."""
    keys: dict[str, dict[str, dict]] = field(default_factory=dict)
    shared: list[Shared] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def printed(task: tasks.Task, params: dict) -> dict:
    """``params`` as the notebook prints them: each number that the "Your numbers" sentence or the
    prompt formats (``{rho:.2f}``), read back from the printed text; the others as they are."""
    shown = dict(params)
    for template in (task.numbers, task.prompt):
        for _, name, spec, conversion in string.Formatter().parse(template):
            if not name or name not in params:
                continue
            value = params[name]
            text = format(repr(value) if conversion == "r" else str(value) if conversion == "s" else value, spec)
            back = _read_back(text, value)
            if back is not None and _differs(back, value) and not _differs(shown[name], value):
                shown[name] = back
    return shown


def _read_back(text: str, value):
    text = text.strip().replace(",", "").replace("_", "")
    try:
        if isinstance(value, bool):
            return text == "True"
        if isinstance(value, int):
            return int(float(text)) if float(text).is_integer() else float(text)
        if isinstance(value, float):
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        if isinstance(value, str):
            return text
    except ValueError:
        return None
    return None


def _differs(a, b) -> bool:
    try:
        return Fraction(str(a)) != Fraction(str(b)) if not isinstance(a, str) else a != b
    except (ValueError, ZeroDivisionError):
        return a != b


def unprinted(task: tasks.Task, params: dict) -> list[str]:
    """The numbers ``task``'s solution uses that neither its "Your numbers" sentence nor its prompt prints."""
    shown = {name for template in (task.numbers, task.prompt) for _, name, _, _ in string.Formatter().parse(template)
             if name}
    used = {name for _, name, _, _ in string.Formatter().parse(task.solution) if name}
    return sorted(name for name in used - shown if name in params)


def answer_key(task: tasks.Task, bank: tasks.Bank, course_seed: int, students: list[str],
               example: tasks.Bank, synthetic: int = 0) -> dict[str, dict]:
    """Student -> the reference answer of ``task`` (encoded), each drawn variant checked (see the
    module's docstring); ``synthetic`` more students are checked and not kept."""
    key, forms = {}, set()
    extra = [f"synthetic-student-{number}@example.invalid" for number in range(synthetic)]
    for student in [*students, *extra]:
        params = task.params(course_seed, student)
        encoded = grading.encode(tasks.run(task, params))
        reference = grading.decode(encoded)
        if task.second is not None:
            second = task.second(params)
            if not grading.matches(second, reference, task.rtol, task.atol, task.also_at):
                raise ValueError(f"task {task.label}: its solution and its second computation should agree, got "
                                 f"{reference!r} and {second!r} for the numbers {params}: one of them is wrong")
        if not bank.public_practice and task.label in example.tasks:
            public = example.tasks[task.label]
            if _answers(public, params, reference, task):
                raise ValueError(f"task {task.label}: the public example bank's solution should not answer a "
                                 f"task graded for credit, got the right answer with the numbers {params}: change "
                                 "what the task asks, not only its ranges (the instructor page, step 1)")
        shown = printed(task, params)
        if shown != params:
            try:
                as_printed = tasks.run(task, shown)
            except Exception as error:  # noqa: BLE001 - any failure of the bank's code is the bank's
                as_printed = error
            if isinstance(as_printed, Exception) or not grading.matches(as_printed, reference, task.rtol, task.atol,
                                                                        task.also_at):
                changed = {name: (params[name], shown[name]) for name in params if shown[name] != params[name]}
                raise ValueError(f"task {task.label}: the numbers the notebook prints should give the answer its "
                                 f"key holds, got another answer with the numbers as printed "
                                 f"({', '.join(f'{n} = {p} printed as {s}' for n, (p, s) in changed.items())}): "
                                 "print them in full ({name}, not {name:.2f}), or draw them already rounded")
        forms.add(json.dumps(grading.form_of(reference), sort_keys=True))
        if len(forms) > 1:
            raise ValueError(f"task {task.label}: its answer should have the same form for every student (the "
                             f"visible test checks it), got {grading.form_of(reference)} for the numbers {params}")
        if student in students:
            key[student] = {"answer": encoded, "rtol": task.rtol, "atol": task.atol, "also_at": task.also_at}
    return key


def _answers(public: tasks.Task, params: dict, reference, task: tasks.Task) -> bool:
    """Whether ``public``'s solution, given ``params`` (where its template takes them), gives ``reference``."""
    try:
        value = tasks.run(public, params)
    except Exception:  # noqa: BLE001 - the numbers do not fit the example's template: nothing to substitute
        return False
    return grading.matches(value, reference, task.rtol, task.atol, task.also_at)


# --- answers students share ----------------------------------------------------------------------

def _fingerprint(value, rtol: float, atol: float) -> tuple[list[float], list[float], list[float]]:
    """``value`` (a decoded reference) as numbers with the relative and absolute tolerance of each: a
    SymPy expression by its values at the points where the grader compares it."""
    if isinstance(value, tuple):
        parts = [_fingerprint(item, rtol, atol) for item in value]
        return tuple(sum((part[k] for part in parts), []) for k in range(3))
    if isinstance(value, sp.Basic):
        names = sorted({s.name for s in value.free_symbols})
        numbers = [grading._value(value, at) for at in list(grading._points(names))[:grading.SYMPY_POINTS]]
        numbers = [complex(n).real if n is not None else float("nan") for n in numbers]
        return numbers, [max(rtol, grading.VALUE_RTOL)] * len(numbers), [atol] * len(numbers)
    array = np.asarray(value)
    exact = array.dtype.kind in "biu"
    flat = array.astype(float).ravel().tolist()
    return flat, [0.0 if exact else rtol] * len(flat), [0.0 if exact else atol] * len(flat)


def shared_answers(label: str, key: dict[str, dict], students: list[str]) -> Shared:
    """How many pairs of ``students`` hold answers in ``key`` within the task's tolerance of each other."""
    entries = [key[student] for student in students]
    if not entries:
        return Shared(label, 0, 0, 0, 0)
    distinct = len({json.dumps(entry["answer"], sort_keys=True) for entry in entries})
    rtol, atol = entries[0]["rtol"], entries[0]["atol"]
    prints = [_fingerprint(grading.decode(entry["answer"]), rtol, atol) for entry in entries]
    partners = np.zeros(len(entries), dtype=int)
    pairs = 0
    for length in {len(p[0]) for p in prints}:  # answers of other shapes never score for each other
        group = [i for i, p in enumerate(prints) if len(p[0]) == length]
        values = np.array([prints[i][0] for i in group], dtype=float).reshape(len(group), length)
        rtols, atols = np.array(prints[group[0]][1]), np.array(prints[group[0]][2])
        scale = np.maximum(np.abs(values)[:, None, :], np.abs(values)[None, :, :])
        close = np.abs(values[:, None, :] - values[None, :, :]) <= atols + rtols * scale
        close |= np.isnan(values[:, None, :]) & np.isnan(values[None, :, :])
        same = close.all(axis=2)
        np.fill_diagonal(same, False)
        pairs += int(same.sum()) // 2
        partners[group] = same.sum(axis=1)
    return Shared(label, len(entries), distinct, pairs, int((partners > 0).sum()))


# --- the whole bank -----------------------------------------------------------------------------

def bank_warnings(bank: tasks.Bank, labels: list[str], course_seed: int) -> list[str]:
    """What the build warns about in the tasks of ``labels`` (see the module's docstring)."""
    found = []
    for label in labels:
        task = bank.tasks[label]
        if task.check is None:
            found.append(f"task {label} has no check: a range that breaks what its numbers must satisfy builds "
                         "without a word")
        if task.second is None:
            found.append(f"task {label} has no second computation: nothing tells a wrong solution from a right one")
        if task.rtol > LOOSE_RTOL:
            found.append(f"task {label} accepts answers within rtol = {task.rtol:g}, looser than {LOOSE_RTOL:g}: a "
                         "wrong answer close to the right one scores, and students' answers may score for each other")
        if not bank.public_practice and task.question is None:
            found.append(f"task {label} has no question: its notebook prints the book's statement of the exercise; "
                         "set question= to what the task asks")
        missing = unprinted(task, task.params(course_seed, "instructor"))
        if missing:
            found.append(f"task {label}: its solution uses {', '.join(missing)}, which its notebook never prints")
    return found


def check_bank(bank: tasks.Bank, example: tasks.Bank, course_seed: int, labels: list[str], students: list[str],
               roster: list[str], max_shared_pairs: int | None = None, strict: bool = False,
               synthetic: int | None = None) -> Checked:
    """Every key of the tasks ``labels`` for ``students`` (the reference student and the ``roster``),
    checked; the shared answers among the ``roster``; the warnings. Raises ValueError, naming the task,
    on a refused key, more shared pairs than ``max_shared_pairs``, or (``strict``) any warning."""
    if synthetic is None:
        synthetic = 0 if bank.public_practice else SYNTHETIC_STUDENTS
    checked = Checked(warnings=bank_warnings(bank, labels, course_seed))
    if strict and checked.warnings:
        raise ValueError("the bank should build without warnings (strict), got: " + "; ".join(checked.warnings))
    for label in labels:
        checked.keys[label] = answer_key(bank.tasks[label], bank, course_seed, students, example, synthetic)
        if len(roster) > 1:
            shared = shared_answers(label, checked.keys[label], roster)
            checked.shared.append(shared)
            if max_shared_pairs is not None and shared.pairs > max_shared_pairs:
                raise ValueError(f"task {label}: at most {max_shared_pairs} pairs of students should share a "
                                 f"scoring answer, got {shared.pairs} ({shared.line()}): widen the task's ranges, "
                                 "or ask for more of each student's numbers in the answer")
    for warning in checked.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return checked


def main(argv: list[str] | None = None) -> None:
    """Print, for a bank and classes of the given sizes (synthetic rosters), each task's shared answers
    as a Markdown table: what ``shared.csv`` will say, before there is a roster."""
    import argparse
    import dataclasses

    parser = argparse.ArgumentParser(prog="python assignments/answer_keys.py", description=main.__doc__.split("\n")[0])
    parser.add_argument("--bank", type=pathlib.Path, default=tasks.EXAMPLE_BANK)
    parser.add_argument("--seed", type=int, default=20270115)
    parser.add_argument("--students", type=int, nargs="+", default=[100, 300])
    args = parser.parse_args(argv)
    # the bank's keys are drawn per student even for the public example, whose builds do not
    bank = dataclasses.replace(tasks.load_bank(args.bank), public_practice=True)
    figures = {}
    for size in args.students:
        roster = [f"student{number:03d}@uni.edu" for number in range(size)]
        for label, task in bank.tasks.items():
            figures[label, size] = shared_answers(label, answer_key(task, bank, args.seed, roster, bank), roster)
    print("| task | " + " | ".join(f"{size} students: distinct answers, pairs sharing one" for size in args.students)
          + " |")
    print("|---|" + "---|" * len(args.students))
    for label in bank.tasks:
        print(f"| `{label}` | " + " | ".join(f"{figures[label, size].distinct}, {figures[label, size].pairs}"
                                            for size in args.students) + " |")


if __name__ == "__main__":
    main()
