"""Chapter 10's checkers accept answers computed here and reject plausible mistakes with a hint."""
import json
import math
import pathlib

import numpy as np
import pytest
import sympy as sp
import torch

from attnlib.book import exercises

ROOT = pathlib.Path(__file__).resolve().parents[1]

S = sp.symbols("z_0:3", real=True)
G = sp.symbols("dO_0:2", real=True)
V = sp.Matrix(3, 2, lambda j, a: sp.Symbol(f"v_{j}{a}", real=True))


def row_sums(weights):
    """sum_j P_j dP_j and sum_a dO_a O_a with the given weights P_j."""
    grad_weights = [G[0] * V[j, 0] + G[1] * V[j, 1] for j in range(3)]
    output = [sum(weights[j] * V[j, a] for j in range(3)) for a in range(2)]
    return sum(p * dp for p, dp in zip(weights, grad_weights)), G[0] * output[0] + G[1] * output[1]


def softmax_weights():
    total = sum(sp.exp(s) for s in S)
    return [sp.exp(s) / total for s in S]


def test_row_term_accepts_both_sums_written_by_hand():
    assert exercises.check("ex-10-row-term", row_sums(softmax_weights()))


def test_row_term_accepts_plain_symbols_of_the_same_names():
    # a student who writes sp.symbols("z_0:3") without real=True is read by name
    lhs, rhs = row_sums(softmax_weights())
    plain = {x: sp.Symbol(x.name) for x in lhs.free_symbols | rhs.free_symbols}
    assert exercises.check("ex-10-row-term", (lhs.xreplace(plain), rhs.xreplace(plain)))


def test_row_term_names_unnormalised_weights():
    feedback = exercises.check("ex-10-row-term", row_sums([sp.exp(s) for s in S]))
    assert not feedback and "divides them by their sum" in feedback.message


def test_row_term_names_missing_weights():
    lhs = sum(G[0] * V[j, 0] + G[1] * V[j, 1] for j in range(3))
    feedback = exercises.check("ex-10-row-term", (lhs, row_sums(softmax_weights())[1]))
    assert not feedback and "without their weights" in feedback.message


def masked_problem():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, 8, generator=gen, dtype=torch.float64) for n in (4, 6, 6))
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2] = False
    return q, k, v, mask


def plain_torch_gradients(scale, fill_row=None):
    """dq and dv through torch.softmax; ``fill_row`` replaces the masked row of P (None: keep NaN)."""
    q, k, v, mask = masked_problem()
    q.requires_grad_()
    v.requires_grad_()
    weights = torch.softmax((scale * q @ k.T).masked_fill(~mask, -math.inf), dim=-1)
    if fill_row is not None:
        weights = torch.where(mask.any(dim=-1, keepdim=True), weights, fill_row)
    (weights @ v).sum().backward()
    return q.grad, v.grad


def test_masked_row_accepts_gradients_with_the_masked_row_at_zero():
    dq, dv = plain_torch_gradients(8**-0.5, fill_row=0.0)
    assert torch.equal(dq[2], torch.zeros(8, dtype=torch.float64))
    assert exercises.check("ex-10-masked-row", (dq, dv))


def test_masked_row_explains_the_nan_of_plain_softmax():
    # masked_fill stops the NaN before q, but the NaN row of P reaches every row of dV
    dq, dv = plain_torch_gradients(8**-0.5)
    assert torch.isfinite(dq).all() and torch.isnan(dv).all()
    feedback = exercises.check("ex-10-masked-row", (dq, dv))
    assert not feedback and "0/0" in feedback.message


def test_masked_row_explains_a_nan_row_of_dq():
    dq, dv = plain_torch_gradients(8**-0.5, fill_row=0.0)
    dq[2] = math.nan
    feedback = exercises.check("ex-10-masked-row", (dq, dv))
    assert not feedback and "row 2 of dq is NaN" in feedback.message


def test_masked_row_names_the_missing_scale():
    dq, dv = plain_torch_gradients(8**-0.5, fill_row=0.0)
    feedback = exercises.check("ex-10-masked-row", (dq * math.sqrt(8), dv))
    assert not feedback and "1/sqrt(8)" in feedback.message


def test_masked_row_rejects_a_non_zero_masked_row():
    dq, dv = plain_torch_gradients(8**-0.5, fill_row=0.0)
    dq[2] = 1e-3
    feedback = exercises.check("ex-10-masked-row", (dq, dv))
    assert not feedback and "row 2 of dq is not zero" in feedback.message


