"""Checkers for the exercises of Chapter 10, The backward pass and training."""
import math

import numpy as np
import sympy as sp
import torch

from .. import stored_results
from . import UnreadableAnswer, as_array, as_number, as_parts, checker, compare
from .symbolic import as_expression

# counted from 0, as the book counts: scores z_j, values v_ja (key j, coordinate a), dO_a
_SCORES = sp.symbols("z_0:3", real=True)
_VALUES = sp.symbols("v_00 v_01 v_10 v_11 v_20 v_21", real=True)
_INCOMING = sp.symbols("dO_0:2", real=True)
# Points at which the two sums are evaluated: the largest score in each place, a tie, negative values.
_POINTS = [((3.0, -1.0, 0.5), (0.3, -1.2, 2.0, 0.7, -0.4, 1.1), (0.5, -2.0)),
           ((-2.0, 1.5, 0.25), (1.0, 0.0, -0.5, 2.5, 0.25, -1.5), (1.5, 0.75)),
           ((0.1, 0.1, -0.7), (-1.0, 2.0, 0.5, 0.5, 3.0, -2.0), (-0.25, 1.0))]

# The worked example of Chapter 1.
_EXAMPLE_Q = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
_EXAMPLE_K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
_EXAMPLE_V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)

_MASKED_ROW = 2
_HEADS, _LENGTH, _FLOAT_BYTES = 32, 8192, 4


def _hint_row_sum(expression, side: str) -> str | None:
    """What is wrong with the student's ``side`` sum, or None when it equals sum_j P_j dP_j."""
    symbols = _SCORES + _VALUES + _INCOMING
    for scores, values, incoming in _POINTS:
        point = dict(zip(symbols, scores + values + incoming))
        weights = np.exp(np.array(scores) - max(scores))
        weights /= weights.sum()
        grad_weights = np.array(values).reshape(3, 2) @ np.array(incoming)  # dP_j = sum_a dO_a v_ja
        got = float(expression.subs(point))
        if math.isclose(got, weights @ grad_weights, rel_tol=1e-9, abs_tol=1e-12):
            continue
        if math.isclose(got, grad_weights.sum(), rel_tol=1e-9, abs_tol=1e-12):
            return f"{side} adds the dP_j without their weights P_j."
        if math.isclose(got, np.exp(scores) @ grad_weights, rel_tol=1e-9, abs_tol=1e-12):
            return f"{side} uses exp(z_j) as weights; softmax divides them by their sum."
        return (f"{side} differs from sum_j P_j dP_j at z = {scores}: dP_j = dO_0 v_j0 + dO_1 v_j1, "
                "and O_a = sum_j P_j v_ja.")
    return None


@checker("ex-10-row-term",
         "a pair (lhs, rhs) of SymPy expressions in z_0..z_2, v_00..v_21, dO_0, dO_1: sum_j P_j dP_j "
         "and sum_a dO_a O_a for one query row with three keys and values of width 2")
def _row_term(answer):
    lhs, rhs = answer
    symbols = _SCORES + _VALUES + _INCOMING
    for expression, side in ((lhs, "lhs"), (rhs, "rhs")):
        error = _hint_row_sum(as_expression(expression, side, symbols), side)
        if error:
            return False, error
    return True, "both sums are sum_j sum_a P_j dO_a v_ja, so D costs one dot product of O with dO."


def _read_gradient(answer, name: str, shape: tuple[int, int]) -> np.ndarray:
    """The student's gradient ``name`` as a float array of ``shape``; NaN is kept for the hints."""
    if isinstance(answer, torch.Tensor):
        answer = answer.detach().cpu()
    if answer is None or isinstance(answer, (str, bytes, dict, set)):
        raise UnreadableAnswer(f"{name} should be an array of numbers, got {type(answer).__name__}")
    array = np.asarray(answer, dtype=float)
    if array.shape != shape:
        raise UnreadableAnswer(f"{name} should have shape {shape}, got {array.shape}")
    return array


@checker("ex-10-masked-row",
         "a pair (dq, dv): the (4, 8) and (6, 8) gradients of out.sum() with respect to q and v, for "
         "the exercise's q, k, v (seed 0, float64) and a mask under which query 2 sees no key")
def _masked_row(answer):
    dq, dv = answer
    got_q, got_v = _read_gradient(dq, "dq", (4, 8)), _read_gradient(dv, "dv", (6, 8))
    if np.isnan(got_v).all():
        return False, ("dv is NaN everywhere: softmax of a row of -inf is 0/0, and that row of P enters "
                       "every row of dV = P^T dO. A row with no key has weights 0; attnlib computes it so.")
    if sorted({int(i) for i in np.argwhere(np.isnan(got_q))[:, 0]}) == [_MASKED_ROW]:
        return False, ("row 2 of dq is NaN: softmax of a row of -inf is 0/0. A row with no key has "
                       "weights 0, and attnlib computes it that way.")
    if not (np.isfinite(got_q).all() and np.isfinite(got_v).all()):
        return False, "dq and dv should hold finite numbers; a masked row does not explain this NaN or inf."
    if np.any(got_q[_MASKED_ROW] != 0):
        return False, ("row 2 of dq is not zero. Query 2's weights are all 0, so dS = P * (dP - D) is 0 "
                       "in its row, and dQ = scale dS K with it.")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, 8, generator=gen, dtype=torch.float64).numpy() for n in (4, 6, 6))
    scores = q @ k.T / math.sqrt(8)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    weights[_MASKED_ROW] = 0.0
    grad_output = np.ones((4, 8))
    row_term = (grad_output * (weights @ v)).sum(axis=1, keepdims=True)
    expected_q = (weights * (grad_output @ v.T - row_term)) @ k / math.sqrt(8)
    passed, message = compare("dq", got_q, expected_q, 1e-8)
    if not passed:
        if np.allclose(got_q, expected_q * math.sqrt(8), atol=1e-8):
            return False, message + " dQ = scale dS K: is the factor 1/sqrt(8) there?"
        return False, message + " Use loss out.sum(), the draws in the order q, k, v, and query 2 fully masked."
    passed, message = compare("dv", got_v, weights.T @ grad_output, 1e-8)
    if not passed:
        return False, message + " dV = P^T dO, where query 2's row of P is 0."
    return True, "the masked row has gradient 0, never NaN, and adds nothing to dV."


