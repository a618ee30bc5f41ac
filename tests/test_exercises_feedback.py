"""The checkers teach without answering: a wrong answer's feedback never holds the right value,
non-finite and non-answers are turned away with a sentence, and the verdict is shown once.

The right answers are the book's (tests/book_answers.py: the example bank's tasks with the
book's numbers, and the book's own solutions), which every checker must accept.
"""
import copy
import json
import math
import pathlib
import time

import numpy as np
import pytest
import sympy as sp
import torch
from IPython.core.formatters import DisplayFormatter

from attnlib.book import exercises
from attnlib.heads import MultiHeadAttention

import book_pages
from book_answers import answered_labels, book_answer

ROOT = pathlib.Path(__file__).resolve().parents[1]

LABELS = sorted(exercises.CHECKERS)
PROBE_FACTOR = 1.37
# ex-08-why-max can only bound l_running, since the scores are the student's own draw: a wrong
# answer is one outside the bound.
WRONG_ANSWERS = {"ex-08-why-max": (math.inf, 9.5)}


@pytest.fixture(scope="module")
def right_answers():
    return {label: book_answer(label) for label in LABELS}


def transform(answer, number, module):
    """``answer`` with every number passed through ``number`` and every module through ``module``."""
    if isinstance(answer, MultiHeadAttention):
        return module(answer)
    if isinstance(answer, (tuple, list)) and not isinstance(answer, torch.Size):
        return type(answer)(transform(x, number, module) for x in answer)
    if answer is None or isinstance(answer, (bool, np.bool_)):
        return answer
    if isinstance(answer, torch.Size):
        return tuple(int(number(n)) for n in answer)
    if isinstance(answer, sp.Basic):
        return number(answer)
    if isinstance(answer, torch.Tensor) and answer.dtype == torch.bool:
        return ~answer
    return number(answer)


def numbers_in(answer) -> list[float]:
    found = []
    transform(answer, lambda x: found.extend(np.ravel(np.asarray(x, dtype=float)).tolist()) or x
              if not isinstance(x, sp.Basic) else x, lambda m: m)
    return found


def scaled_module(module):
    """The module unchanged if it carries a temperature, else with its query projection scaled:
    a pair (hot, folded) whose folding is off."""
    if module.temperature != 1.0:
        return module
    other = copy.deepcopy(module)
    with torch.no_grad():
        other.q_proj.weight *= PROBE_FACTOR
    return other


def probe(answer):
    """A wrong answer near the right one: numbers times 1.37 (plus 1 for zeros), masks inverted."""
    def number(x):
        if isinstance(x, sp.Basic):
            return x * sp.Rational(137, 100) + 1
        if isinstance(x, int):
            return int(x * PROBE_FACTOR) + 1
        return x * PROBE_FACTOR + (x == 0)
    return transform(answer, number, scaled_module)


def spellings(value: float) -> set[str]:
    """How a message could write ``value``."""
    if not math.isfinite(value):
        return {str(value)}
    forms = {f"{value:.3g}", f"{value:.4g}", f"{value:.6g}", f"{value:g}", f"{value:.3f}", f"{value:.4f}"}
    if value == round(value):
        forms.add(str(int(value)))
    return forms


def informative(value: float, prompt: str) -> bool:
    """Whether a right value would give something away if a message wrote it: not a small
    whole number (a shape, a count of heads), not a number the exercise itself states."""
    if not math.isfinite(value) or (value == round(value) and abs(value) < 100):
        return False
    return not any(form in prompt for form in spellings(value))


def test_every_checker_has_a_reference_answer():
    assert answered_labels() == set(exercises.CHECKERS)


@pytest.mark.parametrize("label", LABELS)
def test_the_reference_answer_passes(label, right_answers):
    assert exercises.check(label, right_answers[label])


