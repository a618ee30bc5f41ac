"""Chapter 12's checkers accept answers computed here and reject plausible mistakes with a hint."""
import math

import numpy as np
import pytest
import torch

import attnlib
from attnlib import positions
from attnlib.book import exercises


def correlated_variance_ratios(angle_factor=2):
    # Var(q.k)/E summed over the 32 planes of width 64: 2 + 2 rho^2 cos(angle_factor * phi) each
    theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    return [float(np.sum(2 + 2 * 0.25 * np.cos(angle_factor * offset * theta)) / 64)
            for offset in (0, 1, 100)]


def test_correlated_variance_accepts_the_sum_over_planes():
    assert exercises.check("ex-12-correlated-variance", correlated_variance_ratios())


def test_correlated_variance_accepts_a_monte_carlo_free_torch_answer():
    theta = positions.rope_frequencies(64)
    answer = torch.stack([(2 + 0.5 * torch.cos(2 * o * theta)).sum() / 64 for o in (0, 1, 100)])
    assert exercises.check("ex-12-correlated-variance", answer)


def test_correlated_variance_names_the_single_angle():
    feedback = exercises.check("ex-12-correlated-variance", correlated_variance_ratios(angle_factor=1))
    assert not feedback and "cos(2 phi)" in feedback.message


def test_correlated_variance_names_the_missing_division():
    feedback = exercises.check("ex-12-correlated-variance", [64 * r for r in correlated_variance_ratios()])
    assert not feedback and "divide them by d_k" in feedback.message


def test_correlated_variance_names_independent_coordinates():
    feedback = exercises.check("ex-12-correlated-variance", [1.0, 1.0, 1.0])
    assert not feedback and "correlation" in feedback.message


def content_free_entropy(head):
    mask = positions.alibi(8, 1, 4096, causal=True, alignment="bottom_right", dtype=torch.float64)[head]
    weights = attnlib.attention_weights(torch.zeros(1, 16, dtype=torch.float64),
                                        torch.ones(4096, 16, dtype=torch.float64), attn_mask=mask)
    return torch.special.entr(weights).sum().item()


def test_alibi_entropy_accepts_the_measured_entropy():
    assert exercises.check("ex-12-alibi-entropy", content_free_entropy(3))


def test_alibi_entropy_names_another_head():
    feedback = exercises.check("ex-12-alibi-entropy", content_free_entropy(2))
    assert not feedback and "another head" in feedback.message


def test_alibi_entropy_names_the_missing_mask():
    feedback = exercises.check("ex-12-alibi-entropy", math.log(4096))
    assert not feedback and "ALiBi mask" in feedback.message


def test_softcap_slope_accepts_autograd():
    s = torch.tensor([0.0, 5.0, 15.0], dtype=torch.float64, requires_grad=True)
    (5 * torch.tanh(s / 5)).sum().backward()
    assert exercises.check("ex-12-softcap-slope", s.grad)


@pytest.mark.parametrize("wrong, words", [
    (1 - np.tanh(np.array([0.0, 5.0, 15.0])) ** 2, "z / c"),
    (1 - np.tanh(np.array([0.0, 5.0, 15.0]) / 5), "squared"),
    (5 * np.tanh(np.array([0.0, 5.0, 15.0]) / 5), "capped scores"),
])
def test_softcap_slope_names_the_mistake(wrong, words):
    feedback = exercises.check("ex-12-softcap-slope", wrong)
    assert not feedback and words in feedback.message


def test_temperatures_accept_the_ratios():
    standard = 1 / 16
    assert exercises.check("ex-12-temperatures", [standard * math.sqrt(128), standard * 256 / 8, standard])


def test_temperatures_name_an_inversion_and_squares():
    right = np.array([math.sqrt(128) / 16, 2.0, 1 / 16])
    inverted = exercises.check("ex-12-temperatures", 1 / right)
    assert not inverted and "inverted" in inverted.message
    squared = exercises.check("ex-12-temperatures", right**2)
    assert not squared and "variances" in squared.message


@pytest.mark.parametrize("label", ["ex-12-correlated-variance", "ex-12-softcap-slope", "ex-12-temperatures"])
def test_non_finite_answers_are_turned_away(label):
    feedback = exercises.check(label, [1.0, float("nan"), 1.0])
    assert not feedback and "finite" in feedback.message


def test_mup_widths_accept_sqrt_d_over_8():
    # muP's 8/d_k against 1/sqrt(d_k): T = sqrt(d_k)/8, worked by hand: 1 at 64, 2 at 256
    assert exercises.check("ex-12-mup-widths", [math.sqrt(32) / 8, 1.0, math.sqrt(2), 2.0, math.sqrt(8)])


def test_mup_widths_name_the_plain_one_over_d_and_an_inversion():
    plain = exercises.check("ex-12-mup-widths", [math.sqrt(d) for d in (32, 64, 128, 256, 512)])
    assert not plain and "8/d_k" in plain.message
    inverted = exercises.check("ex-12-mup-widths", [8 / math.sqrt(d) for d in (32, 64, 128, 256, 512)])
    assert not inverted and "inverted" in inverted.message
    wrong = exercises.check("ex-12-mup-widths", [1.0] * 5)
    assert not wrong and "index (4,)" in wrong.message  # the widest head is furthest from 1


def test_non_finite_entropy_is_turned_away():
    feedback = exercises.check("ex-12-alibi-entropy", float("inf"))
    assert not feedback and "finite" in feedback.message
