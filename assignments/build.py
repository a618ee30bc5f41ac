"""Build the graded assignments: one otter-grader assignment per chapter with exercises.

    python assignments/build.py OUT --bank BANK --seed N --ref TAG_OR_COMMIT --roster ROSTER [--chapters 01 07]

BANK is the question bank (see tasks.py), kept outside the public repository for a course
graded for credit; without --bank the public example bank is used and every assignment says it
is practice. For each chapter, writes an otter "master" notebook with its support files into
OUT/source/NN_topic/ (solutions and reference answers: never hand that folder out) and runs
``otter assign`` on it, which writes

    OUT/NN_topic/student/NN_topic.ipynb         the notebook to hand out (practice: one for all)
    OUT/NN_topic/student/EMAIL/NN_topic.ipynb   a graded course: each student's own notebook
    OUT/NN_topic/autograder/blank_NN_topic.ipynb   a graded course: the blank notebook of the
                                                reference's numbers (for checking the build)
    OUT/NN_topic/autograder/autograder.zip      the bundle for Gradescope or ``otter run``,
                                                with the hidden tests and the course's answers
    OUT/NN_topic/autograder/NN_topic.ipynb      the reference solutions
    OUT/catalogue.csv                           every exercise: label, chapter, points, how graded
    OUT/points.csv                              every assignment: auto, by-hand and total points
    OUT/build.json                              what was built from: seed, ref and its commit, bank

An exercise of the bank becomes an autograded question whose hidden test compares the answer
with the reference for the submitting student's numbers, which the autograder computes with the
bank in the bundle. The build computes every student's reference too, with the installed
attnlib (which must be the commit the autograder installs), and refuses a task whose drawn
numbers break its constraints, whose second computation disagrees, or which the public example
bank's solution answers. Any other checked exercise is practice (attnlib's
check, no points); an exercise that asks why, and every exercise without a checker, gets a
written answer graded by hand.
"""
from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import json
import pathlib
import re
import shutil
import subprocess
import sys
import warnings
import zipfile
from contextlib import redirect_stdout

import numpy as np
import sympy as sp
import torch
import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT / "tools")]

import answer_keys  # noqa: E402
import catalogue  # noqa: E402
import grading  # noqa: E402
import tasks  # noqa: E402
from install_cells import repository  # noqa: E402
from jupyter_edition import Book, Converter, book_url  # noqa: E402

import attnlib  # noqa: E402
from attnlib.book.exercises.assignment import answer_name  # noqa: E402

