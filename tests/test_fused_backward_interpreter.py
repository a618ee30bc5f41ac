"""The fused backward kernels, run in Triton's interpreter on the CPU, against float64 gradients.

Triton decides when it is first imported whether a process compiles or
interprets kernels (see attnlib.fused), so this module, like
test_fused_interpreter.py, switches the interpreter on before anything in
the test process imports Triton.

Each case compares ``dQ``, ``dK`` and ``dV`` with the naive path's autograd
gradients in float64, with the tolerance of the kernel projects: the fused
error at most twice the naive path's error in the same dtype, plus a small
absolute term (1e-5, for the fp32 cases, whose errors are of order 1e-6).
The cases cover each axis of the contract without a full cross product;
shapes are small, because the interpreter runs every program in NumPy.

``torch.autograd.gradcheck`` needs float64, which the fused path does not
take (its contract: fp16, bf16, fp32). The interpreter can run the kernels
on float64 tensors all the same: NumPy promotes their fp32 running states
to float64 (a GPU compiler would refuse that), and only the saved ``lse``
stays fp32, well inside gradcheck's tolerance. So one test lifts the dtype
check for itself and runs gradcheck on :class:`FusedAttentionFunction`
directly: the backward kernels are checked against finite differences of
the forward kernel itself.
"""
import os

os.environ["TRITON_INTERPRET"] = "1"

import dataclasses  # noqa: E402
import inspect  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import attnlib  # noqa: E402
from attnlib import fused, naive  # noqa: E402
from attnlib.masks import allowed_positions  # noqa: E402
from attnlib.problem import check_problem  # noqa: E402
from reference import max_error  # noqa: E402

import test_fused_gpu as gpu_tests  # noqa: E402  (the GPU tests' cases and checks, for their twins)

from interpreter import skip_without_triton, triton_interprets  # noqa: E402,F401  (autouse)

skip_without_triton()


#: The absolute term of the tolerance: fp32 errors are of order 1e-6 on gradients of order 1.
TINY = 1e-5


def gradients_of(backend, query, key, value, grad_output, attn_mask=None, **kwargs):
    """``(dQ, dK, dV)`` of ``backend``'s attention for the gradient ``grad_output`` at its output."""
    inputs = [x.detach().requires_grad_() for x in (query, key, value)]
    output = attnlib.scaled_dot_product_attention(*inputs, attn_mask, backend=backend, **kwargs)
    return torch.autograd.grad(output, inputs, grad_output)


def float64_gradients(query, key, value, grad_output, attn_mask=None, **kwargs):
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    return gradients_of("naive", query.double(), key.double(), value.double(), grad_output.double(),
                        attn_mask, **kwargs)


def assert_gradients_as_accurate_as_naive(gradients, query, key, value, grad_output, **kwargs):
    """Each of ``gradients = (dQ, dK, dV)`` against float64, as accurate as naive's in the same dtype."""
    reference = float64_gradients(query, key, value, grad_output, **kwargs)
    same_dtype = gradients_of("naive", query, key, value, grad_output, **kwargs)
    for name, x, gradient, expected, naive_gradient in zip(
            ("dQ", "dK", "dV"), (query, key, value), gradients, reference, same_dtype):
        assert gradient.dtype == x.dtype and gradient.shape == x.shape, name
        err, err_naive = max_error(gradient, expected), max_error(naive_gradient, expected)
        assert err <= 2 * err_naive + TINY, (
            f"{name}: error {err:.3e} exceeds 2 x naive's {err_naive:.3e} + {TINY}")


@dataclass(frozen=True)
class Case:
    query_len: int
    key_len: int
    head_dim: int
    dtype: torch.dtype = torch.float16
    causal: str | None = None  # None, "top_left" or "bottom_right"
    mask: str | None = None  # None, "bool", "float" or "padding"
    heads: tuple[int, int] = (2, 2)  # (Hq, Hkv)
    value_dim: int | None = None  # None: the head width
    softcap: float | None = None

    def __str__(self):
        parts = [f"L{self.query_len}-S{self.key_len}-E{self.head_dim}", str(self.dtype).removeprefix("torch.")]
        parts += [p for p in (self.causal, self.mask) if p]
        if self.heads[0] != self.heads[1]:
            parts.append(f"Hq{self.heads[0]}-Hkv{self.heads[1]}")
        if self.value_dim:
            parts.append(f"Ev{self.value_dim}")
        if self.softcap:
            parts.append(f"softcap{self.softcap}")
        return "-".join(parts)


