"""The graded assignments: otter-grader gives the reference solutions full marks and a blank
notebook zero, without crashing; the student's notebook holds no hidden test; the course's
numbers differ from the book's, so the book's solutions do not answer the graded version.

Grading runs otter without Docker, in this environment, as ``otter run`` does.
"""
import json
import pathlib
import sys

import pytest
from otter.api import grade_submission

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "assignments"))
import build  # noqa: E402
import catalogue  # noqa: E402
import grading  # noqa: E402
import tasks  # noqa: E402

GRADED = [path.stem for path in catalogue.chapter_paths() if catalogue.chapter_exercises(path)]
COURSE_SEED = 2026


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("assignments")
    return {result.name: result for result in build.build(out, COURSE_SEED)}


def grade(notebook: pathlib.Path, chapter: pathlib.Path):
    return grade_submission(str(notebook), str(chapter / "autograder" / "autograder.zip"), quiet=True)


def auto_points(chapter: str) -> int:
    return sum(e.auto_points for e in catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb"))


def test_every_chapter_with_exercises_has_an_assignment(built):
    assert sorted(built) == GRADED
    for result in built.values():
        assert (result / "student" / f"{result.name}.ipynb").is_file()
        assert (result / "autograder" / "autograder.zip").is_file()


@pytest.mark.parametrize("chapter", GRADED)
def test_reference_solutions_get_full_marks(chapter, built):
    results = grade(built[chapter] / "autograder" / f"{chapter}.ipynb", built[chapter])
    assert results.possible == auto_points(chapter) > 0
    assert results.total == results.possible, results.summary()


@pytest.mark.parametrize("chapter", GRADED)
def test_a_blank_notebook_gets_zero(chapter, built):
    results = grade(built[chapter] / "student" / f"{chapter}.ipynb", built[chapter])
    checked = [e.label for e in catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb") if e.checked]
    assert sorted(results.results) == sorted(checked), "every question is graded, none crashes the grader"
    assert results.total == 0 and results.possible == auto_points(chapter)


@pytest.mark.parametrize("chapter", GRADED)
def test_the_student_notebook_holds_no_hidden_test_and_no_reference(chapter, built):
    text = (built[chapter] / "student" / f"{chapter}.ipynb").read_text()
    notebook = json.loads(text)
    assert "matches(" not in text and "BEGIN SOLUTION" not in text and "answer = " not in text
    assert not (built[chapter] / "student" / "grading.py").exists()
    manual = [e for e in catalogue.chapter_exercises(catalogue.CHAPTERS / f"{chapter}.ipynb") if e.written]
    answer_cells = [c for c in notebook["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])
                    and c["cell_type"] == "markdown"]
    assert len(answer_cells) == len(manual), "one written-answer cell per exercise that asks why"


@pytest.mark.parametrize("task", [t for t in tasks.TASKS if t.variants], ids=lambda t: t.label)
def test_no_variant_is_answered_by_the_book(task):
    book = tasks.run(task, task.book)
    for params in task.variants:
        assert params != task.book
        assert not grading.matches(book, tasks.run(task, params), rtol=max(task.rtol, 1e-9))


def test_the_course_seed_chooses_the_numbers():
    varied = [t for t in tasks.TASKS if t.variants]
    assert [t.params(1) for t in varied] != [t.params(2) for t in varied]
    assert [t.params(1) for t in varied] == [t.params(1) for t in varied]


@pytest.mark.parametrize("junk", [..., None, "1", [[1, 2]], float("nan")], ids=repr)
def test_matches_never_raises_and_never_accepts_junk(junk):
    assert not grading.matches(junk, (1.0, [2.0, 3.0]), rtol=1e-6)
    assert not grading.matches(junk, 4.0, rtol=0.0)


def test_the_instructor_page_lists_every_exercise():
    page = (ROOT / "instructor.md").read_text()
    assert catalogue.page_block(page) == catalogue.markdown_table(), \
        "run python assignments/catalogue.py --write instructor.md"
    labels = [e.label for e in catalogue.all_exercises()]
    assert len(labels) > len(tasks.TASKS) and all(f"`{label}`" in page for label in labels)


def test_the_autograder_installs_the_pinned_library(built):
    url, ref = build.repository()
    chapter = built[GRADED[0]]
    assert f"attnlib @ git+{url}@{ref}" in build.requirements(ref)
    notebook = (chapter / "student" / f"{chapter.name}.ipynb").read_text()
    assert f"git+{url}@{ref}" in notebook
