"""The graded assignments: otter-grader gives the reference solutions full marks and a blank
notebook zero, without crashing; no hidden test, answer or failure text reaches a student; a
private question bank's answers are computed by nothing public; the strict matcher turns away
the type tricks of the course review; a build is pinned to the attnlib that computed its answers;
a kernel that presents itself as Colab runs an assignment and writes the file to hand in.

Grading runs otter without Docker, in this environment, as ``otter run`` does.
"""
import csv
import json
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
import build  # noqa: E402
import jupyter_edition  # noqa: E402
import catalogue  # noqa: E402
import grading  # noqa: E402
import tasks  # noqa: E402

import attnlib.exercises  # noqa: E402
from attnlib.exercises.assignment import answer_name, is_answered  # noqa: E402

EXAMPLE = tasks.load_bank(tasks.EXAMPLE_BANK)
WITH_EXERCISES = [path.stem for path in catalogue.chapter_paths() if catalogue.chapter_exercises(path)]
GRADED = [chapter for chapter in WITH_EXERCISES
          if any(catalogue.graded(e, EXAMPLE)
                 for e in catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb"))]
COURSE_SEED = 2026
# Five more courses: each grades its reference notebooks of a few chapters with otter, so that
# every chapter is graded under a seed other than COURSE_SEED too.
SAMPLE_SEEDS = [11, 222, 3333, 44444, 555555]


def exercises(chapter: str) -> list[catalogue.Exercise]:
    return catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb")


def auto_points(chapter: str, bank: tasks.Bank = EXAMPLE) -> int:
    return sum(catalogue.auto_points(e, bank) for e in exercises(chapter))


def grade(notebook: pathlib.Path, chapter: pathlib.Path):
    return grade_submission(str(notebook), str(chapter / "autograder" / "autograder.zip"), quiet=True)


def references(out: pathlib.Path, chapter: str) -> dict:
    return json.loads((out / "source" / chapter / grading.REFERENCES).read_text())


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


@pytest.mark.parametrize("chapter", GRADED)
def test_reference_solutions_get_full_marks(chapter, built):
    _, results = built
    graded = grade(results[chapter] / "autograder" / f"{chapter}.ipynb", results[chapter])
    assert graded.possible == auto_points(chapter) > 0
    assert graded.total == graded.possible, graded.summary()


@pytest.mark.parametrize("chapter", GRADED)
def test_a_blank_notebook_gets_zero(chapter, built):
    _, results = built
    graded = grade(results[chapter] / "student" / f"{chapter}.ipynb", results[chapter])
    labels = [e.label for e in exercises(chapter) if catalogue.graded(e, EXAMPLE)]
    assert sorted(graded.results) == sorted(labels), "every bank question is graded, none crashes the grader"
    assert graded.total == 0 and graded.possible == auto_points(chapter)


@pytest.mark.parametrize("seed,chapters", [(seed, GRADED[i::len(SAMPLE_SEEDS)]) for i, seed in enumerate(SAMPLE_SEEDS)])
def test_reference_solutions_get_full_marks_for_other_seeds(seed, chapters, tmp_path, book_html):
    results = {result.name: result for result in build.build(tmp_path, seed, [c[:2] for c in chapters], html=book_html)}
    for chapter in chapters:
        reference = grade(results[chapter] / "autograder" / f"{chapter}.ipynb", results[chapter])
        assert reference.total == reference.possible == auto_points(chapter) > 0, (seed, reference.summary())
        blank = grade(results[chapter] / "student" / f"{chapter}.ipynb", results[chapter])
        assert blank.total == 0 and blank.possible == auto_points(chapter), seed


@pytest.mark.parametrize("task", EXAMPLE.tasks.values(), ids=lambda t: t.label)
def test_no_course_is_answered_by_the_book(task):
    """The book's public solution, run with the book's numbers, answers none of five courses."""
    book = tasks.run(task, task.book)
    drawn = [task.params(seed) for seed in [COURSE_SEED, *SAMPLE_SEEDS]]
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
    """attnlib.exercises.check knows the book's numbers: for a course's numbers it would say "not yet"."""
    _, results = built
    notebook = json.loads((results[chapter] / "student" / f"{chapter}.ipynb").read_text())
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if "**Your numbers.**" in source:
            assert "attnlib.exercises.check(" not in source, source


def test_practice_exercises_carry_no_points_and_say_so(built):
    """An exercise the book answers publicly gets attnlib's check and no points, in the catalogue too."""
    out, results = built
    with open(out / "catalogue.csv") as table:
        rows = {row[0]: row for row in list(csv.reader(table))[1:]}
    for exercise in catalogue.all_exercises():
        if exercise.checked and not catalogue.graded(exercise, EXAMPLE):
            assert rows[exercise.label][3] == "0", exercise.label
            assert rows[exercise.label][5] == ("self-check" if attnlib.exercises.CHECKERS[exercise.label].self_check
                                               else "practice"), exercise.label
            student = (results[exercise.chapter] / "student" / f"{exercise.chapter}.ipynb").read_text()
            assert f"attnlib.exercises.check({exercise.label!r}" in student


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

PRIVATE_BANK = '''
from tasks import Task

PUBLIC_PRACTICE = False
WRITTEN_POINTS = {"ex-07-extrapolate": 3}

TASKS = [
    Task("ex-07-layer-bytes", points=3,
         draw=lambda rng: {"batch": rng.randint(17, 40), "heads": rng.randint(65, 99), "n": 512 * rng.randint(17, 33),
                           "dtype": rng.choice(["float16", "float32"])},
         book={"batch": 4, "heads": 32, "n": 4096, "dtype": "bfloat16"},
         numbers="Use {heads} heads, a batch of {batch} sequences of {n} tokens, in {dtype}.",
         prompt="an int: the bytes of one layer's score matrices (batch {batch}, {heads} heads, n = {n}, {dtype})",
         solution="answer = {batch} * {heads} * {n} ** 2 * torch.finfo(torch.{dtype}).bits // 8"),
    Task("ex-07-max-length",
         draw=lambda rng: (lambda small: {"heads": rng.randint(2, 5), "batch": rng.randint(1, 3), "small": small,
                                          "large": 2 * small})(rng.randint(100000, 900000)),
         book={"heads": 16, "batch": 2, "small": 24, "large": 48},
         numbers="Use {heads} heads, a batch of {batch}, float16, and budgets of {small} GiB and {large} GiB.",
         prompt="a pair of ints: the largest n in {small} GiB and in {large} GiB",
         solution="answer = tuple(math.isqrt(gib * 2**30 // ({batch} * {heads} * 2)) for gib in ({small}, {large}))"),
]
'''


def head_commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def private(tmp_path_factory, book_html):
    """A private bank written here, outside the repository, built at the checked-out commit."""
    bank = tmp_path_factory.mktemp("instructor") / "bank.py"
    bank.write_text(PRIVATE_BANK)
    out = tmp_path_factory.mktemp("private")
    [result] = build.build(out, COURSE_SEED, ["07"], ref=head_commit(), bank=bank, html=book_html)
    return bank, out, result


def test_a_private_bank_grades_for_credit(private):
    bank, out, result = private
    loaded = tasks.load_bank(bank)
    chapter = result.name
    reference = grade(result / "autograder" / f"{chapter}.ipynb", result)
    assert reference.possible == auto_points(chapter, loaded) == 3 + 2
    assert reference.total == reference.possible, reference.summary()
    assert grade(result / "student" / f"{chapter}.ipynb", result).total == 0
    student = (result / "student" / f"{chapter}.ipynb").read_text()
    assert "Practice assignment" not in student
    with open(out / "points.csv") as table:
        assert f"{chapter},5,3,8" in table.read(), "3 + 2 auto points; the bank's 3 for ex-07-extrapolate by hand"


def test_nothing_public_computes_a_private_banks_answers(private):
    """Neither a file of the public repository nor the installed attnlib holds the private
    answers, the example bank gives other answers at the same seed, and attnlib's checker
    (the book's numbers) calls the private answers wrong."""
    _, out, result = private
    answers = references(out, result.name)
    public_files = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True,
                                  check=True).stdout.split()
    package = pathlib.Path(attnlib.__file__).parent
    texts = [(ROOT / name).read_text(errors="ignore") for name in public_files if (ROOT / name).is_file()]
    texts += [path.read_text(errors="ignore") for path in package.rglob("*") if path.is_file()]
    for label, reference in answers.items():
        value = grading.decode(reference["answer"])
        numbers = [value] if isinstance(value, int) else list(value)
        for number in numbers:
            assert len(str(number)) >= 7, "the bank draws numbers long enough to be found only as themselves"
            assert not any(str(number) in text for text in texts), (label, number)
        task = EXAMPLE.tasks[label]
        public = tasks.run(task, task.params(COURSE_SEED))
        assert not grading.matches(public, value, task.rtol, task.atol, task.also_at), label
        assert not attnlib.exercises.check(label, value).passed, label


def test_a_graded_build_needs_a_tag_or_commit(private, tmp_path):
    bank, _, _ = private
    with pytest.raises(ValueError, match="ref should be the tag or commit"):
        build.build(tmp_path, COURSE_SEED, ["07"], bank=bank)
    branch = subprocess.run(["git", "-C", str(ROOT), "branch", "--show-current"], capture_output=True,
                            text=True).stdout.strip()
    if branch:  # a checkout on a branch: the branch is refused, then accepted with a warning
        with pytest.raises(ValueError, match=f"got the branch '{re.escape(branch)}'"):
            build.build(tmp_path, COURSE_SEED, ["07"], ref=branch, bank=bank)
        with pytest.warns(UserWarning, match="building from the branch"):
            assert build.resolve_ref(branch, allow_branch=True) == head_commit()
    with pytest.raises(ValueError, match="which git does not know"):
        build.resolve_ref("no-such-tag-anywhere", allow_branch=False)


def test_a_graded_build_refuses_another_installed_attnlib(private, tmp_path):
    """The commit before attnlib last changed has other files: the answers computed here would not
    be the ones its autograder computes."""
    bank, _, _ = private
    last_change = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%H", "--", "attnlib"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    before = f"{last_change}~1"
    assert build.installed_differences(head_commit()) == []
    assert build.installed_differences(build.resolve_ref(before, allow_branch=False))
    with pytest.raises(ValueError, match="the installed attnlib .* should be the ref the autograder installs"):
        build.build(tmp_path, COURSE_SEED, ["07"], ref=before, bank=bank)


def test_the_autograder_installs_the_pinned_commit(private):
    _, out, result = private
    url, _ = build.repository()
    commit = head_commit()
    assert f"attnlib @ git+{url}@{commit}" in (result / "autograder" / "requirements.txt").read_text()
    assert f"git+{url}@{commit}" in (result / "student" / f"{result.name}.ipynb").read_text()
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
    answers = references(out, chapter)
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
    graded = grade(wrong, result)
    assert graded.total == 0
    summary = graded.summary(public_only=False)
    assert "not the answer for your numbers" in summary
    with zipfile.ZipFile(result / "autograder" / "autograder.zip") as bundle:
        tests = [bundle.read(name).decode(errors="ignore") for name in bundle.namelist()
                 if pathlib.PurePath(name).name != grading.REFERENCES]
    for reference in answers.values():
        value = grading.decode(reference["answer"])
        for number in [value] if isinstance(value, int) else value:
            assert str(number) not in summary
            assert not any(str(number) in text for text in tests)


# Each trick of the review, with the reference it tried to pass: a kind that is not the answer's.
TYPE_TRICKS = [
    ("120", 120), (b"120", 120), (True, 1), (True, 1.0), (1.0, True), (np.float64(1.0), True),
    (("120", "250"), (120.0, 250.0)), ([[3, 3], [3, 5]], ((3, 3), (3, 5, 1))), ((3, 3, 5), ((3, 3), (3, 5))),
    (np.array([[1.0, 0.0]]), np.array([[True, False]])), (torch.tensor([[1, 0]]), np.array([[True, False]])),
    (np.array([[True, False]]), np.array([[1.0, 0.0]])), (float("nan"), 1.0), (float("inf"), float("inf")),
    ([1.0, 2.0, 3.0], np.array([1.0, 2.0])), (None, 1.0), (..., 1.0), ({"a": 1}, 1.0), (3.5, 3),
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
    export writes the notebook and offers it for download, and that file gets zero and full
    marks. (otter's own Notebook raises there.)"""
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
    assert graded.possible == auto_points(chapter)
    assert graded.total == (graded.possible if edition == "autograder" else 0)


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
                        str(submissions / f"{student}.ipynb")], check=True, capture_output=True)
    written.totals(tmp_path / "results", tmp_path / "scores.csv", tmp_path / "totals.csv")
    with open(tmp_path / "totals.csv") as table:
        totals = {row["student"]: row for row in csv.DictReader(table)}
    manual = sum(questions.values())
    assert totals["alice"] == {"student": "alice", "auto": f"{auto_points(chapter):g}", "written": f"{manual:g}",
                               "total": f"{auto_points(chapter) + manual:g}"}
    assert totals["bob"]["total"] == "0"


def test_totals_refuse_a_missing_score(tmp_path):
    import written

    (tmp_path / "scores.csv").write_text("student,question,points,score\nalice,ex-07-extrapolate-written,1,\n")
    with pytest.raises(ValueError, match="got none for alice, ex-07-extrapolate-written"):
        written.totals(tmp_path, tmp_path / "scores.csv", tmp_path / "totals.csv")
