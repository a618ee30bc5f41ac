"""Chapter 10's backward pass: the SymPy derivation against SymPy's own derivative,
the five formulas against autograd in float64 (masks, causal, soft-cap, rows with
no key), and the bytes autograd saves for the backward pass of naive and tiled."""
import math

import pytest
import sympy as sp
import torch

import attnlib
from attnlib import tiled
from attnlib.book.intermediates import saved_for_backward
from attnlib.book.theory import backward


def test_the_formulas_equal_sympys_derivative_of_symbolic_attention():
    # two queries, three keys, width 2, value width 2, the scale a symbol
    assert backward.formula_residuals(backward.attention_symbols(2, 3, 2, 2)) == {
        "dQ": True, "dK": True, "dV": True}


def test_dropping_D_gives_a_residual_that_does_not_vanish():
    # the control: dS = P * dP (no D) is not the derivative, and vanishes says so
    symbols = backward.attention_symbols(1, 2, 1, 1)
    formulas = backward.gradients_by_formulas(symbols)
    weights = backward.forward(symbols)["P"]
    wrong = backward.tau * weights.multiply_elementwise(formulas["dP"]) * symbols["K"]
    derived = backward.gradients_by_differentiation(symbols)["dQ"]
    assert not backward.vanishes((wrong - derived)[0])
    assert backward.vanishes((formulas["dQ"] - derived)[0])


def test_vanishes_sees_powers_and_inverses_of_one_exponential():
    x, y = sp.symbols("x y", real=True)
    assert backward.vanishes(sp.exp(2 * x + 2 * y) - sp.exp(x + y) ** 2)
    assert backward.vanishes(sp.exp(-x) * sp.exp(x) - 1)
    assert not backward.vanishes(sp.exp(x) - sp.exp(y))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_jacobian_vector_product_needs_only_a_dot_product(n):
    assert backward.jacobian_vector_product_residual(n) == sp.zeros(n, 1)


def test_jacobian_vector_product_uses_chapter_4s_jacobian():
    # J dP with J from SymPy's own derivative of softmax, at a point: p * (dP - p.dP)
    from attnlib.book.theory import softmax as softmax_theory

    z, g = [0.3, -1.2, 2.0], [0.5, 1.5, -0.25]
    jacobian = softmax_theory.jacobian(3).subs(dict(zip(softmax_theory.logits(3), z)))
    alpha = torch.softmax(torch.tensor(z, dtype=torch.float64), dim=0)
    expected = alpha * (torch.tensor(g, dtype=torch.float64) - alpha @ torch.tensor(g, dtype=torch.float64))
    product = [float(x) for x in jacobian * sp.Matrix(g)]
    assert product == pytest.approx(expected.tolist(), abs=1e-14)


def test_row_term_identity_holds_and_its_control_does_not():
    lhs, rhs = backward.row_term_identity(keys=3, value_width=2)
    assert backward.vanishes(lhs - rhs)
    assert not backward.vanishes(lhs)


def test_softcap_slope_is_the_derivative_of_the_cap():
    slope = backward.softcap_slope()
    s = torch.tensor([-7.0, 0.0, 0.4, 15.0], dtype=torch.float64, requires_grad=True)
    (5.0 * torch.tanh(s / 5.0)).sum().backward()
    symbol = next(x for x in slope.free_symbols if x.name == "z")
    at = [float(slope.subs({symbol: value, backward.cap: 5})) for value in s.detach().tolist()]
    assert at == pytest.approx(s.grad.tolist(), abs=1e-15)


def seeded(*shape, seed):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def torch_autograd_gradients(q, k, v, grad_output, scale, mask, softcap=None):
    """Autograd through plain torch ops, for problems where every row sees a key."""
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    scores = scale * q @ k.mT
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    out = torch.softmax(scores, dim=-1) @ v
    return torch.autograd.grad(out, (q, k, v), grad_output)


CASES = {
    "no mask": dict(mask=None),
    "random mask": dict(mask=seeded(2, 6, 9, seed=5) > -0.5),
    "causal": dict(mask=torch.ones(6, 9, dtype=torch.bool).tril()),
    "soft-cap": dict(mask=None, softcap=2.0),
}


@pytest.mark.parametrize("case", CASES)
def test_attention_gradients_equal_autograd_in_float64(case):
    kwargs = CASES[case]
    mask = kwargs["mask"]
    if mask is not None:
        assert mask.any(dim=-1).all(), "this test's mask leaves every row a key"
    q, k, v = seeded(2, 6, 4, seed=1), 3 * seeded(2, 9, 4, seed=2), seeded(2, 9, 3, seed=3)
    grad_output = seeded(2, 6, 3, seed=4)
    ours = backward.attention_gradients(q, k, v, grad_output, 0.5, **kwargs)
    theirs = torch_autograd_gradients(q, k, v, grad_output, 0.5, **kwargs)
    for mine, reference in zip(ours, theirs):
        assert (mine - reference).abs().max() < 1e-13


def test_attention_gradients_equal_the_library_paths_with_a_causal_mask():
    q, k, v = seeded(1, 2, 7, 8, seed=6), seeded(1, 2, 7, 8, seed=7), seeded(1, 2, 7, 5, seed=8)
    grad_output = seeded(1, 2, 7, 5, seed=9)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    ours = backward.attention_gradients(q, k, v, grad_output, 8**-0.5, causal)
    for path in ("naive", "tiled"):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out = attnlib.scaled_dot_product_attention(*leaves, is_causal=True, backend=path)
        for mine, reference in zip(ours, torch.autograd.grad(out, leaves, grad_output)):
            assert (mine - reference).abs().max() < 1e-13, path


