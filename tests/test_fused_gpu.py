"""The fused kernel compiled and run on a CUDA GPU, against a float64 reference.

Skipped where there is no CUDA GPU. Tolerance, as the kernel projects use it:
``err(fused) <= 2 * err(reference in the input dtype) + 1e-5``, both errors
against float64, the reference being attnlib's naive path on the same GPU.

The backward tests have ``grad`` or ``backward`` in their names, and the
tests of offsets past 2**31 ``offsets_past_2_to_the_31``:
``benchmarks/gpu_session.sh`` selects them by name, to run them first.

Triton decides when it is first imported whether a process compiles or
interprets (see attnlib.fused), and ``tests/test_fused_interpreter.py`` asks
for the interpreter as soon as it is collected. So where this process
interprets, the tests here skip and ``test_the_suite_in_a_process_that_compiles``
runs this module again in a child process without ``TRITON_INTERPRET``; run
alone (``pytest tests/test_fused_gpu.py``), they run here.
"""
import itertools
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

import attnlib
from attnlib import fused
from reference import float64_reference, max_error

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
    pytest.mark.skipif(not fused.triton_installed(), reason="Triton is not installed"),
]

CHILD_RUNS = "the tests ran in a child process where Triton compiles (test_the_suite_in_a_process_that_compiles)"


def triton_compiles_here() -> bool:
    return not fused.triton_interprets()


@pytest.fixture(autouse=True)
def _only_where_triton_compiles(request):
    if request.node.name != "test_the_suite_in_a_process_that_compiles" and not triton_compiles_here():
        pytest.skip(CHILD_RUNS)


def test_the_suite_in_a_process_that_compiles():
    if triton_compiles_here():
        pytest.skip("Triton compiles in this process, so the tests ran here")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-p", "no:cacheprovider", "-n", "0", "-q", "-x",
         "--no-header", "-o", "addopts="],
        capture_output=True, text=True, env=env, timeout=1200, cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def assert_within_tolerance(output, query, key, value, attn_mask=None, **kwargs):
    reference = float64_reference(query, key, value, attn_mask, **kwargs)
    same_dtype = attnlib.scaled_dot_product_attention(query, key, value, attn_mask, backend="naive", **kwargs)
    err_fused, err_reference = max_error(output, reference), max_error(same_dtype, reference)
    assert err_fused <= 2 * err_reference + 1e-5, (
        f"fused error {err_fused:.3e} exceeds 2 x {err_reference:.3e} (naive in {query.dtype}) + 1e-5")


def randn(*shape, dtype, seed, device="cuda"):
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*shape, generator=generator, device=device, dtype=torch.float32).to(dtype)


@dataclass(frozen=True)
class Case:
    query_len: int
    key_len: int
    head_dim: int
    dtype: torch.dtype
    causal: str | None = None  # "top_left" or "bottom_right"
    mask: str | None = None  # "bool", "float" or "padding"
    heads: tuple[int, int] = (4, 4)  # (Hq, Hkv)

    def __str__(self):
        parts = [f"L{self.query_len}-S{self.key_len}-E{self.head_dim}", str(self.dtype).removeprefix("torch.")]
        parts += [p for p in (self.causal, self.mask) if p]
        if self.heads[0] != self.heads[1]:
            parts.append(f"Hq{self.heads[0]}-Hkv{self.heads[1]}")
        return "-".join(parts)


#: The (L, S) pairs of FlashAttention's own tests, and head widths 16 to 256, odd ones included.
LENGTHS = [(1, 239), (3, 799), (113, 203), (127, 512), (128, 217), (113, 211), (108, 256), (256, 512),
           (512, 256), (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)]
