"""The fused kernels with ``window=`` and ``sinks=``, in Triton's interpreter, against a float64 formula.

The formula is tests/test_window_and_sinks.py's, written from the definitions;
the yardstick is the kernel projects' (the fused error at most twice the
naive path's in the same dtype, plus a tiny absolute term). The backward
kernels, as FlashAttention's, take ``D = rowsum(dO * O)`` from the output as
stored, in fp16, where the naive path's autograd keeps it in fp32: the
gradients' bound adds what that rounding alone moves them by, computed in
float64 (:func:`cost_of_the_stored_output`). Then the work:
the tiles each kernel visits, recorded from the bounds it passes to its
tile loops, equal a count made here from the window rule alone, and grow
with ``L x W``, not ``L x S``.

Like test_fused_interpreter.py, this module switches the interpreter on
before anything in the process imports Triton.
"""
import os

os.environ["TRITON_INTERPRET"] = "1"

import pathlib  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import attnlib  # noqa: E402
from attnlib import fused, naive  # noqa: E402
from attnlib.problem import check_problem  # noqa: E402
from reference import max_error  # noqa: E402
from test_window_and_sinks import attention_float64, window_allowed  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from fused_window_tiles import record_tile_loops, tiles_needed  # noqa: E402  (benchmarks/ is no package)

from interpreter import skip_without_triton, triton_interprets  # noqa: E402,F401  (autouse)

skip_without_triton()


#: The absolute term of the tolerance: fp32 errors are of order 1e-6.
TINY = 1e-5


