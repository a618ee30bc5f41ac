"""attnlib.heads: torch compatibility, GQA/MQA, the scale rule, temperature, bad input.

Expected values come from torch itself: ``torch.nn.MultiheadAttention`` for
the MHA case and ``torch.nn.functional.scaled_dot_product_attention`` on
projections written out here for GQA, MQA, temperature and learned scales.
"""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib
from attnlib.heads import MultiHeadAttention, kv_cache_bytes

TIGHT = dict(rtol=0.0, atol=1e-12)


def torch_reference(module: MultiHeadAttention, x, y, scale, attn_mask=None):
    """The module's computation written with torch ops: project, share K/V heads, torch SDPA, merge."""
    batch, query_len, d_model = x.shape
    key_len, heads, kv_heads, head_dim = y.shape[1], module.n_heads, module.n_kv_heads, module.head_dim
    q = F.linear(x, module.q_proj.weight, module.q_proj.bias).view(batch, query_len, heads, head_dim)
    k = F.linear(y, module.k_proj.weight, module.k_proj.bias).view(batch, key_len, kv_heads, head_dim)
    v = F.linear(y, module.v_proj.weight, module.v_proj.bias).view(batch, key_len, kv_heads, head_dim)
    group = heads // kv_heads
    k = k.transpose(1, 2).repeat_interleave(group, dim=1)
    v = v.transpose(1, 2).repeat_interleave(group, dim=1)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask, scale=scale)
    return F.linear(o.transpose(1, 2).reshape(batch, query_len, d_model), module.out_proj.weight, module.out_proj.bias)


def float64_inputs(batch=2, query_len=5, key_len=7, d_model=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, query_len, d_model, generator=generator, dtype=torch.float64)
    y = torch.randn(batch, key_len, d_model, generator=generator, dtype=torch.float64)
    return x, y


def torch_mha(d_model=16, heads=4, bias=True, seed=0):
    torch.manual_seed(seed)
    module = torch.nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True, dtype=torch.float64)
    # nonzero biases, so that copying them is tested too
    if bias:
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    return module.eval()


# -- weight compatibility with torch.nn.MultiheadAttention ------------------------------------

PADDING = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])      # sequence 2 has 4 real keys
BLOCKED = torch.tensor([[j > i + 2 for j in range(7)] for i in range(5)])  # torch: True = blocked


@pytest.mark.parametrize("masks", ["none", "key_padding", "bool_attn", "float_attn", "both"])
def test_matches_torch_multihead_attention_in_float64(masks):
    reference_module = torch_mha()
    module = MultiHeadAttention.from_torch(reference_module)
    x, y = float64_inputs()
    float_mask = torch.randn(5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch_kwargs, ours = {}, {}
    if masks in ("key_padding", "both"):
        torch_kwargs["key_padding_mask"] = ours["key_padding_mask"] = PADDING
    if masks in ("bool_attn", "both"):
        torch_kwargs["attn_mask"], ours["attn_mask"] = BLOCKED, ~BLOCKED
    if masks == "float_attn":
        torch_kwargs["attn_mask"] = ours["attn_mask"] = float_mask
    expected, expected_weights = reference_module(x, y, y, need_weights=True, average_attn_weights=False,
                                                  **torch_kwargs)
    torch.testing.assert_close(module(x, y, y, **ours), expected, **TIGHT)
    torch.testing.assert_close(module.attention_weights(x, y, **ours), expected_weights, **TIGHT)


def test_causal_self_attention_with_padding_matches_torch():
    reference_module = torch_mha()
    module = MultiHeadAttention.from_torch(reference_module)
    x, _ = float64_inputs(query_len=6)
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)   # torch: True = blocked
    expected, _ = reference_module(x, x, x, attn_mask=causal, is_causal=True, key_padding_mask=padding)
    torch.testing.assert_close(module(x, is_causal=True, key_padding_mask=padding), expected, **TIGHT)


def test_converter_without_bias_matches_torch():
    reference_module = torch_mha(bias=False)
    module = MultiHeadAttention.from_torch(reference_module)
    assert module.q_proj.bias is None and module.out_proj.bias is None
    x, y = float64_inputs()
    expected, _ = reference_module(x, y, y)
    torch.testing.assert_close(module(x, y), expected, **TIGHT)


