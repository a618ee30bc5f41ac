"""The tiled path against the naive path, torch's SDPA and the contract of DESIGN.md.

Small block sizes (3, 4, 5 ...) make every case cross several query and key
blocks whose lengths do not divide L or S.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlib
from attnlib import tiled
from attnlib.problem import check_problem
from attnlib.book.intermediates import largest_intermediate
from reference import assert_as_accurate_as_naive, causal_allowed, max_error, randn, torch_sdpa_on_visible_rows

TOL = {torch.float64: 1e-12, torch.float32: 2e-6}
MASK_KINDS = ["none", "bool", "float", "causal", "causal_br"]


def make_case(batch, hq, hkv, L, S, E, Ev, mask_kind, dtype=torch.float64, seed=0):
    """Inputs, tiled/naive keyword arguments, and the bool pattern of allowed keys (or None)."""
    q = randn(batch, hq, L, E, dtype=dtype, seed=seed)
    k = randn(batch, hkv, S, E, dtype=dtype, seed=seed + 1)
    v = randn(batch, hkv, S, Ev, dtype=dtype, seed=seed + 2)
    generator = torch.Generator().manual_seed(seed + 3)
    kwargs, allowed = {"enable_gqa": hq != hkv}, None
    if mask_kind == "bool":
        allowed = torch.rand(batch, 1, L, S, generator=generator) > 0.3
        kwargs["attn_mask"] = allowed
    elif mask_kind == "float":
        bias = torch.randn(hq, L, S, generator=generator, dtype=dtype)
        hidden = torch.rand(L, S, generator=generator) < 0.2
        kwargs["attn_mask"] = bias.masked_fill(hidden, -math.inf)
        allowed = ~hidden
    elif mask_kind == "causal":
        kwargs["is_causal"] = True
        allowed = causal_allowed(L, S, 0)
    elif mask_kind == "causal_br":
        kwargs.update(is_causal=True, causal_alignment="bottom_right")
        allowed = causal_allowed(L, S, S - L)
    return q, k, v, kwargs, allowed


def torch_reference(q, k, v, kwargs, allowed):
    """torch's SDPA with the same pattern given as a mask (it has no bottom-right causal)."""
    mask = kwargs.get("attn_mask", allowed)
    if mask is not None and mask.dtype != torch.bool:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=kwargs["enable_gqa"])
        return torch.where(allowed.any(dim=-1, keepdim=True), out, torch.zeros((), dtype=out.dtype))
    return torch_sdpa_on_visible_rows(q, k, v, mask, enable_gqa=kwargs["enable_gqa"])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("hq,hkv,L,S", [(2, 2, 11, 11), (4, 2, 7, 13), (3, 1, 13, 6)])
def test_matches_torch_and_naive(dtype, mask_kind, hq, hkv, L, S):
    q, k, v, kwargs, allowed = make_case(2, hq, hkv, L, S, 8, 5, mask_kind, dtype)
    out = tiled.attention(q, k, v, block_q=4, block_k=5, **kwargs)
    assert out.shape == (2, hq, L, 5) and out.dtype == dtype
    assert max_error(out, torch_reference(q, k, v, kwargs, allowed)) < 10 * TOL[dtype]
    naive = attnlib.scaled_dot_product_attention(q, k, v, backend="naive", **kwargs)
    assert max_error(out, naive) < 10 * TOL[dtype]


shapes = st.tuples(
    st.integers(1, 2),  # batch
    st.sampled_from([(1, 1), (2, 2), (4, 2), (3, 1)]),  # (Hq, Hkv)
    st.integers(1, 12),  # L
    st.integers(1, 12),  # S
    st.integers(1, 9),  # E
    st.integers(1, 5),  # Ev
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=shapes, mask_kind=st.sampled_from(MASK_KINDS), block_q=st.integers(1, 13),
       block_k=st.integers(1, 13), seed=st.integers(0, 2**16))
