"""Logit soft-capping (``softcap``): scores ``c * tanh(scale * q.k / c)``, then the mask.

Every backend that declares ``SUPPORTS_SOFTCAP`` is compared with a float64
formula written here from the definition; a backend that does not declare
it is refused by the dispatcher, never run with the cap ignored.
"""
import math
import types

import pytest
import torch

import attnlib
from attnlib import dispatch, tiled
from attnlib.problem import check_problem
from reference import causal_allowed, max_error, randn

SOFTCAPPED_BACKENDS = ["naive", "tiled"]


def capped_attention_float64(q, k, v, cap, *, scale=None, allowed=None, bias=None):
    """``softmax(c tanh(scale q.k / c) + bias, masked) v`` in float64; rows with no key give 0.

    Grouped heads are repeated here; ``allowed`` and ``bias`` broadcast to ``(..., Hq, L, S)``.
    """
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.einsum("...ie,...je->...ij", q, k) * scale
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if bias is not None:
        scores = scores + bias.double()
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    exps = torch.exp(scores - row_max)
    total = exps.sum(-1, keepdim=True)
    weights = exps / torch.where(total > 0, total, torch.ones_like(total))
    return weights @ v.masked_fill(~torch.isfinite(v), 0.0)


@pytest.mark.parametrize("backend", SOFTCAPPED_BACKENDS)
@pytest.mark.parametrize("cap", [0.5, 3.0, 50.0])
@pytest.mark.parametrize("mask_kind", [None, "top_left", "bottom_right", "bool", "float"])
def test_matches_float64_formula(backend, cap, mask_kind):
    L, S = 9, 14
    q, k, v = randn(2, 4, L, 16, seed=1) * 3, randn(2, 2, S, 16, seed=2) * 3, randn(2, 2, S, 8, seed=3)
    kwargs, allowed, bias = {}, None, None
    if mask_kind in ("top_left", "bottom_right"):
        kwargs = {"is_causal": True, "causal_alignment": mask_kind}
        allowed = causal_allowed(L, S, S - L if mask_kind == "bottom_right" else 0)
    elif mask_kind == "bool":
        allowed = randn(L, S, seed=4) > -0.5
        kwargs = {"attn_mask": allowed}
    elif mask_kind == "float":
        bias = randn(4, L, S, seed=5)
        kwargs = {"attn_mask": bias}
    expected = capped_attention_float64(q, k, v, cap, allowed=allowed, bias=bias)
    output = attnlib.scaled_dot_product_attention(
        q, k, v, enable_gqa=True, softcap=cap, backend=backend, **kwargs
    )
    assert max_error(output, expected) < 1e-12


@pytest.mark.parametrize("blocks", [(1, 1), (4, 5), (7, 16)])
def test_tiled_small_blocks_match_the_formula(blocks):
    q, k, v = randn(1, 2, 13, 8, seed=6) * 4, randn(1, 2, 17, 8, seed=7) * 4, randn(1, 2, 17, 8, seed=8)
    expected = capped_attention_float64(q, k, v, 1.5, allowed=causal_allowed(13, 17, 4))
    output = tiled.attention(q, k, v, is_causal=True, causal_alignment="bottom_right",
                             softcap=1.5, block_q=blocks[0], block_k=blocks[1])
    assert max_error(output, expected) < 1e-12


def test_weights_are_the_capped_softmax_and_their_log_ratios_are_bounded():
    q, k = randn(3, 5, 32, seed=9) * 4, randn(3, 11, 32, seed=10) * 4
    cap = 2.0
    weights = attnlib.attention_weights(q, k, softcap=cap)
    scores = cap * torch.tanh(q @ k.mT / math.sqrt(32) / cap)
    assert max_error(weights, torch.softmax(scores, dim=-1)) < 1e-14
    # every capped score lies in (-c, c), so no two weights of a row differ by more than e^(2c)
    log_ratio = weights.log().amax(-1) - weights.log().amin(-1)
    assert (log_ratio < 2 * cap).all()
    uncapped = attnlib.attention_weights(q, k)
    assert ((uncapped.log().amax(-1) - uncapped.log().amin(-1)) > 2 * cap).any()


def test_scale_is_applied_inside_the_cap():
    q, k, v = randn(1, 6, 8, seed=11), randn(1, 7, 8, seed=12), randn(1, 7, 4, seed=13)
    expected = capped_attention_float64(q, k, v, 0.7, scale=2.5)
    output = attnlib.scaled_dot_product_attention(q, k, v, scale=2.5, softcap=0.7)
    assert max_error(output, expected) < 1e-13