def test_converted_module_scale_is_one_over_sqrt_head_dim():
    module = MultiHeadAttention.from_torch(torch_mha(d_model=24, heads=3))
    assert module.head_dim == 8
    assert module.scale == pytest.approx(1 / math.sqrt(8), rel=1e-15)


# -- GQA, MQA, and the scale following the width of each dot product ---------------------------

@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_grouped_heads_match_torch_with_shared_kv_heads(kv_heads):
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, kv_heads, dtype=torch.float64)
    x, y = float64_inputs()
    assert module.k_proj.out_features == kv_heads * 4
    expected = torch_reference(module, x, y, scale=1 / math.sqrt(4))
    torch.testing.assert_close(module(x, y), expected, **TIGHT)


@pytest.mark.parametrize("kv_heads", [8, 4, 1])
def test_scale_depends_on_head_width_only(kv_heads):
    module = MultiHeadAttention(64, 8, kv_heads)
    assert module.scale == pytest.approx(1 / math.sqrt(64 / 8), rel=1e-15)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 2), query_len=st.integers(1, 5), key_len=st.integers(1, 5),
       head_dim=st.integers(1, 5), kv_heads=st.integers(1, 3), group=st.integers(1, 3),
       seed=st.integers(0, 2**16))
def test_any_head_layout_matches_torch(batch, query_len, key_len, head_dim, kv_heads, group, seed):
    heads = kv_heads * group
    torch.manual_seed(seed)
    module = MultiHeadAttention(heads * head_dim, heads, kv_heads, dtype=torch.float64)
    x, y = float64_inputs(batch, query_len, key_len, heads * head_dim, seed)
    expected = torch_reference(module, x, y, scale=1 / math.sqrt(head_dim))
    torch.testing.assert_close(module(x, y), expected, **TIGHT)


def test_project_key_value_has_kv_head_shapes():
    module = MultiHeadAttention(32, 8, 2)
    k, v = module.project_key_value(torch.randn(3, 10, 32), torch.randn(3, 10, 32))
    assert k.shape == v.shape == (3, 2, 10, 4)


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_kv_cache_bytes_counts_what_the_module_stores(kv_heads):
    module = MultiHeadAttention(32, 8, kv_heads, dtype=torch.float16)
    x = torch.randn(3, 10, 32, dtype=torch.float16)
    k, v = module.project_key_value(x, x)
    stored = k.nelement() * k.element_size() + v.nelement() * v.element_size()
    assert kv_cache_bytes(1, kv_heads, 4, 10, batch=3, dtype=torch.float16) == stored
    # 2 tensors x 3 sequences x 10 positions x kv_heads x 4 wide x 2 bytes
    assert stored == 2 * 3 * 10 * kv_heads * 4 * 2


def test_kv_cache_bytes_scales_with_layers():
    assert kv_cache_bytes(32, 8, 128, 4096, dtype=torch.float32) == 32 * 2 * 4096 * 8 * 128 * 4


# -- temperature and learnable scale ----------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.25, 1.0, 3.0])
def test_temperature_divides_the_scale(temperature):
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, 2, temperature=temperature, dtype=torch.float64)
    x, y = float64_inputs()
    expected = torch_reference(module, x, y, scale=1 / (2.0 * temperature))
    torch.testing.assert_close(module(x, y), expected, **TIGHT)


def test_setting_temperature_changes_output_like_a_new_scale():
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, dtype=torch.float64)
    x, y = float64_inputs()
    before = module(x, y)
    module.temperature = 2.0
    assert module.scale == pytest.approx(0.25)
    after = module(x, y)
    torch.testing.assert_close(after, torch_reference(module, x, y, scale=0.25), **TIGHT)
    assert (after - before).abs().max() > 1e-3


def test_learnable_scale_starts_at_the_standard_scale_and_learns():
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, learnable_scale=True, dtype=torch.float64)
    x, y = float64_inputs()
    assert module.scale == pytest.approx(0.5, rel=1e-12)
    torch.testing.assert_close(module(x, y), torch_reference(module, x, y, scale=0.5), **TIGHT)
    module(x, y).square().sum().backward()
    assert module.log_scale.grad is not None and module.log_scale.grad.abs() > 0


def test_learnable_scale_is_exp_log_scale_over_temperature():
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, 1, learnable_scale=True, temperature=2.0, dtype=torch.float64)
    with torch.no_grad():
        module.log_scale.fill_(math.log(3.0))
    x, y = float64_inputs()
    assert module.scale == pytest.approx(1.5, rel=1e-12)
    torch.testing.assert_close(module(x, y), torch_reference(module, x, y, scale=1.5), **TIGHT)


