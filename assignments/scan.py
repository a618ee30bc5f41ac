"""Flag the submissions whose code reaches for the grader instead of the answer.

    python assignments/scan.py SUBMISSIONS CHAPTER [--csv FLAGS.csv]

The course's grader judges outside the student's kernel (``course_judge.py``), so none of the
review's grader-replacing tricks scores; this scan is a second line, for what the grader does
not stop (a process left running after the kernel) and for a look at who tried. It reads each
submission (NAME.ipynb, or the NAME.zip its export cell writes) in SUBMISSIONS before or after
grading, skips the cells the build wrote (those of CHAPTER's
blank notebook, e.g. ``_build/assignments/07_cost_of_attention``) and lists every line of the
student's own code that names one of ``PATTERNS``. A flag is a reason to read the notebook, not
a verdict: ``open(`` may be honest.
"""
from __future__ import annotations

import argparse
import csv
import pathlib
import re
import sys
from dataclasses import dataclass

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from written import read_submission  # noqa: E402

PATTERNS = {
    r"\bsys\s*\.\s*modules\b|\bmodules\s*\[": "replaces a module (sys.modules)",
    r"\b__builtins__\b|\bbuiltins\b": "patches builtins",
    r"\bimportlib\b|\b__import__\b": "imports by name (importlib, __import__)",
    r"\botter\b": "touches otter, the grader",
    r"\bgrading\w*\b|\btasks\b|references\.json|\bcourse_answers\b|\bcourse_judge\b": "reads the grader's files",
    r"submission_metadata|ATTNLIB_STUDENT|\bos\s*\.\s*environ\b|\bputenv\b": "touches who submitted",
    r"\b(exec|eval|compile)\s*\(": "runs code from a string",
    r"\bopen\s*\(|\bread_text\b|\bread_bytes\b|\bos\s*\.\s*(listdir|walk|scandir|chdir)\b|\bglob\b":
        "reads files or moves away from them",
    r"\bglobals\s*\(|\bsetattr\s*\(|\b__dict__\b|\b__code__\b": "rewrites objects or names",
    r"\bsubprocess\b|\bos\s*\.\s*system\b|\bpickle\b|\bdill\b": "runs other processes or unpickles",
    r"\bgetattr\s*\([^)]*['\"]\s*\+|\brunpy\b|\bpkgutil\b": "reaches a module by a computed name",
    r"\b_getframe\b|\bf_locals\b|\bf_back\b|\binspect\b|\bgc\s*\.": "reads other code's frames or objects",
    r"\bwrite_text\b|\bwrite_bytes\b|\bfromfile\b|\bloadtxt\b|\bsymlink": "writes or reads files",
    r"^\s*(np|numpy|math|sp|sympy|torch|pathlib|os|json|attnlib)(\.\w+)+\s*=[^=]": "replaces a library's function",
    r"^\s*class\s": "defines a class in an answer cell",
}
_COMPILED = [(re.compile(pattern), why) for pattern, why in PATTERNS.items()]


@dataclass(frozen=True)
class Flag:
    submission: str
    cell: int      # the code cell's position among the notebook's cells
    why: str
    line: str


def blank_cells(chapter: pathlib.Path) -> set[str]:
    """The sources of the code cells the build wrote into CHAPTER's notebooks."""
    notebooks = [*chapter.glob("autograder/blank_*.ipynb"), *chapter.glob("student/*.ipynb")]
    if not notebooks:
        raise ValueError(f"chapter should be a chapter folder of a build (with autograder/blank_NN.ipynb or "
                         f"student/NN.ipynb), got {str(chapter)!r}")
    return {"".join(cell["source"]).strip() for path in notebooks
            for cell in read_submission(path)["cells"] if cell["cell_type"] == "code"}


def scan_notebook(name: str, notebook: dict, written_by_build: set[str]) -> list[Flag]:
    flags = []
    for number, cell in enumerate(notebook["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or source.strip() in written_by_build:
            continue
        for line in source.splitlines():
            code = line.split("#", 1)[0] if "'" not in line and '"' not in line else line
            for pattern, why in _COMPILED:
                if pattern.search(code):
                    flags.append(Flag(name, number, why, line.strip()))
    return flags


def scan(submissions: pathlib.Path, chapter: pathlib.Path) -> list[Flag]:
    """Every flag of every submission (NAME.ipynb or NAME.zip) in ``submissions``."""
    written_by_build = blank_cells(chapter)
    flags = []
    for path in sorted([*submissions.glob("*.ipynb"), *submissions.glob("*.zip")]):
        flags += scan_notebook(path.stem, read_submission(path), written_by_build)
    return flags


def write_flags(flags: list[Flag], path: pathlib.Path) -> None:
    with open(path, "w", newline="") as table:
        writer = csv.writer(table, lineterminator="\n")
        writer.writerow(["submission", "cell", "why", "line"])
        writer.writerows([(f.submission, f.cell, f.why, f.line) for f in flags])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python assignments/scan.py", description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=pathlib.Path)
    parser.add_argument("chapter", type=pathlib.Path, help="the chapter's folder in the build")
    parser.add_argument("--csv", type=pathlib.Path, help="also write the flags to this CSV file")
    args = parser.parse_args(argv)
    try:
        flags = scan(args.submissions, args.chapter)
    except ValueError as exc:
        parser.error(str(exc))
    for flag in flags:
        print(f"{flag.submission}: cell {flag.cell}: {flag.why}: {flag.line}")
    if args.csv:
        write_flags(flags, args.csv)
    print(f"{len({f.submission for f in flags})} submission(s) flagged", file=sys.stderr)


if __name__ == "__main__":
    main()