def test_a_row_with_no_key_gets_zero_gradient_and_leaves_the_others_alone():
    q, k, v = seeded(5, 4, seed=10), seeded(6, 4, seed=11), seeded(6, 3, seed=12)
    grad_output = seeded(5, 3, seed=13)
    mask = seeded(5, 6, seed=14) > -0.8
    mask[2] = False  # query 2 sees nothing
    assert mask[[0, 1, 3, 4]].any(dim=-1).all()
    dq, dk, dv = backward.attention_gradients(q, k, v, grad_output, 0.5, mask)
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    assert torch.equal(dq[2], torch.zeros(4, dtype=torch.float64))
    # query 2 contributes nothing: the problem without it has the same dK, dV and other dQ rows
    rest = [0, 1, 3, 4]
    without = torch_autograd_gradients(q[rest], k, v, grad_output[rest], 0.5, mask[rest])
    assert (dq[rest] - without[0]).abs().max() < 1e-13
    assert (dk - without[1]).abs().max() < 1e-13
    assert (dv - without[2]).abs().max() < 1e-13


@pytest.mark.parametrize("path", ["naive", "tiled"])
def test_nan_padding_never_reaches_the_library_paths_gradients(path):
    q, k, v = (seeded(1, 1, 4, 8, seed=s).requires_grad_() for s in (15, 16, 17))
    mask = torch.tensor([True, True, True, False])  # key 3 is padding
    mask = mask.expand(1, 1, 4, 4).clone()
    mask[0, 0, 1] = False  # and query 1 sees nothing
    with torch.no_grad():
        k[0, 0, 3] = math.nan
        v[0, 0, 3] = math.nan
    out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask, backend=path)
    out.sum().backward()
    for x in (q, k, v):
        assert torch.isfinite(x.grad).all()
    assert torch.equal(q.grad[0, 0, 1], torch.zeros(8, dtype=torch.float64))
    assert torch.equal(k.grad[0, 0, 3], torch.zeros(8, dtype=torch.float64))


def test_attention_gradients_turn_away_a_float_mask():
    x = seeded(2, 2, seed=0)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        backward.attention_gradients(x, x, x, x, 1.0, mask=torch.zeros(2, 2))


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_attention_symbols_turn_away_a_bad_size(bad):
    with pytest.raises(ValueError, match="queries must be a positive int"):
        backward.attention_symbols(bad)


def saved_bytes(path, heads, length, width):
    q, k, v = (torch.randn(1, heads, length, width, requires_grad=True) for _ in range(3))
    _, saved = saved_for_backward(attnlib.scaled_dot_product_attention, q, k, v, backend=path)
    return saved


@pytest.mark.parametrize("length", [64, 128, 256])
def test_tiled_saves_its_inputs_output_and_one_float_per_row(length):
    heads, width = 2, 16
    saved = saved_bytes("tiled", heads, length, width)
    by_role = {role: sorted(s.nbytes for s in saved if s.role == role) for role in ("input", "output", "extra")}
    tensor = 4 * heads * length * width  # one float32 (1, H, L, d) tensor
    assert by_role == {"input": [tensor] * 3, "output": [tensor], "extra": [4 * heads * length]}


def test_naive_saves_score_matrices_that_grow_with_the_square_of_the_length():
    heads, width = 2, 16
    extra = {n: sum(s.nbytes for s in saved_bytes("naive", heads, n, width) if s.role == "extra")
             for n in (64, 128, 256)}
    for n, nbytes in extra.items():
        assert nbytes >= 4 * heads * n * n  # at least the weights P, float32
        assert nbytes < 4 * 4 * heads * n * n  # and no more than a few score-sized tensors
    assert extra[256] / extra[128] == pytest.approx(4, rel=0.02)


def test_saved_for_backward_counts_a_shared_storage_once():
    x = torch.randn(8, 8, requires_grad=True)
    _, saved = saved_for_backward(lambda t: (t * t).sum(), x)  # mul saves x twice
    assert [(s.nbytes, s.role) for s in saved] == [(4 * 64, "input")]
    _, saved = saved_for_backward(lambda t: t.exp(), x)  # exp saves its result
    assert [(s.nbytes, s.role) for s in saved] == [(4 * 64, "output")]


def test_one_tile_of_the_tiled_backward_is_the_five_formulas():
    q, k, v = seeded(1, 1, 6, 4, seed=20), seeded(1, 1, 9, 4, seed=21), seeded(1, 1, 9, 3, seed=22)
    grad_output = seeded(1, 1, 6, 3, seed=23)
    problem = attnlib.problem.check_problem(q, k, v, None, 0.0, False, None, False, "top_left", None)
    out, lse = tiled.attention(q, k, v, return_lse=True)
    from_lse = tiled.gradients_from_lse(problem, out, lse, grad_output, torch.zeros_like(lse),
                                        block_q=6, block_k=9)
    for mine, reference in zip(backward.attention_gradients(q, k, v, grad_output, 0.5), from_lse):
        assert (mine - reference).abs().max() < 1e-13
