"""The graded assignments: otter-grader gives the reference solutions full marks and a blank
notebook zero, without crashing; no hidden test, answer or failure text reaches a student; a
private question bank's answers are computed by nothing public; the strict matcher turns away
the type tricks of the course review; a build is pinned to the attnlib that computed its answers;
a kernel that presents itself as Colab runs an assignment and writes the file to hand in.

Grading runs otter without Docker, in this environment, as ``otter run`` does.
"""
import csv
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import zipfile

import nbformat
import numpy as np
import pytest
import torch
import yaml
from nbclient import NotebookClient
from otter.api import grade_submission

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "assignments"), str(ROOT / "tools")]
import answer_keys  # noqa: E402
import build  # noqa: E402
import jupyter_edition  # noqa: E402
import catalogue  # noqa: E402
import grading  # noqa: E402
import tasks  # noqa: E402

import attnlib.book.exercises  # noqa: E402
from attnlib.book.exercises.assignment import answer_name, is_answered  # noqa: E402

EXAMPLE = tasks.load_bank(tasks.EXAMPLE_BANK)
WITH_EXERCISES = [path.stem for path in catalogue.chapter_paths() if catalogue.chapter_exercises(path)]
GRADED = [chapter for chapter in WITH_EXERCISES
          if any(catalogue.graded(e, EXAMPLE)
                 for e in catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb"))]
COURSE_SEED = 2026
# Five more courses. Each chapter's reference notebook is graded with otter once, under one of the
# six seeds in turn (COURSE_SEED's from the build the other tests read), so that the references
# are shown to earn full marks for six draws of the numbers across the chapters; a chapter graded
# under two seeds would run the same build and grading code once more. (A blank notebook scores
# nothing whatever its numbers: test_a_blank_notebook_gets_zero grades each chapter's once.)
SAMPLE_SEEDS = [11, 222, 3333, 44444, 555555]
SEEDS = [COURSE_SEED, *SAMPLE_SEEDS]


def exercises(chapter: str) -> list[catalogue.Exercise]:
    return catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb")


def auto_points(chapter: str, bank: tasks.Bank = EXAMPLE) -> int:
    return sum(catalogue.auto_points(e, bank) for e in exercises(chapter))


def grade(notebook: pathlib.Path, chapter: pathlib.Path):
    return grade_submission(str(notebook), str(chapter / "autograder" / "autograder.zip"), quiet=True)


def references(out: pathlib.Path, chapter: str, student: str = "") -> dict:
    """Label -> the build's reference for ``student`` ("": a practice build's, the same for everyone)."""
    by_label = json.loads((out / "source" / chapter / grading.REFERENCES).read_text())
    return {label: by_student[student] for label, by_student in by_label.items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory, book_html):
    out = tmp_path_factory.mktemp("assignments")
    return out, {result.name: result for result in build.build(out, COURSE_SEED, html=book_html)}


def test_every_chapter_with_exercises_has_an_assignment(built):
    _, results = built
    assert sorted(results) == sorted(WITH_EXERCISES)
    for result in results.values():
        assert (result / "student" / f"{result.name}.ipynb").is_file()
        assert (result / "autograder" / "autograder.zip").is_file() == (result.name in GRADED)


def assert_full_marks(graded, chapter: str) -> None:
    assert graded.possible == auto_points(chapter) > 0
    assert graded.total == graded.possible, graded.summary()


def assert_zero_for_every_question(graded, chapter: str) -> None:
    labels = [e.label for e in exercises(chapter) if catalogue.graded(e, EXAMPLE)]
    assert sorted(graded.results) == sorted(labels), "every bank question is graded, none crashes the grader"
    assert graded.total == 0 and graded.possible == auto_points(chapter)


# GRADED[0]'s reference and blank notebooks are graded by the Colab test below, which hands in
# those same notebooks from a kernel that presents itself as Colab
@pytest.mark.parametrize("chapter", GRADED[len(SEEDS)::len(SEEDS)])
def test_reference_solutions_get_full_marks(chapter, built):
    _, results = built
    assert_full_marks(grade(results[chapter] / "autograder" / f"{chapter}.ipynb", results[chapter]), chapter)


@pytest.mark.parametrize("chapter", GRADED[1:])
def test_a_blank_notebook_gets_zero(chapter, built):
    _, results = built
    assert_zero_for_every_question(grade(results[chapter] / "student" / f"{chapter}.ipynb", results[chapter]), chapter)


@pytest.mark.parametrize("seed,chapters", [(seed, GRADED[i::len(SEEDS)]) for i, seed in enumerate(SEEDS) if i])
def test_reference_solutions_get_full_marks_for_other_seeds(seed, chapters, tmp_path, book_html):
    results = {result.name: result for result in build.build(tmp_path, seed, [c[:2] for c in chapters], html=book_html)}
    for chapter in chapters:
        reference = grade(results[chapter] / "autograder" / f"{chapter}.ipynb", results[chapter])
        assert reference.total == reference.possible == auto_points(chapter) > 0, (seed, reference.summary())


@pytest.mark.parametrize("task", EXAMPLE.tasks.values(), ids=lambda t: t.label)
def test_no_course_is_answered_by_the_book(task):
    """The book's public solution, run with the book's numbers, answers none of five courses."""
    book = tasks.run(task, task.book)
    drawn = [task.params(seed) for seed in SEEDS]
    assert all(params != task.book for params in drawn)
    assert len({json.dumps(p, sort_keys=True) for p in drawn}) >= 3, "the seed draws from ranges, not a few choices"
    for params in drawn:
        reference = grading.decode(grading.encode(tasks.run(task, params)))
        assert not grading.matches(book, reference, task.rtol, task.atol, task.also_at), params


@pytest.mark.parametrize("chapter", WITH_EXERCISES)
def test_the_student_notebook_holds_no_hidden_test_and_no_reference(chapter, built):
    out, results = built
    text = (results[chapter] / "student" / f"{chapter}.ipynb").read_text()
    notebook = json.loads(text)
    assert "matches_reference" not in text and "BEGIN SOLUTION" not in text and "answer = " not in text
    assert not (results[chapter] / "student" / "grading.py").exists()
    assert not (results[chapter] / "student" / grading.REFERENCES).exists()
    for label, reference in (references(out, chapter) if chapter in GRADED else {}).items():
        value = grading.decode(reference["answer"])
        if isinstance(value, int) and value > 1000:  # a number long enough to be found only as itself
            assert str(value) not in text, label
    written = [e for e in exercises(chapter) if e.written]
    answer_cells = [c for c in notebook["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])
                    and c["cell_type"] == "markdown"]
    assert len(answer_cells) == len(written), "one written-answer cell per exercise that asks why"


@pytest.mark.parametrize("chapter", WITH_EXERCISES)
def test_the_notebooks_hold_no_book_markup(chapter, built):
    """The exercises' text and solutions are converted as the Jupyter edition is: cross-references,
    equations and citations are links into the published book, never raw MyST."""
    _, results = built
    for notebook in (results[chapter] / "student" / f"{chapter}.ipynb", results[chapter] / "autograder" / f"{chapter}.ipynb"):
        converted = json.loads(notebook.read_text())
        assert not jupyter_edition.leftovers(converted), (notebook.name, jupyter_edition.leftovers(converted))
        assert "the book's `" not in notebook.read_text()
        assert f"### Exercise {int(chapter[:2])}.1: " in notebook.read_text(), "exercises carry the book's numbers"


@pytest.mark.parametrize("chapter", GRADED)
def test_graded_questions_send_no_one_to_the_practice_checker(chapter, built):
    """attnlib.book.exercises.check knows the book's numbers: for a course's numbers it would say "not yet"."""
    _, results = built
    notebook = json.loads((results[chapter] / "student" / f"{chapter}.ipynb").read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if "**Your numbers.**" in source:
            assert "attnlib.book.exercises.check(" not in source, source


def test_practice_exercises_carry_no_points_and_say_so(built):
    """An exercise the book answers publicly gets attnlib's check and no points, in the catalogue too."""
    out, results = built
    with open(out / "catalogue.csv") as table:
        rows = {row[0]: row for row in list(csv.reader(table))[1:]}
    for exercise in catalogue.all_exercises():
        if exercise.checked and not catalogue.graded(exercise, EXAMPLE):
            assert rows[exercise.label][3] == "0", exercise.label
            assert rows[exercise.label][5] == ("self-check" if attnlib.book.exercises.CHECKERS[exercise.label].self_check
                                               else "practice"), exercise.label
            student = (results[exercise.chapter] / "student" / f"{exercise.chapter}.ipynb").read_text()
            assert f"attnlib.book.exercises.check({exercise.label!r}" in student


def test_the_points_table_counts_the_written_answers(built):
    out, _ = built
    with open(out / "points.csv") as table:
        rows = {row[0]: row for row in list(csv.reader(table))[1:]}
    for chapter in WITH_EXERCISES:
        manual = sum(catalogue.manual_points(e, EXAMPLE) for e in exercises(chapter))
        assert rows[chapter][1:] == [str(auto_points(chapter)), str(manual), str(auto_points(chapter) + manual)]


def test_example_assignments_say_they_are_practice(built):
    _, results = built
    for result in results.values():
        assert "Practice assignment, not for credit" in (result / "student" / f"{result.name}.ipynb").read_text()


# --- a private bank: what an instructor grading for credit builds ------------------------------

# A private bank made as the instructor page says: for each task kept, another question than the
# example's (all layers' scores and weights; a budget that holds both), with ranges of its own,
# the constraints of its numbers and a second computation.
PRIVATE_BANK = '''
import math

from tasks import Task

PUBLIC_PRACTICE = False
WRITTEN_POINTS = {"ex-07-extrapolate": 3}
BYTES = {"float16": 2, "float32": 4}


def _largest_fitting(budget, per_n_squared):
    n = int(math.sqrt(budget / per_n_squared))
    while (n + 1) ** 2 * per_n_squared <= budget:
        n += 1
    while n ** 2 * per_n_squared > budget:
        n -= 1
    return n


def _check(condition, constraint):
    assert condition, constraint


TASKS = [
    Task("ex-07-layer-bytes", points=3,
         question="Training keeps each layer's scores and its softmax weights for the backward pass. How many bytes "
                  "do all layers' scores and weights take?",
         draw=lambda rng: {"batch": rng.randint(17, 40), "heads": rng.randint(65, 99), "n": 512 * rng.randint(17, 33),
                           "dtype": rng.choice(["float16", "float32"]), "layers": rng.randint(3, 9)},
         book={"batch": 4, "heads": 32, "n": 4096, "dtype": "bfloat16", "layers": 1},
         check=lambda p: _check(p["dtype"] in BYTES and p["layers"] > 1, "a dtype of the book, several layers"),
         second=lambda p: 2 * p["layers"] * p["batch"] * p["heads"] * p["n"] ** 2 * BYTES[p["dtype"]],
         numbers="Use {layers} layers of {heads} heads, a batch of {batch} sequences of {n} tokens, in {dtype}; "
                 "training keeps each layer's scores and softmax weights for the backward pass.",
         prompt="an int: the bytes of the scores and weights {layers} layers keep (batch {batch}, {heads} heads, "
                "n = {n}, {dtype})",
         solution="answer = 2 * {layers} * {batch} * {heads} * {n} ** 2 * torch.finfo(torch.{dtype}).bits // 8"),
    Task("ex-07-max-length",
         question="What is the largest sequence length whose scores and softmax weights, held at once, fit in each "
                  "budget?",
         draw=lambda rng: (lambda small: {"heads": rng.randint(2, 5), "batch": rng.randint(1, 3), "small": small,
                                          "large": 2 * small, "dtype": "float16"})(rng.randint(100000, 900000)),
         book={"heads": 16, "batch": 2, "small": 24, "large": 48, "dtype": "float16"},
         check=lambda p: _check(p["small"] < p["large"], "the smaller budget first"),
         second=lambda p: tuple(_largest_fitting(gib * 2**30, 2 * p["batch"] * p["heads"] * 2)
                                for gib in (p["small"], p["large"])),
         numbers="Use {heads} heads, a batch of {batch}, {dtype}, and budgets of {small} GiB and {large} GiB, "
                 "which must hold the scores and the softmax weights at once.",
         prompt="a pair of ints: the largest n whose scores and weights fit in {small} GiB and in {large} GiB",
         solution="answer = tuple(math.isqrt(gib * 2**30 // (2 * {batch} * {heads} * 2)) for gib in ({small}, {large}))"),
]
'''
STUDENTS = ["alice@uni.edu", "bob@uni.edu", "carol@uni.edu"]


def head_commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def private(tmp_path_factory, book_html):
    """A private bank written here, outside the repository, built at the checked-out commit for
    three students (one of them written with a capital, as rosters have them)."""
    instructor = tmp_path_factory.mktemp("instructor")
    bank, roster = instructor / "bank.py", instructor / "roster.txt"
    bank.write_text(PRIVATE_BANK)
    roster.write_text("# the course's students\nalice@uni.edu\nBob@uni.edu\ncarol@uni.edu\n")
    out = tmp_path_factory.mktemp("private")
    # chapter 3 has no task of this bank and no question in words: nothing to grade, so no assignment
    [result] = build.build(out, COURSE_SEED, ["03", "07"], ref=head_commit(), bank=bank, html=book_html,
                           roster=roster)
    return bank, out, result


def test_a_chapter_with_nothing_to_grade_gets_no_assignment(private):
    _, out, result = private
    assert result.name == "07_cost_of_attention"
    assert not (out / "03_variance_monte_carlo").exists()
    assert "03_variance_monte_carlo" not in (out / "points.csv").read_text()


def student_notebook(result: pathlib.Path, student: str) -> dict:
    return json.loads((result / "student" / student / f"{result.name}.ipynb").read_text())


def with_answers(notebook: dict, answers: dict[str, str], first: str = "") -> dict:
    """``notebook`` with each answer cell's ``...`` replaced by the source ``answers[label]``, and ``first``
    (if any) run before the first answer."""
    notebook = json.loads(json.dumps(notebook))
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        for label, code in answers.items():
            if source.startswith(f"# {label}, with your numbers: "):
                prefix = first + "\n" if first and label == next(iter(answers)) else ""
                source = source.replace(f"{answer_name(label)} = ...", f"{prefix}{answer_name(label)} = {code}")
        cell["source"] = source
    return notebook


def literal(value) -> str:
    """Python source that gives ``value`` (a reference) as a NumPy array where it is a tuple: the natural
    container the review found scored 0."""
    if isinstance(value, tuple):
        return f"np.array({list(value)!r})"
    return repr(value)


def test_a_private_bank_grades_for_credit(private):
    import grade

    bank, out, result = private
    loaded = tasks.load_bank(bank)
    chapter = result.name
    bundle = result / "autograder" / "autograder.zip"
    reference = grade.grade_as(result / "autograder" / f"{chapter}.ipynb", bundle, build.REFERENCE_STUDENT)
    assert reference.possible == auto_points(chapter, loaded) == 3 + 2
    assert reference.total == reference.possible, reference.summary()
    blank = result / "autograder" / f"blank_{chapter}.ipynb"
    assert grade.grade_as(blank, bundle, build.REFERENCE_STUDENT).total == 0
    assert sorted(path.name for path in (result / "student").iterdir()) == STUDENTS, \
        "a notebook per student, none for the reference's numbers"
    for student in STUDENTS:
        text = (result / "student" / student / f"{chapter}.ipynb").read_text()
        assert "Practice assignment" not in text and f"student_id = {student!r}" in text
        # the question the course asks replaces the book's, and the precision asked is stated
        assert "The question, as this course asks it.** Training keeps each layer" in text
        assert "to within" not in text and "(exactly)" in text, "integer answers are asked exactly"
    with open(out / "points.csv") as table:
        assert f"{chapter},5,3,8" in table.read(), "3 + 2 auto points; the bank's 3 for ex-07-extrapolate by hand"


def test_each_student_gets_numbers_of_their_own(private):
    """Drawn with the course seed and the student's email: every task gives the three students three
    different sets of numbers, which their notebooks show, and so three different answers."""
    bank, out, result = private
    loaded = tasks.load_bank(bank)
    notebooks = {student: json.dumps(student_notebook(result, student)) for student in STUDENTS}
    for label, task in loaded.tasks.items():
        drawn = {student: task.params(COURSE_SEED, student) for student in STUDENTS}
        assert len({json.dumps(p, sort_keys=True) for p in drawn.values()}) == len(STUDENTS), label
        for student, params in drawn.items():
            assert json.dumps(task.numbers.format(**params))[1:-1] in notebooks[student], (label, student)
        answers = {json.dumps(references(out, result.name, student)[label]["answer"]) for student in STUDENTS}
        assert len(answers) == len(STUDENTS), label
    assert task.params(COURSE_SEED, "bob@uni.edu") == task.params(COURSE_SEED, tasks.student_key(" Bob@uni.edu"))


# The review's grader-replacing cheats (2026-12-04, P1-1 and P1-2), all in one notebook: importlib
# reached through getattr; pathlib.Path.resolve pointing grading.py at a fake; runpy on grading.py;
# NumPy's, math's and SymPy's comparisons replaced; a float whose __float__ reads the expected value
# from the caller's frame; a SymPy expression whose difference from anything is 0; and an answer
# whose __repr__ raises the text of the bank, which the visible check printed back.
CHEATS = textwrap.dedent('''\
    import math, pathlib, pkgutil, runpy, sys
    import numpy as np
    import sympy as sp
    _u = getattr(getattr(pkgutil, 'import' + 'lib'), 'util')
    _spec = _u.spec_from_file_location
    def _fake_spec(name, location=None, *a, **k):
        spec = _spec(name, location, *a, **k)
        class _Loader:
            def create_module(self, spec): return None
            def exec_module(self, module):
                module.matches_reference = module.matches = lambda *a, **k: True
        spec.loader = _Loader()
        return spec
    _u.spec_from_file_location = _fake_spec
    _fake = pathlib.Path('fake.py')
    _fake.write_text('def matches(*a, **k):\\n    return True\\nmatches_reference = matches\\n')
    _resolve = pathlib.Path.resolve
    pathlib.Path.resolve = lambda self, strict=False: _resolve(_fake) if self.name == 'gra' + 'ding.py' else _resolve(self)
    np.allclose = np.array_equal = lambda *a, **k: True
    math.isclose = lambda *a, **k: True
    sp.simplify = lambda *a, **k: 0
    try:
        _stolen = runpy.run_path('gra' + 'ding.py')
    except Exception:
        _stolen = {}
    def _expected():
        frame = sys._getframe()
        while frame is not None:
            for name in ('expected', 'reference'):
                if name in frame.f_locals:
                    return frame.f_locals[name]
            frame = frame.f_back
        raise LookupError('no reference in any frame')
    class Num(float):
        def __float__(self): return float(_expected())
        def __int__(self): return int(_expected())
        def __index__(self): return int(_expected())
        def __array__(self, *a, **k): return np.asarray(_expected())
        def __eq__(self, other): return True
        __hash__ = float.__hash__
    class Z(sp.Expr):
        free_symbols = set()
        def subs(self, *a, **k): return self
        def __sub__(self, other): return sp.S.Zero
    class Leak:
        def __repr__(self):
            texts = []
            for name in ('grading_bank.py', 'grading_keys.json', '../source/files/grading_bank.py', 'tasks.py'):
                try:
                    texts.append(open(name).read())
                except OSError:
                    pass
            raise RuntimeError('LEAKED:' + ''.join(texts))
        __str__ = __repr__
    ''')
CHEAT_ANSWERS = ["Num(0)", "(Z(), Leak())"]
# The review's P1-3: a classmate's notebook, plus a line that rewrites who submitted
CLAIMS_ALICE = textwrap.dedent('''\
    import json, os, pathlib
    pathlib.Path('..', 'submission_' + 'metadata.json').write_text(json.dumps({'users': [{'email': 'alice@uni.edu'}]}))
    getattr(os, 'envi' + 'ron')['ATTNLIB_' + 'STUDENT'] = 'alice@uni.edu'
    ''')


@pytest.fixture(scope="module")
def graded_folder(private, tmp_path_factory):
    """A folder of three submissions graded by assignments/grade.py: alice's own right answers given as
    NumPy arrays; bob handing in alice's notebook, with the lines that claim to be alice; carol
    replacing the grading module as the first review did, with every cheat of the last review."""
    import grade

    _, out, result = private
    chapter = result.name
    alice = references(out, chapter, "alice@uni.edu")
    honest = with_answers(student_notebook(result, "alice@uni.edu"),
                          {label: literal(grading.decode(r["answer"])) for label, r in alice.items()})
    copied = with_answers(student_notebook(result, "alice@uni.edu"),
                          {label: literal(grading.decode(r["answer"])) for label, r in alice.items()}, first=CLAIMS_ALICE)
    cheat = with_answers(student_notebook(result, "carol@uni.edu"), dict(zip(alice, CHEAT_ANSWERS)),
                         first="import sys, types; sys.modules['grading'] = "
                               "types.SimpleNamespace(matches_reference=lambda *a: True)\n" + CHEATS)
    submissions = tmp_path_factory.mktemp("submissions")
    for student, notebook in [("alice@uni.edu", honest), ("bob@uni.edu", copied), ("carol@uni.edu", cheat)]:
        (submissions / f"{student}.ipynb").write_text(json.dumps(notebook))
    results = tmp_path_factory.mktemp("results")
    return grade.grade_folder(result, submissions, results), results


def test_right_values_as_arrays_score_full_marks(graded_folder):
    points, results = graded_folder
    assert points["alice@uni.edu"] == 3 + 2
    public = json.loads((results / "alice@uni.edu" / "results.json").read_text())["tests"][0]
    assert public["name"] == "Public Tests" and public["status"] == "passed"


def test_another_students_notebook_scores_nothing_whatever_it_claims(graded_folder):
    """bob hands in alice's notebook, right for alice, with lines that rewrite the submission metadata and
    ATTNLIB_STUDENT to name alice: who submitted was read before the notebook ran, so it is graded with
    bob's numbers (0), and bob is told why, where he sees it; scores.csv names whom it was made for."""
    points, results = graded_folder
    assert points["bob@uni.edu"] == 0
    shown = json.loads((results / "bob@uni.edu" / "results.json").read_text())
    public = next(test for test in shown["tests"] if test["name"] == "Public Tests")
    assert "All test cases passed" not in public["output"] and public["status"] == "failed"
    for text in (shown["output"], public["output"]):
        assert "student_id is not the identity you submitted as (bob@uni.edu)" in text
    with open(results / "scores.csv") as table:
        rows = {row["student"]: row for row in csv.DictReader(table)}
    assert rows["bob@uni.edu"]["notebook made for"] == "alice@uni.edu"
    assert rows["alice@uni.edu"] | {"notebook made for": ""} == {
        "student": "alice@uni.edu", "ex-07-layer-bytes": "3", "ex-07-max-length": "2", "total": "5", "possible": "5",
        "notebook made for": ""}


def test_the_reviews_cheats_score_nothing_and_leak_nothing(graded_folder, private):
    """carol's notebook replaces the grading module, patches importlib, pathlib, NumPy, math and SymPy,
    runs grading.py with runpy, and answers with a float that reads the reference from the grader's frame,
    a SymPy expression equal to anything and an object whose repr raises the bank's text: 0 points, and
    what she is shown is the grader's own words, with nothing of the bank's or of her objects' text."""
    points, results = graded_folder
    assert points["carol@uni.edu"] == 0
    shown = (results / "carol@uni.edu" / "results.json").read_text()
    bank, _, _ = private
    assert "LEAKED" not in shown and "Task(" not in shown and "lookup" not in shown.lower()
    assert "something the grader cannot read" in shown
    with open(results / "flags.csv") as table:
        flags = list(csv.DictReader(table))
    assert {flag["submission"] for flag in flags} == {"bob@uni.edu", "carol@uni.edu"}, "alice's is not flagged"
    whys = {flag["why"] for flag in flags if flag["submission"] == "carol@uni.edu"}
    assert {"replaces a module (sys.modules)", "reaches a module by a computed name", "replaces a library's function",
            "reads other code's frames or objects", "defines a class in an answer cell"} <= whys, whys


def test_the_bundle_holds_its_chapters_tasks_and_no_seed(private):
    """The bundle holds the chapter's tasks and their keys (from which no other chapter's numbers and no
    seed follow), and the grader removes both before the notebook runs (the test below reads them)."""
    bank, out, result = private
    with zipfile.ZipFile(result / "autograder" / "autograder.zip") as bundle:
        names = {pathlib.PurePath(name).name: name for name in bundle.namelist()}
        texts = "\n".join(bundle.read(name).decode(errors="ignore") for name in bundle.namelist())
        keys = json.loads(bundle.read(names[grading.KEYS]))
        chapter_bank = bundle.read(names[grading.BANK]).decode()
    assert "course_judge.py" in bundle.namelist(), "the plugin sits beside run_otter.py"
    assert not re.search(rf"\b{COURSE_SEED}\b", texts) and "seed" not in json.dumps(keys) + chapter_bank
    assert set(keys["keys"]) == {"ex-07-layer-bytes", "ex-07-max-length"}
    assert keys["keys"]["ex-07-layer-bytes"] == tasks.task_key(COURSE_SEED, "ex-07-layer-bytes")
    assert "ex-07-layer-bytes" in chapter_bank and "ex-12" not in chapter_bank


def test_reading_the_bundle_scores_nothing_and_is_flagged(private, tmp_path):
    """The review's first way in: code that computes the answers with the bank and the seed in the
    bundle. The grader has removed the bank and the keys before the notebook runs: 0; and the scan
    flags it (and the earlier review's reading of references.json, which the bundle never held)."""
    import grade
    import scan

    _, out, result = private
    chapter = result.name
    reads_the_bank = ("(lambda t, c: t.run(t.load_bank('grading_bank.py').tasks[{label!r}], "
                      "t.load_bank('grading_bank.py').tasks[{label!r}].params(key=c['keys'][{label!r}], "
                      "student='alice@uni.edu')))(__import__('tasks'), json.load(open('grading_keys.json')))")
    notebook = with_answers(student_notebook(result, "alice@uni.edu"),
                            {label: reads_the_bank.format(label=label) for label in references(out, chapter, "alice@uni.edu")},
                            first="import json")
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    (submissions / "alice@uni.edu.ipynb").write_text(json.dumps(notebook))
    old_cheat = with_answers(student_notebook(result, "bob@uni.edu"),
                             {"ex-07-layer-bytes": "grading.decode(json.load(open('references.json'))"
                                                   "['ex-07-layer-bytes']['answer'])"}, first="import json, grading")
    (submissions / "bob@uni.edu.ipynb").write_text(json.dumps(old_cheat))
    graded = grade.grade_as(submissions / "alice@uni.edu.ipynb", result / "autograder" / "autograder.zip",
                            "alice@uni.edu")
    flagged = {flag.submission: flag for flag in scan.scan(submissions, result)}
    assert set(flagged) == {"alice@uni.edu", "bob@uni.edu"}
    assert graded.possible == 5 and graded.total == 0, graded.summary()


def test_the_example_banks_solutions_score_nothing(private, tmp_path):
    """A student who runs the public example bank's solutions with their own numbers (the best a
    cheater reading them off the notebook can do) gets 0: the private bank asks other questions."""
    import grade

    bank, out, result = private
    loaded = tasks.load_bank(bank)
    student = "alice@uni.edu"
    answers = {}
    for label, task in loaded.tasks.items():
        public = EXAMPLE.tasks[label]
        params = task.params(COURSE_SEED, student)
        code = public.code(params)
        value = tasks.run(public, params)  # it runs, and gives an answer: not the one asked
        assert is_answered(value) and not grading.matches(
            value, grading.decode(references(out, result.name, student)[label]["answer"]), task.rtol, task.atol), label
        answers[label] = "(lambda: (exec(" + repr(code) + ", globals()), globals()['answer'])[1])()"
    notebook = with_answers(student_notebook(result, student), answers)
    (tmp_path / f"{student}.ipynb").write_text(json.dumps(notebook))
    graded = grade.grade_as(tmp_path / f"{student}.ipynb", result / "autograder" / "autograder.zip", student)
    assert graded.possible == 5 and graded.total == 0, graded.summary()


def test_nothing_public_holds_a_private_banks_answers(private):
    """Neither a file of the public repository nor the installed attnlib holds any student's private
    answers, and attnlib's checker (the book's numbers) calls them wrong."""
    _, out, result = private
    public_files = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True,
                                  check=True).stdout.split()
    package = pathlib.Path(attnlib.__file__).parent
    texts = [(ROOT / name).read_text(errors="ignore") for name in public_files if (ROOT / name).is_file()]
    texts += [path.read_text(errors="ignore") for path in package.rglob("*") if path.is_file()]
    for student in STUDENTS:
        for label, reference in references(out, result.name, student).items():
            value = grading.decode(reference["answer"])
            numbers = [value] if isinstance(value, int) else list(value)
            for number in numbers:
                assert len(str(number)) >= 7, "the bank draws numbers long enough to be found only as themselves"
                assert not any(str(number) in text for text in texts), (label, number)
            assert not attnlib.book.exercises.check(label, value).passed, label


# --- checked answer keys: what the build refuses -------------------------------------------------

def example_copy(tmp_path: pathlib.Path, old: str, new: str) -> pathlib.Path:
    """A copy of the example bank for credit, with ``old`` (a range) replaced by ``new``, as step 1 of the
    instructor page starts."""
    text = tasks.EXAMPLE_BANK.read_text()
    assert old in text
    bank = tmp_path / "bank.py"
    bank.write_text(text.replace(old, new).replace("PUBLIC_PRACTICE = True", "PUBLIC_PRACTICE = False"))
    (tmp_path / "roster.txt").write_text("alice@uni.edu\n")
    return bank


# Copies of the example bank for credit that the build refuses, naming the task: the review's changed
# range (n from 40-400 breaks ex-11-causal-work's 2 W equal chunks), and a copy with new ranges only,
# which the example's public solution answers (the review's 44/44).
REFUSED_COPIES = [
    ("11", '"n": 2 * ranks * rng.randint(2, 1000)', '"n": rng.randint(40, 400)',
     "task ex-11-causal-work: its draw should meet the task's constraints.*2 W equal chunks"),
    ("07", '"batch": rng.randint(1, 64)', '"batch": rng.randint(65, 99)',
     "task ex-07-layer-bytes: the public example bank's solution should not answer"),
]


@pytest.mark.parametrize("chapter,old,new,refusal", REFUSED_COPIES, ids=["changed-range", "new-ranges-only"])
def test_a_broken_or_public_answer_key_fails_the_build(chapter, old, new, refusal, tmp_path):
    """Refused before anything is built (no book needed, nothing written)."""
    bank = example_copy(tmp_path, old, new)
    with pytest.raises(ValueError, match=refusal):
        build.build(tmp_path / "out", 20270115, [chapter], ref=head_commit(), bank=bank, html=tmp_path / "no-book",
                    roster=tmp_path / "roster.txt")
    assert not (tmp_path / "out").exists()


def test_a_wrong_second_computation_fails_the_build():
    task = dataclasses.replace(EXAMPLE.tasks["ex-07-layer-bytes"], second=lambda p: 1)
    with pytest.raises(ValueError, match="task ex-07-layer-bytes: its solution and its second computation should "
                                         "agree"):
        answer_keys.answer_key(task, EXAMPLE, COURSE_SEED, ["alice@uni.edu"], EXAMPLE)


def _rope_with_rho_drawn_unrounded(rng):
    return {"rho": rng.uniform(0.1, 0.95)}


def _causal_work_from_any_length(p):
    block = p["n"] // p["ranks"]  # the shared wrong assumption: the leftover positions dropped
    chunk = p["n"] // (2 * p["ranks"])
    zigzag = [chunk * chunk * c + chunk * (chunk + 1) // 2 for c in range(2 * p["ranks"])]
    return ([block * block * r + block * (block + 1) // 2 for r in range(p["ranks"])],
            [zigzag[r] + zigzag[2 * p["ranks"] - 1 - r] for r in range(p["ranks"])])


def _wrong_keys() -> dict[str, tuple[tasks.Task, dict, str]]:
    """The review's six wrong answer keys (2026-12-04, W1-W6), each as a change of an example task, with
    the options of ``check_bank`` that refuse it and the refusal."""
    t = EXAMPLE.tasks
    return {
        # W1: a solution missing a factor 2 (here: a second computation twice the solution)
        "W1": (dataclasses.replace(t["ex-07-layer-bytes"], second=lambda p: 2 * t["ex-07-layer-bytes"].second(p)),
               {}, "its solution and its second computation should agree"),
        # W2: a floor for a ceil, wrong only when BLOCK_M < BLOCK_N: the synthetic students draw that
        "W2": (dataclasses.replace(t["ex-09-causal-tiles"],
                                   solution=t["ex-09-causal-tiles"].solution.replace("math.ceil(", "math.floor(")),
               {"synthetic": answer_keys.SYNTHETIC_STUDENTS}, "its solution and its second computation should agree"),
        # W3: no check, any length; solution and second share the assumption that W divides n
        "W3": (dataclasses.replace(t["ex-11-causal-work"], check=None, second=_causal_work_from_any_length,
                                   draw=lambda rng: {"n": rng.randint(40, 400), "ranks": 4, "last": 3}),
               {"strict": True}, "task ex-11-causal-work has no check"),
        # W4: the sentence prints rho to 2 decimals, the solution uses all of them
        "W4": (dataclasses.replace(t["ex-12-correlated-variance"], draw=_rope_with_rho_drawn_unrounded,
                                   numbers="Use the correlation {rho:.2f} inside each plane instead of 0.5."),
               {}, "the numbers the notebook prints should give the answer its key holds"),
        # W5: rtol = 0.5, under which students' answers score for each other
        "W5": (dataclasses.replace(t["ex-12-temperatures"], rtol=0.5), {"max_shared_pairs": 0},
               "pairs of students should share a scoring answer"),
        # W6: bits for nats, with no check and no second
        "W6": (dataclasses.replace(t["ex-12-alibi-entropy"], check=None, second=None,
                                   solution=t["ex-12-alibi-entropy"].solution + " / math.log(2)"),
               {"strict": True}, "has no check"),
    }


@pytest.mark.parametrize("wrong", ["W1", "W2", "W3", "W4", "W5", "W6"])
def test_the_reviews_wrong_keys_are_refused(wrong):
    """Each wrong key of the review is refused before anything is built, with the options that say how
    strict the instructor is; without them, W3, W5 and W6 build with warnings that name the task."""
    task, options, refusal = _wrong_keys()[wrong]
    bank = dataclasses.replace(EXAMPLE, tasks={task.label: task})
    roster = [f"student{number}@uni.edu" for number in range(20)]
    with pytest.raises(ValueError, match=refusal) as refused:
        answer_keys.check_bank(bank, EXAMPLE, 20270115, [task.label], ["instructor", *roster], roster, **options)
    assert f"task {task.label}" in str(refused.value)
    if wrong in ("W3", "W5", "W6"):
        lenient = {name: value for name, value in options.items() if name not in ("strict", "max_shared_pairs")}
        checked = answer_keys.check_bank(bank, EXAMPLE, 20270115, [task.label], ["instructor", *roster], roster,
                                         **lenient)
        assert any(task.label in warning for warning in checked.warnings), checked.warnings
        assert wrong != "W5" or checked.shared[0].pairs > 0


def test_the_build_counts_the_students_who_share_an_answer():
    """Pairs of roster students whose answers score for each other, counted as the grader matches:
    equal ints, floats within the tolerance, SymPy expressions by their values."""
    key = {"a": {"answer": grading.encode(120), "rtol": 0, "atol": 0},
           "b": {"answer": grading.encode(120), "rtol": 0, "atol": 0},
           "c": {"answer": grading.encode(121), "rtol": 0, "atol": 0}}
    assert answer_keys.shared_answers("t", key, ["a", "b", "c"]).pairs == 1
    d = __import__("sympy").Symbol("d")
    key = {name: {"answer": grading.encode(value), "rtol": 1e-5, "atol": 0}
           for name, value in [("a", (d / 3, 1.0)), ("b", (d / 3, 1.000001)), ("c", (d / 4, 1.0)), ("e", (d / 3, 1.1))]}
    shared = answer_keys.shared_answers("t", key, ["a", "b", "c", "e"])
    assert (shared.pairs, shared.sharing, shared.distinct) == (1, 2, 4)


@pytest.mark.parametrize("task", EXAMPLE.tasks.values(), ids=lambda t: t.label)
def test_every_example_task_states_its_constraints(task):
    """Each task of the example checks its numbers; all but three (a library constant put to use) have
    a second computation, which agrees with the solution for a few students."""
    assert task.check is not None
    assert (task.second is None) == (task.label in {"ex-03-budget", "ex-08-block-sizes", "ex-11-infiniband"})
    answer_keys.answer_key(task, EXAMPLE, COURSE_SEED, ["", "alice@uni.edu", "bob@uni.edu"], EXAMPLE)


def test_a_graded_build_needs_a_tag_or_commit(private, tmp_path):
    bank, _, _ = private
    with pytest.raises(ValueError, match="ref should be the tag or commit"):
        build.build(tmp_path, COURSE_SEED, ["07"], bank=bank)
    with pytest.raises(ValueError, match="roster should be the file of the course's students"):
        build.build(tmp_path, COURSE_SEED, ["07"], ref=head_commit(), bank=bank)
    branch = subprocess.run(["git", "-C", str(ROOT), "branch", "--show-current"], capture_output=True,
                            text=True).stdout.strip()
    if branch:  # a checkout on a branch: the branch is refused, then accepted with a warning
        with pytest.raises(ValueError, match=f"got the branch '{re.escape(branch)}'"):
            build.build(tmp_path, COURSE_SEED, ["07"], ref=branch, bank=bank, roster=bank.with_name("roster.txt"))
        with pytest.warns(UserWarning, match="building from the branch"):
            assert build.resolve_ref(branch, allow_branch=True) == head_commit()
    with pytest.raises(ValueError, match="which git does not know"):
        build.resolve_ref("no-such-tag-anywhere", allow_branch=False)
    # the review's spellings that name a commit today and may name another tomorrow
    for moving in ["HEAD", "HEAD~0", "HEAD@{0}", head_commit()[:12], *(["origin/main"] if _knows("origin/main")
                                                                          else [])]:
        with pytest.raises(ValueError, match="should be a tag or a full 40-hex commit hash|got the branch"):
            build.resolve_ref(moving, allow_branch=False)
    assert build.resolve_ref(head_commit(), allow_branch=False) == head_commit()


def _knows(ref: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", ref],
                          capture_output=True).returncode == 0


def test_a_graded_build_refuses_another_installed_attnlib(private, tmp_path):
    """The commit before attnlib last changed has other files: the answers computed here would not
    be the ones its autograder computes."""
    bank, _, _ = private
    # a change of its code: a stored result added under attnlib/ leaves every .py file as it was
    last_change = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%H", "--", "attnlib/*.py"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    before = subprocess.run(["git", "-C", str(ROOT), "rev-parse", f"{last_change}~1"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert build.installed_differences(head_commit()) == []
    assert build.installed_differences(build.resolve_ref(before, allow_branch=False))
    with pytest.raises(ValueError, match="the installed attnlib .* should be the ref the autograder installs"):
        build.build(tmp_path, COURSE_SEED, ["07"], ref=before, bank=bank, roster=bank.with_name("roster.txt"))


def test_the_autograder_installs_the_pinned_commit(private):
    _, out, result = private
    url, _ = build.repository()
    commit = head_commit()
    requirements = (result / "autograder" / "requirements.txt").read_text()
    assert f"attnlib[book] @ git+{url}@{commit}" in requirements
    for package, version in [("numpy", np.__version__), ("sympy", __import__("sympy").__version__)]:
        assert f"{package}=={version}\n" in requirements, "the grader computes with what checked the key"
    recorded = json.loads((out / "build.json").read_text())
    assert recorded["students"] == STUDENTS and len(recorded["bank_sha256"]) == len(recorded["roster_sha256"]) == 64
    assert f"git+{url}@{commit}" in (result / "student" / STUDENTS[0] / f"{result.name}.ipynb").read_text()
    assert json.loads((out / "build.json").read_text())["commit"] == commit
    with zipfile.ZipFile(result / "autograder" / "autograder.zip") as bundle:
        environment = yaml.safe_load(bundle.read("environment.yml"))
    assert "git" in environment["dependencies"], "the git+ install of attnlib needs git"
    assert f"python={sys.version_info.major}.{sys.version_info.minor}" in environment["dependencies"], \
        "the autograder computes with the Python that computed the references"


# --- strict, non-leaking grading ---------------------------------------------------------------

def test_the_failure_text_never_shows_the_expected_value(private, tmp_path):
    """Even with show_hidden, a wrong answer's failure text names the exercise, not the reference;
    and no test in the bundle holds a reference value."""
    _, out, result = private
    chapter = result.name
    import grade

    answers = references(out, chapter, build.REFERENCE_STUDENT)
    notebook = json.loads((result / "autograder" / f"{chapter}.ipynb").read_text())
    for cell in notebook["cells"]:  # the reference's answers, each off by one
        source = "".join(cell["source"])
        for label in answers:
            source = source.replace(f"{answer_name(label)} = answer",
                                    f"{answer_name(label)} = answer + 1 if isinstance(answer, int) "
                                    f"else tuple(x + 1 for x in answer)")
        cell["source"] = source
    wrong = tmp_path / f"{chapter}.ipynb"
    wrong.write_text(json.dumps(notebook))
    graded = grade.grade_as(wrong, result / "autograder" / "autograder.zip", build.REFERENCE_STUDENT)
    assert graded.total == 0
    summary = graded.summary(public_only=False)
    assert "not the answer for your numbers" in summary
    with zipfile.ZipFile(result / "autograder" / "autograder.zip") as bundle:
        assert grading.REFERENCES not in {pathlib.PurePath(name).name for name in bundle.namelist()}
        tests = [bundle.read(name).decode(errors="ignore") for name in bundle.namelist()]
    for reference in answers.values():
        value = grading.decode(reference["answer"])
        for number in [value] if isinstance(value, int) else value:
            assert str(number) not in summary
            assert not any(str(number) in text for text in tests)


def _through_the_kernel_cell(answers: dict, tmp_path: pathlib.Path) -> dict:
    """``answers`` as the grader reads them: written by the cell it appends to a notebook, read back."""
    namespace = dict(answers)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(grading.kernel_cell(list(answers)), namespace)
        return grading.read_answers(tmp_path / grading.ANSWERS, list(answers))
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("task", EXAMPLE.tasks.values(), ids=lambda t: t.label)
def test_a_right_answer_crosses_to_the_grader_as_plain_data(task, tmp_path):
    """Every example task's reference, as a student may hold it (itself, float32, a tensor, lists), reaches
    the grader as plain data that still matches; the same off by a little does not."""
    reference = tasks.run(task, task.params(COURSE_SEED))
    expected = grading.decode(grading.encode(reference))
    forms = {"as_is": reference, "as_list": list(reference) if isinstance(reference, tuple) else reference}
    if isinstance(expected, np.ndarray) and expected.dtype.kind == "f":
        forms["as_tensor"] = torch.tensor(expected, dtype=torch.float32)
    read = _through_the_kernel_cell(forms, tmp_path)
    for name, value in read.items():
        assert grading.matches(value, expected, task.rtol, task.atol, task.also_at), (name, value)
        assert grading.form_message(name, value, grading.form_of(expected)) is None, name


def test_the_grader_reads_data_and_runs_none_of_it(tmp_path):
    """SymPy arrives as text that a parser of a few constructors reads, never eval: code, a symbol named
    with code, an enormous power are unreadable; so are a link, an oversized file and broken JSON."""
    for text in ["__import__('os').system('touch pwned')", "Symbol('x); import os; (')",
                 "Pow(Integer(10), Integer(10**9))", "Add(Symbol('x'), Lambda(Symbol('y'), Symbol('y')))",
                 "Symbol('x').__class__", "Float('nan; 1')"]:
        with pytest.raises((grading.Unreadable, SyntaxError)):
            grading.parse_sympy(text)
    assert not (tmp_path / "pwned").exists()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"answer_x": {"kind": "int", "value": 1}}))
    (tmp_path / grading.ANSWERS).symlink_to(tmp_path / "elsewhere.json")
    assert grading.read_answers(tmp_path / grading.ANSWERS, ["answer_x"]) == {"answer_x": None}
    for data in ["{", "x" * (grading.MAX_ANSWERS_BYTES + 1), json.dumps({"answer_x": {"kind": "int", "value": True}}),
                 json.dumps({"answer_x": {"kind": "array", "dtype": "int", "value": [[1], [2, 3]]}}),
                 json.dumps({"answer_x": {"kind": "float", "value": "1.0"}})]:
        (tmp_path / grading.ANSWERS).unlink()
        (tmp_path / grading.ANSWERS).write_text(data)
        assert grading.read_answers(tmp_path / grading.ANSWERS, ["answer_x"])["answer_x"] is grading.UNREADABLE


def test_sympy_answers_match_within_the_tolerance_whatever_their_last_bit():
    """The review's P2-9: d (2^2 0.2^2 + 2^2 0.2^2) is 0.32000000000000006 d, which scored 0."""
    import sympy as sp

    d = sp.Symbol("d")
    expected = grading.decode(grading.encode(sp.Rational(8, 25) * d))
    given = grading.parse_sympy(sp.srepr(d * (2**2 * 0.2**2 + 2**2 * 0.2**2)))
    assert grading.matches(given, expected, rtol=1e-5)
    assert not grading.matches(grading.parse_sympy(sp.srepr(0.33 * d)), expected, rtol=1e-5)
    assert not grading.matches(grading.parse_sympy(sp.srepr(sp.Rational(8, 25) * d**2)), expected, rtol=1e-5)


# Each trick of the review, with the reference it tried to pass: a kind that is not the answer's.
TYPE_TRICKS = [
    ("120", 120), (b"120", 120), (True, 1), (True, 1.0), (1.0, True), (np.float64(1.0), True),
    (("120", "250"), (120.0, 250.0)), ([[3, 3], [3, 5]], ((3, 3), (3, 5, 1))), ((3, 3, 5), ((3, 3), (3, 5))),
    (np.array([[1.0, 0.0]]), np.array([[True, False]])), (torch.tensor([[1, 0]]), np.array([[True, False]])),
    (np.array([[True, False]]), np.array([[1.0, 0.0]])), (float("nan"), 1.0), (float("inf"), float("inf")),
    ([1.0, 2.0, 3.0], np.array([1.0, 2.0])), (None, 1.0), (..., 1.0), ({"a": 1}, 1.0), (3.5, 3),
    (np.array([120, 250, 1]), (120, 250)), (np.array(["120", "250"]), (120, 250)),
    (torch.tensor([True, False]), (1, 0)),
]


@pytest.mark.parametrize("got,expected", TYPE_TRICKS, ids=repr)
def test_an_answer_of_the_wrong_kind_never_matches(got, expected):
    assert not grading.matches(got, grading.decode(grading.encode(expected)), rtol=1e-6)


# The same answers in the kinds a student gets them in: tensors, NumPy scalars, float32, a bool tensor.
RIGHT_ANSWERS = [
    (torch.tensor(120), 120), (np.int64(120), 120), (120.0, 120), (torch.tensor([[True, False]]),
                                                                   np.array([[True, False]])),
    (np.bool_(False), False), (torch.tensor(False), False), ([3, 3], (3, 3)), (torch.Size([3, 5]), (3, 5)),
    (np.float32(1 / 3), 1 / 3),
    # a tuple of numbers given as an array or a tensor of that length (the review's 28/44 and 30/44)
    (np.array([120, 250]), (120, 250)), (torch.tensor([0.5, 0.25]), (0.5, 0.25)),
    (np.array([[3, 3], [3, 5]]), ((3, 3), (3, 5))), (torch.tensor([1, 2, 3]), (1, 2, 3)),
]


@pytest.mark.parametrize("got,expected", RIGHT_ANSWERS, ids=repr)
def test_the_right_answer_in_any_natural_kind_matches(got, expected):
    assert grading.matches(got, grading.decode(grading.encode(expected)), rtol=1e-5)


@pytest.mark.parametrize("task", EXAMPLE.tasks.values(), ids=lambda t: t.label)
def test_float32_answers_pass_where_float32_is_natural(task):
    """A float answer computed in float32 instead of float64 still matches its tolerance."""
    reference = tasks.run(task, task.params(COURSE_SEED))
    expected = grading.decode(grading.encode(reference))

    def in_float32(x):
        if isinstance(x, tuple):
            return tuple(in_float32(item) for item in x)
        if isinstance(x, float):
            return np.float32(x)
        if isinstance(x, (torch.Tensor, np.ndarray, list)) and np.asarray(grading.on_the_cpu(x)).dtype.kind == "f":
            return np.asarray(grading.on_the_cpu(x), dtype=np.float32)
        return x

    assert grading.matches(in_float32(reference), expected, task.rtol, task.atol, task.also_at)


def test_a_sympy_answer_may_be_given_by_its_values():
    """ex-02-bernoulli allows "their values at d = 3": the exact values pass, other values do not."""
    task = EXAMPLE.tasks["ex-02-bernoulli"]
    params = task.params(COURSE_SEED)
    reference = grading.decode(grading.encode(tasks.run(task, params)))
    d = next(iter(reference[0].free_symbols))
    at_three = tuple(value.subs(d, 3) for value in reference)
    assert grading.matches(at_three, reference, task.rtol, task.atol, task.also_at)
    assert grading.matches(tuple(float(v) for v in at_three), reference, task.rtol, task.atol, task.also_at)
    assert not grading.matches(tuple(value.subs(d, 4) for value in reference), reference, task.rtol, task.atol,
                               task.also_at)


@pytest.mark.parametrize("junk", [..., None, "1", b"1", float("nan"), (1.0, float("nan")), np.array([np.nan]),
                                  torch.tensor([1.0, float("nan")]), ("a", 1), [], np.array(["1"])], ids=repr)
def test_the_answered_check_turns_away_what_is_no_answer(junk):
    assert not is_answered(junk)


@pytest.mark.parametrize("answer", [0, 0.0, False, (1, 2.0), np.zeros(3), torch.ones(2, dtype=torch.bool),
                                    torch.nn.Linear(2, 2)], ids=repr)
def test_the_answered_check_accepts_any_answer_right_or_wrong(answer):
    assert is_answered(answer)


# --- Colab -------------------------------------------------------------------------------------

FAKE_COLAB = {
    "google/__init__.py": "",
    "google/colab/__init__.py": "",
    "google/colab/_shell.py": "",
    # Colab's kernel hands the notebook it shows to the kernel on request; here, a file's
    "google/colab/_message.py": textwrap.dedent('''\
        import json, os

        def blocking_request(kind, request="", timeout_sec=None):
            assert kind == "get_ipynb"
            with open(os.environ["FAKE_COLAB_NOTEBOOK"]) as notebook:
                return {"ipynb": json.load(notebook)}
        '''),
    "google/colab/files.py": textwrap.dedent('''\
        import os

        def download(path):
            with open(os.environ["FAKE_COLAB_DOWNLOADS"], "a") as downloads:
                downloads.write(os.path.abspath(path) + "\\n")
        '''),
}

# Run first in the kernel: the shell becomes an instance of a class of google.colab, which is
# what otter-grader (and attnlib) look for to know they run in Colab.
PRESENT_AS_COLAB = textwrap.dedent('''\
    import sys
    sys.path.insert(0, {path!r})
    import google.colab._shell
    _ip = get_ipython()
    google.colab._shell.Shell = type("Shell", (type(_ip),), {{"__module__": "google.colab._shell"}})
    _ip.__class__ = google.colab._shell.Shell
    import otter.check.utils
    assert otter.check.utils.IPythonInterpreter.COLAB.value.running()
    ''')


@pytest.mark.parametrize("edition", ["student", "autograder"])
def test_a_colab_kernel_runs_the_assignment_and_writes_the_file_to_hand_in(edition, built, tmp_path, monkeypatch):
    """In a kernel that presents itself as Colab, the student notebook (blank) and the reference
    notebook run without an error: their checks say whether each answer is filled in, their
    export writes the notebook and offers it for download, and that file gets zero (every
    question graded) and full marks. (otter's own Notebook raises there.)"""
    _, results = built
    chapter = GRADED[0]
    for name, text in FAKE_COLAB.items():
        (tmp_path / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / name).write_text(text)
    opened = results[chapter] / edition / f"{chapter}.ipynb"
    monkeypatch.setenv("FAKE_COLAB_NOTEBOOK", str(opened))
    monkeypatch.setenv("FAKE_COLAB_DOWNLOADS", str(tmp_path / "downloads.txt"))
    work = tmp_path / "content"
    work.mkdir()
    notebook = nbformat.read(opened, as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell(PRESENT_AS_COLAB.format(path=str(tmp_path / "fake"))))
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    printed = "\n".join(out.get("text", "") for cell in notebook.cells for out in cell.get("outputs", []))
    said = "is filled in" if edition == "autograder" else "is not filled in yet"
    for exercise in exercises(chapter):
        if catalogue.graded(exercise, EXAMPLE):
            assert f"{exercise.label}: {answer_name(exercise.label)} {said}" in printed
    handed_in = work / f"{chapter}.ipynb"
    assert (tmp_path / "downloads.txt").read_text().split() == [str(handed_in)]
    graded = grade(handed_in, results[chapter])
    if edition == "autograder":
        assert_full_marks(graded, chapter)
    else:
        assert_zero_for_every_question(graded, chapter)


def test_otter_alone_fails_in_colab(tmp_path):
    """Control: the fake Colab is one otter recognises, so the test above shows attnlib's grader at work."""
    for name, text in FAKE_COLAB.items():
        (tmp_path / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / name).write_text(text)
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(PRESENT_AS_COLAB.format(path=str(tmp_path / "fake"))),
        nbformat.v4.new_code_cell("import otter\notter.Notebook('x.ipynb')")])
    with pytest.raises(Exception, match="Tests directory ./tests does not exist"):
        NotebookClient(notebook, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()


# --- the instructor page -------------------------------------------------------------------------

def test_the_instructor_page_lists_every_exercise():
    page = (ROOT / "instructor.md").read_text()
    assert catalogue.page_block(page) == catalogue.markdown_table(EXAMPLE), \
        "run python assignments/catalogue.py --write instructor.md"
    labels = [e.label for e in catalogue.all_exercises()]
    assert all(f"`{label}`" in page for label in labels)


# --- written answers, end to end ---------------------------------------------------------------

def test_written_answers_are_collected_graded_and_counted(built, tmp_path):
    """A folder of submissions: otter run grades the code, written.py collects the written
    answers for grading by hand and adds their scores to otter's."""
    import written

    out, results = built
    chapter = next(c for c in GRADED if any(e.written for e in exercises(c)))
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    (submissions / "alice.ipynb").write_text((results[chapter] / "autograder" / f"{chapter}.ipynb").read_text())
    (submissions / "bob.ipynb").write_text((results[chapter] / "student" / f"{chapter}.ipynb").read_text())
    written.collect(submissions, out, tmp_path / "hand")
    questions = {(f"{e.label}-written" if e.checked else e.label): catalogue.manual_points(e, EXAMPLE)
                 for e in exercises(chapter) if e.written}
    page = (tmp_path / "hand" / "written.md").read_text()
    for question, points in questions.items():
        assert f"## {question} ({points} points)" in page
    with open(tmp_path / "hand" / "written_scores.csv") as table:
        rows = list(csv.DictReader(table))
    assert sorted((r["student"], r["question"]) for r in rows) == sorted(
        (student, q) for student in ("alice", "bob") for q in questions)
    for row in rows:  # the reference's answers get full marks, the blank ones none
        row["score"] = row["points"] if row["student"] == "alice" else "0"
    with open(tmp_path / "scores.csv", "w", newline="") as table:
        writer = csv.DictWriter(table, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    bundle = results[chapter] / "autograder" / "autograder.zip"
    otter = pathlib.Path(sys.executable).with_name("otter")
    for student in ("alice", "bob"):
        (tmp_path / "results" / student).mkdir(parents=True)
        subprocess.run([str(otter), "run", "-a", str(bundle), "-o", str(tmp_path / "results" / student),
                        str(submissions / f"{student}.ipynb")], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "assignments")})  # the course's grader
    written.totals(tmp_path / "results", tmp_path / "scores.csv", tmp_path / "totals.csv")
    with open(tmp_path / "totals.csv") as table:
        totals = {row["student"]: row for row in csv.DictReader(table)}
    manual = sum(questions.values())
    assert totals["alice"] == {"student": "alice", "auto": f"{auto_points(chapter):g}", "written": f"{manual:g}",
                               "total": f"{auto_points(chapter) + manual:g}"}
    assert totals["bob"]["total"] == "0"


def test_totals_and_the_gradebook_count_every_student(tmp_path):
    """A chapter with no written part (its scores file a header only) still gives every graded student a
    row; the gradebook merges chapters, with a 0 where a student handed nothing in, and names the
    chapters where a student's notebook was made for someone else."""
    import gradebook
    import written

    for chapter, rows in {"07_cost": [("alice@uni.edu", 5, ""), ("bob@uni.edu", 0, "alice@uni.edu")],
                          "12_scale": [("alice@uni.edu", 8, "")]}.items():
        folder = tmp_path / chapter
        for student, total, made_for in rows:
            (folder / student).mkdir(parents=True)
            (folder / student / "results.json").write_text(json.dumps({"tests": [{"score": total}]}))
        with open(folder / "scores.csv", "w", newline="") as table:
            writer = csv.writer(table)
            writer.writerow(["student", "total", "possible", "notebook made for"])
            writer.writerows([(student, total, 5 if chapter == "07_cost" else 8, made_for or student)
                              for student, total, made_for in rows])
    (tmp_path / "scores.csv").write_text("student,question,points,score\n")
    written.totals(tmp_path / "07_cost", tmp_path / "scores.csv", tmp_path / "totals.csv")
    with open(tmp_path / "totals.csv") as table:
        assert [row["student"] for row in csv.DictReader(table)] == ["alice@uni.edu", "bob@uni.edu"]
    gradebook.merge(tmp_path / "gradebook.csv", [tmp_path / "07_cost", tmp_path / "12_scale"])
    with open(tmp_path / "gradebook.csv") as table:
        rows = {row["student"]: row for row in csv.DictReader(table)}
    assert rows["alice@uni.edu"] == {"student": "alice@uni.edu", "07_cost": "5", "12_scale": "8", "total": "13",
                                     "possible": "13", "notebooks made for another": ""}
    assert (rows["bob@uni.edu"]["12_scale"], rows["bob@uni.edu"]["notebooks made for another"]) == ("0", "07_cost")


def test_totals_refuse_a_missing_score(tmp_path):
    import written

    (tmp_path / "scores.csv").write_text("student,question,points,score\nalice,ex-07-extrapolate-written,1,\n")
    with pytest.raises(ValueError, match="got none for alice, ex-07-extrapolate-written"):
        written.totals(tmp_path, tmp_path / "scores.csv", tmp_path / "totals.csv")


@pytest.mark.parametrize("n,block_m,block_n", [(1024, 128, 64), (2304, 64, 128), (1280, 256, 32), (1024, 32, 64)])
def test_the_books_causal_tiles_solution_holds_for_every_block_shape(n, block_m, block_n):
    """The book's solution to ex-09-causal-tiles, run with other blocks (BLOCK_M < BLOCK_N too, where the
    review found it miscounted), counts the tiles as a brute-force classification of every tile does."""
    import contextlib
    import io

    [exercise] = [e for e in catalogue.all_exercises() if e.label == "ex-09-causal-tiles"]
    code = re.search(r"```python\n(.*?)```", exercise.solution, re.S).group(1).split("import attnlib.book.exercises")[0]
    book_numbers = "n, block_m, block_n = 1024, 128, 64"
    assert book_numbers in code
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code.replace(book_numbers, f"n, block_m, block_n = {n}, {block_m}, {block_n}"), namespace)
    counts, fraction = EXAMPLE.tasks["ex-09-causal-tiles"].second({"n": n, "block_m": block_m, "block_n": block_n})
    assert np.array_equal(np.array(namespace["counts"]), counts)
    assert namespace["fraction"] == pytest.approx(fraction)


def _same_kind_other_containers(reference) -> list:
    """``reference`` as a student may give it: itself, a tuple as a list, a tuple of numbers as an array
    and as a tensor."""
    forms = [reference]
    if isinstance(reference, tuple):
        forms.append(list(reference))
        if all(isinstance(item, (int, float)) for item in reference):
            forms += [np.array(reference), torch.tensor(reference)]
    return forms


@pytest.mark.parametrize("task", EXAMPLE.tasks.values(), ids=lambda t: t.label)
def test_the_visible_check_passes_no_form_the_grader_refuses(task):
    """The visible test checks the answer's form (``form_problem``, from the reference's kind, no value in
    it): every natural container of a right answer passes it and the hidden test, and answers of another
    form fail both, so no check cell says "passed" for an answer the grader turns away for its form."""
    from attnlib.book.exercises.assignment import form_problem

    reference = grading.decode(grading.encode(tasks.run(task, task.params(COURSE_SEED))))
    form = grading.form_of(reference)
    assert str(reference) not in str(form) or isinstance(reference, bool)
    for right in _same_kind_other_containers(reference):
        assert form_problem(right, form) is None, (right, form)
        assert grading.matches(right, reference, task.rtol, task.atol, task.also_at), right
    wrong_forms = [{"answer": 1}, (reference, reference, reference), [reference] * 5]
    if isinstance(reference, tuple):
        wrong_forms.append(reference[0])
    for wrong in wrong_forms:
        assert form_problem(wrong, form) is not None, wrong
        assert not grading.matches(wrong, reference, task.rtol, task.atol, task.also_at), wrong


class _Installed:
    """A stand-in for an installed attnlib whose direct_url.json says where it came from."""

    def __init__(self, origin: dict):
        self.origin = origin

    def read_text(self, name: str) -> str:
        return json.dumps(self.origin) if name == "direct_url.json" else ""


@pytest.mark.parametrize("origin, reinstalled", [
    ({"url": "git+x", "vcs_info": {"vcs": "git", "commit_id": "a" * 40}}, False),   # the assignment's commit
    ({"url": "git+x", "vcs_info": {"vcs": "git", "commit_id": "b" * 40}}, True),    # another commit's
    ({"url": "https://files/attnlib-0.1.0.whl", "archive_info": {}}, True),         # a wheel of unknown commit
    ({"url": "file:///home/me/attnlib", "dir_info": {"editable": True}}, False),  # a developer's checkout
])
def test_the_install_cell_replaces_another_commits_attnlib(monkeypatch, origin, reinstalled):
    import importlib.metadata

    installed = []
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _Installed(origin))
    monkeypatch.setattr(subprocess, "check_call", lambda command: installed.extend(command))
    exec(build.install_source("a" * 40), {})
    assert any(spec.startswith("attnlib[book] @ git+") for spec in installed) == reinstalled
