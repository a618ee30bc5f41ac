"""Each bad input raises the right exception with a message naming the argument."""
import math

import pytest
import torch

import attnlib
from attnlib.problem import check_problem


def qkv(q_shape=(2, 4, 5, 8), k_shape=(2, 4, 6, 8), v_shape=(2, 4, 6, 3), dtype=torch.float32):
    return torch.randn(q_shape, dtype=dtype), torch.randn(k_shape, dtype=dtype), torch.randn(v_shape, dtype=dtype)


def call(*args, **kwargs):
    return attnlib.scaled_dot_product_attention(*args, **kwargs)


def test_query_with_one_dimension():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"query must have at least 2 dimensions.*got shape \(8,\)"):
        call(torch.randn(8), k, v)


def test_different_numbers_of_dimensions():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"query, key and value must have the same number of dimensions"):
        call(q, k[0], v[0])


def test_query_key_width_mismatch():
    q, k, v = qkv(k_shape=(2, 4, 6, 7))
    with pytest.raises(ValueError, match=r"key width must equal query width E = 8.*\(2, 4, 6, 7\)"):
        call(q, k, v)


def test_key_value_length_mismatch():
    q, k, v = qkv(v_shape=(2, 4, 5, 3))
    with pytest.raises(ValueError, match=r"value length must equal key length S = 6.*\(2, 4, 5, 3\)"):
        call(q, k, v)


def test_batch_dimensions_are_not_broadcast():
    q, k, v = qkv(k_shape=(1, 4, 6, 8), v_shape=(1, 4, 6, 3))
    with pytest.raises(ValueError, match=r"key must have the query's batch dimensions \(2,\).*not broadcast"):
        call(q, k, v)


def test_value_heads_differ_from_key_heads():
    q, k, v = qkv(v_shape=(2, 2, 6, 3))
    with pytest.raises(ValueError, match=r"value must have the key's batch and head dimensions \(2, 4\)"):
        call(q, k, v)


def test_dtype_mismatch():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"share one dtype.*key torch.float64"):
        call(q, k.double(), v)


def test_integer_dtype():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"value must have a floating dtype.*got torch.int64"):
        call(q, k, v.long())


def test_device_mismatch():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"query, key and value must be on one device.*key meta"):
        call(q, k.to("meta"), v)


def test_mask_of_wrong_dtype():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"attn_mask must be bool .* or have the query's dtype torch.float32.*got torch.int64"):
        call(q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.long))


def test_float_mask_in_another_float_dtype_is_not_recast():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"attn_mask .* got torch.float64"):
        call(q, k, v, attn_mask=torch.zeros(5, 6, dtype=torch.float64))


def test_mask_not_broadcastable():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"attn_mask must be broadcastable to .* \(2, 4, 5, 6\), got shape \(5, 5\)"):
        call(q, k, v, attn_mask=torch.ones(5, 5, dtype=torch.bool))


def test_mask_that_would_enlarge_the_output():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"attn_mask must be broadcastable .* got shape \(3, 2, 4, 5, 6\)"):
        call(q, k, v, attn_mask=torch.ones(3, 2, 4, 5, 6, dtype=torch.bool))


def test_mask_on_another_device():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"attn_mask must be on the query's device cpu, got meta"):
        call(q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.bool, device="meta"))


def test_mask_that_is_not_a_tensor():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"attn_mask must be a torch.Tensor or None, got list"):
        call(q, k, v, attn_mask=[[True] * 6] * 5)


def test_causal_together_with_mask():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"is_causal=True and attn_mask cannot be combined"):
        call(q, k, v, attn_mask=torch.ones(5, 6, dtype=torch.bool), is_causal=True)


def test_query_heads_not_a_multiple_of_kv_heads():
    q, k, v = qkv(q_shape=(2, 6, 5, 8), k_shape=(2, 4, 6, 8), v_shape=(2, 4, 6, 3))
    with pytest.raises(ValueError, match=r"enable_gqa, query heads Hq = 6 must be a multiple of key/value heads Hkv = 4"):
        call(q, k, v, enable_gqa=True)


def test_different_head_counts_without_gqa():
    q, k, v = qkv(q_shape=(2, 8, 5, 8))
    with pytest.raises(ValueError, match=r"query has Hq = 8 heads but key/value have Hkv = 4; pass enable_gqa=True"):
        call(q, k, v)


@pytest.mark.parametrize("scale", [math.inf, -math.inf, math.nan])
def test_non_finite_scale(scale):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"scale must be finite"):
        call(q, k, v, scale=scale)


def test_scale_of_wrong_type():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"scale must be a real number or None, got a torch.float32 tensor"):
        call(q, k, v, scale=torch.tensor(0.5))


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_dropout_outside_unit_interval(p):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"dropout_p must lie in \[0, 1\), got"):
        call(q, k, v, dropout_p=p)


def test_dropout_of_wrong_type():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"dropout_p must be a real number, got str"):
        call(q, k, v, dropout_p="0.1")


def test_unknown_backend():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"backend must be 'auto' or one of .*'naive'.*got 'flash'"):
        call(q, k, v, backend="flash")


def test_unknown_alignment():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"causal_alignment must be one of \('top_left', 'bottom_right'\), got 'left'"):
        call(q, k, v, is_causal=True, causal_alignment="left")


@pytest.mark.parametrize("name", ["query", "key", "value"])
def test_non_tensor_input(name):
    tensors = dict(zip(("query", "key", "value"), qkv()))
    tensors[name] = tensors[name].tolist()
    with pytest.raises(TypeError, match=rf"{name} must be a torch.Tensor, got list"):
        call(**tensors)


def test_is_causal_must_be_bool():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"is_causal must be a bool, got str"):
        call(q, k, v, is_causal="yes")


def test_enable_gqa_must_be_bool():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"enable_gqa must be a bool, got int"):
        call(q, k, v, enable_gqa=1)


def test_attention_weights_checks_its_arguments_too():
    q, k, _ = qkv()
    with pytest.raises(ValueError, match=r"key width must equal query width"):
        attnlib.attention_weights(q, k[..., :4])


def test_check_problem_accepts_a_valid_call_unchanged():
    q, k, v = qkv()
    problem = check_problem(q, k, v)
    assert problem.query is q and problem.key is k and problem.value is v
    assert problem.scale == pytest.approx(1 / math.sqrt(8))


@pytest.mark.parametrize(
    "args,match",
    [((3, 4, "diagonal"), r"alignment must be one of"), ((-1, 4), r"query_len must be a non-negative int"),
     ((3, 2.5), r"key_len must be a non-negative int")],
)
def test_causal_mask_helper_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        attnlib.causal_mask(*args)


def test_padding_mask_lengths_out_of_range():
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, key_len=4\], got min 0 and max 5"):
        attnlib.padding_mask(torch.tensor([0, 5]), 4)


def test_padding_mask_float_lengths():
    with pytest.raises(TypeError, match=r"lengths must be a 1-D integer tensor"):
        attnlib.padding_mask(torch.tensor([1.0, 2.0]), 4)