@pytest.mark.parametrize("label", LABELS)
def test_a_wrong_answer_gets_a_hint_without_the_right_value(label, right_answers):
    right = right_answers[label]
    wrong = WRONG_ANSWERS.get(label, probe(right))
    feedback = exercises.check(label, wrong)
    assert not feedback
    prompt = exercises.CHECKERS[label].prompt
    mine = {form for value in numbers_in(wrong) for form in spellings(value)}
    leaked = {form for value in numbers_in(right) if informative(value, prompt)
              for form in spellings(value) if form not in mine and form in feedback.message}
    assert not leaked, f"{label}: {feedback.message}"
    ratio = f"{PROBE_FACTOR:g}"
    assert ratio in mine or ratio not in feedback.message, "a ratio to the right answer gives it away"


def poisoned(answer, bad: float):
    """``answer`` with every number replaced by ``bad`` (nan or inf)."""
    def number(x):
        if isinstance(x, sp.Basic):
            return sp.nan if math.isnan(bad) else sp.oo
        if isinstance(x, (torch.Tensor, np.ndarray)):
            return x * 0 + bad if not isinstance(x, torch.Tensor) or x.is_floating_point() else x.double() * 0 + bad
        return bad

    def module(m):
        other = copy.deepcopy(m)
        with torch.no_grad():
            other.q_proj.weight.fill_(bad)
        return other
    return transform(answer, number, module)


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_no_checker_accepts_a_non_finite_answer(label, bad, right_answers):
    feedback = exercises.check(label, poisoned(right_answers[label], bad))
    assert not feedback
    assert feedback.message.endswith(".")


def test_why_max_rejects_an_infinite_or_undefined_pair():
    # the examples: only the frozen sum may be inf, and the running l is a sum of 8 terms
    for answer in [(math.inf, 1.0), (math.nan, 1.0), (math.nan, 2.5), (math.inf, math.nan)]:
        assert not exercises.check("ex-08-why-max", answer)


def test_max_length_rejects_nan():
    feedback = exercises.check("ex-07-max-length", (math.nan, math.nan))
    assert not feedback and "n_24 should hold finite numbers, got nan" in feedback.message


def test_max_length_near_miss_names_no_ratio_and_no_length(right_answers):
    n24, n48 = right_answers["ex-07-max-length"]
    feedback = exercises.check("ex-07-max-length", (n24 + 14, n48))
    assert not feedback and "times the memory" not in feedback.message and str(n24) not in feedback.message
    assert "as a function of n" in feedback.message, "the next step"
    assert "batch x heads" not in feedback.message and "2^30" not in feedback.message, "not the graded formula"


# The fall-through hints of the checkers whose exercise a course grades with other numbers: the
# next step to take, never the formula that gives the answer (the course review's item 6).
FORMULA_HINTS = [
    ("ex-07-layer-bytes", 12345, "batch x heads"), ("ex-02-correlation-budget", (0.3, 0.05), "rho^2 = 2"),
    ("ex-06-kv-cache", (9.5, 80.0), "2 (keys and values)"), ("ex-10-stored-bytes", (1, 1), "L x S per head"),
    ("ex-11-infiniband", 2306, "4 H L_b^2 d / F"), ("ex-08-block-sizes", (1, 1, 1), "heads x block_q x block_k"),
    ("ex-02-unequal-scales", sp.Symbol("d") * 3, "d sigma_q^2 sigma_k^2"),
]


@pytest.mark.parametrize("label,wrong,formula", FORMULA_HINTS, ids=[h[0] for h in FORMULA_HINTS])
def test_a_wrong_try_gets_the_next_step_not_the_formula(label, wrong, formula):
    feedback = exercises.check(label, wrong)
    assert not feedback and formula not in feedback.message, feedback.message


def test_heavier_tails_names_what_none_is():
    feedback = exercises.check("ex-03-heavier-tails", None)
    assert not feedback and "answer should be a number, got None" in feedback.message
    assert "NaN" not in feedback.message


@pytest.mark.parametrize("label", ["ex-02-unequal-scales", "ex-02-bernoulli", "ex-03-xavier-square",
                                   "ex-08-merge-order"])
