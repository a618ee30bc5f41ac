"""The tiled path with sliding windows and sinks, in blocks small enough to cross every edge.

Block sizes of 1 and odd sizes that divide neither L nor S make the band of
a window start and end inside tiles, between tiles and past the last key.
The reference is the float64 formula of ``test_window_and_sinks.py``, written
without attnlib; the tile count is derived from the window rule alone.
"""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnlib
from attnlib import tiled
from attnlib.problem import check_problem
from reference import max_error, randn
from test_window_and_sinks import attention_float64, window_allowed

BLOCKS = [(1, 1), (2, 3), (3, 5), (5, 2), (64, 64)]


def case(L, S, *, heads=(4, 2), batch=2, seed=0, cap=None, window=None, causal=False,
         alignment="top_left", sinks=False, padding=False):
    """Inputs, keyword arguments and the float64 expectation (output and lse) of one problem."""
    hq, hkv = heads
    q = randn(batch, hq, L, 8, seed=seed) * 2
    k, v = randn(batch, hkv, S, 8, seed=seed + 1) * 2, randn(batch, hkv, S, 5, seed=seed + 2)
    offset = S - L if alignment == "bottom_right" else 0
    allowed = torch.ones(batch, 1, L, S, dtype=torch.bool)
    kwargs = dict(enable_gqa=hq != hkv, is_causal=causal, causal_alignment=alignment, window=window,
                  softcap=cap)
    if window is not None:
        allowed &= window_allowed(L, S, *window, offset)
    if causal:
        allowed &= window_allowed(L, S, None, 0, offset)
    if padding:  # sequence 1 has only its first S // 2 keys
        lengths = torch.tensor([S, S // 2])
        kwargs["attn_mask"] = (torch.arange(S) < lengths[:, None])[:, None, None, :]
        allowed &= kwargs["attn_mask"]
    if sinks:
        kwargs["sinks"] = torch.linspace(-1.5, 2.5, hq, dtype=torch.float64)
    expected = attention_float64(q, k, v, allowed=allowed, sinks=kwargs.get("sinks"), cap=cap)
    return (q, k, v), kwargs, expected, lse_float64(q, k, allowed, kwargs.get("sinks"), cap)


def lse_float64(q, k, allowed, sinks, cap):
    """``log(exp(s_h) + sum over allowed j of exp(z_ij))``, from the definition."""
    k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    scores = scores.masked_fill(~allowed, -math.inf)
    if sinks is not None:
        scores = torch.cat([scores, sinks.reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)], dim=-1)
    return torch.logsumexp(scores, dim=-1)


def check_against_formula(inputs, kwargs, expected, expected_lse, block_q, block_k):
    output, lse = tiled.attention(*inputs, block_q=block_q, block_k=block_k, return_lse=True, **kwargs)
    assert max_error(output, expected) < 1e-12
    assert torch.equal(torch.isneginf(lse), torch.isneginf(expected_lse))
    finite = torch.isfinite(expected_lse)
    assert max_error(lse[finite], expected_lse[finite]) < 1e-12


@pytest.mark.parametrize("block_q, block_k", BLOCKS)
@pytest.mark.parametrize("window, causal, alignment", [
    ((0, 0), False, "top_left"), ((3, 1), False, "bottom_right"), ((None, 2), False, "top_left"),
    ((4, None), False, "bottom_right"), ((2, 0), True, "top_left"), ((5, None), True, "bottom_right"),
])
def test_windows_match_the_formula_in_small_blocks(block_q, block_k, window, causal, alignment):
    inputs, kwargs, expected, lse = case(9, 14, window=window, causal=causal, alignment=alignment)
    check_against_formula(inputs, kwargs, expected, lse, block_q, block_k)


@pytest.mark.parametrize("block_q, block_k", BLOCKS)
@pytest.mark.parametrize("extras", [
    dict(sinks=True), dict(sinks=True, causal=True), dict(sinks=True, window=(2, 1), padding=True),
    dict(window=(3, 0), padding=True, cap=3.0),  # is_causal does not combine with a mask
    dict(window=(1, 2), sinks=True, cap=2.0, alignment="bottom_right", heads=(3, 1)),
])
def test_sinks_padding_gqa_and_softcap_together(block_q, block_k, extras):
    inputs, kwargs, expected, lse = case(10, 13, **extras)
    check_against_formula(inputs, kwargs, expected, lse, block_q, block_k)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 12), S=st.integers(1, 12), block_q=st.integers(1, 6), block_k=st.integers(1, 6),
       left=st.one_of(st.none(), st.integers(0, 6)), right=st.one_of(st.none(), st.integers(0, 6)),
       causal=st.booleans(), bottom_right=st.booleans(), sinks=st.booleans(), seed=st.integers(0, 999))
