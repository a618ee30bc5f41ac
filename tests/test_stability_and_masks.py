"""Chapter 5's claims about attnlib: stable softmax, the half-precision bound,
mask semantics against torch's SDPA, fully masked rows, hidden NaN and additive_mask."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import attnlib
from reference import float64_reference


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# Overflow and max-subtraction ---------------------------------------------------

def test_weights_stay_finite_for_logits_far_beyond_exp_overflow():
    q, k = 12 * randn(2, 1024, seed=1), 12 * randn(8, 1024, seed=2)
    assert float((q @ k.T / 32).max()) > 88.8     # exp of these overflows in float32
    weights = attnlib.attention_weights(q, k)
    expected = torch.softmax(q.double() @ k.double().T / 32, -1)
    torch.testing.assert_close(weights.double(), expected, atol=1e-6, rtol=0)


def test_float16_inputs_whose_dot_products_exceed_float16_range():
    q = torch.full((1, 128), 23.0, dtype=torch.float16)
    k = torch.stack([q[0], -q[0], q[0] / 2])
    v = randn(3, 4, seed=3).half()
    assert float(q.double() @ q.double().T) > torch.finfo(torch.float16).max
    out = attnlib.scaled_dot_product_attention(q, k, v, scale=1.0 / 128)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), float64_reference(q, k, v, scale=1.0 / 128),
                               atol=2e-3, rtol=0)


# Precision: the bound |o - o64| <= u |o64| + 1e-5 that chapter 5 states --------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n_keys", [256, 1024])
def test_half_precision_error_is_one_final_rounding(dtype, n_keys):
    q, k, v = (randn(n, 64, seed=s).to(dtype) for s, n in [(0, 256), (1, n_keys), (2, n_keys)])
    reference = float64_reference(q, k, v)
    out = attnlib.scaled_dot_product_attention(q, k, v)
    assert out.dtype == dtype
    u = 2.0**-11 if dtype == torch.float16 else 2.0**-8
    assert bool(((out.double() - reference).abs() <= u * reference.abs() + 1e-5).all())


# Masks against torch's SDPA ------------------------------------------------------

@pytest.mark.parametrize("L, S", [(5, 5), (3, 7), (7, 3)])
def test_top_left_causal_matches_torch_is_causal(L, S):
    q, k, v = randn(2, L, 8, seed=0), randn(2, S, 8, seed=1), randn(2, S, 4, seed=2)
    ours = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")  # it does not, in 2.13
@pytest.mark.parametrize("L, S", [(5, 5), (3, 7), (7, 3)])
def test_bottom_right_causal_matches_torch_lower_right_bias(L, S):
    q, k, v = randn(2, L, 8, seed=0), randn(2, S, 8, seed=1), randn(2, S, 4, seed=2)
    ours = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(L, S))
    torch.testing.assert_close(ours, theirs)


def test_bottom_right_decoding_reproduces_last_rows_of_full_causal_attention():
    q, k, v = (randn(6, 8, seed=s, dtype=torch.float64) for s in range(3))
    full = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True)
    decoded = attnlib.scaled_dot_product_attention(q[3:], k, v, is_causal=True,
                                                   causal_alignment="bottom_right")
    torch.testing.assert_close(decoded, full[3:], atol=1e-15, rtol=0)


def test_padding_and_causal_bool_mask_matches_torch():
    q, k, v = randn(2, 1, 6, 8, seed=0), randn(2, 1, 6, 8, seed=1), randn(2, 1, 6, 4, seed=2)
    mask = attnlib.causal_mask(6, 6) & attnlib.padding_mask(torch.tensor([6, 4]), 6)
    torch.testing.assert_close(attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_weights_sum_to_one_over_allowed_keys_and_zero_elsewhere():
    mask = attnlib.causal_mask(5, 5)
    weights = attnlib.attention_weights(randn(5, 8, seed=0), randn(5, 8, seed=1), attn_mask=mask)
    torch.testing.assert_close(weights.sum(-1), torch.ones(5))
    assert bool((weights[~mask] == 0).all())


@pytest.mark.parametrize("fill", [-1e9, torch.finfo(torch.float32).min])
def test_huge_finite_fill_on_a_whole_row_gives_uniform_weights_over_all_keys(fill):
    # the scores are swamped: score + fill rounds to fill, so every key gets 1/S
    q, k, v = randn(2, 8, seed=0), randn(4, 8, seed=1), randn(4, 4, seed=2)
    bias = torch.zeros(2, 4)
    bias[1] = fill
    ours = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    torch.testing.assert_close(ours[1], v.mean(0))


def test_moderate_finite_fill_on_a_whole_row_is_a_shift_not_a_mask():
    # softmax ignores a common shift: the row attends as if there were no mask
    q, k, v = randn(2, 8, seed=0), randn(4, 8, seed=1), randn(4, 4, seed=2)
    bias = torch.zeros(2, 4)
    bias[1] = -100.0
    ours = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
    torch.testing.assert_close(ours[1], attnlib.scaled_dot_product_attention(q, k, v)[1])


def test_minus_1e9_is_minus_inf_in_float16_so_the_row_is_masked():
    bias = torch.tensor([[-1e9] * 4], dtype=torch.float16)
    assert bias[0, 0].item() == float("-inf")
    q, k, v = randn(1, 8, seed=0).half(), randn(4, 8, seed=1).half(), randn(4, 4, seed=2).half()
    assert bool((attnlib.scaled_dot_product_attention(q, k, v, attn_mask=bias) == 0).all())


def test_float16_finfo_min_added_twice_forbids_only_where_both_masks_forbid():
    fmin = torch.finfo(torch.float16).min
    causal_part = torch.tensor([[0.0, 0.0, fmin, fmin]], dtype=torch.float16)
    padding_part = torch.tensor([[fmin, fmin, fmin, 0.0]], dtype=torch.float16)
    combined = causal_part + padding_part
    assert combined[0, 2].item() == float("-inf") and math.isfinite(combined[0, 0].item())
    weights = attnlib.attention_weights(randn(1, 4, seed=0).half(), randn(4, 4, seed=1).half(),
                                        attn_mask=combined)
    assert weights[0, 2] == 0 and bool((weights[0, [0, 1, 3]] > 0).all())


# Fully masked rows ---------------------------------------------------------------

def test_fully_masked_row_gives_zero_output_like_torch():
    mask = torch.tensor([[True, True, False], [False, False, False]])
    q, k, v = randn(2, 4, seed=0), randn(3, 4, seed=1), randn(3, 4, seed=2)
    ours = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert bool((ours[1] == 0).all())
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert bool((attnlib.attention_weights(q, k, attn_mask=mask)[1] == 0).all())


@pytest.mark.parametrize("mask_kind", ["bool", "additive"])
def test_fully_masked_row_has_zero_gradient_and_no_nan(mask_kind):
    allowed = torch.tensor([[True, True, False], [False, False, False]])
    mask = allowed if mask_kind == "bool" else attnlib.additive_mask(allowed)
    q, k, v = (randn(n, 4, seed=s).requires_grad_() for s, n in [(0, 2), (1, 3), (2, 3)])
    attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    for grad in (q.grad, k.grad, v.grad):
        assert torch.isfinite(grad).all()
    assert bool((q.grad[1] == 0).all())
    # the allowed row's gradients are those of attention over its two keys alone
    q0, k0, v0 = (x.detach()[:n].clone().requires_grad_() for x, n in [(q, 1), (k, 2), (v, 2)])
    attnlib.scaled_dot_product_attention(q0, k0, v0).sum().backward()
    torch.testing.assert_close(q.grad[:1], q0.grad)
    torch.testing.assert_close(k.grad[:2], k0.grad)
    assert bool((k.grad[2] == 0).all())


def test_no_keys_at_all_gives_zero_output():
    q, k, v = randn(3, 4), torch.zeros(0, 4), torch.zeros(0, 5)
    out = attnlib.scaled_dot_product_attention(q, k, v)
    assert out.shape == (3, 5) and bool((out == 0).all())


def test_bottom_right_with_more_queries_than_keys_zeroes_the_first_rows():
    q, k, v = randn(5, 4, seed=0), randn(3, 4, seed=1), randn(3, 4, seed=2)
    out = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
    assert bool((out[:2] == 0).all()) and bool((out[2:] != 0).any())


# NaN in padding --------------------------------------------------------------------

@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_nan_or_inf_in_padding_gives_the_zero_padded_output_and_gradients(poison):
    q = randn(2, 6, 8, seed=0)
    k, v = randn(2, 6, 8, seed=1), randn(2, 6, 8, seed=2)
    k[1, 4:], v[1, 4:] = poison, poison
    mask = attnlib.padding_mask(torch.tensor([6, 4]), 6)[:, 0]

    def run(key, value):
        q_ = q.clone().requires_grad_()
        key, value = key.clone().requires_grad_(), value.clone().requires_grad_()
        out = attnlib.scaled_dot_product_attention(q_, key, value, attn_mask=mask)
        out.sum().backward()
        return out, q_.grad, key.grad, value.grad

    poisoned, clean = run(k, v), run(k.nan_to_num(0.0, 0.0, 0.0), v.nan_to_num(0.0, 0.0, 0.0))
    for a, b in zip(poisoned, clean):
        assert torch.equal(a, b)
    assert torch.isfinite(poisoned[0]).all()


# additive_mask ---------------------------------------------------------------------

def test_additive_mask_values_and_dtype():
    allowed = torch.tensor([[True, False], [False, True]])
    bias = attnlib.additive_mask(allowed, torch.float16)
    assert bias.dtype == torch.float16
    assert bias.tolist() == [[0.0, float("-inf")], [float("-inf"), 0.0]]


def test_additive_masks_combine_by_addition_like_bool_masks_by_and():
    causal = attnlib.causal_mask(4, 4)
    padding = torch.tensor([True, True, True, False])
    for dtype in (torch.float16, torch.float32):
        summed = attnlib.additive_mask(causal, dtype) + attnlib.additive_mask(padding, dtype)
        assert torch.equal(summed, attnlib.additive_mask(causal & padding, dtype))


def test_additive_mask_gives_the_same_attention_as_the_bool_mask_and_torch():
    allowed = attnlib.causal_mask(4, 6, "bottom_right")
    q, k, v = randn(4, 8, seed=0), randn(6, 8, seed=1), randn(6, 3, seed=2)
    additive = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=attnlib.additive_mask(allowed))
    torch.testing.assert_close(additive, attnlib.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    torch.testing.assert_close(additive, F.scaled_dot_product_attention(q, k, v, attn_mask=allowed))


def test_additive_mask_rejects_a_non_bool_mask():
    with pytest.raises(TypeError, match="allowed must be a bool torch.Tensor"):
        attnlib.additive_mask(torch.ones(2, 2))


def test_additive_mask_rejects_a_non_floating_dtype():
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        attnlib.additive_mask(torch.ones(2, 2, dtype=torch.bool), torch.int32)