def test_masked_row_rejects_a_uniform_masked_row_in_dv():
    # giving the empty row uniform weights 1/6 instead of 0 leaves dq's row 2 at 0 but changes dV
    dq, _ = plain_torch_gradients(8**-0.5, fill_row=0.0)
    _, dv = plain_torch_gradients(8**-0.5, fill_row=1 / 6)
    feedback = exercises.check("ex-10-masked-row", (dq, dv))
    assert not feedback and "row of P is 0" in feedback.message


def test_masked_row_turns_away_a_wrong_shape():
    feedback = exercises.check("ex-10-masked-row", (np.zeros((4, 6)), np.zeros((6, 8))))
    assert not feedback and "shape (4, 8)" in feedback.message


EXAMPLE_Q = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]])
EXAMPLE_K = np.array([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]])


def example_weights(scale):
    scores = scale * EXAMPLE_Q @ EXAMPLE_K.T
    exps = np.exp(scores - scores.max(axis=1, keepdims=True))
    return exps / exps.sum(axis=1, keepdims=True)


def test_worked_value_gradient_accepts_the_column_sums_of_the_weights():
    # with dO all ones, dV_j = sum_i P_ij in both columns
    column_sums = example_weights(0.5).sum(axis=0)
    assert exercises.check("ex-10-worked-value-gradient", np.stack([column_sums, column_sums], axis=1))


def test_worked_value_gradient_names_the_missing_transpose():
    feedback = exercises.check("ex-10-worked-value-gradient", example_weights(0.5) @ np.ones((3, 2)))
    assert not feedback and "transpose" in feedback.message


def test_worked_value_gradient_names_the_missing_scale():
    feedback = exercises.check("ex-10-worked-value-gradient", example_weights(1.0).T @ np.ones((3, 2)))
    assert not feedback and "sqrt(d_k) = 2" in feedback.message


def test_stored_bytes_accepts_the_counts():
    assert exercises.check("ex-10-stored-bytes", (4 * 32 * 8192 * 8192, 4 * 32 * 8192))


@pytest.mark.parametrize("wrong, hint", [
    ((4 * 8192 * 8192, 4 * 32 * 8192), "counts one head"),
    ((32 * 8192 * 8192, 4 * 32 * 8192), "a float32 takes 4 bytes"),
    ((2 * 32 * 8192 * 8192, 4 * 32 * 8192), "2 bytes per number"),
    ((8 * 1024, 4 * 32 * 8192), "MiB or GiB"),
    ((4 * 32 * 8192 * 8192, 4 * 32 * 8192 * 8192), "lse_bytes does not match"),
])
def test_stored_bytes_names_the_mistake(wrong, hint):
    feedback = exercises.check("ex-10-stored-bytes", wrong)
    assert not feedback and hint in feedback.message


def _sweep_start(rule):
    # (|grad W_q| at step 0, tau) of the stored Adam run, seed 0, head_dim 256, LeCun, LayerNorm
    sweep = json.loads((ROOT / "attnlib" / "book" / "results" / "training_sweep.json").read_text())
    [r] = [r for r in sweep["runs"] if r["optimizer"] == "adam" and r["seed"] == 0
           and r["config"]["scale_rule"] == rule and r["config"]["head_dim"] == 256
           and r["config"]["init"] == "lecun" and r["config"]["layernorm"] and not r["config"]["qk_norm"]]
    return r["curves"]["grad_q"][0], 1.0 if rule == "1" else 256**-0.5


def test_tau_divided_accepts_the_ratio_of_gradients_over_their_factors():
    (unscaled, tau_1), (scaled, tau_sqrt) = _sweep_start("1"), _sweep_start("1/sqrt(d)")
    assert exercises.check("ex-10-tau-divided", (unscaled / tau_1) / (scaled / tau_sqrt))


def test_tau_divided_names_the_raw_ratio_and_the_inversion():
    (unscaled, tau_1), (scaled, tau_sqrt) = _sweep_start("1"), _sweep_start("1/sqrt(d)")
    raw = exercises.check("ex-10-tau-divided", unscaled / scaled)
    assert not raw and "raw" in raw.message
    inverted = exercises.check("ex-10-tau-divided", (scaled / tau_sqrt) / (unscaled / tau_1))
    assert not inverted and "inverted" in inverted.message