def test_property_any_window_matches_the_formula(L, S, block_q, block_k, left, right, causal,
                                                  bottom_right, sinks, seed):
    if left is None and right is None:
        left = 0
    if causal:
        right = 0 if right is None else min(right, 0)
    inputs, kwargs, expected, lse = case(
        L, S, seed=seed, window=(left, right), causal=causal, sinks=sinks,
        alignment="bottom_right" if bottom_right else "top_left")
    check_against_formula(inputs, kwargs, expected, lse, block_q, block_k)


@pytest.mark.parametrize("sinks", [False, True])
def test_rows_with_no_key_give_zero_and_the_sink_alone_in_lse(sinks):
    # L = 9 > S = 4, top-left, window (1, 0): queries 5.. sit past every key
    inputs, kwargs, expected, lse_expected = case(9, 4, window=(1, 0), sinks=sinks)
    q, k, v = (x.clone().requires_grad_() for x in inputs)
    output, lse = tiled.attention(q, k, v, block_q=2, block_k=3, return_lse=True, **kwargs)
    empty = slice(5, None)
    assert (output[..., empty, :] == 0).all()
    if sinks:
        assert torch.equal(lse[..., empty], kwargs["sinks"][:, None].expand(2, -1, 4))
    else:
        assert torch.isneginf(lse[..., empty]).all()
    output[..., empty, :].sum().backward()
    assert all((x.grad == 0).all() for x in (q, k, v))


@pytest.mark.parametrize("block_q, block_k", [(1, 1), (2, 3), (4, 5)])
def test_gradcheck_with_window_sinks_padding_and_lse(block_q, block_k):
    (q, k, v), kwargs, _, _ = case(6, 7, heads=(2, 1), batch=2, window=(2, 1), sinks=True,
                                   padding=True, cap=3.0, alignment="bottom_right")
    sinks = kwargs.pop("sinks").requires_grad_()

    def both(q, k, v, sinks):
        return tiled.attention(q, k, v, sinks=sinks, block_q=block_q, block_k=block_k,
                               return_lse=True, **kwargs)

    assert torch.autograd.gradcheck(both, (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(),
                                           sinks))


def test_gradients_match_autograd_through_the_naive_path():
    (q, k, v), kwargs, _, _ = case(17, 23, window=(4, 0), sinks=True, padding=True,
                                   alignment="bottom_right")
    leaves = [x.requires_grad_() for x in (q, k, v, kwargs["sinks"])]
    upstream = randn(2, 4, 17, 5, seed=9)
    gradients = {}
    for backend in ("tiled", "naive"):
        output = attnlib.scaled_dot_product_attention(q, k, v, backend=backend, **kwargs) \
            if backend == "naive" else tiled.attention(q, k, v, block_q=3, block_k=4, **kwargs)
        gradients[backend] = torch.autograd.grad(output, leaves, upstream)
    for got, want in zip(gradients["tiled"], gradients["naive"]):
        assert max_error(got, want) < 1e-12


def test_a_key_no_query_sees_never_reaches_the_results():
    """Bottom-right, L = 4, S = 10, window (2, 0): query i sees keys i + 4 .. i + 6.

    Keys 0-3 lie left of every window; key 4 is in query 0's window only, and
    the mask hides it from query 0: no query sees it either.
    """
    mask = torch.ones(4, 10, dtype=torch.bool)
    mask[0, 4] = False
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 10, 8, seed=1), randn(1, 2, 10, 3, seed=2)
    k[..., :5, :], v[..., :5, :] = math.nan, math.nan
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    output = tiled.attention(q, k, v, mask, window=(2, 0), causal_alignment="bottom_right",
                             block_q=3, block_k=4)
    assert torch.isfinite(output).all()
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(output.sum(), (q, k, v)))


def tiles_touched_by_the_rule(L, S, window, causal, offset, block_q, block_k):
    """Tiles (query block, key block) of the grid holding at least one allowed (i, j)."""
    allowed = window_allowed(L, S, *window, offset)
    if causal:
        allowed &= window_allowed(L, S, None, 0, offset)
    return {(i0, j0) for i0 in range(0, L, block_q) for j0 in range(0, S, block_k)
            if allowed[i0:i0 + block_q, j0:j0 + block_k].any()}