OTTER_VERSION = "7.0.0"
# The identity of the reference notebook (autograder/NN_topic.ipynb): its numbers are this
# "student"'s, and grading it as this student gives full marks.
REFERENCE_STUDENT = "instructor"
STUDENT_VARIABLE = "student_id"
# A seed shorter than this is short enough to find by trying every one against a leaked task key.
SHORT_SEED = 10 ** 12
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`$(])")


def _cell(kind: str, source: str, **metadata) -> dict:
    cell = {"cell_type": kind, "metadata": metadata, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def _test(name: str, points: int, hidden: bool, arguments: str, body: str) -> dict:
    config = f'""" # BEGIN TEST CONFIG\npoints: {points}\nhidden: {str(hidden).lower()}\n""" # END TEST CONFIG\n'
    return _cell("code", f"{config}def {name}({arguments}):\n{body}")


def _without_practice_check(markdown: str) -> str:
    """The exercise's text without its sentences that send the student to ``attnlib.book.exercises.check``,
    which knows the book's numbers only and so calls a right answer to the course's numbers wrong."""
    paragraphs = []
    for paragraph in markdown.split("\n\n"):
        if "attnlib.book.exercises.check(" in paragraph:
            paragraph = " ".join(sentence for sentence in _SENTENCE_END.split(paragraph)
                                 if "attnlib.book.exercises.check(" not in sentence)
        paragraphs.append(paragraph)
    return "\n\n".join(paragraphs)


def _written_question(name: str, points: int, prompt: str, solution: str, converter: Converter) -> list[dict]:
    return [
        _cell("raw", f"# BEGIN QUESTION\nname: {name}\nmanual: true\npoints: {points}"),
        _cell("markdown", prompt),
        _cell("raw", "# BEGIN SOLUTION"), _cell("markdown", converter.blocks(solution) or "-"),
        _cell("raw", "# END SOLUTION"), _cell("raw", "# END QUESTION"),
    ]


def question_cells(exercise: catalogue.Exercise, bank: tasks.Bank, params: dict | None, form: dict | None,
                   converter: Converter) -> list[dict]:
    """The cells of one exercise; ``params`` are the numbers a graded exercise shows (the reference
    notebook's, which each student's notebook replaces by theirs), ``form`` its answer's kind, which
    the visible test checks (``grading.form_of``: no value in it).

    ``converter`` writes the book's markup as the Jupyter edition does (tools/jupyter_edition.py):
    cross-references, equations and citations become links into the published book."""
    shown = converter.book.label(exercise.label, f"{converter.page}: exercise").text
    heading = (f"### {shown}: {converter.inline(exercise.title)} (`{exercise.label}`)\n\n"
               f"{converter.blocks(exercise.text)}")
    name = answer_name(exercise.label)
    manual = catalogue.manual_points(exercise, bank)
    if not exercise.checked:
        prompt = (heading + "\n\nRun what the exercise asks in the chapter's notebook, then describe what you "
                            "found and what it tells you.")
        return _written_question(exercise.label, manual, prompt, exercise.solution, converter)
    if not catalogue.graded(exercise, bank):
        cells = [
            _cell("markdown", heading + "\n\n**Practice, no points.** The book's solutions answer this exercise "
                                        "with the book's numbers; `attnlib.book.exercises.check` says whether your "
                                        "answer is right."),
            _cell("code", f"# {exercise.label}: {exercise.checks}\n{name} = ...\n"
                          f"attnlib.book.exercises.check({exercise.label!r}, {name})"),
        ]
    else:
        task = bank.tasks[exercise.label]
        if task.question is not None:  # the course asks another question than the book's
            heading = (f"### {shown}: {converter.inline(exercise.title)} (`{exercise.label}`)\n\n"
                       f"**The question, as this course asks it.** {task.question}")
        cells = [
            _cell("raw", f"# BEGIN QUESTION\nname: {exercise.label}\npoints: {task.points}"),
            _cell("markdown", f"{_without_practice_check(heading)}\n\n{numbers_line(task, params)}"),
            _cell("raw", "# BEGIN SOLUTION"),
            _cell("code", f"{prompt_line(task, params)}\n"
                          f"# BEGIN SOLUTION NO PROMPT\n{task.code(params)}\n# END SOLUTION\n"
                          f"{name} = answer  # SOLUTION"),
            _cell("raw", "# END SOLUTION"),
            _cell("raw", "# BEGIN TESTS"),
            # the form of the answer, which the hidden test requires too, and no value
            _test(f"test_{name}_is_answered", 0, False, name,
                  f"    from attnlib.book.exercises.assignment import form_problem, is_answered\n"
                  f"    try:\n"
                  f"        problem = (None if is_answered({name}) else 'is not filled in: replace ... by your "
                  f"answer, without NaN') or form_problem({name}, {form!r})\n"
                  f"    except Exception:\n"
                  f"        problem = 'cannot be read as an answer'\n"
                  f"    assert problem is None, '{name} ' + problem"),
            # judged outside this kernel: the grader (course_judge.py) reads the answer as plain data
            _test(f"test_{name}", task.points, True, name,
                  "    pass  # the course's grader judges your answer in its own process, not here\n"),
            _cell("raw", "# END TESTS"), _cell("raw", "# END QUESTION"),
        ]
    if exercise.written:
        cells += _written_question(f"{exercise.label}-written", manual,
                                   f"**In words** (`{exercise.label}`): answer the part of the exercise above that "
                                   "asks for a reason or a comparison.", exercise.solution, converter)
    return cells


def numbers_line(task: tasks.Task, params: dict) -> str:
    return f"**Your numbers.** {task.numbers.format(**params)}"


def precision(task: tasks.Task) -> str:
    """How close the answer must be, in the words the notebook shows."""
    if not task.rtol and not task.atol:
        return "exactly"
    parts = [f"{task.rtol:g} relative" if task.rtol else "", f"{task.atol:g} absolute" if task.atol else ""]
    return "to within " + " or ".join(part for part in parts if part) + ", so give it unrounded"


def prompt_line(task: tasks.Task, params: dict) -> str:
    return f"# {task.label}, with your numbers: {task.prompt.format(**params)} ({precision(task)})"


def chapter_bank(bank: tasks.Bank, labels: list[str]) -> str:
    """The source of ``bank`` with the tasks of ``labels`` only in its ``TASKS``, for a chapter's
    bundle: its helpers stay, other chapters' tasks go."""
    tree = ast.parse(bank.path.read_text())
    lists = [node.value for node in tree.body if isinstance(node, ast.Assign)
             and any(isinstance(target, ast.Name) and target.id == "TASKS" for target in node.targets)]
    if len(lists) != 1 or not isinstance(lists[0], ast.List):
        raise ValueError(f"bank {bank.path} should set TASKS once, to a list of Task(...), got another form: the "
                         "build puts each chapter's tasks alone in its bundle")
    kept = []
    for element in lists[0].elts:
        label = next((arg.value for arg in getattr(element, "args", [])[:1] if isinstance(arg, ast.Constant)),
                     None)
        if not isinstance(label, str):
            raise ValueError(f"bank {bank.path} should list each task as Task(\"label\", ...), got a task at "
                             f"line {element.lineno} whose label is not written there")
        if label in labels:
            kept.append(element)
    lists[0].elts = kept
    return ast.unparse(tree) + "\n"


def personalised(notebook: dict, bank: tasks.Bank, course_seed: int, student: str) -> dict:
    """The student notebook ``notebook`` (made for the reference student) with ``student``'s id and numbers."""
    notebook = json.loads(json.dumps(notebook))
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith(f"{STUDENT_VARIABLE} = "):
            source = student_cell(student)
        for label, task in bank.tasks.items():
            if cell["cell_type"] == "markdown" and f"(`{label}`)" in source and "**Your numbers.** " in source:
                source = source[:source.rindex("**Your numbers.** ")] + numbers_line(
                    task, task.params(course_seed, student))
            if cell["cell_type"] == "code" and source.startswith(f"# {label}, with your numbers: "):
                source = prompt_line(task, task.params(course_seed, student)) + "\n" + source.partition("\n")[2]
        cell["source"] = source
    return notebook


def student_cell(student: str) -> str:
    return (f"{STUDENT_VARIABLE} = {student!r}  # the email your course knows you by: the grader checks it "
            "against your submission\n")


def install_source(ref: str) -> str:
    url, _ = repository()
    return (
        "# Installs attnlib at the commit this assignment was written for, and otter-grader, when they are\n"
        "# missing or attnlib is another commit's (a developer's editable checkout is kept), as in Colab;\n"
        "# torch is never installed or upgraded here.\n"
        "import importlib.metadata, importlib.util, json, subprocess, sys\n"
        "def other_attnlib():\n"
        "    try:\n"
        "        origin = json.loads(importlib.metadata.distribution(\"attnlib\").read_text(\"direct_url.json\") or \"{}\")\n"
        "    except importlib.metadata.PackageNotFoundError:\n"
        "        return False\n"
        "    return not origin.get(\"dir_info\", {}).get(\"editable\") and \\\n"
        f"        origin.get(\"vcs_info\", {{}}).get(\"commit_id\") != \"{ref}\"\n"
        "missing = [spec for name, spec in [(\"attnlib\", \"attnlib[book] @ git+" + url + "@" + ref + "\"),\n"
        f"                                    (\"otter\", \"otter-grader=={OTTER_VERSION}\")]\n"
        "           if importlib.util.find_spec(name) is None or (name == \"attnlib\" and other_attnlib())]\n"
        "if missing:\n"
        "    subprocess.check_call([sys.executable, \"-m\", \"pip\", \"install\", \"--quiet\", *missing])"
    )


PRACTICE_BANNER = (
    "> **Practice assignment, not for credit.** It was built from the book's public example bank: anyone can "
    "compute its answers. An instructor grading for credit builds from a private bank (see the book's page "
    "for instructors).\n\n"
)


def master_notebook(chapter: str, found: list[catalogue.Exercise], bank: tasks.Bank, course_seed: int,
                    ref: str, book: Book, forms: dict[str, dict], show_hidden: bool = False,
                    student: str = "") -> dict:
    """The otter master notebook of ``chapter``, with the numbers of ``student`` (the reference
    notebook's) when the numbers are per student (each student's notebook then gets theirs,
    ``personalised``); "" when the whole course has the same numbers.

    ``show_hidden``: Gradescope shows the hidden tests' results once grades are published (their
    failure text names the exercise, never the answer).
    """
    config = {
        "name": chapter, "init_cell": False, "check_all_cell": False, "run_tests": False,
        "export_cell": {"pdf": False, "instructions": "Run this cell and hand in the file it writes "
                                                      "(in Colab, the notebook it downloads)."},
        "generate": {"pdf": False, "filtering": False, "show_stdout": False, "show_hidden": show_hidden},
        "autograder_files": list(grading.SUPPORT_FILES), "requirements": "requirements.txt",
        # the judging runs in otter's process, never in the student's kernel (course_judge.py)
        "plugins": ["course_judge.CourseJudge"],
        "overwrite_requirements": True, "tests": {"files": False, "ok_format": False},
        # the autograder computes with the Python that computed the references, and has git for
        # requirements.txt's git+ install of attnlib (otter's setup installs no git)
        "python_version": f"{sys.version_info.major}.{sys.version_info.minor}", "environment": "environment.yml",
    }
    title = found[0].chapter_title
    introduction = (
        f"# Assignment: {title}\n\n" + (PRACTICE_BANNER if bank.public_practice else "") +
        f"The exercises of the chapter *{title}*. Work here or in the chapter's notebook, then put each answer "
        "in the cell that names it: the comment above the cell says what the answer is, with your numbers. A "
        "check cell says whether an answer is filled in and of the form asked (a pair, an int), not whether it "
        "is right; the grader decides that with tests you do not see.\n\n"
        "Where an exercise gives **your numbers**, use them instead of the chapter's: the chapter's solutions "
        "answer the chapter's numbers only. Give every number to full precision, as Python computes it: do not "
        "round (the comment above each answer cell says how close it must be; 1e-05 relative is 5 significant "
        "digits, so a rounded value fails). A SymPy answer is compared by its values at a few points of its "
        "symbols, to the same precision; exact fractions (`sp.Rational(1, 3)`) are always safe. Exercises marked "
        "*practice* carry no points. Questions marked *in words* are read and graded by hand."
        + ("\n\nThis notebook's numbers are yours: other students have other ones. Hand in your own notebook, "
           f"with `{STUDENT_VARIABLE}` as it is." if student else "")
    )
    cells = [_cell("raw", "# ASSIGNMENT CONFIG\n" + yaml.safe_dump(config, sort_keys=False)),
             _cell("markdown", introduction),
             _cell("code", install_source(ref)),
             # otter's own first cell would import otter before the cell above installs it, and otter's
             # Notebook cannot check or export in Colab: attnlib's stands in for it there
             _cell("code", f"import attnlib.book.exercises.assignment\n"
                           f"grader = attnlib.book.exercises.assignment.notebook({chapter + '.ipynb'!r})"),
             *([_cell("code", student_cell(student))] if student else []),
             _cell("code", tasks.setup_code(chapter[:2]))]
    converter = Converter(book, f"{catalogue.CHAPTERS.relative_to(ROOT).as_posix()}/{chapter}", book_url())
    for exercise in found:
        task = bank.tasks.get(exercise.label)
        cells += question_cells(exercise, bank, task.params(course_seed, student) if task else None,
                                forms.get(exercise.label), converter)
    for number, cell in enumerate(cells):
        cell["id"] = f"cell-{number}"
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                        "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def requirements(ref: str) -> str:
    """What the autograder's machine installs: attnlib with its book extra (the checkers use NumPy and
    SymPy); attnlib does not list torch, so it is named here, from PyTorch's CPU index (grading needs
    no GPU, and the CUDA build is gigabytes); torch, NumPy and SymPy at the versions that computed
    and checked the answer key here."""
    url, _ = repository()
    return (f"--extra-index-url https://download.pytorch.org/whl/cpu\ntorch=={torch.__version__.split('+')[0]}\n"
            f"numpy=={np.__version__}\nsympy=={sp.__version__}\n"
            f"attnlib[book] @ git+{url}@{ref}\notter-grader=={OTTER_VERSION}\n")


# otter merges this into the conda environment of its autograder
AUTOGRADER_ENVIRONMENT = {"name": "otter-env", "channels": ["conda-forge"], "dependencies": ["git"]}


# --- pinning: the ref the autograder installs is the library that computed the answers --------

def _git(*args: str) -> str | None:
    """``git args`` in the book's repository; its output, or None when git fails."""
    result = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


_FULL_HASH = re.compile(r"[0-9a-f]{40}")


def resolve_ref(ref: str, allow_branch: bool) -> str:
    """The commit that ``ref`` names: a tag or a full (40-hex) commit hash, which cannot move; a branch
    only with ``allow_branch``. Anything else (a short hash, ``origin/main``, ``main~0``) is refused."""
    commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit is None:
        raise ValueError(f"ref should be a tag or commit of the book's repository, got {ref!r}, which git "
                         f"does not know there (fetch it, or check the spelling)")
    if _FULL_HASH.fullmatch(ref) or _git("show-ref", "--verify", "--quiet", f"refs/tags/{ref}") is not None:
        return commit
    is_branch = any(_git("show-ref", "--verify", "--quiet", f"refs/{kind}/{ref}") is not None
                    for kind in ("heads", "remotes/origin"))
    if is_branch and allow_branch:
        warnings.warn(f"building from the branch {ref!r} (now {commit[:12]}): the autograder installs that "
                      "commit; tag it for a course", stacklevel=2)
        return commit
    if is_branch:
        raise ValueError(f"ref should be a tag or commit, got the branch {ref!r}: a branch moves, so the "
                         "autograder would install another library than the one that computed the answers "
                         "(pass --allow-branch to build from its current commit anyway)")
    raise ValueError(f"ref should be a tag or a full 40-hex commit hash, got {ref!r}, which git reads as "
                     f"{commit[:12]} today but is neither: a short hash can become ambiguous and a revision "
                     f"expression can move; pass {commit}")


def _blob_id(data: bytes) -> str:
    """The id git gives a file with ``data`` in it."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def installed_differences(commit: str) -> list[str]:
    """The files of the installed attnlib that differ from ``commit``'s (empty when it is that commit)."""
    package = pathlib.Path(attnlib.__file__).resolve().parent
    listing = _git("ls-tree", "-r", commit, "--", "attnlib")
    if listing is None:
        raise ValueError(f"commit should be a commit of the book's repository, got {commit!r}")
    committed = {}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        committed[path.removeprefix("attnlib/")] = meta.split()[2]
    installed = {str(path.relative_to(package)): path for path in package.rglob("*")
                 if path.is_file() and "__pycache__" not in path.parts}
    differences = [f"{name}: changed" for name, blob in sorted(committed.items())
                   if name in installed and _blob_id(installed[name].read_bytes()) != blob]
    differences += [f"{name}: missing" for name in sorted(committed) if name.endswith(".py") and name not in installed]
    differences += [f"{name}: not in {commit[:12]}" for name in sorted(installed)
                    if name.endswith(".py") and name not in committed]
    return differences


def check_installed(commit: str) -> None:
    """Refuse to build when the installed attnlib is not ``commit``: its answers would not be the autograder's."""
    differences = installed_differences(commit)
    if differences:
        shown = "; ".join(differences[:5]) + (f"; and {len(differences) - 5} more" if len(differences) > 5 else "")
        raise ValueError(f"the installed attnlib ({pathlib.Path(attnlib.__file__).parent}) should be the ref the "
                         f"autograder installs, {commit[:12]}, got other files: {shown}. Check out that ref "
                         "(git checkout REF) or build with the ref you have")


# --- the build --------------------------------------------------------------------------------

def read_roster(path: pathlib.Path, reference_student: str = REFERENCE_STUDENT) -> list[str]:
    """The students of the roster file ``path``: one email or id a line (# starts a comment), or a
    CSV with an ``Email`` column (Gradescope's roster export)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"roster should be a file with one student's email a line, got {str(path)!r}, "
                         "which is not a file")
    lines = [line.split("#")[0].strip() for line in path.read_text().splitlines()]
    lines = [line for line in lines if line]
    if lines and "," in lines[0]:
        rows = list(csv.DictReader(lines))
        column = next((name for name in rows[0] if name.strip().lower() == "email"), None) if rows else None
        if column is None:
            raise ValueError(f"roster {path} should have an Email column, got the columns {lines[0]!r}")
        lines = [row[column] for row in rows if row[column]]
    students = [tasks.student_key(line) for line in lines]
    if not students or len(set(students)) != len(students) or reference_student in students:
        raise ValueError(f"roster {path} should name each student once (and not {reference_student!r}, "
                         f"the reference notebook's), got {len(students)} lines, {len(set(students))} different")
    return students


def build(out: pathlib.Path, course_seed: int, chapters: list[str] | None = None, ref: str | None = None,
          bank: pathlib.Path | None = None, allow_branch: bool = False, show_hidden: bool = False,
          html: pathlib.Path = ROOT / "_build" / "html", roster: pathlib.Path | None = None,
          reference_student: str = REFERENCE_STUDENT, max_shared_pairs: int | None = None,
          strict: bool = False, check_only: bool = False) -> list[pathlib.Path]:
    """Build the assignments of ``chapters`` (all when None) into ``out``; returns the chapters' folders.

    A bank for credit (PUBLIC_PRACTICE false) needs ``ref``, a tag or full commit hash, the installed
    attnlib at that commit, and a ``roster``: each student gets numbers of their own, drawn with
    the course seed and their email, in ``NN_topic/student/EMAIL/NN_topic.ipynb``. The public example
    bank (the default) builds practice assignments, the same numbers for everyone, from ``ref`` or
    the book's ``repository.branch``, unchecked. ``html`` is the built book (``make book``), which
    numbers the cross-references, equations and citations of the exercises' text. The reference
    notebook has the numbers of ``reference_student`` (on Gradescope, the instructor's email, which
    *Test Autograder* submits as).
    """
    from otter.assign import main as otter_assign

    loaded = tasks.load_bank(bank or tasks.EXAMPLE_BANK)
    example = tasks.load_bank(tasks.EXAMPLE_BANK)
    if loaded.public_practice:
        ref = ref or repository()[1]
        commit = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        pin = ref
        print(f"{loaded.path.name} is public practice: the assignments say so and are not for credit",
              file=sys.stderr)
    else:
        if ref is None:
            raise ValueError(f"ref should be the tag or commit the autograder installs for the graded bank "
                             f"{loaded.path}, got none (pass --ref, or REF= to make)")
        if roster is None:
            raise ValueError(f"roster should be the file of the course's students (one email a line) for the "
                             f"graded bank {loaded.path}, got none (pass --roster, or ROSTER= to make): each "
                             "student gets numbers of their own")
        commit = resolve_ref(ref, allow_branch)
        pin = commit  # the commit itself, which no later push can move
        check_installed(commit)
        if not _git("branch", "-r", "--contains", commit):
            print(f"warning: no remote branch of this clone holds {commit[:12]}: the autograder installs it from "
                  f"{repository()[0]}, so it must be a commit of that public repository", file=sys.stderr)
    reference_student = tasks.student_key(reference_student)
    students = read_roster(roster, reference_student) if roster is not None and not loaded.public_practice else []
    per_student = bool(students)
    keyed = [reference_student, *students] if per_student else [""]
    selected = [path for path in catalogue.chapter_paths() if catalogue.chapter_exercises(path)
                and not (chapters and path.stem[:2] not in chapters)]
    graded = [exercise.label for path in selected for exercise in catalogue.chapter_exercises(path)
              if catalogue.graded(exercise, loaded)]
    # every key of every chapter, checked before any notebook is written
    checked = answer_keys.check_bank(loaded, example, course_seed, graded, keyed, students, max_shared_pairs, strict)
    for shared in checked.shared:
        print(shared.line(), file=sys.stderr)
    if check_only:
        return []
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "shared.csv", "w", newline="") as table:
        csv.writer(table).writerows([("task", "students", "distinct answers", "pairs sharing a scoring answer",
                                      "students with such a classmate"),
                                     *[(x.label, x.students, x.distinct, x.pairs, x.sharing) for x in checked.shared]])
    book = Book(html)
    rows = catalogue.rows(loaded)
    built = []
    for path in selected:
        if not any(int(row[3]) + int(row[4]) for row in rows if row[1] == path.stem):
            # no task of the bank and no question in words: an assignment would score every student 0 of 0
            print(f"{path.stem}: nothing to grade (0 points automatic, 0 by hand), so no assignment",
                  file=sys.stderr)
            continue
        found = catalogue.chapter_exercises(path)
        source = out / "source" / path.stem
        source.mkdir(parents=True, exist_ok=True)
        references = {exercise.label: checked.keys[exercise.label] for exercise in found
                      if catalogue.graded(exercise, loaded)}
        forms = {label: grading.form_of(grading.decode(key[keyed[0]]["answer"])) for label, key in references.items()}
        master = master_notebook(path.stem, found, loaded, course_seed, pin, book, forms, show_hidden,
                                 reference_student if per_student else "")
        (source / path.name).write_text(json.dumps(master, indent=1) + "\n")
        shutil.copy(HERE / "grading.py", source / "grading.py")
        shutil.copy(HERE / "tasks.py", source / "tasks.py")
        # the chapter's tasks and their keys only: nothing from which another chapter's numbers, or
        # the course seed, follow
        (source / grading.BANK).write_text(chapter_bank(loaded, list(references)))
        (source / grading.KEYS).write_text(json.dumps({
            "per_student": per_student, "keys": {label: tasks.task_key(course_seed, label) for label in references},
            "forms": forms}, indent=1) + "\n")
        (source / "requirements.txt").write_text(requirements(pin))
        (source / "environment.yml").write_text(yaml.safe_dump(AUTOGRADER_ENVIRONMENT, sort_keys=False))
        result = out / path.stem
        shutil.rmtree(result, ignore_errors=True)
        with redirect_stdout(sys.stderr):
            otter_assign(str(source / path.name), str(result), no_pdfs=True, no_run_tests=True)
        # the build's record of each student's answers, for the instructor (the bundle computes its own)
        (source / grading.REFERENCES).write_text(json.dumps(references, indent=1) + "\n")
        (bundle,) = (result / "autograder").glob("*-autograder_*.zip")
        if references:
            # otter names the bundle with the time it was built; one stable name is easier to hand on
            bundle = bundle.rename(result / "autograder" / "autograder.zip")
            with zipfile.ZipFile(bundle, "a") as archive:  # beside run_otter.py, which imports the plugin
                archive.write(HERE / "course_judge.py", "course_judge.py")
        else:  # otter's autograder fails on a notebook without tests; the written answers are graded by hand
            bundle.unlink()
            print(f"{path.stem}: no exercise of the bank, so no autograder.zip: written answers only",
                  file=sys.stderr)
        if per_student:
            template = result / "student" / path.name
            blank = json.loads(template.read_text())
            for student in students:
                (result / "student" / student).mkdir()
                (result / "student" / student / path.name).write_text(
                    json.dumps(personalised(blank, loaded, course_seed, student), indent=1) + "\n")
            # the blank notebook has the reference's numbers: the instructor's, never to hand out
            template.rename(result / "autograder" / f"blank_{path.name}")
            for support in (result / "student").glob("*"):
                if support.is_file():
                    support.unlink()
        built.append(result)
    with open(out / "catalogue.csv", "w", newline="") as table:
        csv.writer(table).writerows([catalogue.COLUMNS, *rows])
    with open(out / "points.csv", "w", newline="") as table:
        totals = [("assignment", "auto", "by hand", "total")]
        for result in built:
            auto = sum(int(row[3]) for row in rows if row[1] == result.name)
            manual = sum(int(row[4]) for row in rows if row[1] == result.name)
            totals.append((result.name, str(auto), str(manual), str(auto + manual)))
        csv.writer(table).writerows(totals)
    # everything a regrade needs to build the same bundles and notebooks again (keep it private: the seed)
    (out / "build.json").write_text(json.dumps({
        "course_seed": course_seed, "ref": ref, "commit": commit, "bank": str(loaded.path),
        "bank_sha256": hashlib.sha256(loaded.path.read_bytes()).hexdigest(),
        "public_practice": loaded.public_practice, "chapters": [path.stem for path in selected],
        "roster": str(roster) if roster is not None else None,
        "roster_sha256": hashlib.sha256(pathlib.Path(roster).read_bytes()).hexdigest() if roster else None,
        "students": students, "reference_student": reference_student, "show_hidden": show_hidden,
        "max_shared_pairs": max_shared_pairs, "strict": strict, "otter_grader": OTTER_VERSION,
        "python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__,
        "sympy": sp.__version__}, indent=1) + "\n")
    return built


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python assignments/build.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--bank", type=pathlib.Path, help="the question bank, a .py file kept outside the public "
                                                          "repository (default: the public example bank, practice)")
    parser.add_argument("--seed", type=int, default=0, help="the course seed that draws each exercise's numbers")
    parser.add_argument("--chapters", nargs="*", help="two-digit chapter numbers (default: all)")
    parser.add_argument("--ref", help="the tag or commit of attnlib the autograder installs; the installed attnlib "
                                      "must be that commit (default for the example bank: repository.branch in "
                                      "_config.yml)")
    parser.add_argument("--allow-branch", action="store_true", help="accept a branch as --ref, with a warning")
    parser.add_argument("--html", type=pathlib.Path, default=ROOT / "_build" / "html",
                        help="the built book (make book), which numbers the exercises' cross-references")
    parser.add_argument("--roster", type=pathlib.Path,
                        help="the students of a graded course, one email a line (or Gradescope's roster CSV): "
                             "each gets numbers of their own")
    parser.add_argument("--reference-student", default=REFERENCE_STUDENT,
                        help="whose numbers the reference notebook has: on Gradescope, your own email, which "
                             "Test Autograder submits as (default: %(default)s)")
    parser.add_argument("--show-hidden", action="store_true",
                        help="show the hidden tests' results on Gradescope once grades are published")
    parser.add_argument("--max-shared-pairs", type=int,
                        help="refuse a task for which more pairs of roster students than this share a scoring "
                             "answer (default: no bound; the build reports the pairs of each task)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse what the build otherwise warns about (no check, no second, a loose tolerance, "
                             "the book's question, a number the notebook never prints)")
    parser.add_argument("--check", action="store_true",
                        help="check the bank's answer keys for the roster and report shared answers, in seconds, "
                             "and build nothing")
    args = parser.parse_args(argv)
    if args.seed < SHORT_SEED:
        print(f"warning: a course seed under {SHORT_SEED:.0e} is short: choose one with python -c \"import secrets; "
              "print(secrets.randbits(63))\" and keep it for the whole course", file=sys.stderr)
    try:
        built = build(args.out, args.seed, args.chapters, args.ref, args.bank, args.allow_branch, args.show_hidden,
                      args.html, args.roster, args.reference_student, args.max_shared_pairs, args.strict,
                      args.check)
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    if args.check:
        print("the bank's answer keys are sound for this roster")
        return
    for result in built:
        print(f"wrote {result}")
    print(f"{args.out / 'source'} holds the solutions and the course's answers: never hand it out")


if __name__ == "__main__":
    main()