@pytest.mark.parametrize("backend", SOFTCAPPED_BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_gradients_pass_gradcheck(backend, causal):
    q = (randn(1, 2, 5, 4, seed=14) * 2).requires_grad_()
    k = (randn(1, 1, 6, 4, seed=15) * 2).requires_grad_()
    v = randn(1, 1, 6, 3, seed=16).requires_grad_()

    def capped(q, k, v):
        return attnlib.scaled_dot_product_attention(
            q, k, v, is_causal=causal, causal_alignment="bottom_right", enable_gqa=True,
            softcap=1.3, backend=backend,
        )

    assert torch.autograd.gradcheck(capped, (q, k, v))


def test_tiled_gradients_through_several_tiles_match_the_formula():
    inputs = [(randn(2, 3, 11, 8, seed=s) * 3).requires_grad_() for s in (17, 18, 19)]
    upstream = randn(2, 3, 11, 8, seed=20)
    mask = randn(11, 11, seed=21) > -1.0
    grads = {}
    for name, function in [
        ("formula", lambda q, k, v: capped_attention_float64(q, k, v, 2.0, allowed=mask)),
        ("tiled", lambda q, k, v: tiled.attention(q, k, v, mask, softcap=2.0, block_q=4, block_k=3)),
    ]:
        (function(*inputs) * upstream).sum().backward()
        grads[name] = [x.grad.clone() for x in inputs]
        for x in inputs:
            x.grad = None
    for ours, expected in zip(grads["tiled"], grads["formula"]):
        assert max_error(ours, expected) < 1e-12


@pytest.mark.parametrize("backend", SOFTCAPPED_BACKENDS)
def test_fully_masked_rows_give_zero_and_zero_gradient(backend):
    q = randn(1, 4, 8, seed=22).requires_grad_()
    k, v = randn(1, 5, 8, seed=23).requires_grad_(), randn(1, 5, 8, seed=24).requires_grad_()
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[2] = False
    output = attnlib.scaled_dot_product_attention(q, k, v, mask, softcap=1.0, backend=backend)
    assert torch.equal(output[0, 2], torch.zeros(8, dtype=torch.float64))
    output.sum().backward()
    assert torch.equal(q.grad[0, 2], torch.zeros(8, dtype=torch.float64))
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


@pytest.mark.parametrize("backend", SOFTCAPPED_BACKENDS)
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_padding_never_leaks(backend, poison):
    k, v = randn(2, 6, 8, seed=25), randn(2, 6, 8, seed=26)
    k[1, 4:], v[1, 4:] = poison, poison
    q = randn(2, 3, 8, seed=27).requires_grad_()
    mask = attnlib.padding_mask(torch.tensor([6, 4]), 6)[:, 0]  # (2, 1, 6)
    output = attnlib.scaled_dot_product_attention(q, k, v, mask, softcap=0.8, backend=backend)
    expected = capped_attention_float64(q.detach(), k, v, 0.8, allowed=mask)
    assert max_error(output.detach(), expected) < 1e-13
    output.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("backend", SOFTCAPPED_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_accumulates_in_float32(backend, dtype):
    q, k, v = (randn(2, 2, 64, 32, seed=s).to(dtype) * 2 for s in (28, 29, 30))
    output = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, softcap=5.0, backend=backend)
    assert output.dtype == dtype
    expected = capped_attention_float64(q, k, v, 5.0, allowed=causal_allowed(64, 64, 0))
    # float32 accumulation: the error is that of rounding the inputs and the output, not of the sums
    assert max_error(output, expected) < (4e-3 if dtype == torch.float16 else 3e-2)


@pytest.mark.parametrize("bad", [True, "2.0", 1 + 0j, [1.0]])
def test_softcap_of_the_wrong_type_is_a_type_error(bad):
    q = randn(1, 2, 4, seed=31)
    with pytest.raises(TypeError, match="softcap"):
        attnlib.scaled_dot_product_attention(q, q, q, softcap=bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), -float("inf")])
def test_softcap_that_is_not_finite_and_positive_is_a_value_error(bad):
    q = randn(1, 2, 4, seed=32)
    with pytest.raises(ValueError, match="softcap must be a finite positive"):
        attnlib.attention_weights(q, q, softcap=bad)


def test_integer_softcap_is_accepted_as_a_number():
    q = randn(1, 3, 4, seed=33)
    assert torch.equal(attnlib.attention_weights(q, q, softcap=2), attnlib.attention_weights(q, q, softcap=2.0))


def problem_with_cap(cap):
    q = randn(1, 3, 16, seed=34)
    return check_problem(q, q, q, softcap=cap)


def test_a_backend_that_does_not_declare_softcap_is_never_given_it():
    takes_anything = types.SimpleNamespace(unsupported_reason=lambda problem: None)
    assert dispatch.unsupported_reason(takes_anything, problem_with_cap(None)) is None
    assert (dispatch.unsupported_reason(takes_anything, problem_with_cap(2.0))
            == "softcap is not implemented in this path")
    takes_anything.SUPPORTS_SOFTCAP = True
    assert dispatch.unsupported_reason(takes_anything, problem_with_cap(2.0)) is None


def test_every_registered_backend_either_declares_softcap_or_is_refused_it():
    for name, module in dispatch.BACKENDS.items():
        reason = dispatch.unsupported_reason(module, problem_with_cap(2.0))
        if getattr(module, "SUPPORTS_SOFTCAP", False):
            assert reason != "softcap is not implemented in this path", name
        else:
            assert reason == "softcap is not implemented in this path", name


def test_every_backend_implements_softcap():
    assert all(getattr(module, "SUPPORTS_SOFTCAP", False) for module in dispatch.BACKENDS.values())


def test_without_softcap_the_fused_reason_is_its_own():
    q = randn(1, 2, 8, 16, seed=36).float()
    assert attnlib.explain(q, q, q).passed_over["fused"] != "softcap is not implemented in this path"