def test_symbolic_checkers_turn_away_a_large_array_at_once(label):
    huge = np.ones(10**6)
    answer = huge if label in ("ex-02-unequal-scales", "ex-03-xavier-square") else (
        (huge, huge) if label == "ex-02-bernoulli" else ((huge, huge, huge), (huge, huge, huge)))
    start = time.perf_counter()
    feedback = exercises.check(label, answer)
    assert not feedback and "should be one SymPy expression or number" in feedback.message
    assert time.perf_counter() - start < 1.0


def test_the_verdict_is_printed_once(capsys):
    feedback = exercises.check("ex-01-value-width", ((3, 3), (3, 5)))
    assert capsys.readouterr().out == f"{feedback}\n"
    shown, _ = DisplayFormatter().format(feedback)
    assert shown == {}, "as a cell's value the verdict would show a second time"


def test_check_cells_follow_their_own_exercise():
    # Chapter 2 keeps several exercises in one markdown cell
    notebook = json.loads((ROOT / "chapters" / "02_variance_symbolic.ipynb").read_text())
    cells = exercises.student_notebook(notebook)["cells"]
    checks = [i for i, c in enumerate(cells) if "student" in c["metadata"].get("tags", [])]
    assert len(checks) >= 2
    for i in checks:
        label = "".join(cells[i]["source"]).split(":")[0].removeprefix("# ")
        before = "".join(cells[i - 1]["source"])
        assert cells[i - 1]["cell_type"] == "markdown" and f":label: {label}" in before
        assert before.rstrip().endswith("````"), "the exercise should end the markdown cell before its check"


def test_student_edition_speaks_to_the_student():
    for path in book_pages.notebooks():
        cells = exercises.student_notebook(json.loads(path.read_text()))["cells"]
        text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert "student-edition" not in text and "in its solution" not in text, path.name
        assert text.count(exercises.STUDENT_INTRODUCTION.strip()) == text.count("## Exercises")


CHECKER_MODULES = sorted(name for name, module in vars(exercises).items()
                         if name.startswith("ch") and hasattr(module, "__file__"))
@pytest.mark.parametrize("name", CHECKER_MODULES)
def test_no_installed_function_computes_an_answer(name):
    """A checker module defines graders, and hints that read a student's answer: the expected values
    are computed inside the graders, for the book's numbers, so no helper answers other numbers."""
    module = getattr(exercises, name)
    graders = {c.grade for c in exercises.CHECKERS.values()}
    defined = [f for f in vars(module).values() if callable(f) and getattr(f, "__module__", "") == module.__name__
               and not isinstance(f, type)]
    # Chapter 14's checkers grade a layer and head the student picks, so they measure the checkpoint
    # for any head: _recorded hands them the model's queries and keys, no expected value
    measures_the_checkpoint = {"_recorded"} if name == "ch14" else set()
    extra = [f.__name__ for f in defined if f not in graders and f.__name__ not in measures_the_checkpoint
             and not f.__name__.startswith(("_hint_", "_read_", "_close"))]
    assert not extra, f"{module.__name__} defines {extra}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to put answers on it")
def test_answers_on_a_gpu_are_read():
    device = torch.device("cuda")
    weights = torch.softmax(torch.randn(4, 8, dtype=torch.float64), dim=-1).to(device)
    jacobians = torch.diag_embed(weights) - weights[:, :, None] * weights[:, None, :]
    assert exercises.check("ex-04-jacobian-bound", (weights, jacobians.abs().sum(dim=(-2, -1))))
    torch.manual_seed(0)
    hot = MultiHeadAttention(32, 4, temperature=2.5, dtype=torch.float64).to(device)
    folded = copy.deepcopy(hot)
    folded.temperature = 1.0
    with torch.no_grad():
        folded.q_proj.weight /= 2.5
        folded.q_proj.bias /= 2.5
    assert exercises.check("ex-06-fold-temperature", (hot, folded))