@dataclass(frozen=True)
class Case:
    query_len: int
    key_len: int
    window: tuple
    dtype: torch.dtype = torch.float32
    causal: bool = False
    alignment: str = "top_left"
    sinks: bool = True
    softcap: float | None = None
    padding: bool = False  # the second sequence's last third of keys is padding

    def __str__(self):
        parts = [f"L{self.query_len}-S{self.key_len}-w{self.window[0]}_{self.window[1]}",
                 str(self.dtype).removeprefix("torch."), self.alignment]
        parts += [name for name, on in (("causal", self.causal), ("sinks", self.sinks),
                                        (f"softcap{self.softcap}", self.softcap), ("padding", self.padding)) if on]
        return "-".join(parts)

    @property
    def offset(self):
        return self.key_len - self.query_len if self.alignment == "bottom_right" else 0

    def allowed(self):
        """(B, 1, L, S) by the window rule, the causal rule and the padding, from the definitions."""
        L, S = self.query_len, self.key_len
        allowed = window_allowed(L, S, *self.window, self.offset)
        if self.causal:
            allowed &= window_allowed(L, S, None, 0, self.offset)
        allowed = allowed.expand(2, 1, L, S).clone()
        if self.padding:
            allowed[1, ..., 2 * S // 3:] = False
        return allowed


#: Interpreter tiles: 32 x 32 forward, 16 x 32 backward. Windows narrower than a tile and
#: wider, open on either side; bottom-right alignment with L < S and L > S; GQA throughout.
CASES = [
    Case(37, 45, (3, 1)),  # narrower than a tile, both sides
    Case(45, 70, (40, 0), torch.float16, causal=True, alignment="bottom_right", softcap=2.0),
    Case(70, 30, (2, 0), sinks=False),  # top-left, L > S: rows 32.. see no key at all
    Case(70, 30, (2, 0), torch.float16),  # the same rows, with a sink: still 0
    Case(60, 37, (5, None), torch.float16, alignment="bottom_right", sinks=False),  # rows past no key
    Case(40, 75, (None, 2), padding=True, softcap=4.0),  # open left side, key lengths
]


def make_inputs(case: Case, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(case.dtype)

    L, S = case.query_len, case.key_len
    query, key, value = randn(2, 4, L, 32) * 1.5, randn(2, 2, S, 32) * 1.5, randn(2, 2, S, 24)
    grad_output = randn(2, 4, L, 24)
    sinks = torch.tensor([-1.0, 0.5, 2.0, 6.0]).to(case.dtype) if case.sinks else None
    kwargs = dict(enable_gqa=True, is_causal=case.causal, causal_alignment=case.alignment,
                  window=case.window, softcap=case.softcap)
    if case.padding:
        kwargs["attn_mask"] = attnlib.padding_mask(torch.tensor([S, 2 * S // 3]), S)
    return query, key, value, grad_output, sinks, kwargs


def cost_of_the_stored_output(case, query, key, value, grad_output, sinks, kwargs, stored_output, exact_output):
    """How far ``(dQ, dK, dV, dsinks)`` move, in float64, when ``D`` comes from ``stored_output``.

    ``dS = P (dP - D)``: changing ``D`` by ``d`` changes ``dS`` by ``-P d``, and the sink's
    gradient ``-sum_i p_sink,i D_i`` by ``-sum_i p_sink,i d_i``; ``dV = P^T dO`` does not move.
    """
    problem = check_problem(*(x.double() for x in (query, key, value)),
                            sinks=sinks.double() if sinks is not None else None,
                            **dict(kwargs, softcap=None if case.softcap is None else case.softcap))
    weights = naive.weights(problem)  # (B, Hq, L, S), the sink in each denominator
    change = (grad_output.double() * (stored_output.double() - exact_output.detach())).sum(-1, keepdim=True)
    moved_scores = -weights * change
    if case.softcap is not None:  # through the cap's slope, as the kernels do
        scores = naive.masked_scaled_scores(problem, None)
        moved_scores = moved_scores * (1 - torch.tanh(scores / case.softcap) ** 2)
    key_rows = key.double().repeat_interleave(2, dim=1)
    moved = [(moved_scores @ key_rows * problem.scale).abs().max(),
             (moved_scores.mT @ query.double() * problem.scale).unflatten(1, (2, 2)).sum(2).abs().max(),
             torch.zeros(())]
    if sinks is not None:
        sink_weights = 1 - weights.sum(-1, keepdim=True)
        moved.append((sink_weights * change).sum(dim=(0, 2, 3)).abs().max())
    return [float(x) for x in moved]


def output_and_gradients(backend, query, key, value, grad_output, sinks, kwargs):
    """Output, lse-free; then (dQ, dK, dV, dsinks) for ``grad_output`` (dsinks None without sinks)."""
    leaves = [x.detach().clone().requires_grad_() for x in (query, key, value)]
    sink_leaf = sinks.detach().clone().requires_grad_() if sinks is not None else None
    output = attnlib.scaled_dot_product_attention(*leaves, sinks=sink_leaf, backend=backend, **kwargs)
    inputs = leaves + ([sink_leaf] if sinks is not None else [])
    return output, torch.autograd.grad(output, inputs, grad_output)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_output_and_gradients_match_float64_formula(case):
    query, key, value, grad_output, sinks, kwargs = make_inputs(case)
    output, gradients = output_and_gradients("fused", query, key, value, grad_output, sinks, kwargs)
    assert attnlib.last_dispatch().backend == "fused"
    naive_output, naive_gradients = output_and_gradients("naive", query, key, value, grad_output, sinks, kwargs)

    leaves = [x.double().requires_grad_() for x in (query, key, value)]
    sink_leaf = sinks.double().requires_grad_() if sinks is not None else None
    expected = attention_float64(*leaves, allowed=case.allowed(), sinks=sink_leaf, cap=case.softcap)
    expected_gradients = torch.autograd.grad(
        expected, leaves + ([sink_leaf] if sinks is not None else []), grad_output.double())

    assert output.dtype == case.dtype
    assert max_error(output, expected) <= 2 * max_error(naive_output, expected) + TINY
    stored = cost_of_the_stored_output(case, query, key, value, grad_output, sinks, kwargs, output, expected)
    names = ("dQ", "dK", "dV", "dsinks")
    for name, gradient, naive_gradient, exact, moved in zip(
            names, gradients, naive_gradients, expected_gradients, stored):
        err, err_naive = max_error(gradient, exact), max_error(naive_gradient, exact)
        assert gradient.dtype == case.dtype
        assert err <= 2 * err_naive + moved + TINY, (
            f"{name}: error {err:.3e} exceeds 2 x naive's {err_naive:.3e} + {moved:.3e} (stored output)")
    no_key = ~case.allowed().any(-1)  # (B, 1, L): rows that see no key give 0
    assert bool(output.masked_select(no_key[..., None].expand_as(output)).eq(0).all())


def test_a_window_meets_a_general_mask_with_sinks_in_batch_slices(monkeypatch):
    """A bool mask (loaded per tile) inside a two-sided window, GQA, sinks; one sequence per launch."""
    monkeypatch.setattr(fused.layout, "MAX_BATCH_HEADS", 4)  # 4 query heads: the batch of 3 in 3 launches
    generator = torch.Generator().manual_seed(5)
    L, S = 20, 40
    query, key, value = (torch.randn(3, heads, n, 16, generator=generator) for heads, n in ((4, L), (2, S), (2, S)))
    mask = torch.rand(L, S, generator=generator) > 0.3
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    kwargs = dict(attn_mask=mask, enable_gqa=True, window=(6, 3), causal_alignment="bottom_right")
    grad_output = torch.randn(3, 4, L, 16, generator=generator)
    output, gradients = output_and_gradients("fused", query, key, value, grad_output, sinks, kwargs)
    leaves = [x.double().requires_grad_() for x in (query, key, value, sinks)]
    expected = attention_float64(*leaves[:3], allowed=window_allowed(L, S, 6, 3, S - L) & mask, sinks=leaves[3])
    expected_gradients = torch.autograd.grad(expected, leaves, grad_output.double())
    assert max_error(output, expected) < 1e-5
    assert all(max_error(a, b) < 1e-5 for a, b in zip(gradients, expected_gradients))


def test_the_log_sum_exp_includes_the_sink():
    case = CASES[0]
    query, key, value, _, sinks, kwargs = make_inputs(case)
    _, lse = fused.attention(query, key, value, sinks=sinks, return_lse=True, **kwargs)
    scores = (query.double() @ key.double().repeat_interleave(2, dim=1).mT) / 32**0.5
    scores = scores.masked_fill(~case.allowed(), float("-inf"))
    sink_column = sinks.double()[:, None, None].expand(2, 4, case.query_len, 1)
    expected = torch.logsumexp(torch.cat([scores, sink_column], dim=-1), dim=-1)
    torch.testing.assert_close(lse.double(), expected, rtol=1e-5, atol=1e-5)


def test_without_keys_the_lse_is_the_sink_and_its_gradient_flows():
    query, sinks = torch.randn(1, 2, 3, 16), torch.tensor([0.5, -1.0], requires_grad=True)
    empty = torch.zeros(1, 2, 0, 16)
    output, lse = fused.attention(query, empty, empty, sinks=sinks, return_lse=True)
    assert torch.equal(output, torch.zeros_like(output))
    assert torch.equal(lse, sinks.detach()[:, None].expand(1, 2, 3))
    lse.sum().backward()  # d lse / d s = p_sink = 1 in each of the 3 rows
    assert torch.equal(sinks.grad, torch.full((2,), 3.0))


def test_gradcheck_in_float64_with_window_sinks_and_softcap(monkeypatch):
    """Analytic gradients (the backward kernels, and the sinks' sum) against finite differences
    of the forward kernel itself, run on float64 tensors as in test_fused_backward_interpreter.py."""
    monkeypatch.setattr(sys.modules["attnlib.fused.forward"], "unsupported_reason", lambda problem: None)
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(1, 2, 9, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    key = torch.randn(1, 1, 7, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    value = torch.randn(1, 1, 7, 24, generator=generator, dtype=torch.float64, requires_grad=True)
    sinks = torch.tensor([0.3, -1.0], dtype=torch.float64, requires_grad=True)

    def attend(query, key, value, sinks):
        problem = check_problem(query, key, value, is_causal=True, causal_alignment="bottom_right",
                                enable_gqa=True, softcap=3.0, window=(2, 0), sinks=sinks)
        return fused.FusedAttentionFunction.apply(query, key, value, sinks, problem, None)[0]

    assert torch.autograd.gradcheck(attend, (query, key, value, sinks), fast_mode=True)


# -- the work: tiles visited -------------------------------------------------------------------


#: (L, S, window, causal, alignment): windows from narrower than a tile to wider than several.
WORK_CASES = [
    (96, 96, (8, 0), True, "top_left"),
    (96, 96, (40, 0), True, "top_left"),
    (64, 160, (20, 20), False, "bottom_right"),
    (100, 70, (33, 5), False, "top_left"),
]


@pytest.mark.parametrize("L, S, window, causal, alignment", WORK_CASES, ids=str)
def test_each_kernel_visits_exactly_the_tiles_the_window_reaches(monkeypatch, L, S, window, causal, alignment):
    forward = record_tile_loops(monkeypatch, "forward_kernel", "_attend_to_key_tiles", "BLOCK_N")
    key_value = record_tile_loops(monkeypatch, "backward_kernel", "_key_block_gradients", "BLOCK_M")
    query_blocks = record_tile_loops(monkeypatch, "backward_kernel", "_query_block_gradient", "BLOCK_N")
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, 1, L, 16, generator=generator, requires_grad=True)
    key = torch.randn(1, 1, S, 16, generator=generator, requires_grad=True)
    value = torch.randn(1, 1, S, 16, generator=generator, requires_grad=True)
    output = fused.attention(query, key, value, is_causal=causal, causal_alignment=alignment, window=window)
    output.sum().backward()

    offset = S - L if alignment == "bottom_right" else 0
    allowed = window_allowed(L, S, *window, offset)
    if causal:
        allowed &= window_allowed(L, S, None, 0, offset)
    forward_blocks, backward_blocks = fused.INTERPRETER_BLOCKS, fused.INTERPRETER_BACKWARD_BLOCKS
    assert sum(forward) == tiles_needed(allowed, *forward_blocks)
    assert sum(query_blocks) == tiles_needed(allowed, *backward_blocks)
    assert sum(key_value) == tiles_needed(allowed, *backward_blocks)


def test_forward_work_grows_with_the_window_not_the_keys(monkeypatch):
    """At fixed W, doubling L = S doubles the tiles visited (L x W); without a window it quadruples."""
    forward = record_tile_loops(monkeypatch, "forward_kernel", "_attend_to_key_tiles", "BLOCK_N")

    def tiles(n, window):
        forward.clear()
        q = torch.randn(1, 1, n, 16)
        fused.attention(q, q, q, is_causal=True, window=window)
        return sum(forward)

    windowed = [tiles(n, (31, 0)) for n in (128, 256)]
    causal = [tiles(n, None) for n in (128, 256)]
    assert windowed == [2 * 128 // 32 - 1, 2 * 256 // 32 - 1]  # the diagonal tile and the one left of it
    assert causal == [(128 // 32) * (128 // 32 + 1) // 2, (256 // 32) * (256 // 32 + 1) // 2]


def test_decode_takes_neither_window_nor_sinks():
    """The dispatcher never sends a call to fused.decode, which takes neither keyword."""
    q, cache = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 40, 16)
    for keyword, value in (("window", (8, 0)), ("sinks", torch.zeros(2))):
        with pytest.raises(TypeError, match=keyword):
            fused.decode(q, cache, cache, **{keyword: value})


# -- the GPU tests' window cases, twinned ---------------------------------------------------------


def test_the_gpu_window_and_sinks_check_passes_in_the_interpreter():
    """tests/test_fused_gpu.py's window-and-sinks gradient check on its own inputs, on the CPU, in
    fp16 (its fp32 case passed too, in 12 s more): a check too tight for a correct kernel shows here first."""
    import test_fused_gpu as gpu_tests

    case = next(c for c in gpu_tests.WINDOW_CASES if c.dtype == torch.float16)
    dtype = case.dtype
    query, key, value, kwargs = gpu_tests.make_inputs(case, device="cpu")
    kwargs.update(gpu_tests.window_and_sinks(case, device="cpu"))
    grad_output = gpu_tests.randn(*query.shape, dtype=dtype, seed=4, device="cpu")
    gradients = gpu_tests.gradients_of("fused", query, key, value, grad_output, **kwargs)
    gpu_tests.assert_gradients_within_tolerance(gradients, query, key, value, grad_output, **kwargs)
    error, bound = gpu_tests.sinks_gradient_check(case, device="cpu")
    assert error <= bound, f"dsinks: fused error {error:.3e} exceeds {bound:.3e}"


def test_a_window_tunes_without_the_tiles_that_spill_with_it_before_sm_90():
    """tests/test_fused_compile.py compiles the default of each list; the left-out tiles spill at
    E = 128 on sm_80 with a window (attnlib.fused.tiles.SPILLS_WITH_A_WINDOW_BEFORE_SM_90)."""
    left_out = fused.SPILLS_WITH_A_WINDOW_BEFORE_SM_90
    for capability in ((8, 0), (8, 9)):
        name, configs = fused.autotune_configs(capability, 4096, torch.bfloat16, window=True)
        assert name == "tensor_cores, window" and configs and left_out not in configs
        assert left_out in fused.autotune_configs(capability, 4096, torch.bfloat16)[1]
        assert (fused.autotune_bucket(capability, 4096, 4096, torch.bfloat16, window=True)
                != fused.autotune_bucket(capability, 4096, 4096, torch.bfloat16))
    assert left_out in fused.autotune_configs((9, 0), 4096, torch.bfloat16, window=True)[1]
