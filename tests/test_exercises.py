"""The exercise checkers accept right answers, reject wrong ones helpfully, and the student edition has no solutions."""
import json
import re

import nbformat
import numpy as np
import pytest

import book_pages
from attnlib.book import exercises

CHAPTERS = book_pages.notebooks()  # every chapter and section page, as _toc.yml lists them

Q = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]])
K = np.array([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]])
V = np.array([[1.0, 0], [0, 1], [1, 1]])


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def exercise_labels() -> set[str]:
    text = "".join(json.dumps(json.loads(p.read_text())["cells"]) for p in CHAPTERS)
    return set(re.findall(r":label: (ex-[\w-]+)", text))


def test_every_checker_belongs_to_an_exercise_in_a_chapter():
    assert set(exercises.CHECKERS) <= exercise_labels()


def test_row_two_accepts_the_hand_computation_and_rejects_row_one():
    weights = softmax(Q[1] @ K.T / 2)
    assert exercises.check("ex-01-row-two", (weights, weights @ V))
    wrong = exercises.check("ex-01-row-two", (softmax(Q[0] @ K.T / 2), softmax(Q[0] @ K.T / 2) @ V))
    assert not wrong and "weights does not match" in wrong.message


def test_row_two_explains_a_wrong_shape():
    feedback = exercises.check("ex-01-row-two", (np.zeros(4), np.zeros(2)))
    assert not feedback and "shape (3,)" in feedback.message


def test_shift_scale_limits():
    row = Q[0] @ K.T
    assert exercises.check("ex-01-shift-scale", (softmax(1e-9 * row), softmax(1e3 * row)))
    assert not exercises.check("ex-01-shift-scale", (softmax(row), softmax(1e3 * row)))


def test_causal_numpy():
    scores = np.where(np.tril(np.ones((3, 3), dtype=bool)), Q @ K.T / 2, -np.inf)
    assert exercises.check("ex-01-causal-numpy", softmax(scores))
    feedback = exercises.check("ex-01-causal-numpy", softmax(Q @ K.T / 2))
    assert not feedback and "above the diagonal" in feedback.message


def test_value_width_shapes():
    assert exercises.check("ex-01-value-width", ((3, 3), (3, 5)))
    assert not exercises.check("ex-01-value-width", ((3, 3), (3, 2)))


def causal_output(q, k, v):
    scores = np.where(np.tril(np.ones((3, 3), dtype=bool)), q @ k.T / 2, -np.inf)
    return softmax(scores) @ v


def test_permutation_accepts_the_reordered_causal_output():
    order = [2, 0, 1]
    assert exercises.check("ex-01-permutation", causal_output(Q[order], K[order], V[order]))
    # by hand: the old token 2 sees itself only, the old token 0 sees scores 2 and 1 (scaled 1, 0.5)
    first = 1 / (1 + np.exp(-0.5))
    assert exercises.check("ex-01-permutation", [[1, 1], [1, first], [0.616, 0.616]])


def test_permutation_says_the_mask_moves_with_the_tokens():
    order = [2, 0, 1]
    feedback = exercises.check("ex-01-permutation", causal_output(Q, K, V)[order])
    assert not feedback and "original causal output, reordered" in feedback.message
    feedback = exercises.check("ex-01-permutation", softmax(Q[order] @ K[order].T / 2) @ V[order])
    assert not feedback and "mask is missing" in feedback.message


@pytest.mark.parametrize("label", sorted(exercises.CHECKERS))
@pytest.mark.parametrize("junk", [..., None, -7, "x", [1, 2]], ids=["ellipsis", "none", "int", "str", "list"])
def test_every_checker_turns_junk_into_feedback(label, junk):
    """The student edition's placeholder ``answer = ...`` and other junk get 'not yet', never an exception."""
    feedback = exercises.check(label, junk)
    assert not feedback


def test_unknown_exercise():
    with pytest.raises(ValueError, match=r"exercise must be one of .* got 'ex-99'"):
        exercises.check("ex-99", None)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_student_edition_drops_solutions_and_keeps_exercises(path):
    original = json.loads(path.read_text())
    student = exercises.student_notebook(original)
    nbformat.validate(nbformat.from_dict(student))
    text = "".join("".join(c["source"]) for c in student["cells"] if c["cell_type"] == "markdown")
    original_text = "".join("".join(c["source"]) for c in original["cells"] if c["cell_type"] == "markdown")
    assert "{solution}" not in text
    assert text.count("{exercise}") == original_text.count("{exercise}")
    checked = [label for label in re.findall(r":label: (ex-[\w-]+)", original_text) if label in exercises.CHECKERS]
    check_cells = ["".join(c["source"]) for c in student["cells"] if "student" in c["metadata"].get("tags", [])]
    assert len(check_cells) == len(checked)
    assert all(f"check({label!r}" in cell for label, cell in zip(checked, check_cells))
    assert all("import attnlib.book.exercises\n" in cell for cell in check_cells)


def test_strip_solutions_keeps_what_follows():
    markdown = "before\n\n````{solution} ex-a\n:class: dropdown\n\n```python\nx = 1\n```\n````\n\nafter\n"
    assert exercises.strip_solutions(markdown) == "before\n\n\nafter\n"
