"""The naive path against torch's SDPA and against the contract of DESIGN.md."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlib
from reference import causal_allowed, float64_reference, max_error, randn, torch_sdpa_on_visible_rows

TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "q_shape,k_shape,v_shape",
    [
        ((5, 8), (7, 8), (7, 3)),
        ((3, 5, 8), (3, 7, 8), (3, 7, 8)),
        ((2, 4, 9, 16), (2, 4, 4, 16), (2, 4, 4, 5)),
        ((2, 3, 2, 1, 6), (2, 3, 2, 11, 6), (2, 3, 2, 11, 2)),
    ],
)
def test_matches_torch_without_mask(dtype, q_shape, k_shape, v_shape):
    q, k, v = randn(*q_shape, dtype=dtype, seed=1), randn(*k_shape, dtype=dtype, seed=2), randn(*v_shape, dtype=dtype, seed=3)
    out = attnlib.scaled_dot_product_attention(q, k, v, backend="naive")
    assert out.shape == (*q_shape[:-1], v_shape[-1]) and out.dtype == dtype
    assert max_error(out, F.scaled_dot_product_attention(q, k, v)) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gqa_matches_torch(dtype):
    q, k, v = randn(2, 6, 5, 8, dtype=dtype), randn(2, 2, 7, 8, dtype=dtype, seed=1), randn(2, 2, 7, 4, dtype=dtype, seed=2)
    out = attnlib.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert max_error(out, F.scaled_dot_product_attention(q, k, v, enable_gqa=True)) < TOL[dtype]


def test_gqa_head_h_uses_kv_head_h_over_group():
    q, k, v = randn(1, 4, 3, 8), randn(1, 2, 5, 8, seed=1), randn(1, 2, 5, 2, seed=2)
    out = attnlib.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    for h in range(4):
        alone = attnlib.scaled_dot_product_attention(q[:, h], k[:, h // 2], v[:, h // 2])
        assert max_error(out[:, h], alone) < 1e-14


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("L,S", [(5, 5), (3, 8), (8, 3)])
def test_causal_top_left_matches_torch(dtype, L, S):
    q, k, v = randn(2, 3, L, 8, dtype=dtype), randn(2, 3, S, 8, dtype=dtype, seed=1), randn(2, 3, S, 4, dtype=dtype, seed=2)
    out = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = torch_sdpa_on_visible_rows(q, k, v, causal_allowed(L, S, 0))
    assert max_error(out, expected) < TOL[dtype]


@pytest.mark.parametrize("L,S", [(1, 9), (3, 8), (8, 8), (8, 3)])
def test_causal_bottom_right_aligns_last_query_with_last_key(L, S):
    q, k, v = randn(2, L, 8), randn(2, S, 8, seed=1), randn(2, S, 4, seed=2)
    out = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
    expected = torch_sdpa_on_visible_rows(q, k, v, causal_allowed(L, S, S - L))
    assert max_error(out, expected) < 1e-12
    # decoding one token with a KV cache: the last query sees every key
    assert max_error(out[..., -1, :], F.scaled_dot_product_attention(q[..., -1:, :], k, v)[..., 0, :]) < 1e-12


@pytest.mark.parametrize("mask_shape", [(7,), (5, 7), (1, 7), (3, 1, 7), (2, 3, 5, 7), (2, 1, 1, 7)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_broadcast_like_torch(mask_shape, kind):
    q, k, v = randn(2, 3, 5, 8), randn(2, 3, 7, 8, seed=1), randn(2, 3, 7, 4, seed=2)
    generator = torch.Generator().manual_seed(5)
    if kind == "bool":
        mask = torch.rand(mask_shape, generator=generator) > 0.3
    else:
        mask = torch.randn(mask_shape, generator=generator, dtype=torch.float64)
    out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected = torch_sdpa_on_visible_rows(q, k, v, mask.expand(2, 3, 5, 7))
    assert max_error(out, expected) < 1e-12


def test_scale_defaults_to_one_over_sqrt_head_width():
    q, k, v = randn(2, 4, 5, 16), randn(2, 4, 6, 16, seed=1), randn(2, 4, 6, 3, seed=2)
    default = attnlib.scaled_dot_product_attention(q, k, v)
    explicit = attnlib.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(16))
    model_width = attnlib.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(4 * 16))
    assert max_error(default, explicit) == 0.0
    assert max_error(default, model_width) > 1e-3


@pytest.mark.parametrize("scale", [0.0, 0.3, 1.0, 2.5, -1.0])
def test_explicit_scale_matches_torch(scale):
    q, k, v = randn(3, 5, 8), randn(3, 6, 8, seed=1), randn(3, 6, 2, seed=2)
    out = attnlib.scaled_dot_product_attention(q, k, v, scale=scale)
    assert max_error(out, F.scaled_dot_product_attention(q, k, v, scale=scale)) < 1e-12


def fully_masked_setup():
    q = randn(2, 2, 4, 8).requires_grad_()
    k = randn(2, 2, 6, 8, seed=1).requires_grad_()
    v = randn(2, 2, 6, 3, seed=2).requires_grad_()
    mask = torch.rand(2, 2, 4, 6, generator=torch.Generator().manual_seed(3)) > 0.4
    mask[0, 1, 2] = False  # one row that sees nothing
    mask[1, :, 0] = False  # and one in every head of batch 1
    return q, k, v, mask


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_fully_masked_rows_give_zero_output_and_zero_gradient(mask_kind):
    q, k, v, mask = fully_masked_setup()
    attn_mask = mask if mask_kind == "bool" else torch.zeros(mask.shape, dtype=torch.float64).masked_fill(~mask, -math.inf)
    out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    empty_rows = ~mask.any(dim=-1)
    assert torch.isfinite(out).all()
    assert (out[empty_rows] == 0).all()
    out[empty_rows].sum().backward()
    assert q.grad is not None and (q.grad == 0).all() and (k.grad == 0).all() and (v.grad == 0).all()


def test_gradients_match_torch_on_rows_that_see_something():
    q, k, v, mask = fully_masked_setup()
    visible_rows = mask.any(dim=-1, keepdim=True)
    upstream = randn(2, 2, 4, 3, seed=9) * visible_rows
    out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    grads = torch.autograd.grad(out, (q, k, v), upstream)
    # torch gives NaN on empty rows; give it the same rows with a harmless mask instead
    safe_mask = mask | ~visible_rows
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=safe_mask)
    ref_grads = torch.autograd.grad(ref, (q, k, v), upstream)
    for g, r in zip(grads, ref_grads):
        assert max_error(g, r) < 1e-12


def test_no_keys_gives_zero_output_and_gradient():
    q = randn(2, 3, 4, 8).requires_grad_()
    k, v = randn(2, 3, 0, 8).requires_grad_(), randn(2, 3, 0, 5).requires_grad_()
    out = attnlib.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 5) and (out == 0).all()
    out.sum().backward()
    assert (q.grad == 0).all()


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf])
def test_padding_contents_never_reach_the_output(poison):
    q, k, v = randn(2, 2, 5, 8).requires_grad_(), randn(2, 2, 7, 8, seed=1), randn(2, 2, 7, 4, seed=2)
    lengths = torch.tensor([4, 7])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    mask = mask[:, None, None, :]
    k_clean, v_clean = k.clone(), v.clone()
    k_clean[0, :, 4:] = 0
    v_clean[0, :, 4:] = 0
    k_poisoned, v_poisoned = k_clean.clone(), v_clean.clone()
    k_poisoned[0, :, 4:] = poison
    v_poisoned[0, :, 4:] = poison
    clean = attnlib.scaled_dot_product_attention(q, k_clean, v_clean, attn_mask=mask)
    poisoned = attnlib.scaled_dot_product_attention(q, k_poisoned, v_poisoned, attn_mask=mask)
    assert torch.equal(clean, poisoned)
    (grad_q,) = torch.autograd.grad(poisoned.sum(), q)
    assert torch.isfinite(grad_q).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_accumulated_in_float32(dtype):
    """The output is the float64 result rounded once to the input dtype (within one unit in the last place)."""
    q, k, v = (randn(2, 4, 64, 64, seed=s).to(dtype) for s in range(3))
    out = attnlib.scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype
    exact = float64_reference(q, k, v)
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(2.0 ** -8)
    assert ((out.double() - exact).abs() <= ulp).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_keeps_dtype_with_masks(dtype):
    q, k, v = (randn(1, 2, 5, 8, seed=s).to(dtype) for s in range(3))
    mask = torch.zeros(5, 5, dtype=dtype).masked_fill(torch.eye(5, dtype=torch.bool), torch.finfo(dtype).min)
    out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.dtype == dtype and torch.isfinite(out).all()


def test_attention_weights_rows_are_softmax_of_scaled_scores():
    q, k = randn(2, 3, 5, 8), randn(2, 3, 6, 8, seed=1)
    weights = attnlib.attention_weights(q, k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    expected = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)
    assert max_error(weights, expected) < 1e-14
    causal = attnlib.attention_weights(q, k, is_causal=True)
    assert (causal.triu(diagonal=1) == 0).all()
    assert max_error(causal.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64)) < 1e-14


def test_dropout_zeroes_or_rescales_each_weight_reproducibly():
    q, k = randn(1, 2, 6, 8), randn(1, 2, 6, 8, seed=1)
    identity_values = torch.eye(6, dtype=torch.float64).expand(1, 2, 6, 6)
    weights = attnlib.attention_weights(q, k)
    torch.manual_seed(123)
    dropped = attnlib.scaled_dot_product_attention(q, k, identity_values, dropout_p=0.25)
    torch.manual_seed(123)
    again = attnlib.scaled_dot_product_attention(q, k, identity_values, dropout_p=0.25)
    assert torch.equal(dropped, again)
    kept = dropped != 0
    assert 0 < kept.sum() < kept.numel()
    assert max_error(dropped[kept], weights[kept] / 0.75) < 1e-14


def test_dropout_is_unbiased_on_average():
    q, k, v = randn(1, 1, 4, 8), randn(1, 1, 6, 8, seed=1), randn(1, 1, 6, 3, seed=2)
    torch.manual_seed(0)
    samples = torch.stack([attnlib.scaled_dot_product_attention(q, k, v, dropout_p=0.5) for _ in range(4000)])
    exact = attnlib.scaled_dot_product_attention(q, k, v)
    standard_error = samples.std(dim=0) / math.sqrt(len(samples))
    assert ((samples.mean(dim=0) - exact).abs() <= 5 * standard_error + 1e-12).all()


def test_dispatch_is_reported():
    q = randn(1, 2, 3, 4)
    attnlib.scaled_dot_product_attention(q, q, q, backend="naive")
    report = attnlib.last_dispatch()
    assert report.backend == "naive" and report.requested == "naive"
    assert set(report.passed_over) == set(attnlib.BACKENDS) - {"naive"}
    explained = attnlib.explain(q, q, q)
    assert explained.backend in attnlib.BACKENDS
    assert "naive" in str(attnlib.explain(q, q, q, backend="naive"))


shapes = st.tuples(
    st.integers(1, 2),  # batch
    st.sampled_from([(1, 1), (2, 2), (4, 2), (3, 1), (4, 4)]),  # (Hq, Hkv)
    st.integers(1, 9),  # L
    st.integers(1, 9),  # S
    st.integers(1, 12),  # E
    st.integers(1, 6),  # Ev
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=shapes, mask_kind=st.sampled_from(["none", "bool", "float", "causal", "causal_br"]),
       dtype=st.sampled_from([torch.float64, torch.float32]), seed=st.integers(0, 2**16))
def test_property_matches_torch(shapes, mask_kind, dtype, seed):
    batch, (hq, hkv), L, S, E, Ev = shapes
    q = randn(batch, hq, L, E, dtype=dtype, seed=seed)
    k = randn(batch, hkv, S, E, dtype=dtype, seed=seed + 1)
    v = randn(batch, hkv, S, Ev, dtype=dtype, seed=seed + 2)
    generator = torch.Generator().manual_seed(seed)
    gqa = hq != hkv
    kwargs, mask = {}, None
    if mask_kind == "bool":
        mask = torch.rand(batch, 1, L, S, generator=generator) > 0.3
        kwargs["attn_mask"] = mask
    elif mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(L, S, generator=generator, dtype=dtype)
    elif mask_kind == "causal":
        kwargs["is_causal"] = True
        mask = causal_allowed(L, S, 0)
    elif mask_kind == "causal_br":
        kwargs.update(is_causal=True, causal_alignment="bottom_right")
        mask = causal_allowed(L, S, S - L)
    out = attnlib.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, **kwargs)
    torch_mask = kwargs.get("attn_mask") if mask_kind == "float" else mask
    expected = torch_sdpa_on_visible_rows(q, k, v, torch_mask, enable_gqa=gqa)
    assert out.shape == (batch, hq, L, Ev)
    assert max_error(out, expected) < 10 * TOL[dtype]