@checker("ex-10-worked-value-gradient",
         "the (3, 2) gradient dV of out.sum() for Chapter 1's worked example")
def _worked_value_gradient(answer):
    got = as_array(answer, "dv", (3, 2))
    weights = torch.softmax(_EXAMPLE_Q @ _EXAMPLE_K.T / 2, dim=-1).numpy()
    grad_output = np.ones((3, 2))
    expected = weights.T @ grad_output
    passed, message = compare("dv", got, expected, 1e-6)
    if passed:
        return True, message + " Each row of dV is the total weight that its key receives from all queries."
    if np.allclose(got, weights @ grad_output, atol=1e-6):
        return False, message + " That is P dO, whose rows are all 1: dV = P^T dO takes the transpose."
    unscaled = torch.softmax(_EXAMPLE_Q @ _EXAMPLE_K.T, dim=-1).numpy()
    if np.allclose(got, unscaled.T @ grad_output, atol=1e-6):
        return False, message + " The scores are divided by sqrt(d_k) = 2 before the softmax."
    return False, message + " dV = P^T dO, with P the worked example's weights and dO all ones."


@checker("ex-10-stored-bytes",
         "a pair (weights_bytes, lse_bytes): bytes of float32 P and of the float32 log-sum-exp kept for "
         "the backward pass of one layer with 32 heads, L = S = 8192, batch 1")
def _stored_bytes(answer):
    weights_bytes, lse_bytes = (as_array(x, name, ()) for x, name in as_parts(answer, ("weights_bytes",
                                                                                    "lse_bytes")))
    expected_weights = _FLOAT_BYTES * _HEADS * _LENGTH * _LENGTH
    expected_lse = _FLOAT_BYTES * _HEADS * _LENGTH
    for got, expected, name in ((weights_bytes, expected_weights, "weights_bytes"),
                                (lse_bytes, expected_lse, "lse_bytes")):
        if got == expected:
            continue
        if got * 2**20 == expected or got * 2**30 == expected:
            return False, f"{name} looks like MiB or GiB; give bytes."
        if got * _HEADS == expected:
            return False, f"{name} counts one head; every head keeps its own."
        if got * _FLOAT_BYTES == expected:
            return False, f"{name} counts numbers; a float32 takes 4 bytes."
        if got * 2 == expected:
            return False, f"{name} looks like 2 bytes per number; the exercise keeps float32."
        return False, f"{name} does not match: write the tensor's shape for one head first, then count the bytes of all heads."
    return True, "P grows with L x S, the log-sum-exp with L: S times smaller."


@checker("ex-10-tau-divided",
         "a number: (|grad W_q| / tau without a scale) / (|grad W_q| / tau under 1/sqrt(d)) at step 0 of "
         "the stored Adam runs, seed 0, head_dim 256, LeCun init, LayerNorm")
def _tau_divided(answer):
    got = as_number(answer, "answer")
    runs = stored_results.load("training_sweep.json")["runs"]

    def at_start(rule):
        # (|grad W_q| at step 0, tau) of the Adam run, seed 0, head_dim 256, LeCun, LayerNorm
        [run] = [r for r in runs if r["optimizer"] == "adam" and r["seed"] == 0
                 and r["config"]["scale_rule"] == rule and r["config"]["head_dim"] == 256
                 and r["config"]["init"] == "lecun" and r["config"]["layernorm"]
                 and not r["config"]["qk_norm"]]
        return run["curves"]["grad_q"][0], run["scale"]

    (unscaled, tau_unscaled), (scaled, tau_scaled) = at_start("1"), at_start("1/sqrt(d)")
    expected = (unscaled / tau_unscaled) / (scaled / tau_scaled)
    if math.isclose(got, expected, rel_tol=1e-6):
        return True, ("with the factor tau divided out, the gradient that reaches the scores is smaller "
                      "without a scale: a saturated row passes less, as Chapter 4 said.")
    if math.isclose(got, unscaled / scaled, rel_tol=1e-6):
        return False, "that is the ratio of the raw norms; divide each by its own run's tau (its 'scale')."
    if math.isclose(got, 1 / expected, rel_tol=1e-6):
        return False, "that ratio is inverted: the run without a scale goes on top."
    if math.isclose(got, (unscaled * tau_unscaled) / (scaled * tau_scaled), rel_tol=1e-6):
        return False, "dW_q = tau X^T dZ K carries tau as a factor: divide by it, do not multiply."
    return False, "that ratio does not match; take grad_q at step 0 and the scale of each of the two runs."