def test_property_matches_naive_in_float64(shapes, mask_kind, block_q, block_k, seed):
    batch, (hq, hkv), L, S, E, Ev = shapes
    q, k, v, kwargs, _ = make_case(batch, hq, hkv, L, S, E, Ev, mask_kind, seed=seed)
    out, lse = tiled.attention(q, k, v, block_q=block_q, block_k=block_k, return_lse=True, **kwargs)
    naive = attnlib.scaled_dot_product_attention(q, k, v, backend="naive", **kwargs)
    assert max_error(out, naive) < TOL[torch.float64]
    assert lse.shape == (batch, hq, L) and not torch.isnan(lse).any()


def test_unbatched_inputs_without_head_axis():
    q, k, v = randn(9, 4), randn(7, 4, seed=1), randn(7, 3, seed=2)
    out = tiled.attention(q, k, v, block_q=2, block_k=3)
    assert max_error(out, F.scaled_dot_product_attention(q, k, v)) < TOL[torch.float64]


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_one_dimensional_key_mask(kind):
    q, k, v, _, _ = make_case(2, 2, 2, 5, 9, 8, 4, "none")
    allowed = torch.arange(9) % 3 != 1
    mask = allowed if kind == "bool" else torch.zeros(9, dtype=torch.float64).masked_fill(~allowed, -math.inf)
    out = tiled.attention(q, k, v, attn_mask=mask, block_q=2, block_k=4)
    # torch's SDPA rejects a 1-D mask; as (1, S) it means the same
    assert max_error(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None])) < TOL[torch.float64]


def test_non_contiguous_inputs_in_batch_length_head_layout():
    q, k, v = (randn(2, 11, 4, 8, seed=s).transpose(1, 2) for s in range(3))  # (B, H, L, E) views
    for x in (q, k, v):
        x.requires_grad_()
    out = tiled.attention(q, k, v, is_causal=True, block_q=4, block_k=3)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert max_error(out.detach(), expected.detach()) < TOL[torch.float64]
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.sum(), (q, k, v))
    assert all(max_error(g, r) < 1e-12 for g, r in zip(grads, expected_grads))


def test_explicit_scale_matches_torch():
    q, k, v, _, _ = make_case(1, 2, 2, 6, 9, 8, 4, "none")
    out = tiled.attention(q, k, v, scale=0.37, block_q=4, block_k=4)
    assert max_error(out, F.scaled_dot_product_attention(q, k, v, scale=0.37)) < TOL[torch.float64]


def test_block_sizes_change_only_rounding():
    q, k, v, kwargs, _ = make_case(1, 4, 2, 37, 41, 8, 8, "causal_br", dtype=torch.float32)
    outputs = [tiled.attention(q, k, v, block_q=bq, block_k=bk, **kwargs)
               for bq, bk in [(1, 1), (8, 16), (37, 41), (1000, 1000)]]
    for out in outputs[1:]:
        assert max_error(out, outputs[0]) < 1e-6


def test_log_sum_exp_of_allowed_scores():
    q, k, v, kwargs, allowed = make_case(2, 4, 2, 9, 7, 8, 3, "bool")
    allowed[0, 0, 3] = False  # a row with no allowed key
    _, lse = tiled.attention(q, k, v, block_q=4, block_k=3, return_lse=True, **kwargs)
    scores = q @ k.repeat_interleave(2, dim=1).transpose(-2, -1) / math.sqrt(8)
    expected = torch.logsumexp(scores.masked_fill(~allowed, -math.inf), dim=-1)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(expected))
    assert torch.isneginf(lse[0, :, 3]).all()
    finite = torch.isfinite(expected)
    assert max_error(lse[finite], expected[finite]) < TOL[torch.float64]


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("hq,hkv", [(2, 2), (4, 2)])
def test_gradients_match_naive(mask_kind, hq, hkv):
    q, k, v, kwargs, allowed = make_case(2, hq, hkv, 10, 7, 6, 4, mask_kind, seed=5)
    for x in (q, k, v):
        x.requires_grad_()
    upstream = randn(2, hq, 10, 4, seed=11)
    out = tiled.attention(q, k, v, block_q=3, block_k=4, **kwargs)
    grads = torch.autograd.grad(out, (q, k, v), upstream)
    naive = attnlib.scaled_dot_product_attention(q, k, v, backend="naive", **kwargs)
    naive_grads = torch.autograd.grad(naive, (q, k, v), upstream)
    for g, r in zip(grads, naive_grads):
        assert max_error(g, r) < 1e-12


