"""Sliding windows (``window=``) and attention sinks (``sinks=``) on every backend.

Each backend that declares ``SUPPORTS_WINDOW`` / ``SUPPORTS_SINKS`` is compared
with a float64 formula written here from the definitions, independently of
attnlib's masks and softmax; a backend that does not declare a keyword is
refused by the dispatcher, never run with it ignored.
"""
import math
import types

import pytest
import torch

import attnlib
from attnlib import dispatch
from reference import max_error, randn

WINDOW_BACKENDS = ["naive", "tiled", "fused"]
SINK_BACKENDS = ["naive", "tiled", "fused"]
#: Backends whose float64 grid runs in a module of its own: on the CPU the fused path runs only
#: in Triton's interpreter, which a process switches on before it imports Triton
#: (tests/test_fused_window_and_sinks.py checks it against this module's formula).
GRID_ELSEWHERE = {"fused"}


def run_here(backends):
    return [backend for backend in backends if backend not in GRID_ELSEWHERE]


def window_allowed(L, S, left, right, offset):
    """Key j visible to query i iff i + offset - left <= j <= i + offset + right (None: unbounded)."""
    i = torch.arange(L)[:, None] + offset
    j = torch.arange(S)[None, :]
    allowed = torch.ones(L, S, dtype=torch.bool)
    if left is not None:
        allowed &= j >= i - left
    if right is not None:
        allowed &= j <= i + right
    return allowed


