"""The exercise catalogue: every exercise of the book, read from the chapters and the checkers.

Each exercise has a label, the chapter it ends, what it asks, and how it is graded:
automatically (attnlib has a checker for its answer), by hand (a written answer), or both
(a checked answer and an "explain why" part). Points follow from that and from the question
bank (``tasks.py``): an answer is graded for credit only when the bank draws its numbers, so the
catalogue on the instructor page, the assignments and the autograder cannot disagree.
"""
from __future__ import annotations

import json
import pathlib
import re
import sys
from dataclasses import dataclass

import page_math
import tasks
from attnlib.book import exercises

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_pages  # noqa: E402

CHAPTERS = ROOT / "chapters"

WRITTEN_POINTS = 1   # the "explain why" part of a checked exercise, graded by hand
MANUAL_POINTS = 2    # an exercise without a checker, graded by hand

_EXERCISE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{exercise\}[ \t]*(?P<title>.*?)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                       re.M | re.S)
_SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}[ \t]*(?P<label>\S+)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                       re.M | re.S)
_OPTION = re.compile(r"^:\w+:.*\n", re.M)
# A question the checker cannot grade: a reason, a comparison, a consequence.
_WRITTEN = re.compile(r"\bwhy\b|\bwhat does\b|\bwhat happens\b|\bexplain\b|\bwhat goes wrong\b|\bcould you tell\b",
                      re.I)


@dataclass(frozen=True)
class Exercise:
    label: str
    chapter: str        # the stem of the notebook it is in, e.g. "07_cost_of_attention", "10_5_summary_and_exercises"
    chapter_title: str  # the title of its chapter (of the chapter page, for a section page)
    title: str
    text: str           # the exercise's statement, markdown
    solution: str       # the solution's body, markdown with code blocks

    @property
    def checked(self) -> bool:
        return self.label in exercises.CHECKERS

    @property
    def written(self) -> bool:
        """Whether the exercise asks for a reason or a comparison that is graded by hand."""
        return not self.checked or bool(_WRITTEN.search(self.text))

    @property
    def checks(self) -> str:
        """What the exercise's answer is: the checker's prompt, or the exercise's title."""
        return exercises.CHECKERS[self.label].prompt if self.checked else f"written: {self.title.lower()}"


def graded(exercise: Exercise, bank: tasks.Bank) -> bool:
    """Whether the bank grades the exercise's answer for credit, with the course's numbers."""
    return exercise.label in bank.tasks


def auto_points(exercise: Exercise, bank: tasks.Bank) -> int:
    """Points of the answer the autograder checks; 0 for practice (the book's numbers, answered publicly)."""
    return bank.tasks[exercise.label].points if graded(exercise, bank) else 0


def manual_points(exercise: Exercise, bank: tasks.Bank) -> int:
    """Points of the written answer, graded by hand: the bank's WRITTEN_POINTS, else the catalogue's."""
    if not exercise.written:
        return 0
    default = WRITTEN_POINTS if exercise.checked else MANUAL_POINTS
    return bank.written_points.get(exercise.label, default)


def numbers(exercise: Exercise, bank: tasks.Bank) -> str:
    """"course" (drawn for each student, graded), "practice" (the book's, 0 points), "self-check" (practice
    whose checker guesses can pass) or "-" (no answer to check)."""
    if graded(exercise, bank):
        return "course"
    if not exercise.checked:
        return "-"
    return "self-check" if exercises.CHECKERS[exercise.label].self_check else "practice"


def chapter_paths() -> list[pathlib.Path]:
    """Every chapter and section page, as _toc.yml lists them."""
    return book_pages.notebooks()


def _chapter_title(path: pathlib.Path) -> str:
    [page] = [page for page in book_pages.chapter_pages() if page.path == path.resolve()]
    return book_pages.chapter_title(page)


def chapter_exercises(path: pathlib.Path) -> list[Exercise]:
    """The exercises of one chapter notebook, in order."""
    notebook = json.loads(path.read_text())
    markdown = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    solutions = {m.group("label"): _OPTION.sub("", m.group("body")).strip() for m in _SOLUTION.finditer(markdown)}
    found = []
    for match in _EXERCISE.finditer(markdown):
        label = re.search(r"^:label:\s*(\S+)", match.group("body"), re.M).group(1)
        found.append(Exercise(label, path.stem, _chapter_title(path), match.group("title").strip(),
                              _OPTION.sub("", match.group("body")).strip(), solutions.get(label, "")))
    return found


def all_exercises() -> list[Exercise]:
    return [exercise for path in chapter_paths() for exercise in chapter_exercises(path)]


# --- the catalogue as a table, for the instructor page and the gradebook ------------------------

BEGIN, END = "<!-- exercise catalogue: generated by python assignments/catalogue.py --write -->", \
    "<!-- end of the exercise catalogue -->"
COLUMNS = ("label", "chapter", "what it checks", "auto", "by hand", "numbers")


def rows(bank: tasks.Bank) -> list[tuple[str, ...]]:
    """One row per exercise, as ``COLUMNS``, with the points and numbers of ``bank``."""
    return [(e.label, e.chapter, e.checks, str(auto_points(e, bank)), str(manual_points(e, bank)), numbers(e, bank))
            for e in all_exercises()]


def markdown_table(bank: tasks.Bank) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    # a section page is linked by its chapter's title ("Summary and exercises" would not say which)
    titles = {e.label: e.chapter_title for e in all_exercises()}
    lines = ["| Label | Chapter | What the answer is | Auto | By hand | Numbers |", "|---|---|---|---|---|---|"]
    for label, chapter, checks, auto, manual, kind in rows(bank):
        # the prompt as students read it in plain text, with its math typeset for the page
        shown = page_math.typeset(checks) if label in exercises.CHECKERS else checks
        lines.append(f"| `{label}` | {{doc}}`{titles[label]} <chapters/{chapter}>` | {cell(shown)} | {auto} | {manual} "
                     f"| {kind} |")
    return "\n".join(lines)


def page_block(page: str) -> str:
    """The generated part of the instructor page ``page``."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[start:end].strip("\n")


def with_table(page: str) -> str:
    """``page`` with the catalogue of the example bank, the one the book describes."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + markdown_table(tasks.load_bank(tasks.EXAMPLE_BANK)) + "\n" + page[end:]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python assignments/catalogue.py",
                                     description="print the exercise catalogue, or rewrite it in a page")
    parser.add_argument("--write", type=pathlib.Path, help="the page whose catalogue to rewrite (instructor.md)")
    args = parser.parse_args()
    if args.write:
        args.write.write_text(with_table(args.write.read_text()))
        print(f"rewrote the exercise catalogue in {args.write}")
    else:
        print(markdown_table(tasks.load_bank(tasks.EXAMPLE_BANK)))