@pytest.mark.parametrize("mask_kind", ["none", "float", "causal"])
def test_gradients_match_torch(mask_kind):
    # torch has no bottom-right causal and gives NaN on rows that see nothing: use cases without either
    q, k, v, kwargs, allowed = make_case(2, 4, 2, 9, 12, 8, 4, mask_kind, seed=8)
    if mask_kind == "float":
        kwargs["attn_mask"] = torch.randn(kwargs["attn_mask"].shape, dtype=torch.float64)
    for x in (q, k, v):
        x.requires_grad_()
    upstream = randn(2, 4, 9, 4, seed=12)
    out = tiled.attention(q, k, v, block_q=4, block_k=5, **kwargs)
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    for g, r in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(expected, (q, k, v), upstream)):
        assert max_error(g, r) < 1e-12


def test_gradients_pass_torch_gradcheck_including_log_sum_exp():
    q, k, v, kwargs, _ = make_case(1, 4, 2, 5, 6, 3, 2, "causal_br", seed=7)
    inputs = tuple(x.requires_grad_() for x in (q, k, v))

    def both(q, k, v):
        return tiled.attention(q, k, v, block_q=2, block_k=4, return_lse=True, **kwargs)

    assert torch.autograd.gradcheck(both, inputs)


def test_float32_gradients_as_accurate_as_naive():
    q, k, v, kwargs, _ = make_case(1, 4, 2, 70, 90, 16, 16, "causal", dtype=torch.float32, seed=3)
    upstream = randn(1, 4, 70, 16, seed=4)

    def grads(q, k, v, backend, dtype):
        q, k, v = (x.to(dtype).requires_grad_() for x in (q, k, v))
        if backend == "tiled":
            out = tiled.attention(q, k, v, block_q=16, block_k=32, **kwargs)
        else:
            out = attnlib.scaled_dot_product_attention(q, k, v, backend="naive", **kwargs)
        return torch.autograd.grad(out, (q, k, v), upstream.to(dtype))

    exact = grads(q, k, v, "naive", torch.float64)
    for g, n, x in zip(grads(q, k, v, "tiled", torch.float32), grads(q, k, v, "naive", torch.float32), exact):
        assert max_error(g, x) <= 2 * max_error(n, x) + 1e-6


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_fully_masked_rows_give_zero_output_gradient_and_minus_inf_lse(mask_kind):
    q, k, v, _, _ = make_case(2, 2, 2, 4, 6, 8, 3, "none")
    for x in (q, k, v):
        x.requires_grad_()
    allowed = torch.rand(2, 2, 4, 6, generator=torch.Generator().manual_seed(3)) > 0.4
    allowed[0, 1, 2] = False
    allowed[1, :, 0] = False
    mask = allowed if mask_kind == "bool" else torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, -math.inf)
    out, lse = tiled.attention(q, k, v, attn_mask=mask, block_q=3, block_k=4, return_lse=True)
    empty_rows = ~allowed.any(dim=-1)
    assert torch.isfinite(out).all() and (out[empty_rows] == 0).all()
    assert torch.isneginf(lse[empty_rows]).all() and torch.isfinite(lse[~empty_rows]).all()
    out[empty_rows].sum().backward()
    assert (q.grad == 0).all() and (k.grad == 0).all() and (v.grad == 0).all()


def test_no_keys_gives_zero_output_gradient_and_minus_inf_lse():
    q = randn(2, 3, 4, 8).requires_grad_()
    k, v = randn(2, 3, 0, 8).requires_grad_(), randn(2, 3, 0, 5).requires_grad_()
    out, lse = tiled.attention(q, k, v, return_lse=True)
    assert out.shape == (2, 3, 4, 5) and (out == 0).all() and torch.isneginf(lse).all()
    out.sum().backward()
    assert (q.grad == 0).all()


def test_no_queries_gives_empty_output():
    q, k, v = randn(2, 0, 8), randn(2, 5, 8, seed=1), randn(2, 5, 3, seed=2)
    assert tiled.attention(q, k, v).shape == (2, 0, 3)