#: Lengths are no multiple of the interpreter's blocks (16 queries, 32 keys), and each crosses several.
CASES = [
    Case(37, 45, 32, torch.float32),
    Case(45, 37, 64, causal="top_left", heads=(4, 2)),  # GQA; L > S
    Case(37, 60, 24, torch.float32, causal="bottom_right"),  # a width no power of two; L < S
    Case(60, 37, 16, causal="bottom_right", heads=(4, 1)),  # MQA; the first 23 rows see no key
    Case(40, 50, 48, torch.float32, mask="bool", heads=(4, 2), value_dim=40),
    Case(40, 50, 16, mask="float"),
    Case(33, 70, 40, mask="padding", heads=(4, 2)),
    Case(20, 24, 256),
    Case(37, 45, 32, torch.float32, causal="top_left", value_dim=48, softcap=2.0),
    Case(40, 50, 64, mask="bool", heads=(4, 2), softcap=0.5),
]


def make_inputs(case: Case, seed: int = 0):
    """``(query, key, value, grad_output, kwargs)`` for ``case``, batch 2; masks leave some rows with no key."""
    generator = torch.Generator().manual_seed(seed)
    hq, hkv = case.heads
    L, S, E = case.query_len, case.key_len, case.head_dim
    value_dim = case.value_dim or E

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(case.dtype)

    query, key, value = randn(2, hq, L, E), randn(2, hkv, S, E), randn(2, hkv, S, value_dim)
    grad_output = randn(2, hq, L, value_dim)
    kwargs = {"enable_gqa": hq != hkv, "softcap": case.softcap}
    if case.causal:
        kwargs.update(is_causal=True, causal_alignment=case.causal)
    if case.mask == "bool":  # broadcast over batch; row 0 of every head sees nothing
        mask = torch.rand(hq, L, S, generator=generator) > 0.3
        mask[:, 0] = False
        kwargs["attn_mask"] = mask
    elif case.mask == "float":  # added to the scores; -inf forbids; row 1 sees nothing
        mask = torch.randn(2, 1, L, S, generator=generator).to(case.dtype)
        mask[..., 1, :] = float("-inf")
        mask[..., ::3] = float("-inf")
        kwargs["attn_mask"] = mask
    elif case.mask == "padding":  # key lengths; the second sequence is all padding
        kwargs["attn_mask"] = attnlib.padding_mask(torch.tensor([S // 2, 0]), S)
    return query, key, value, grad_output, kwargs


@pytest.mark.parametrize("case", CASES, ids=str)
def test_gradients_match_float64_reference(case):
    query, key, value, grad_output, kwargs = make_inputs(case)
    gradients = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert attnlib.last_dispatch().backend == "fused"
    assert_gradients_as_accurate_as_naive(gradients, query, key, value, grad_output, **kwargs)


def test_rows_with_no_allowed_key_get_a_zero_query_gradient():
    """Row 0 is fully masked (bool mask); under a bottom-right causal mask with L > S, rows 0..L-S-1."""
    query, key, value, grad_output, kwargs = make_inputs(Case(40, 50, 32, torch.float32, mask="bool"))
    grad_query, _, _ = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert torch.equal(grad_query[:, :, 0], torch.zeros_like(grad_query[:, :, 0]))
    assert torch.isfinite(grad_query).all() and (grad_query[:, :, 1:] != 0).any(dim=-1).all()
    query, key, value, grad_output, kwargs = make_inputs(Case(60, 37, 16, causal="bottom_right"))
    grad_query, _, _ = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert torch.equal(grad_query[:, :, :23], torch.zeros_like(grad_query[:, :, :23]))


def test_nan_in_key_padding_never_reaches_any_gradient():
    query, key, value, grad_output, kwargs = make_inputs(Case(33, 70, 32, mask="padding", heads=(4, 2)))
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[0, :, 35:], dirty_value[0, :, 35:] = float("nan"), float("inf")
    dirty_key[1], dirty_value[1] = float("nan"), float("nan")
    gradients = gradients_of("fused", query, dirty_key, dirty_value, grad_output, **kwargs)
    grad_query, grad_key, grad_value = gradients
    for gradient in gradients:
        assert torch.isfinite(gradient).all()
    # A hidden key or value has gradient 0; a sequence with no key at all, every gradient 0.
    assert not grad_key[0, :, 35:].any() and not grad_value[0, :, 35:].any()
    assert not grad_query[1].any() and not grad_key[1].any() and not grad_value[1].any()
    assert_gradients_as_accurate_as_naive(gradients, query, key, value, grad_output, **kwargs)


def test_nan_in_keys_a_general_mask_hides_never_reaches_any_gradient():
    """Keys 20..29 hidden from every query by a mask that is no key padding (the mask is loaded)."""
    query, key, value, grad_output, _ = make_inputs(Case(40, 60, 32, torch.float32))
    mask = torch.rand(40, 60, generator=torch.Generator().manual_seed(1)) > 0.5
    mask[:, 20:30] = False
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[..., 20:30, :], dirty_value[..., 20:30, :] = float("nan"), float("nan")
    gradients = gradients_of("fused", query, dirty_key, dirty_value, grad_output, attn_mask=mask)
    for gradient in gradients:
        assert torch.isfinite(gradient).all()
    assert not gradients[1][..., 20:30, :].any() and not gradients[2][..., 20:30, :].any()
    assert_gradients_as_accurate_as_naive(gradients, query, key, value, grad_output, attn_mask=mask)


def test_inputs_without_batch_or_head_axes():
    query, key, value, grad_output, kwargs = make_inputs(Case(37, 45, 32, torch.float32, causal="top_left"))
    for take in (lambda x: x[0], lambda x: x[0, 0]):  # (H, N, W), then (N, W)
        inputs = [take(x) for x in (query, key, value, grad_output)]
        gradients = gradients_of("fused", *inputs, **kwargs)
        assert_gradients_as_accurate_as_naive(gradients, *inputs, **kwargs)


def test_only_the_inputs_that_require_grad_get_one():
    query, key, value, grad_output, kwargs = make_inputs(Case(20, 40, 16, heads=(4, 2), causal="top_left"))
    expected = gradients_of("fused", query, key, value, grad_output, **kwargs)
    for wanted in ((True, False, False), (False, True, False), (False, False, True), (False, True, True)):
        inputs = [x.detach().requires_grad_(want) for x, want in zip((query, key, value), wanted)]
        output = attnlib.scaled_dot_product_attention(*inputs, backend="fused", **kwargs)
        output.backward(grad_output)
        for x, want, gradient in zip(inputs, wanted, expected):
            assert torch.equal(x.grad, gradient) if want else x.grad is None


def test_a_grad_output_with_any_strides():
    query, key, value, grad_output, _ = make_inputs(Case(20, 40, 16, torch.float32))
    expected = gradients_of("fused", query, key, value, grad_output)
    transposed = grad_output.transpose(1, 2).contiguous().transpose(1, 2)  # (B, L, H, Ev) in memory
    assert not transposed.is_contiguous()
    assert all(map(torch.equal, gradients_of("fused", query, key, value, transposed), expected))
    # d(sum O)/dO is a stride-0 expansion of one element
    ones = torch.ones((), dtype=query.dtype).expand_as(grad_output)
    assert all(map(torch.equal, gradients_of("fused", query, key, value, ones),
                   gradients_of("fused", query, key, value, torch.ones_like(grad_output))))


def test_the_log_sum_exp_is_differentiable_too():
    """``lse_i`` moves with score ``s_ij`` by ``P_ij``: its gradient enters as ``D = rowsum(dO * O) - dlse``."""
    query, key, value, grad_output, kwargs = make_inputs(Case(37, 45, 32, torch.float32, causal="bottom_right"))
    grad_lse = torch.randn(query.shape[:-1], generator=torch.Generator().manual_seed(5))

    def loss_gradients(attend, inputs):
        inputs = [x.detach().requires_grad_() for x in inputs]
        output, lse = attend(*inputs)
        return torch.autograd.grad((output * grad_output.to(output.dtype)).sum() + (lse * grad_lse).sum(),
                                   inputs)

    def float64_attend(q, k, v):
        problem = check_problem(q, k, v, **kwargs)
        scores = naive.masked_scaled_scores(problem, allowed_positions(problem))
        return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)

    gradients = loss_gradients(lambda q, k, v: fused.attention(q, k, v, return_lse=True, **kwargs),
                               (query, key, value))
    expected = loss_gradients(float64_attend, (query.double(), key.double(), value.double()))
    for gradient, reference in zip(gradients, expected):
        torch.testing.assert_close(gradient.double(), reference, rtol=1e-4, atol=1e-5)


def test_a_batch_above_the_grid_limit_is_launched_in_slices(monkeypatch):
    query, key, value, grad_output, kwargs = make_inputs(Case(20, 40, 16, torch.float32, mask="float",
                                                              heads=(2, 1)))
    query, key, value, grad_output = (torch.cat([x, x.flip(0), x]) for x in (query, key, value, grad_output))
    kwargs["attn_mask"] = torch.cat([kwargs["attn_mask"]] * 3)
    expected = gradients_of("fused", query, key, value, grad_output, **kwargs)
    monkeypatch.setattr(fused.layout, "MAX_BATCH_HEADS", 4)  # 2 query heads: slices of 2 sequences
    gradients = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert all(map(torch.equal, gradients, expected))
    assert_gradients_as_accurate_as_naive(gradients, query, key, value, grad_output, **kwargs)


GPU_TILES = sorted({(c.block_m, c.block_n) for configs in fused.BACKWARD_CONFIGS.values()
                    for name, c in configs.items() if c.block_n})


@pytest.mark.parametrize("blocks", GPU_TILES, ids=lambda b: f"{b[0]}x{b[1]}")
def test_every_gpu_tile_shape_in_the_interpreter(blocks):
    """The backward's GPU tile sizes, on lengths that are no multiple of them, causal, with GQA."""
    query, key, value, grad_output, kwargs = make_inputs(Case(70, 67, 32, torch.float32, causal="bottom_right",
                                                              heads=(2, 1)))
    problem = check_problem(query, key, value, **kwargs)
    output, lse = fused.launch(problem, None)
    gradients = fused.gradients(problem, output, lse, grad_output, blocks=blocks)
    assert_gradients_as_accurate_as_naive(gradients, query, key, value, grad_output, **kwargs)


@pytest.mark.parametrize("kwargs", [
    {"attn_mask": "bool", "enable_gqa": True, "softcap": 1.5},
    {"is_causal": True, "causal_alignment": "bottom_right", "enable_gqa": True},
    {"attn_mask": "float"},
], ids=["bool-mask-gqa-softcap", "causal-bottom-right-gqa", "float-mask"])
def test_gradcheck_in_float64(monkeypatch, kwargs):
    """Analytic gradients of the backward kernels against finite differences of the forward kernel.

    Rows 0 of the masks see no key; with L = 9 > S = 7 bottom-right, rows 0 and 1 neither.
    """
    monkeypatch.setattr(sys.modules["attnlib.fused.forward"], "unsupported_reason", lambda problem: None)
    generator = torch.Generator().manual_seed(7)
    query = torch.randn(1, 2, 9, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    key = torch.randn(1, 1, 7, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    value = torch.randn(1, 1, 7, 24, generator=generator, dtype=torch.float64, requires_grad=True)
    if kwargs.get("attn_mask") == "bool":
        kwargs["attn_mask"] = torch.rand(9, 7, generator=generator) > 0.3
        kwargs["attn_mask"][0] = False
    elif kwargs.get("attn_mask") == "float":
        kwargs["attn_mask"] = torch.randn(9, 7, generator=generator, dtype=torch.float64)
        kwargs["attn_mask"][0] = float("-inf")
        kwargs["attn_mask"][:, 3] = float("-inf")
        kwargs["enable_gqa"] = True

    def attend(query, key, value):
        problem = check_problem(query, key, value, **kwargs)
        return fused.FusedAttentionFunction.apply(query, key, value, None, problem, None)[0]

    assert torch.autograd.gradcheck(attend, (query, key, value), fast_mode=True)


# -- the GPU tests' backward cases, twinned ------------------------------------------------------

#: The twins' tiles, both kernels: the GPU's key/value and query tiles at E <= 128 in fp16/bf16.
TWIN_BLOCKS = (64, 32)
#: L x S x Hq x E of the largest twin: about a second in the interpreter. Halved to it, every
#: twin still spans two key tiles or more, all but three (L < 64) two query tiles or more, and
#: keeps its case's ragged last tiles.
TWIN_WORK = 2**23


def interpreter_twin(case: gpu_tests.Case) -> gpu_tests.Case:
    """``case`` as the interpreter runs it: fp16 for bf16 (NumPy has no bf16), and both lengths
    halved until ``L x S x Hq x E <= TWIN_WORK`` (halving keeps L - S's sign and L > S's keyless rows)."""
    query_len, key_len = case.query_len, case.key_len
    while query_len * key_len * case.heads[0] * case.head_dim > TWIN_WORK:
        query_len, key_len = query_len // 2, key_len // 2
    dtype = torch.float16 if case.dtype == torch.bfloat16 else case.dtype
    return dataclasses.replace(case, query_len=query_len, key_len=key_len, dtype=dtype)


#: Every backward case of tests/test_fused_gpu.py with its extra arguments; the bf16 softcap
#: case has no twin of its own (it would be the fp16 one).
GPU_BACKWARD_CASES = ([(case, {}) for case in gpu_tests.BACKWARD_CASES]
                      + [(case, {"softcap": gpu_tests.SOFTCAP}) for case in gpu_tests.SOFTCAP_CASES
                         if case.dtype != torch.bfloat16])


@pytest.mark.parametrize("case, extra", GPU_BACKWARD_CASES,
                         ids=[f"{case}{'-softcap' if extra else ''}" for case, extra in GPU_BACKWARD_CASES])
def test_the_gpu_backward_cases_in_the_interpreter(case, extra):
    """The GPU test's inputs (tests/test_fused_gpu.py's make_inputs) and its own check, on the CPU:
    a failure there can be reproduced here, and a check too tight for a correct kernel shows here first."""
    twin = interpreter_twin(case)
    query, key, value, kwargs = gpu_tests.make_inputs(twin, device="cpu")
    grad_output = gpu_tests.randn(*query.shape, dtype=twin.dtype, seed=4, device="cpu")
    problem = check_problem(query, key, value, **kwargs, **extra)
    output, lse = fused.launch(problem, TWIN_BLOCKS)
    gradients = fused.gradients(problem, output, lse, grad_output, blocks=TWIN_BLOCKS)
    gpu_tests.assert_gradients_within_tolerance(gradients, query, key, value, grad_output, **kwargs, **extra)


BIG_OFFSETS = """
import sys, torch
from attnlib import fused
from attnlib.problem import check_problem
rows, stride, width = 600, 2**22, 16  # row 512 starts 2**31 elements into the buffer
buffer = torch.empty(rows * stride, dtype=torch.float16)  # 5 GB of address space; ~1 MB is touched
views = [buffer.as_strided((1, 1, rows, width), (0, 0, stride, 1), storage_offset=i * width)
         for i in range(3)]
*inputs, grad_output = torch.load(sys.argv[1])
for view, values in zip(views, inputs):
    view.copy_(values)
problem = check_problem(*views)
output, lse = fused.launch(problem, (64, 64))
torch.save(fused.gradients(problem, output, lse, grad_output, blocks=(64, 64))[:3], sys.argv[2])
"""


def test_offsets_past_2_to_the_31_elements(tmp_path):
    """Query, key and value rows 2**22 elements apart, as in test_fused_interpreter.py's forward test.

    The backward kernels read the last 88 rows past 2**31 elements; offsets
    computed in 32 bits would wrap around there (a segmentation fault in the
    interpreter), so the call runs in a child process. Its gradients must be
    those of the same call on contiguous copies, bit for bit.
    """
    generator = torch.Generator().manual_seed(0)
    query, key, value, grad_output = (torch.randn(1, 1, 600, 16, generator=generator).half() for _ in range(4))
    torch.save([query, key, value, grad_output], tmp_path / "inputs.pt")
    result = subprocess.run([sys.executable, "-c", BIG_OFFSETS, tmp_path / "inputs.pt", tmp_path / "grads.pt"],
                            capture_output=True, text=True, timeout=300,
                            env=os.environ | {"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    problem = check_problem(query, key, value)
    output, lse = fused.launch(problem, (64, 64))
    expected = fused.gradients(problem, output, lse, grad_output, blocks=(64, 64))[:3]  # no sinks: dsinks None
    assert all(map(torch.equal, torch.load(tmp_path / "grads.pt"), expected))


BIG_GRAD_OUTPUT_STRIDE = """
import sys, torch
from attnlib import fused
from attnlib.problem import check_problem
rows, stride, width = 40, 2**26, 16  # inside a 64-row tile, row 32 is 2**31 elements from row 0
buffer = torch.empty((rows - 1) * stride + width, dtype=torch.float16)  # 5 GB of address space
grad_output = buffer.as_strided((1, 1, rows, width), (0, 0, stride, 1))
query, key, value, values = torch.load(sys.argv[1])
grad_output.copy_(values)
problem = check_problem(query, key, value)
output, lse = fused.launch(problem, (64, 64))
torch.save(fused.gradients(problem, output, lse, grad_output, blocks=(64, 64))[:3], sys.argv[2])
"""


def test_a_grad_output_whose_rows_lie_2_to_the_26_elements_apart(tmp_path):
    """The gradient at the output comes with autograd's strides, which the forward never checked.

    Rows 2**26 elements apart: inside a tile of 64 rows, offsets from its
    first row pass 2**31 at row 32 and wrap around in 32 bits (a
    segmentation fault in the interpreter, hence the child process). The
    gradients must be those of a contiguous grad_output, bit for bit.
    """
    generator = torch.Generator().manual_seed(0)
    query, key, value, grad_output = (torch.randn(1, 1, 40, 16, generator=generator).half() for _ in range(4))
    torch.save([query, key, value, grad_output], tmp_path / "inputs.pt")
    result = subprocess.run([sys.executable, "-c", BIG_GRAD_OUTPUT_STRIDE, tmp_path / "inputs.pt",
                             tmp_path / "grads.pt"], capture_output=True, text=True, timeout=300,
                            env=os.environ | {"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    problem = check_problem(query, key, value)
    output, lse = fused.launch(problem, (64, 64))
    expected = fused.gradients(problem, output, lse, grad_output, blocks=(64, 64))[:3]  # no sinks: dsinks None
    assert all(map(torch.equal, torch.load(tmp_path / "grads.pt"), expected))


def test_no_keys_or_no_queries_give_zero_gradients():
    query, key = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 0, 16)
    gradients = gradients_of("fused", query, key, key, torch.randn(2, 3, 5, 16))
    assert [tuple(g.shape) for g in gradients] == [(2, 3, 5, 16), (2, 3, 0, 16), (2, 3, 0, 16)]
    assert not gradients[0].any()
    query, key = torch.randn(2, 3, 0, 16), torch.randn(2, 3, 9, 16)
    gradients = gradients_of("fused", query, key, key, torch.randn(2, 3, 0, 16))
    assert not gradients[1].any() and not gradients[2].any()


def test_second_derivatives_are_refused_not_silently_wrong():
    query, key, value, grad_output, kwargs = make_inputs(Case(20, 24, 16, torch.float32))
    inputs = [x.requires_grad_() for x in (query, key, value)]
    output = attnlib.scaled_dot_product_attention(*inputs, backend="fused")
    grad_query, = torch.autograd.grad(output, inputs[0], grad_output.requires_grad_(), create_graph=True)
    with pytest.raises(RuntimeError, match="the fused kernels have no second derivatives; use backend=.naive."):
        grad_query.sum().backward()


@pytest.mark.parametrize("name", fused.backward.BACKWARD_KERNELS)
def test_the_backward_kernels_source_is_shown_from_the_file(name):
    source = fused.kernel_source(name)
    assert source.startswith(f"@triton.jit\ndef {name}(")
    assert source == inspect.getsource(getattr(fused.kernel_module("backward_kernel"), name).fn)


# -- dispatch ------------------------------------------------------------------------------------

def test_backend_fused_runs_the_backward_kernels():
    query, key, value, grad_output, kwargs = make_inputs(Case(37, 45, 32))
    inputs = [x.requires_grad_() for x in (query, key, value)]
    output = attnlib.scaled_dot_product_attention(*inputs, backend="fused", **kwargs)
    assert attnlib.last_dispatch().backend == "fused"
    assert type(output.grad_fn).__name__ == "FusedAttentionFunctionBackward"


def test_auto_no_longer_declines_for_grad_but_for_the_cpu():
    q = torch.randn(1, 2, 40, 32, requires_grad=True)
    report = attnlib.explain(q, q, q)
    assert report.passed_over["fused"] == fused.ON_THE_CPU


def test_a_float_mask_that_requires_grad_goes_to_another_path():
    q = torch.randn(1, 2, 40, 32)
    mask = torch.zeros(40, 40, requires_grad=True)
    report = attnlib.explain(q, q, q, attn_mask=mask)
    assert "no gradient for a float attn_mask that requires grad" in report.passed_over["fused"]
    with torch.no_grad():  # no gradient to compute: the kernels take it
        attnlib.scaled_dot_product_attention(q, q, q, attn_mask=mask, backend="fused")


def test_dropout_is_still_refused_with_grad():
    q = torch.randn(1, 2, 40, 32, requires_grad=True)
    with pytest.raises(ValueError, match="backend='fused'.*dropout"):
        attnlib.scaled_dot_product_attention(q, q, q, dropout_p=0.1, backend="fused")