HEAD_DIMS = [16, 32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
CAUSAL = [None, "top_left", "bottom_right"]
MASKS = [None, "bool", "float", "padding"]
HEADS = [(4, 4), (4, 2), (4, 1)]


def cases() -> list[Case]:
    """Each (L, S) pair and each head width twice; dtype, causal alignment, mask and heads vary
    at different rates, so that their combinations vary too.

    Not the full cross product: every case is autotuned, which compiles each
    configuration once per new key, and the module must stay within minutes.
    """
    widths = HEAD_DIMS + HEAD_DIMS[1:] + HEAD_DIMS[:1]  # the second round pairs them differently
    masks = itertools.cycle(MASKS)  # on the cases without a causal mask
    result = []
    for i, ((L, S), E) in enumerate(zip(itertools.cycle(LENGTHS), widths)):
        causal = CAUSAL[i // 3 % 3]
        mask = None if causal else next(masks)
        result.append(Case(L, S, E, DTYPES[i % 3], causal, mask, HEADS[i // 9 % 3]))
    return result


def make_inputs(case: Case, seed: int = 0, device: str = "cuda"):
    """``(query, key, value, kwargs)`` of ``case``; ``device="cpu"`` for tests/kernel_rounding.py's emulation."""
    hq, hkv = case.heads
    L, S = case.query_len, case.key_len
    query = randn(2, hq, L, case.head_dim, dtype=case.dtype, seed=seed, device=device)
    key = randn(2, hkv, S, case.head_dim, dtype=case.dtype, seed=seed + 1, device=device)
    value = randn(2, hkv, S, case.head_dim, dtype=case.dtype, seed=seed + 2, device=device)
    kwargs = {"enable_gqa": hq != hkv}
    if case.causal:
        kwargs.update(is_causal=True, causal_alignment=case.causal)
    generator = torch.Generator(device=device).manual_seed(seed + 3)
    if case.mask == "bool":  # row 0 of every head sees nothing
        mask = torch.rand(hq, L, S, generator=generator, device=device) > 0.3
        mask[:, 0] = False
        kwargs["attn_mask"] = mask
    elif case.mask == "float":  # -inf forbids; row 0 sees nothing
        mask = torch.randn(2, 1, L, S, generator=generator, device=device).to(case.dtype)
        mask[..., 0, :] = float("-inf")
        mask[..., ::3] = float("-inf")
        kwargs["attn_mask"] = mask
    elif case.mask == "padding":  # the second sequence is all padding
        kwargs["attn_mask"] = attnlib.padding_mask(torch.tensor([S // 2, 0]), S).to(device)
    return query, key, value, kwargs


@pytest.mark.parametrize("case", cases(), ids=str)
def test_matches_float64_through_backend_fused(case):
    query, key, value, kwargs = make_inputs(case)
    output = attnlib.scaled_dot_product_attention(query, key, value, backend="fused", **kwargs)
    assert output.dtype == case.dtype and output.shape == (*query.shape[:-1], value.shape[-1])
    assert_within_tolerance(output, query, key, value, **kwargs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_auto_takes_the_fused_kernel_on_cuda(dtype):
    query, key, value, kwargs = make_inputs(Case(300, 260, 64, dtype, causal="bottom_right", heads=(4, 2)))
    output = attnlib.scaled_dot_product_attention(query, key, value, **kwargs)
    assert attnlib.last_dispatch().backend == "fused"
    assert_within_tolerance(output, query, key, value, **kwargs)


def test_fully_masked_rows_give_zero_and_minus_inf():
    query, key, value, kwargs = make_inputs(Case(113, 203, 64, torch.float16, mask="bool"))
    output, lse = fused.attention(query, key, value, return_lse=True, **kwargs)
    assert torch.equal(output[:, :, 0], torch.zeros_like(output[:, :, 0]))
    assert (lse[:, :, 0] == float("-inf")).all() and torch.isfinite(lse[:, :, 1:]).all()


def test_nan_in_key_padding_never_reaches_the_output():
    query, key, value, _ = make_inputs(Case(128, 217, 64, torch.bfloat16))
    mask = attnlib.padding_mask(torch.tensor([100, 0]), 217).cuda()
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[0, :, 100:], dirty_value[0, :, 100:] = float("nan"), float("inf")
    dirty_key[1], dirty_value[1] = float("nan"), float("nan")
    output = fused.attention(query, dirty_key, dirty_value, attn_mask=mask)
    assert torch.isfinite(output).all() and torch.equal(output[1], torch.zeros_like(output[1]))
    assert_within_tolerance(output, query, key, value, attn_mask=mask)


def test_nan_in_keys_a_general_mask_hides_never_reaches_the_output():
    query, key, value, _ = make_inputs(Case(113, 203, 64, torch.float16))
    mask = torch.rand(113, 203, generator=torch.Generator(device="cuda").manual_seed(1), device="cuda") > 0.5
    mask[:, 40:70] = False  # no query sees keys 40..69
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[..., 40:70, :], dirty_value[..., 40:70, :] = float("nan"), float("nan")
    output = fused.attention(query, dirty_key, dirty_value, attn_mask=mask)
    assert torch.isfinite(output).all()
    assert_within_tolerance(output, query, key, value, attn_mask=mask)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_non_contiguous_blhe_layout(dtype):
    """Projections are usually (B, L, H, E); transposed to (B, H, L, E), their rows are H * E apart."""
    q = randn(2, 300, 8, 64, dtype=dtype, seed=1).transpose(1, 2)
    k = randn(2, 260, 2, 64, dtype=dtype, seed=2).transpose(1, 2)
    v = randn(2, 260, 2, 64, dtype=dtype, seed=3).transpose(1, 2)
    output = fused.attention(q, k, v, is_causal=True, causal_alignment="bottom_right", enable_gqa=True)
    assert_within_tolerance(output, q, k, v, is_causal=True, causal_alignment="bottom_right", enable_gqa=True)


def test_no_keys_give_zeros_and_no_queries_an_empty_output():
    query, key = randn(2, 4, 5, 64, dtype=torch.float16, seed=0), randn(2, 4, 0, 64, dtype=torch.float16, seed=1)
    output, lse = fused.attention(query, key, key, return_lse=True)
    assert torch.equal(output, torch.zeros_like(output)) and (lse == float("-inf")).all()
    output = fused.attention(key, query, query)
    assert output.shape == (2, 4, 0, 64)


@pytest.mark.parametrize("cache_len", [1, 37, 4096, 32768])
def test_decoding_one_query_against_a_cache(cache_len):
    query = randn(4, 32, 1, 128, dtype=torch.bfloat16, seed=0)
    key = randn(4, 8, cache_len, 128, dtype=torch.bfloat16, seed=1)
    value = randn(4, 8, cache_len, 128, dtype=torch.bfloat16, seed=2)
    kwargs = dict(is_causal=True, causal_alignment="bottom_right", enable_gqa=True)
    assert_within_tolerance(fused.attention(query, key, value, **kwargs), query, key, value, **kwargs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("batch, cache_len", [(1, 8192), (3, 1000), (2, 300)])
def test_split_decoding_matches_float64(dtype, batch, cache_len):
    query = randn(batch, 32, 1, 128, dtype=dtype, seed=0)
    key, value = (randn(batch, 8, cache_len, 128, dtype=dtype, seed=seed) for seed in (1, 2))
    output, lse = fused.decode(query, key, value, enable_gqa=True, return_lse=True)
    assert_within_tolerance(output, query, key, value, enable_gqa=True)
    _, expected_lse = fused.attention(query, key, value, enable_gqa=True, return_lse=True)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-4, atol=1e-4)


def test_split_decoding_with_key_padding():
    query = randn(2, 32, 1, 128, dtype=torch.bfloat16, seed=0)
    key, value = (randn(2, 8, 5000, 128, dtype=torch.bfloat16, seed=seed) for seed in (1, 2))
    mask = attnlib.padding_mask(torch.tensor([4321, 0]), 5000).cuda()
    dirty_key = key.clone()
    dirty_key[0, :, 4321:] = float("nan")
    output = fused.decode(query, dirty_key, value, attn_mask=mask, enable_gqa=True)
    assert torch.equal(output[1], torch.zeros_like(output[1]))
    assert_within_tolerance(output, query, key, value, attn_mask=mask, enable_gqa=True)


def test_batch_times_heads_above_65535_runs_in_slices():
    query = randn(2100, 32, 16, 16, dtype=torch.float16, seed=0)  # 67200 (batch, head) pairs
    key, value = randn(2100, 8, 24, 16, dtype=torch.float16, seed=1), randn(2100, 8, 24, 16, dtype=torch.float16, seed=2)
    output = fused.attention(query, key, value, enable_gqa=True)
    assert_within_tolerance(output, query, key, value, enable_gqa=True)


def test_decoding_with_batch_times_kv_heads_above_65535_runs_in_slices():
    query = randn(2100, 32, 1, 16, dtype=torch.float16, seed=0)  # 2100 x 32 = 67200 programs
    key, value = (randn(2100, 32, 24, 16, dtype=torch.float16, seed=seed) for seed in (1, 2))
    assert_within_tolerance(fused.decode(query, key, value), query, key, value)


def test_decoding_reads_query_heads_past_2_to_the_31_elements():
    """Three query heads 2**30 + 16 elements apart (the last-query slice of a long prefill): 4 GB."""
    stride, width = 2**30 + 16, 64
    buffer = torch.zeros(2 * stride + width, dtype=torch.float16, device="cuda")
    query = buffer.as_strided((1, 3, 1, width), (0, stride, width, 1))
    query.copy_(randn(1, 3, 1, width, dtype=torch.float16, seed=0))
    key, value = (randn(1, 1, 1000, width, dtype=torch.float16, seed=seed) for seed in (1, 2))
    output = fused.decode(query, key, value, enable_gqa=True)
    assert torch.equal(output, fused.decode(query.contiguous(), key, value, enable_gqa=True))
    assert_within_tolerance(output, query, key, value, enable_gqa=True)


def test_more_query_heads_than_the_grid_allows_are_refused_by_name():
    q = randn(1, 65536, 1, 16, dtype=torch.float16, seed=0)
    with pytest.raises(ValueError, match="query heads must be at most 65535, got 65536"):
        fused.attention(q, q, q)


def test_two_runs_are_identical():
    query, key, value, kwargs = make_inputs(Case(1024, 1023, 128, torch.bfloat16, causal="top_left", heads=(8, 2)))
    first = fused.attention(query, key, value, **kwargs)
    assert torch.equal(first, fused.attention(query, key, value, **kwargs))


def test_the_autotuner_reports_one_pick_per_bucket():
    query = randn(1, 4, 1000, 64, dtype=torch.float16, seed=0)
    long_query = randn(1, 4, 5000, 64, dtype=torch.float16, seed=1)
    fused.attention(query, query, query)
    fused.attention(long_query, long_query, long_query)
    buckets = {(p["query_bucket"], p["key_bucket"]) for p in fused.picked_configurations()
               if p["key"]["HEAD_DIM"] == 64}
    assert {(1024, 1024), (8192, 8192)} <= buckets


# -- the backward kernels ------------------------------------------------------------------------

def gradients_of(backend, query, key, value, grad_output, attn_mask=None, **kwargs):
    """``(dQ, dK, dV)`` of ``backend``'s attention for the gradient ``grad_output`` at its output."""
    inputs = [x.detach().requires_grad_() for x in (query, key, value)]
    output = attnlib.scaled_dot_product_attention(*inputs, attn_mask, backend=backend, **kwargs)
    return torch.autograd.grad(output, inputs, grad_output)


def input_dtype_attention(query, key, value, attn_mask=None, is_causal=False, causal_alignment="top_left",
                          enable_gqa=False, softcap=None, window=None, sinks=None):
    """Attention in plain torch operations in the input dtype, each result rounded to it.

    FlashAttention's tests compare their kernels' gradients with those of
    such an implementation (``attention_ref(..., upcast=False)``): like the
    kernels, it rounds the weights ``P`` and the score gradients ``dS`` to
    the input dtype before the products that use them. A row with no allowed
    key gives 0. ``window`` and ``sinks`` as attnlib takes them.
    """
    group = query.shape[-3] // key.shape[-3]
    key, value = key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)
    scores = (query @ key.transpose(-2, -1)) * query.shape[-1] ** -0.5
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    L, S = query.shape[-2], key.shape[-2]
    allowed = torch.ones(L, S, dtype=torch.bool, device=query.device)
    offset = S - L if causal_alignment == "bottom_right" else 0
    if is_causal:
        allowed = allowed.tril(offset)
    if window is not None:  # query i, at key position i + offset, sees position - left ... position + right
        positions = torch.arange(L, device=query.device)[:, None] + offset
        keys = torch.arange(S, device=query.device)[None, :]
        left, right = window
        allowed = allowed & (keys >= positions - (left if left is not None else L + S))
        allowed = allowed & (keys <= positions + (right if right is not None else L + S))
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        allowed = allowed & attn_mask
    elif attn_mask is not None:
        scores = scores + attn_mask
        allowed = allowed & (attn_mask != float("-inf"))
    sees_a_key = allowed.any(dim=-1, keepdim=True)
    # Rows with no allowed key get scores 0 (not all -inf, whose softmax is NaN), then weight 0.
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~sees_a_key, 0.0)
    if sinks is None:
        weights = torch.softmax(scores, dim=-1)
    else:  # one more column per row, the head's sink logit, whose weight multiplies no value
        sink_column = sinks.reshape(-1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.softmax(torch.cat([scores, sink_column], dim=-1), dim=-1)[..., :-1]
    return (weights * sees_a_key) @ value


#: How far the yardstick may be from float64, in units of its dtype's machine epsilon times
#: the largest gradient entry (at least 1), plus the 1e-5 that fp32's sums need. It computes
#: the same function, so it is off by rounding alone; tests/kernel_rounding.py measures how much.
YARDSTICK_EPSILONS = 4


@dataclass(frozen=True)
class GradientCheck:
    """One gradient's errors against float64, and the bounds the tests hold them to."""

    name: str
    error: float  # of the gradient under test
    bound: float  # 2 x the yardstick's error + 1e-5
    yardstick_error: float  # of input_dtype_attention's gradient
    yardstick_bound: float  # YARDSTICK_EPSILONS x eps(dtype) x max(1, max |float64 gradient|) + 1e-5


def gradient_checks(gradients, query, key, value, grad_output, attn_mask=None, **kwargs) -> list[GradientCheck]:
    """Each of ``gradients = (dQ, dK, dV)`` against float64, beside ``input_dtype_attention``'s.

    The kernels round ``dS`` to the input dtype for the tensor-core products
    ``dS K`` and ``dS^T Q``; each row of ``dS`` sums to 0, so ``dQ`` and ``dK``
    are sums with cancellation, where that rounding shows. attnlib's naive
    path computes fp16/bf16 in fp32 and rounds only its results, so its error
    would be the wrong yardstick here; FlashAttention's is the one above.
    """
    reference_mask = attn_mask.double() if attn_mask is not None and attn_mask.dtype != torch.bool else attn_mask
    reference_kwargs = dict(kwargs, sinks=kwargs["sinks"].double()) if kwargs.get("sinks") is not None else kwargs
    reference = gradients_of("naive", query.double(), key.double(), value.double(), grad_output.double(),
                             reference_mask, **reference_kwargs)
    inputs = [x.detach().requires_grad_() for x in (query, key, value)]
    same_dtype = torch.autograd.grad(input_dtype_attention(*inputs, attn_mask, **kwargs), inputs, grad_output)
    epsilon = torch.finfo(query.dtype).eps
    checks = []
    for name, x, gradient, expected, plain in zip(("dQ", "dK", "dV"), (query, key, value), gradients, reference,
                                                  same_dtype):
        assert gradient.dtype == x.dtype and gradient.shape == x.shape, name
        err_plain = max_error(plain, expected)
        checks.append(GradientCheck(
            name, max_error(gradient, expected), 2 * err_plain + 1e-5,
            err_plain, YARDSTICK_EPSILONS * epsilon * max(1.0, float(expected.abs().max())) + 1e-5))
    return checks


def assert_gradients_within_tolerance(gradients, query, key, value, grad_output, attn_mask=None, **kwargs):
    """Each gradient against float64 within twice the error of ``input_dtype_attention``'s, plus 1e-5."""
    for check in gradient_checks(gradients, query, key, value, grad_output, attn_mask, **kwargs):
        # A yardstick far off would make the bound below vacuous.
        assert check.yardstick_error <= check.yardstick_bound, (
            f"{check.name}: reference off by {check.yardstick_error:.3e} > {check.yardstick_bound:.3e}")
        assert check.error <= check.bound, (
            f"{check.name}: fused error {check.error:.3e} exceeds 2 x {check.yardstick_error:.3e} "
            f"(torch in {query.dtype}) + 1e-5")


BACKWARD_CASES = [
    Case(128, 217, 64, torch.float16),
    Case(113, 203, 128, torch.bfloat16, causal="top_left", heads=(4, 2)),
    Case(256, 128, 64, torch.float32, causal="bottom_right"),  # L > S: the first 128 rows see no key
    Case(127, 512, 128, torch.float16, mask="bool"),
    Case(113, 211, 64, torch.bfloat16, mask="float", heads=(4, 1)),
    Case(128, 217, 128, torch.float16, mask="padding", heads=(4, 2)),
    Case(108, 256, 256, torch.float16, causal="bottom_right"),
    Case(512, 256, 256, torch.bfloat16, mask="bool", heads=(4, 2)),
    Case(1024, 1024, 128, torch.bfloat16, causal="top_left", heads=(4, 1)),
    Case(1023, 1024, 64, torch.float16, causal="bottom_right", heads=(4, 2)),
    Case(200, 300, 128, torch.float32, mask="padding"),
    Case(300, 260, 96, torch.float32, causal="top_left", heads=(4, 2)),
]


@pytest.mark.parametrize("case", BACKWARD_CASES, ids=str)
def test_gradients_match_float64(case):
    query, key, value, kwargs = make_inputs(case)
    grad_output = randn(*query.shape, dtype=case.dtype, seed=4)
    gradients = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert attnlib.last_dispatch().backend == "fused"
    assert_gradients_within_tolerance(gradients, query, key, value, grad_output, **kwargs)


SOFTCAP = 2.0
SOFTCAP_CASES = [Case(300, 260, 64, dtype, causal="bottom_right", heads=(4, 2)) for dtype in DTYPES]


@pytest.mark.parametrize("case", SOFTCAP_CASES, ids=str)
def test_softcap_gradients_match_float64(case):
    query, key, value, kwargs = make_inputs(case)
    grad_output = randn(*query.shape, dtype=case.dtype, seed=4)
    gradients = gradients_of("fused", query, key, value, grad_output, softcap=SOFTCAP, **kwargs)
    assert_gradients_within_tolerance(gradients, query, key, value, grad_output, softcap=SOFTCAP, **kwargs)


#: A window narrower than the GPU's tiles, causal, and a sink per head (the last one large,
#: so that it takes most of each row's weight), in each dtype; L > S bottom-right leaves
#: the first rows without keys.
WINDOW = (37, 0)
WINDOW_CASES = [Case(300, 260, 64, dtype, causal="bottom_right", heads=(4, 2)) for dtype in DTYPES]


def window_and_sinks(case, device="cuda") -> dict:
    return {"window": WINDOW, "sinks": torch.tensor([-1.0, 0.0, 1.5, 6.0], device=device).to(case.dtype)}


def test_window_and_sinks_match_float64():
    for case in WINDOW_CASES:
        query, key, value, kwargs = make_inputs(case)
        extra = window_and_sinks(case)
        output = attnlib.scaled_dot_product_attention(query, key, value, backend="fused", **kwargs, **extra)
        reference = float64_reference(query, key, value, **kwargs, window=WINDOW, sinks=extra["sinks"].double())
        same_dtype = attnlib.scaled_dot_product_attention(query, key, value, backend="naive", **kwargs, **extra)
        err_fused, err_reference = max_error(output, reference), max_error(same_dtype, reference)
        assert err_fused <= 2 * err_reference + 1e-5, f"{case}: {err_fused:.3e} > 2 x {err_reference:.3e} + 1e-5"


def sinks_gradient_check(case, device="cuda"):
    """``(fused error, bound)`` of the sinks' gradient against float64; the bound as gradient_checks's."""
    query, key, value, kwargs = make_inputs(case, device=device)
    grad_output = randn(*query.shape, dtype=case.dtype, seed=4, device=device)
    sinks = window_and_sinks(case, device)["sinks"]
    errors = {}
    for name, dtype in (("fused", case.dtype), ("yardstick", case.dtype), ("float64", torch.float64)):
        inputs = [x.to(dtype) for x in (query, key, value)]
        leaf = sinks.to(dtype).requires_grad_()
        if name == "yardstick":
            output = input_dtype_attention(*inputs, **kwargs, window=WINDOW, sinks=leaf)
        else:
            output = attnlib.scaled_dot_product_attention(*inputs, **kwargs, window=WINDOW, sinks=leaf,
                                                          backend="fused" if name == "fused" else "naive")
        errors[name] = torch.autograd.grad(output, leaf, grad_output.to(dtype))[0]
    exact = errors.pop("float64")
    return max_error(errors["fused"], exact), 2 * max_error(errors["yardstick"], exact) + 1e-5


@pytest.mark.parametrize("case", WINDOW_CASES, ids=str)
def test_window_and_sinks_gradients_match_float64(case):
    query, key, value, kwargs = make_inputs(case)
    kwargs.update(window_and_sinks(case))
    grad_output = randn(*query.shape, dtype=case.dtype, seed=4)
    gradients = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert_gradients_within_tolerance(gradients, query, key, value, grad_output, **kwargs)
    error, bound = sinks_gradient_check(case)
    assert error <= bound, f"dsinks: fused error {error:.3e} exceeds {bound:.3e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_auto_takes_the_fused_kernels_for_training(dtype):
    query, key, value, kwargs = make_inputs(Case(300, 260, 64, dtype, causal="bottom_right", heads=(4, 2)))
    inputs = [x.requires_grad_() for x in (query, key, value)]
    output = attnlib.scaled_dot_product_attention(*inputs, **kwargs)
    assert attnlib.last_dispatch().backend == "fused"
    assert type(output.grad_fn).__name__ == "FusedAttentionFunctionBackward"


def test_a_float_mask_that_requires_grad_goes_to_another_path():
    query, key, value, kwargs = make_inputs(Case(128, 217, 64, torch.float16, mask="float"))
    kwargs["attn_mask"].requires_grad_()
    attnlib.scaled_dot_product_attention(query, key, value, **kwargs)
    dispatch = attnlib.last_dispatch()
    assert dispatch.backend != "fused" and "float attn_mask that requires grad" in dispatch.passed_over["fused"]


def test_nan_in_key_padding_never_reaches_any_gradient():
    query, key, value, _ = make_inputs(Case(128, 217, 64, torch.bfloat16, heads=(4, 2)))
    grad_output = randn(*query.shape, dtype=torch.bfloat16, seed=4)
    mask = attnlib.padding_mask(torch.tensor([100, 0]), 217).cuda()
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[0, :, 100:], dirty_value[0, :, 100:] = float("nan"), float("inf")
    dirty_key[1], dirty_value[1] = float("nan"), float("nan")
    gradients = gradients_of("fused", query, dirty_key, dirty_value, grad_output, attn_mask=mask, enable_gqa=True)
    assert all(torch.isfinite(g).all() for g in gradients)
    grad_query, grad_key, grad_value = gradients
    assert not grad_key[0, :, 100:].any() and not grad_value[0, :, 100:].any()
    assert not grad_query[1].any() and not grad_key[1].any() and not grad_value[1].any()
    assert_gradients_within_tolerance(gradients, query, key, value, grad_output, attn_mask=mask, enable_gqa=True)


def test_nan_in_keys_a_general_mask_hides_never_reaches_any_gradient():
    query, key, value, _ = make_inputs(Case(113, 203, 64, torch.float16))
    grad_output = randn(*query.shape, dtype=torch.float16, seed=4)
    mask = torch.rand(113, 203, generator=torch.Generator(device="cuda").manual_seed(1), device="cuda") > 0.5
    mask[:, 40:70] = False  # no query sees keys 40..69
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[..., 40:70, :], dirty_value[..., 40:70, :] = float("nan"), float("nan")
    gradients = gradients_of("fused", query, dirty_key, dirty_value, grad_output, attn_mask=mask)
    assert all(torch.isfinite(g).all() for g in gradients)
    assert not gradients[1][..., 40:70, :].any() and not gradients[2][..., 40:70, :].any()
    assert_gradients_within_tolerance(gradients, query, key, value, grad_output, attn_mask=mask)


def test_two_backward_runs_are_identical():
    """No atomics: every gradient is summed inside one program, in a fixed order."""
    query, key, value, kwargs = make_inputs(Case(1024, 1023, 128, torch.bfloat16, causal="top_left", heads=(8, 2)))
    grad_output = randn(*query.shape, dtype=torch.bfloat16, seed=4)
    first = gradients_of("fused", query, key, value, grad_output, **kwargs)
    second = gradients_of("fused", query, key, value, grad_output, **kwargs)
    assert all(map(torch.equal, first, second))


# Last: an illegal memory access would poison the CUDA context for every test after it.
def test_offsets_past_2_to_the_31_elements():
    """The reproducer of the illegal memory access: one head of a (1, 600000, 32, 128) buffer.

    Its rows are 4096 elements apart, so rows past 524288 start beyond 2**31
    elements. About 15 GB of GPU memory.
    """
    buffers = [randn(1, 600000, 32, 128, dtype=torch.float16, seed=seed) for seed in range(3)]
    query, key, value = (b[:, :, 5:6, :].transpose(1, 2) for b in buffers)
    output = fused.attention(query, key, value)
    # Rows past 524288 are the ones 32-bit offsets got wrong; the references take the last 1024
    # (every row reads every key), since all 600000 would need 600000**2 scores.
    tail = slice(600000 - 1024, None)
    assert_within_tolerance(output[:, :, tail], query[:, :, tail], key, value)


def test_gradients_at_offsets_past_2_to_the_31_elements():
    """The same buffers, differentiated: query, key, value and grad_output are one head of four of them.

    grad_output is 0 but in the last 1024 rows, so dK and dV are those of the
    last 1024 queries alone and dQ is 0 above them: the references need
    1024 x 600000 scores, not 600000**2. The kernels still read every row of
    every input, the last 75712 past 2**31 elements. About 20 GB of GPU memory
    for the buffers and 30 GB for the float64 reference.
    """
    buffers = [randn(1, 600000, 32, 128, dtype=torch.float16, seed=seed) for seed in range(4)]
    query, key, value, grad_output = (b[:, :, 5:6, :].transpose(1, 2) for b in buffers)
    tail = slice(600000 - 1024, None)
    grad_output[:, :, :tail.start] = 0
    grad_query, grad_key, grad_value = gradients_of("fused", query, key, value, grad_output)
    assert not grad_query[:, :, :tail.start].any()
    assert_gradients_within_tolerance((grad_query[:, :, tail], grad_key, grad_value), query[:, :, tail], key, value,
                                      grad_output[:, :, tail])