@pytest.mark.parametrize("poison", [math.nan, math.inf])
@pytest.mark.parametrize("mask_kind", ["padding", "causal"])
def test_hidden_keys_never_reach_output_or_gradients(poison, mask_kind):
    q = randn(2, 2, 5, 8).requires_grad_()
    k, v = randn(2, 2, 9, 8, seed=1), randn(2, 2, 9, 4, seed=2)
    if mask_kind == "padding":  # sequence 0 has 6 real keys
        kwargs = {"attn_mask": (torch.arange(9) < torch.tensor([6, 9])[:, None])[:, None, None, :]}
        hidden = (0, slice(None), slice(6, None))
    else:  # top-left causal with L = 5 < S = 9: keys 5.. are seen by no query
        kwargs = {"is_causal": True}
        hidden = (slice(None), slice(None), slice(5, None))
    k_clean, v_clean = k.clone(), v.clone()
    k_clean[hidden], v_clean[hidden] = 0.0, 0.0
    k_poisoned, v_poisoned = k_clean.clone().requires_grad_(), v_clean.clone().requires_grad_()
    with torch.no_grad():
        k_poisoned[hidden], v_poisoned[hidden] = poison, poison
    clean = tiled.attention(q, k_clean, v_clean, block_q=2, block_k=4, **kwargs)
    poisoned = tiled.attention(q, k_poisoned, v_poisoned, block_q=2, block_k=4, **kwargs)
    assert torch.equal(clean, poisoned)
    grads = torch.autograd.grad(poisoned.sum(), (q, k_poisoned, v_poisoned))
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.fixture
def float32_products(monkeypatch):
    """Every product in float32, the compute dtype, whatever this CPU's bfloat16 instructions."""
    monkeypatch.setattr(tiled, "product_dtype", lambda input_dtype, compute_dtype, device: compute_dtype)


@pytest.fixture
def bfloat16_products(monkeypatch):
    """The products with a tile of weights or score gradients in bfloat16, as on a CPU with AVX512-BF16."""
    monkeypatch.setattr(tiled, "product_dtype", lambda input_dtype, compute_dtype, device: torch.bfloat16)