def test_weights_rows_sum_to_one_and_respect_padding():
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, 2, dtype=torch.float64)
    x, y = float64_inputs()
    weights = module.attention_weights(x, y, key_padding_mask=PADDING)
    assert weights.shape == (2, 4, 5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 5, dtype=torch.float64), **TIGHT)
    assert weights[1, :, :, 4:].abs().max() == 0


# -- the backend is passed through ------------------------------------------------------------

@pytest.mark.parametrize("backend", sorted(attnlib.BACKENDS))
def test_every_backend_serves_the_module(backend):
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, 2, backend=backend, dtype=torch.float64)
    x, y = float64_inputs()
    q = module.project_query(x)
    k, v = module.project_key_value(y, y)
    visible = ~PADDING[:, None, None, :]
    try:
        attnlib.explain(q, k, v, visible, scale=module.scale, enable_gqa=True, backend=backend)
    except ValueError as why_not:
        # a backend that cannot take this call must say so, not hand it to another path
        with pytest.raises(ValueError, match=re.escape(str(why_not)[:30])):
            module(x, y, key_padding_mask=PADDING)
        return
    expected = torch_reference(module, x, y, scale=0.5, attn_mask=visible)
    torch.testing.assert_close(module(x, y, key_padding_mask=PADDING), expected, rtol=0, atol=1e-10)
    assert attnlib.last_dispatch().backend == backend


def test_unknown_backend_is_refused_on_call():
    module = MultiHeadAttention(16, 4, backend="no-such-path")
    with pytest.raises(ValueError, match="backend"):
        module(torch.randn(1, 2, 16))


# -- bad input: one test per case --------------------------------------------------------------

def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ValueError, match=r"d_model must be divisible by n_heads.*d_model=10 and n_heads=3"):
        MultiHeadAttention(10, 3)


def test_n_heads_not_a_multiple_of_n_kv_heads():
    with pytest.raises(ValueError, match=r"n_heads must be a multiple of n_kv_heads.*n_heads=6 and n_kv_heads=4"):
        MultiHeadAttention(24, 6, 4)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf"), float("nan")])
def test_non_positive_or_non_finite_temperature(temperature):
    with pytest.raises(ValueError, match=r"temperature must be a positive finite number, got"):
        MultiHeadAttention(16, 4, temperature=temperature)


def test_non_positive_temperature_set_later():
    module = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"temperature must be a positive finite number, got -0.5"):
        module.temperature = -0.5


def test_temperature_of_wrong_type():
    with pytest.raises(TypeError, match=r"temperature must be a positive real number, got str"):
        MultiHeadAttention(16, 4, temperature="2")


def test_non_positive_head_count():
    with pytest.raises(ValueError, match=r"n_heads must be a positive int, got 0"):
        MultiHeadAttention(16, 0)


def test_head_count_of_wrong_type():
    with pytest.raises(TypeError, match=r"n_kv_heads must be a positive int, got float 2.0"):
        MultiHeadAttention(16, 4, 2.0)


def test_dropout_out_of_range():
    with pytest.raises(ValueError, match=r"dropout must be a real number in \[0, 1\), got 1.5"):
        MultiHeadAttention(16, 4, dropout=1.5)


def test_query_of_wrong_width():
    module = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"query must be a tensor of shape \(batch, length, d_model=16\), got shape \(2, 3, 8\)"):
        module(torch.randn(2, 3, 8))


def test_key_padding_mask_of_wrong_shape():
    module = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"key_padding_mask must be a bool tensor of shape \(batch, S\) = \(2, 3\)"):
        module(torch.randn(2, 3, 16), key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))


def test_converter_refuses_other_modules():
    with pytest.raises(TypeError, match=r"module must be a torch.nn.MultiheadAttention, got Linear"):
        MultiHeadAttention.from_torch(torch.nn.Linear(4, 4))


def test_converter_refuses_extra_key_biases():
    with pytest.raises(ValueError, match=r"module must not use add_bias_kv or add_zero_attn"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(16, 4, add_bias_kv=True))


def test_converter_refuses_other_key_widths():
    with pytest.raises(ValueError, match=r"module must have kdim == vdim == embed_dim = 16, got kdim=8"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(16, 4, kdim=8, vdim=8))