def tiles_visited(L, S, block_q, block_k, **kwargs):
    """The tiles that the forward (key_blocks) and the backward (query_blocks_seeing) loops visit."""
    empty = torch.empty(1, 1, L, 1), torch.empty(1, 1, S, 1)
    tiles = tiled._Tiles(check_problem(empty[0], empty[1], empty[1], **kwargs), *empty, empty[1])
    forward = {(i0, j0) for i0 in range(0, L, block_q)
               for j0, _ in tiles.key_blocks(i0, min(i0 + block_q, L), block_k)}
    backward = {(i0, j0) for j0 in range(0, S, block_k)
                for i0, _, _ in tiles.query_blocks_seeing(j0, min(j0 + block_k, S), block_q)}
    return forward, backward


@pytest.mark.parametrize("window, causal, alignment", [
    ((64, 0), True, "top_left"), ((100, 30), False, "top_left"), ((0, 0), False, "bottom_right"),
    ((200, None), False, "top_left"), ((None, 0), True, "bottom_right"), ((37, 0), True, "bottom_right"),
])
def test_the_loops_visit_exactly_the_tiles_the_window_touches(window, causal, alignment):
    L, S, block_q, block_k = 500, 700, 32, 48
    offset = S - L if alignment == "bottom_right" else 0
    forward, backward = tiles_visited(L, S, block_q, block_k, window=window, is_causal=causal,
                                      causal_alignment=alignment)
    expected = tiles_touched_by_the_rule(L, S, window, causal, offset, block_q, block_k)
    assert forward == expected and backward == expected


def test_work_grows_with_the_window_not_the_sequence():
    """At S = 4096 with 64 x 64 tiles, a window of 128 keys visits at most 4 key tiles per query tile."""
    S, block = 4096, 64
    counts = {}
    for window in (128, 512, None):
        forward, _ = tiles_visited(S, S, block, block, is_causal=True,
                                   window=None if window is None else (window - 1, 0))
        counts[window] = len(forward)
    query_tiles = S // block
    assert counts[128] <= 3 * query_tiles  # keys i-127..i: the tile's own and at most two before it
    assert counts[512] <= 9 * query_tiles
    assert counts[None] == query_tiles * (query_tiles + 1) // 2  # the causal triangle


def test_the_forward_and_backward_compute_only_the_visited_tiles(monkeypatch):
    """Every tile computed loads its key block once: count the loads against the rule's tiles."""
    L, S, block_q, block_k = 40, 50, 4, 6
    (q, k, v), kwargs, _, _ = case(L, S, window=(7, 0), causal=True, alignment="bottom_right",
                                   heads=(2, 2), batch=1)
    loads = []  # (key block start, rows of N loaded): the backward splits the heads between cores
    load = tiled._Tiles.key_value_block

    def counting(self, j0, j1):
        loads.append((j0, self.rows))
        return load(self, j0, j1)

    monkeypatch.setattr(tiled._Tiles, "key_value_block", counting)
    output = tiled.attention(*(x.requires_grad_() for x in (q, k, v)), block_q=block_q,
                             block_k=block_k, **kwargs)
    touched = tiles_touched_by_the_rule(L, S, (7, 0), True, S - L, block_q, block_k)
    rows = 2  # batch 1 x 2 key/value heads
    assert len(loads) == len(touched) < (L // block_q) * math.ceil(S / block_k) / 3
    assert {n for _, n in loads} == {rows}
    forward_loads = len(loads)
    output.sum().backward()  # every tile once more, for every row of N
    assert sum(n for _, n in loads[forward_loads:]) == rows * len(touched)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_with_window_and_sinks_as_accurate_as_naive(dtype):
    (q, k, v), kwargs, _, _ = case(40, 50, window=(9, 0), causal=True, sinks=True,
                                   alignment="bottom_right")
    q, k, v = (x.to(dtype) for x in (q, k, v))
    kwargs["sinks"] = kwargs["sinks"].to(dtype).requires_grad_()
    output = tiled.attention(q, k, v, block_q=8, block_k=16, **kwargs)
    (grad_sinks,) = torch.autograd.grad(output.float().sum(), kwargs["sinks"])
    assert grad_sinks.dtype == dtype and torch.isfinite(grad_sinks).all()
    naive = attnlib.scaled_dot_product_attention(q, k, v, backend="naive", **kwargs)
    assert output.dtype == dtype
    output, naive = output.detach(), naive.detach()
    # float64 on the inputs rounded to dtype, as tests/reference.py's helper does
    exact = attention_float64(q, k, v, allowed=window_allowed(40, 50, 9, 0, 10),
                              sinks=kwargs["sinks"].detach())
    assert max_error(output, exact) <= 2 * max_error(naive, exact) + 1e-6