def attention_float64(q, k, v, *, allowed=None, sinks=None, cap=None):
    """``softmax([scores, sink]) v`` in float64 with the sink's column dropped; empty rows give 0."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = torch.einsum("...ie,...je->...ij", q, k) / math.sqrt(q.shape[-1])
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        sink_column = sinks.double().reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sink_column], dim=-1)
    row_max = scores.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    exps = torch.exp(scores - row_max)
    total = exps.sum(-1, keepdim=True)
    weights = exps / torch.where(total > 0, total, torch.ones_like(total))
    if sinks is not None:
        weights = weights[..., :-1]
    return weights @ v


WINDOWS = [(0, 0), (2, 0), (3, 1), (None, 2), (4, None), (100, 100)]
#: is_causal forbids a right reach (refused in test_bad_input_is_refused_by_name)
WINDOWS_AND_CAUSAL = [(w, False) for w in WINDOWS] + [(w, True) for w in WINDOWS if w[1] in (0, None)]


@pytest.mark.parametrize("backend", run_here(WINDOW_BACKENDS))
@pytest.mark.parametrize("window, causal", WINDOWS_AND_CAUSAL)
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_window_matches_float64_formula(backend, window, causal, alignment):
    L, S = 9, 14
    q, k, v = randn(2, 4, L, 16, seed=1) * 2, randn(2, 2, S, 16, seed=2) * 2, randn(2, 2, S, 8, seed=3)
    offset = S - L if alignment == "bottom_right" else 0
    allowed = window_allowed(L, S, *window, offset)
    if causal:
        allowed &= window_allowed(L, S, None, 0, offset)
    output = attnlib.scaled_dot_product_attention(
        q, k, v, enable_gqa=True, is_causal=causal, causal_alignment=alignment, window=window,
        backend=backend,
    )
    assert max_error(output, attention_float64(q, k, v, allowed=allowed)) < 1e-12


@pytest.mark.parametrize("backend", run_here(WINDOW_BACKENDS))
def test_window_meets_a_bool_mask(backend):
    L, S = 7, 11
    q, k, v = randn(1, 2, L, 8, seed=4), randn(1, 2, S, 8, seed=5), randn(1, 2, S, 4, seed=6)
    padding = torch.arange(S) < 8  # the last three keys are padding
    output = attnlib.scaled_dot_product_attention(q, k, v, padding, window=(2, 2), backend=backend)
    expected = attention_float64(q, k, v, allowed=window_allowed(L, S, 2, 2, 0) & padding)
    assert max_error(output, expected) < 1e-12


@pytest.mark.parametrize("backend", run_here(SINK_BACKENDS))
@pytest.mark.parametrize("mask_kind", [None, "causal", "window", "empty_rows"])
def test_sinks_match_float64_formula(backend, mask_kind):
    L, S = 6, 10
    q, k, v = randn(2, 4, L, 16, seed=7) * 2, randn(2, 2, S, 16, seed=8) * 2, randn(2, 2, S, 8, seed=9)
    sinks = torch.tensor([-2.0, 0.0, 1.5, 6.0], dtype=torch.float64)
    kwargs, allowed = {}, None
    if mask_kind == "causal":
        kwargs, allowed = {"is_causal": True}, window_allowed(L, S, None, 0, 0)
    elif mask_kind == "window":
        kwargs, allowed = {"window": (1, 1)}, window_allowed(L, S, 1, 1, 0)
    elif mask_kind == "empty_rows":
        allowed = torch.ones(L, S, dtype=torch.bool)
        allowed[[1, 4]] = False
        kwargs = {"attn_mask": allowed}
    output = attnlib.scaled_dot_product_attention(
        q, k, v, enable_gqa=True, sinks=sinks, backend=backend, **kwargs
    )
    assert max_error(output, attention_float64(q, k, v, allowed=allowed, sinks=sinks)) < 1e-12
    if mask_kind == "empty_rows":
        assert output[..., [1, 4], :].abs().max() == 0


def test_a_zero_sink_is_softmax_plus_one():
    """With sink 0 each weight is exp(z_j) / (1 + sum exp(z)): the "softmax plus one"."""
    q, k = randn(1, 5, 8, seed=10), randn(1, 7, 8, seed=11)
    weights = attnlib.attention_weights(q, k, sinks=torch.zeros(1, dtype=torch.float64))
    exps = torch.exp(q @ k.mT / math.sqrt(8))
    assert max_error(weights, exps / (1 + exps.sum(-1, keepdim=True))) < 1e-14
    assert bool((weights.sum(-1) < 1).all())


@pytest.mark.parametrize("backend", run_here(sorted(set(WINDOW_BACKENDS) & set(SINK_BACKENDS))))
def test_gradients_with_window_and_sinks_pass_gradcheck(backend):
    q = randn(1, 2, 5, 4, seed=12).requires_grad_()
    k = randn(1, 1, 7, 4, seed=13).requires_grad_()
    v = randn(1, 1, 7, 3, seed=14).requires_grad_()
    sinks = torch.tensor([0.3, -1.0], dtype=torch.float64, requires_grad=True)

    def attend(q, k, v, sinks):
        return attnlib.scaled_dot_product_attention(
            q, k, v, is_causal=True, causal_alignment="bottom_right", enable_gqa=True,
            window=(2, 0), sinks=sinks, softcap=4.0, backend=backend,
        )

    assert torch.autograd.gradcheck(attend, (q, k, v, sinks))


def test_every_backend_declares_window_and_sinks():
    assert set(WINDOW_BACKENDS) == set(SINK_BACKENDS) == set(attnlib.BACKENDS)


@pytest.mark.parametrize("keyword, value", [("window", (1, 0)), ("sinks", torch.zeros(1, dtype=torch.float64))])
def test_a_backend_that_does_not_declare_a_keyword_is_passed_over(keyword, value):
    q = randn(1, 1, 4, 8, seed=15)
    takes_anything_else = types.SimpleNamespace(unsupported_reason=lambda problem: None,
                                                SUPPORTS_WINDOW=keyword != "window",
                                                SUPPORTS_SINKS=keyword != "sinks")
    problem = attnlib.problem.check_problem(q, q, q, **{keyword: value})
    assert dispatch.unsupported_reason(takes_anything_else, problem) == f"{keyword} is not implemented in this path"


@pytest.mark.parametrize("kwargs, error, words", [
    ({"window": 3}, TypeError, "window must be None or a tuple (left, right)"),
    ({"window": (1, 2, 3)}, TypeError, "window must be None or a tuple (left, right)"),
    ({"window": (-1, 0)}, ValueError, "window's left reach must be a non-negative int"),
    ({"window": (1, 1.5)}, TypeError, "window's right reach must be a non-negative int or None, got float"),
    ({"window": (True, 0)}, TypeError, "window's left reach"),
    ({"window": (None, None)}, ValueError, "pass window=None"),
    ({"window": (3, 1), "is_causal": True}, ValueError, "which is_causal=True forbids"),
    ({"sinks": [0.0, 0.0]}, TypeError, "sinks must be a torch.Tensor or None, got list"),
    ({"sinks": torch.zeros(2, dtype=torch.float32)}, TypeError, "sinks must have the query's dtype"),
    ({"sinks": torch.zeros(3, dtype=torch.float64)}, ValueError, "sinks must have shape (Hq,) = (2,)"),
    ({"sinks": torch.zeros(1, 2, dtype=torch.float64)}, ValueError, "got shape (1, 2)"),
    ({"sinks": torch.tensor([0.0, float("nan")], dtype=torch.float64)}, ValueError, "sinks must be finite"),
])
@pytest.mark.parametrize("backend", sorted(attnlib.BACKENDS))
def test_bad_input_is_refused_by_name(kwargs, error, words, backend):
    q = randn(1, 2, 4, 8, seed=17)
    with pytest.raises(error) as caught:
        attnlib.scaled_dot_product_attention(q, q, q, backend=backend, **kwargs)
    assert words in str(caught.value)


def test_window_mask_helper_matches_the_rule():
    for window in WINDOWS:
        for alignment, offset in (("top_left", 0), ("bottom_right", 5)):
            expected = window_allowed(4, 9, *window, offset)
            assert torch.equal(attnlib.window_mask(4, 9, window, alignment), expected)