@pytest.mark.parametrize("products", ["float32_products", "bfloat16_products"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mask_kind", ["none", "float", "causal"])
def test_half_precision_as_accurate_as_naive(dtype, mask_kind, products, request):
    request.getfixturevalue(products)  # the forward pass is float32 throughout either way
    q, k, v, kwargs, _ = make_case(2, 4, 2, 40, 50, 32, 32, mask_kind, dtype=dtype)
    out, lse = tiled.attention(q, k, v, block_q=16, block_k=16, return_lse=True, **kwargs)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert_as_accurate_as_naive(out, q, k, v, **kwargs)


@pytest.mark.parametrize("products", ["float32_products", "bfloat16_products"])
def test_bfloat16_gradients_as_accurate_as_naive(products, request):
    request.getfixturevalue(products)
    q, k, v, kwargs, _ = make_case(2, 4, 2, 40, 50, 32, 32, "causal", dtype=torch.bfloat16)
    upstream = randn(2, 4, 40, 32, seed=9)

    def gradients(x, backend):
        inputs = [t.detach().to(x).requires_grad_() for t in (q, k, v)]
        out = attnlib.scaled_dot_product_attention(*inputs, backend=backend, **kwargs)
        return torch.autograd.grad(out, inputs, upstream.to(x))

    exact = gradients(torch.float64, "naive")
    naive, ours = gradients(torch.bfloat16, "naive"), gradients(torch.bfloat16, "tiled")
    for mine, theirs, truth in zip(ours, naive, exact):
        assert mine.dtype == torch.bfloat16
        assert max_error(mine, truth) <= 2.0 * max_error(theirs, truth) + 1e-6


def test_bfloat16_products_only_where_the_hardware_multiplies_bfloat16(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    for dtype in (torch.float32, torch.float16, torch.float64):
        assert tiled.product_dtype(dtype, torch.float32, gpu) == torch.float32
    assert tiled.product_dtype(torch.bfloat16, torch.float32, gpu) == torch.bfloat16
    for avx512_bf16, amx, expected in ((True, False, torch.bfloat16), (False, True, torch.bfloat16),
                                       (False, False, torch.float32)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        assert tiled.product_dtype(torch.bfloat16, torch.float32, cpu) == expected


def test_gqa_never_copies_keys_or_values_per_query_head():
    # One key/value head shared by 8 query heads: a per-head copy of K would be 8 * 512 * 64 floats.
    q, k, v = randn(1, 8, 16, 64, dtype=torch.float32), randn(1, 1, 512, 64, dtype=torch.float32, seed=1), \
        randn(1, 1, 512, 8, dtype=torch.float32, seed=2)
    _, largest = largest_intermediate(tiled.attention, q, k, v, enable_gqa=True, block_q=16, block_k=64)
    one_tile = 8 * 16 * 64 * 4  # query heads x block_q x block_k fp32 scores
    assert largest.nbytes <= one_tile < k.nbytes * 8


@pytest.mark.parametrize("is_causal", [False, True])
def test_largest_intermediate_is_one_tile_not_the_score_matrix(is_causal):
    heads, n, width, block_q, block_k = 4, 512, 16, 128, 256
    q, k, v = (randn(1, heads, n, width, dtype=torch.float32, seed=s).requires_grad_() for s in range(3))

    def forward_and_backward():
        tiled.attention(q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k).sum().backward()

    one_tile = 4 * heads * block_q * block_k  # float32 scores of one tile; larger than the output here
    assert one_tile > 4 * heads * n * width
    with torch.no_grad():
        _, forward_largest = largest_intermediate(
            tiled.attention, q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k)
    _, largest = largest_intermediate(forward_and_backward)
    for allocation in (forward_largest, largest):
        assert allocation.nbytes == one_tile and allocation.shape == (heads, block_q, block_k)
    _, naive_largest = largest_intermediate(
        attnlib.scaled_dot_product_attention, q.detach(), k.detach(), v.detach(), backend="naive")
    assert naive_largest.nbytes == 4 * heads * n * n


@pytest.mark.parametrize("mask_kind", ["causal_br", "float"])  # float: a mask per head, cut per part of the heads
def test_blocks_on_threads_match_blocks_in_order_and_restore_the_thread_count(mask_kind):
    q, k, v, kwargs, _ = make_case(2, 4, 2, 300, 200, 16, 8, mask_kind, dtype=torch.float32)
    upstream = randn(2, 4, 300, 8, dtype=torch.float32, seed=6)

    def output_and_gradients():
        inputs = [x.clone().requires_grad_() for x in (q, k, v)]
        out = tiled.attention(*inputs, block_q=32, block_k=64, **kwargs)
        return (out.detach(), *torch.autograd.grad(out, inputs, upstream))

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # one core: the blocks run in order in this thread
        in_order = output_and_gradients()
        torch.set_num_threads(2)  # two cores: one thread per core takes whole blocks
        on_threads = output_and_gradients()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    for threaded, ordered in zip(on_threads, in_order):
        assert max_error(threaded, ordered) < 1e-5


def test_dispatch_selects_tiled_by_name_and_for_large_problems():
    small = randn(1, 2, 8, 4)
    attnlib.scaled_dot_product_attention(small, small, small, backend="tiled")
    assert attnlib.last_dispatch().backend == "tiled"
    assert attnlib.explain(small, small, small).backend == "naive"
    large = randn(1, 1, 1024, 2, dtype=torch.float32)
    assert attnlib.explain(large, large, large).backend == "tiled"


def test_dropout_falls_back_to_naive_and_named_tiled_refuses_it():
    large = randn(1, 1, 1024, 2, dtype=torch.float32)
    explained = attnlib.explain(large, large, large, dropout_p=0.1)
    assert explained.backend == "naive" and "dropout" in explained.passed_over["tiled"]
    with pytest.raises(ValueError, match="dropout"):
        attnlib.scaled_dot_product_attention(large, large, large, dropout_p=0.1, backend="tiled")


def test_float_mask_that_requires_grad_falls_back_to_naive():
    q = randn(1, 1, 1024, 2, dtype=torch.float32)
    mask = torch.zeros(1024, 1024, requires_grad=True)
    assert attnlib.explain(q, q, q, attn_mask=mask).backend == "naive"
    with pytest.raises(ValueError, match="attn_mask"):
        tiled.attention(q, q, q, attn_mask=mask)


def test_block_q_zero_is_rejected():
    q = randn(1, 4, 2)
    with pytest.raises(ValueError, match="block_q"):
        tiled.attention(q, q, q, block_q=0)


def test_block_k_float_is_rejected():
    q = randn(1, 4, 2)
    with pytest.raises(TypeError, match="block_k"):
        tiled.attention(q, q, q, block_k=2.0)


def test_block_q_bool_is_rejected():
    q = randn(1, 4, 2)
    with pytest.raises(TypeError, match="block_q"):
        tiled.attention(q, q, q, block_q=True)


def test_return_lse_non_bool_is_rejected():
    q = randn(1, 4, 2)
    with pytest.raises(TypeError, match="return_lse"):
        tiled.attention(q, q, q, return_lse="yes")


def test_sympy_merge_of_two_states_equals_the_union():
    from attnlib.book.theory import online_softmax

    for block_a, block_b in [(1, 1), (2, 3)]:
        proof = online_softmax.merge_proof(block_a, block_b)
        assert set(proof) == {"l", "acc", "output"}
        assert all(online_softmax.vanishes(difference) for difference in proof.values())


def test_sympy_merge_without_rescaling_does_not_vanish():
    import sympy as sp

    from attnlib.book.theory import online_softmax

    s1, s2, v1, v2 = sp.symbols("s1 s2 v1 v2", real=True)
    a, b = online_softmax.block_state([s1], [v1], s1), online_softmax.block_state([s2], [v2], s2)
    unscaled_acc = a[2] + b[2]  # forgets exp(m_side - m)
    assert not online_softmax.vanishes(unscaled_acc - online_softmax.merge_states(a, b)[2])


def test_sympy_merge_agrees_with_numbers():
    import numpy as np
    import sympy as sp

    from attnlib.book.theory import online_softmax

    scores, values = [0.3, -1.2, 2.5], [1.0, -2.0, 0.5]
    s, v = sp.symbols("s1:4", real=True), sp.symbols("v1:4", real=True)
    a = online_softmax.block_state(s[:1], v[:1], s[0])
    b = online_softmax.block_state(s[1:], v[1:], sp.Max(*s[1:]))
    _, l, acc = online_softmax.merge_states(a, b)
    numbers = dict(zip(s + v, scores + values))
    weights = np.exp(scores) / np.exp(scores).sum()
    assert abs(float((acc / l).subs(numbers)) - float(weights @ np.array(values))) < 1e-12


def test_gradients_from_lse_equal_autograd_through_the_naive_path():
    gen = torch.Generator().manual_seed(41)
    q, k, v = (torch.randn(2, 4, n, 16, generator=gen, dtype=torch.float64) for n in (33, 47, 47))
    mask = torch.rand(4, 33, 47, generator=gen) > 0.3
    mask[1, 5] = False  # a row that sees nothing
    upstream = torch.randn(2, 4, 33, 16, generator=gen, dtype=torch.float64)
    output, lse = tiled.attention(q, k, v, attn_mask=mask, return_lse=True)
    problem = check_problem(q, k, v, mask)
    grads = tiled.gradients_from_lse(problem, output, lse, upstream, torch.zeros_like(lse),
                                     block_q=8, block_k=16)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    naive = attnlib.scaled_dot_product_attention(*leaves, attn_mask=mask, backend="naive")
    (naive * upstream).sum().backward()
    for ours, leaf in zip(grads, leaves):
        assert ours.shape == leaf.shape
        torch.testing.assert_close(ours, leaf.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_exp_as_exp2_is_exp_to_the_rounding_of_x_log2_e(dtype):
    # the exponents z - m <= 0 of a tile, down to e^-80 (normal in float32), and -inf for a masked score
    exponents = -torch.logspace(-8, math.log10(80), 2001, dtype=dtype)
    ours, exact = tiled._exp_(exponents.clone()), torch.exp(exponents)
    # rounding x log2 e moves the exponent by about |x| units in the last place
    allowed = 2 * torch.finfo(dtype).eps * (1 + exponents.abs()) * exact
    assert ((ours - exact).abs() <= allowed).all()
    assert tiled._exp_(torch.tensor([0.0, -math.inf], dtype=dtype)).tolist() == [1.0, 0.0]
