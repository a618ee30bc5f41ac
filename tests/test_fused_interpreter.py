"""The fused Triton kernel, run in Triton's interpreter on the CPU, against a float64 reference.

Triton decides when it is first imported whether a process compiles or
interprets kernels (see attnlib.fused), so this module switches the
interpreter on before anything in the test process imports Triton; the
compile checks (test_fused_compile.py) run in a child process of their own.

The cases cover each axis of the contract without a full cross product:
every (L, S) pair and head width of the issue appears, each with a different
mix of causal alignment, mask kind, grouped heads and dtype.
"""
import os

os.environ["TRITON_INTERPRET"] = "1"

import inspect  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import attnlib  # noqa: E402
from attnlib import fused, naive  # noqa: E402
from attnlib.masks import allowed_positions  # noqa: E402
from attnlib.problem import check_problem  # noqa: E402
from reference import assert_as_accurate_as_naive, float64_reference, max_error  # noqa: E402

from interpreter import skip_without_triton, triton_interprets  # noqa: E402,F401  (autouse)

skip_without_triton()


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

    def __str__(self):
        parts = [f"L{self.query_len}-S{self.key_len}-E{self.head_dim}", str(self.dtype).removeprefix("torch.")]
        parts += [p for p in (self.causal, self.mask) if p]
        if self.heads[0] != self.heads[1]:
            parts.append(f"Hq{self.heads[0]}-Hkv{self.heads[1]}")
        if self.value_dim:
            parts.append(f"Ev{self.value_dim}")
        return "-".join(parts)


CASES = [
    Case(1, 37, 64, causal="bottom_right", heads=(4, 2)),  # one decoding step with a KV cache
    Case(37, 1, 16, torch.float32),
    Case(113, 203, 59, causal="top_left", value_dim=72),
    Case(113, 203, 111, torch.float32, mask="bool"),
    Case(128, 217, 128, mask="float"),
    Case(128, 217, 40, mask="padding"),
    Case(256, 128, 80, causal="bottom_right"),  # L > S: the first 128 rows see no key
    Case(256, 128, 96, torch.float32, causal="top_left", heads=(4, 1)),  # MQA
    Case(37, 1, 256, heads=(4, 1)),
    Case(1, 37, 32, mask="bool", heads=(4, 2)),
]


def make_inputs(case: Case, seed: int = 0):
    """``(query, key, value, kwargs)`` for ``case``, batch 2; masks leave some rows with no key."""
    generator = torch.Generator().manual_seed(seed)
    hq, hkv = case.heads
    L, S = case.query_len, case.key_len

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(case.dtype)

    query = randn(2, hq, L, case.head_dim)
    key = randn(2, hkv, S, case.head_dim)
    value = randn(2, hkv, S, case.value_dim or case.head_dim)
    kwargs = {"enable_gqa": hq != hkv}
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
    return query, key, value, kwargs


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_float64_reference(case):
    query, key, value, kwargs = make_inputs(case)
    output = attnlib.scaled_dot_product_attention(query, key, value, backend="fused", **kwargs)
    assert output.dtype == case.dtype and output.shape == (*query.shape[:-1], value.shape[-1])
    assert_as_accurate_as_naive(output, query, key, value, **kwargs)


def float64_log_sum_exp(query, key, value, attn_mask=None, **kwargs):
    """``log sum_j exp(s_ij)`` over the allowed keys, from the naive path's scores in float64."""
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    problem = check_problem(query.double(), key.double(), value.double(), attn_mask, **kwargs)
    return torch.logsumexp(naive.masked_scaled_scores(problem, allowed_positions(problem)), dim=-1)


@pytest.mark.parametrize("case", CASES[2:7], ids=str)
def test_log_sum_exp_matches_float64(case):
    query, key, value, kwargs = make_inputs(case)
    _, lse = fused.attention(query, key, value, return_lse=True, **kwargs)
    expected = float64_log_sum_exp(query, key, value, **kwargs)
    assert lse.dtype == torch.float32 and lse.shape == query.shape[:-1]
    assert torch.equal(lse == float("-inf"), expected == float("-inf"))
    finite = expected > float("-inf")
    torch.testing.assert_close(lse.double()[finite], expected[finite], rtol=1e-5, atol=1e-5)


#: Cases with more than one key, where a cap can change the weights: causal, masks, GQA, fp32.
SOFTCAP_CASES = [CASES[0], CASES[2], CASES[3], CASES[4], CASES[5], CASES[7]]


@pytest.mark.parametrize("softcap", [0.5, 4.0])
@pytest.mark.parametrize("case", SOFTCAP_CASES, ids=str)
def test_softcap_matches_float64_reference(case, softcap):
    query, key, value, kwargs = make_inputs(case)
    output = attnlib.scaled_dot_product_attention(query, key, value, backend="fused", softcap=softcap,
                                                  **kwargs)
    assert_as_accurate_as_naive(output, query, key, value, softcap=softcap, **kwargs)


def test_softcap_saturates_large_scores_instead_of_overflowing():
    # scores of order 1e4: exp(2y) in the kernel's tanh overflows to inf, which must give tanh = +-1
    query, key, value, kwargs = make_inputs(Case(40, 70, 32, torch.float32, causal="top_left"))
    query = query * 30.0
    output = attnlib.scaled_dot_product_attention(query, key, value, backend="fused", softcap=3.0,
                                                  **kwargs)
    assert torch.isfinite(output).all()
    assert_as_accurate_as_naive(output, query, key, value, softcap=3.0, **kwargs)


def test_softcap_log_sum_exp_matches_float64():
    query, key, value, kwargs = make_inputs(CASES[4])
    _, lse = fused.attention(query, key, value, return_lse=True, softcap=2.0, **kwargs)
    expected = float64_log_sum_exp(query, key, value, softcap=2.0, **kwargs)
    finite = expected > float("-inf")
    assert torch.equal(lse == float("-inf"), ~finite)
    torch.testing.assert_close(lse.double()[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_fully_masked_rows_give_zero_and_minus_inf():
    query, key, value, kwargs = make_inputs(Case(113, 203, 32, mask="bool"))
    output, lse = fused.attention(query, key, value, return_lse=True, **kwargs)
    assert torch.equal(output[:, :, 0], torch.zeros_like(output[:, :, 0]))
    assert (lse[:, :, 0] == float("-inf")).all() and torch.isfinite(lse[:, :, 1:]).all()


def test_nan_in_padding_never_reaches_the_output():
    query, key, value, kwargs = make_inputs(Case(128, 217, 64, mask="padding"))
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[0, :, 217 // 2:], dirty_value[0, :, 217 // 2:] = float("nan"), float("inf")
    dirty_key[1], dirty_value[1] = float("nan"), float("nan")
    output = fused.attention(query, dirty_key, dirty_value, **kwargs)
    assert torch.isfinite(output).all()
    assert torch.equal(output[1], torch.zeros_like(output[1]))
    assert max_error(output, float64_reference(query, key, value, **kwargs)) < 1e-2


def test_nan_in_keys_hidden_by_a_general_mask_never_reaches_the_output():
    query, key, value, _ = make_inputs(Case(113, 203, 32))
    mask = torch.rand(113, 203, generator=torch.Generator().manual_seed(1)) > 0.5
    mask[:, 40:70] = False  # no query sees keys 40..69
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[..., 40:70, :], dirty_value[..., 40:70, :] = float("nan"), float("nan")
    output = fused.attention(query, dirty_key, dirty_value, attn_mask=mask)
    assert torch.isfinite(output).all()
    assert_as_accurate_as_naive(output, query, key, value, attn_mask=mask)


GPU_TILES = sorted({(c.block_m, c.block_n) for configs in fused.AUTOTUNE_CONFIGS.values() for c in configs})


@pytest.mark.parametrize("blocks", GPU_TILES, ids=lambda b: f"{b[0]}x{b[1]}")
def test_every_gpu_tile_shape_in_the_interpreter(blocks):
    """The tile sizes the GPU autotuner may pick, on lengths that are no multiple of them."""
    query, key, value, kwargs = make_inputs(Case(300, 260, 64, causal="bottom_right", heads=(2, 1)))
    output = fused.attention(query, key, value, blocks=blocks, **kwargs)
    assert_as_accurate_as_naive(output, query, key, value, **kwargs)


def test_five_batch_dimensions_and_a_single_head_without_head_axis():
    generator = torch.Generator().manual_seed(3)
    q5 = torch.randn(2, 1, 3, 20, 48, generator=generator)
    k5, v5 = torch.randn(2, 1, 3, 30, 48, generator=generator), torch.randn(2, 1, 3, 30, 16, generator=generator)
    assert_as_accurate_as_naive(fused.attention(q5, k5, v5, is_causal=True), q5, k5, v5, is_causal=True)
    q2, k2, v2 = q5[0, 0, 0], k5[0, 0, 0], v5[0, 0, 0]
    assert_as_accurate_as_naive(fused.attention(q2, k2, v2), q2, k2, v2)


# -- no keys, no queries ------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 4, 7, 32), (3, 7, 16), (7, 48)], ids=str)
def test_no_keys_give_zero_outputs_and_minus_inf_lse(shape):
    """S == 0: every row has no allowed key; the contract says output 0, and lse is -inf."""
    *batch, heads, L, E = (1, *shape) if len(shape) == 2 else shape
    query = half(*shape)
    kv_heads = max(heads // 2, 1)
    kv_shape = (*batch, kv_heads, 0) if len(shape) > 2 else (0,)
    key, value = half(*kv_shape, E), half(*kv_shape, 24)
    output, lse = fused.attention(query, key, value, enable_gqa=kv_heads != heads, return_lse=True)
    assert output.shape == (*shape[:-1], 24) and output.dtype == torch.float16
    assert torch.equal(output, torch.zeros_like(output))
    assert lse.shape == shape[:-1] and (lse == float("-inf")).all()


def test_no_keys_through_the_public_call_with_a_mask_and_causal_alignment():
    query, key = half(2, 3, 5, 16), half(2, 3, 0, 16)
    output = attnlib.scaled_dot_product_attention(query, key, key, is_causal=True,
                                                  causal_alignment="bottom_right", backend="fused")
    assert torch.equal(output, torch.zeros(2, 3, 5, 16, dtype=torch.float16))
    mask = torch.ones(5, 0, dtype=torch.bool)
    output = attnlib.scaled_dot_product_attention(query, key, key, attn_mask=mask, backend="fused")
    assert torch.equal(output, torch.zeros(2, 3, 5, 16, dtype=torch.float16))


def test_no_queries_give_an_empty_output():
    query, key = half(2, 3, 0, 16), half(2, 3, 9, 16)
    output, lse = fused.attention(query, key, key, return_lse=True)
    assert output.shape == (2, 3, 0, 16) and lse.shape == (2, 3, 0)


# -- offsets past 2**31 --------------------------------------------------------------------------

BIG_OFFSETS = """
import sys, torch
from attnlib import fused
rows, stride, width = 600, 2**22, 16  # row 512 starts 2**31 elements into the buffer
buffer = torch.empty(rows * stride, dtype=torch.float16)  # 5 GB of address space; ~1 MB is touched
views = [buffer.as_strided((1, 1, rows, width), (0, 0, stride, 1), storage_offset=i * width)
         for i in range(3)]
for view, values in zip(views, torch.load(sys.argv[1])):
    view.copy_(values)
torch.save(fused.attention(*views, blocks=(64, 64)), sys.argv[2])
"""


def test_offsets_past_2_to_the_31_elements(tmp_path):
    """Rows of query, key and value 2**22 elements apart: the last 88 rows start past 2**31.

    Offsets computed in 32 bits wrap around there; in the interpreter that
    reads outside the buffer (a segmentation fault), on a GPU it is an
    illegal memory access. The call runs in a child process so that a
    regression fails this test instead of killing the test run.
    """
    query, key, value = (half(1, 1, 600, 16, seed=seed) for seed in range(3))
    torch.save([query, key, value], tmp_path / "inputs.pt")
    result = subprocess.run([sys.executable, "-c", BIG_OFFSETS, tmp_path / "inputs.pt", tmp_path / "out.pt"],
                            capture_output=True, text=True, timeout=300,
                            env=os.environ | {"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    assert_as_accurate_as_naive(torch.load(tmp_path / "out.pt"), query, key, value)


def strided(shape, stride, dtype=torch.float16):
    """A tensor of ``shape`` whose second-to-last axis has ``stride`` (others packed), on a small buffer."""
    *_, rows, width = shape
    buffer = torch.zeros((rows - 1) * stride + width, dtype=dtype)
    return buffer.as_strided(shape, (0,) * (len(shape) - 2) + (stride, 1))


#: The smallest row stride whose offsets inside a 256-row tile, 255 x (stride + 1), pass 2**31 - 1.
UNREACHABLE_STRIDE = (2**31 - 1) // 255


@pytest.mark.parametrize("name", ["query", "key", "value", "attn_mask"])
def test_a_row_stride_the_tile_offsets_cannot_reach_is_refused_by_name(name):
    inputs = {"query": half(1, 1, 2, 16), "key": half(1, 1, 2, 16), "value": half(1, 1, 2, 16)}
    if name == "attn_mask":
        inputs[name] = strided((2, 2), UNREACHABLE_STRIDE, dtype=torch.bool)
    else:
        inputs[name] = strided((1, 1, 2, 16), UNREACHABLE_STRIDE)
    with pytest.raises(ValueError, match=rf"backend='fused' cannot run this call: {name} has row stride "
                                         rf"{UNREACHABLE_STRIDE}: offsets inside a tile of 256 rows"):
        attnlib.scaled_dot_product_attention(backend="fused", **inputs)
    report = attnlib.explain(**inputs)
    assert f"{name} has row stride {UNREACHABLE_STRIDE}" in report.passed_over["fused"]


def test_the_largest_row_stride_the_tile_offsets_reach_is_taken():
    query = strided((1, 1, 2, 16), UNREACHABLE_STRIDE - 1)
    assert fused.unaddressable_reason(check_problem(query, query, query)) is None
    output = fused.attention(query, query, query)
    assert_as_accurate_as_naive(output, query, query, query)


def test_a_batch_above_the_grid_limit_is_launched_in_slices(monkeypatch):
    """CUDA allows 65535 (batch, head) programs on the grid's second axis; here the limit is 4."""
    monkeypatch.setattr(fused.layout, "MAX_BATCH_HEADS", 4)
    query, key, value, kwargs = make_inputs(Case(40, 70, 32, mask="float", heads=(2, 1)))
    query, key, value = (torch.cat([x, x.flip(0), x]) for x in (query, key, value))  # batch 6
    kwargs["attn_mask"] = torch.cat([kwargs["attn_mask"]] * 3)
    output, lse = fused.attention(query, key, value, return_lse=True, **kwargs)
    assert_as_accurate_as_naive(output, query, key, value, **kwargs)
    expected = float64_log_sum_exp(query, key, value, **kwargs)
    finite = expected > float("-inf")
    assert torch.equal(lse == float("-inf"), ~finite)
    torch.testing.assert_close(lse.double()[finite], expected[finite], rtol=1e-5, atol=1e-5)


# -- the autotuner's buckets ---------------------------------------------------------------------

def test_length_buckets_are_the_next_power_of_two():
    lengths = [1, 16, 17, 1000, 1024, 1025, 8192, 10000]
    assert [fused.length_bucket(n) for n in lengths] == [16, 16, 32, 1024, 1024, 2048, 8192, 16384]


def test_each_bucket_of_lengths_goes_to_an_autotuner_of_its_own():
    hopper = (9, 0)
    first = fused.autotune_bucket(hopper, 1500, 1500, torch.float16)
    assert fused.autotune_bucket(hopper, 2000, 1100, torch.float16) == first
    others = [fused.autotune_bucket(hopper, 1500, 8192, torch.float16),
              fused.autotune_bucket(hopper, 5000, 1500, torch.float16),
              fused.autotune_bucket(hopper, 1, 1500, torch.float16),
              fused.autotune_bucket(hopper, 1500, 1500, torch.float32)]
    assert len({first, *others}) == 5
    assert others[2][0] == "tensor_cores, short queries" and others[3][0] == "fma"


class RecordedAutotuner:
    """Stands for Triton's Autotuner (which needs a GPU driver to exist): what it keeps after tuning."""

    def __init__(self, cache):
        self.cache = cache


def test_picked_configurations_report_what_each_autotuner_keeps(monkeypatch):
    second = fused.AUTOTUNE_CONFIGS["tensor_cores"][1]
    # Triton's autotuner maps the key's values (then the tensors' dtypes) to the fastest config.
    cache = {(128, 128, True, 0, False, False, "torch.bfloat16"): fused.triton_config(second)}
    bucket = fused.autotune_bucket((9, 0), 4000, 4000, torch.bfloat16)
    monkeypatch.setattr(fused.tiles, "_autotuned", {bucket: RecordedAutotuner(cache)})
    assert fused.picked_configurations() == [{
        "configs": "tensor_cores", "query_bucket": 4096, "key_bucket": 4096,
        "key": {"HEAD_DIM": 128, "VALUE_DIM": 128, "IS_CAUSAL": True, "MASK_KIND": 0,
                "HAS_KEY_LENGTHS": False, "WINDOW": False},
        "picked": second,
    }]


def test_kernel_source_is_read_from_the_file_with_its_decorator():
    source = fused.kernel_source("attention_forward_kernel")
    assert source.startswith("@triton.jit\ndef attention_forward_kernel(")
    assert source == inspect.getsource(fused.kernel_module().attention_forward_kernel.fn)
    with pytest.raises(ValueError, match=r"name must be a function of attnlib/fused/ \(forward_kernel.py, .*\), got 'nope'"):
        fused.kernel_source("nope")


# -- the fast path for key lengths ------------------------------------------------------------

def test_key_lengths_are_read_off_a_padding_mask():
    lengths = torch.tensor([5, 0, 9])
    mask = attnlib.padding_mask(lengths, 9).expand(3, 4, 7, 9)
    assert torch.equal(fused.key_lengths(mask), torch.tensor([5, 0, 9], dtype=torch.int32))


def test_a_mask_with_a_gap_is_not_key_lengths():
    mask = torch.ones(1, 1, 1, 9, dtype=torch.bool)
    mask[..., 3] = False
    assert fused.key_lengths(mask.expand(1, 2, 5, 9)) is None


def test_a_mask_that_varies_over_queries_is_not_key_lengths():
    mask = attnlib.causal_mask(5, 9)[None, None].expand(1, 2, 5, 9)
    assert fused.key_lengths(mask) is None


# -- dispatch: what auto does with the fused path on the CPU ---------------------------------

def half(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).half()


def test_named_backend_runs_in_the_interpreter_and_is_reported():
    q = half(1, 2, 40, 32)
    attnlib.scaled_dot_product_attention(q, q, q, backend="fused")
    assert attnlib.last_dispatch().backend == "fused"


def test_auto_leaves_the_interpreter_to_validation():
    q = half(1, 2, 40, 32)
    report = attnlib.explain(q, q, q)
    assert report.backend != "fused" and "interpreter" in report.passed_over["fused"]


def test_inputs_that_require_grad_are_taken_with_their_backward():
    """The backward kernels' own tests are in test_fused_backward_interpreter.py."""
    q = half(1, 2, 40, 32).requires_grad_()
    assert fused.unsupported_reason(check_problem(q, q, q)) is None
    output = attnlib.scaled_dot_product_attention(q, q, q, backend="fused")
    assert attnlib.last_dispatch().backend == "fused" and output.requires_grad


def test_a_float_mask_that_requires_grad_is_refused_by_name():
    q = half(1, 2, 40, 32)
    mask = torch.zeros(40, 40, dtype=torch.float16, requires_grad=True)
    with pytest.raises(ValueError, match="backend='fused'.*no gradient for a float attn_mask that requires grad"):
        attnlib.scaled_dot_product_attention(q, q, q, attn_mask=mask, backend="fused")


def test_no_grad_lets_the_kernel_take_inputs_that_require_grad():
    q = half(1, 2, 40, 32).requires_grad_()
    with torch.no_grad():
        attnlib.scaled_dot_product_attention(q, q, q, backend="fused")
    assert attnlib.last_dispatch().backend == "fused"


def test_dropout_is_refused():
    q = half(1, 2, 40, 32)
    with pytest.raises(ValueError, match="backend='fused'.*dropout"):
        attnlib.scaled_dot_product_attention(q, q, q, dropout_p=0.1, backend="fused")


def test_float64_is_refused():
    q = half(1, 2, 40, 32).double()
    with pytest.raises(ValueError, match="backend='fused'.*float16, bfloat16 and float32, got torch.float64"):
        attnlib.scaled_dot_product_attention(q, q, q, backend="fused")


def test_bfloat16_is_refused_by_the_interpreter():
    q = half(1, 2, 40, 32).bfloat16()
    with pytest.raises(ValueError, match="backend='fused'.*interpreter.*bfloat16"):
        attnlib.scaled_dot_product_attention(q, q, q, backend="fused")


def test_head_width_below_16_is_refused():
    q = half(1, 2, 40, 8)
    with pytest.raises(ValueError, match="backend='fused'.*head widths.*got E=8"):
        attnlib.scaled_dot_product_attention(q, q, q, backend="fused")


@pytest.mark.parametrize("blocks", [(48, 32), (32, 8), (512, 32), [32, 32]], ids=str)
def test_blocks_that_are_no_power_of_two_from_16_to_256_are_refused(blocks):
    q = half(1, 2, 40, 32)
    with pytest.raises(ValueError, match=r"blocks must be None or a pair of powers of two from 16 to 256 "
                                         r"\(BLOCK_M, BLOCK_N\), got " + re.escape(repr(blocks))):
        fused.attention(q, q, q, blocks=blocks)


def test_return_lse_must_be_a_bool():
    q = half(1, 2, 40, 32)
    with pytest.raises(TypeError, match="return_lse must be a bool, got int 1"):
        fused.attention(q, q, q, return_lse=1)


# -- processes without the interpreter, or without Triton ------------------------------------

def run_python(code: str, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment,
                          timeout=120)


def test_without_the_interpreter_the_cpu_call_says_how_to_switch_it_on():
    result = run_python(
        "import torch, attnlib\n"
        "q = torch.randn(1, 2, 8, 16)\n"
        "print(attnlib.explain(q, q, q).passed_over['fused'])\n"
        "try:\n"
        "    attnlib.scaled_dot_product_attention(q, q, q, backend='fused')\n"
        "except ValueError as error:\n"
        "    print(error)\n"
    )
    assert result.returncode == 0, result.stderr
    reason, error = result.stdout.strip().splitlines()
    assert "TRITON_INTERPRET=1" in reason and "before Triton is first imported" in reason
    assert error.startswith("backend='fused' cannot run this call") and "TRITON_INTERPRET=1" in error


def test_without_triton_attnlib_imports_and_fused_says_why_not():
    result = run_python(
        "import sys\n"
        "sys.modules['triton'] = None  # to import and find_spec, Triton is now missing\n"
        "import torch, attnlib\n"
        "q = torch.randn(1, 2, 8, 16)\n"
        "print(attnlib.scaled_dot_product_attention(q, q, q).shape)\n"
        "try:\n"
        "    attnlib.scaled_dot_product_attention(q, q, q, backend='fused')\n"
        "except ValueError as error:\n"
        "    print(error)\n",
        TRITON_INTERPRET="1",
    )
    assert result.returncode == 0, result.stderr
    shape, error = result.stdout.strip().splitlines()
    assert shape == "torch.Size([1, 2, 8, 16])"
    assert "Triton is not installed" in error


def test_a_large_custom_scale_is_honoured():
    """Four times the usual scale: peaked rows, where the running maximum does the work."""
    query, key, value, _ = make_inputs(Case(64, 64, 64))
    scale = 4.0 / math.sqrt(64)
    output = fused.attention(query, key, value, scale=scale)
    assert_as_accurate_as_naive(output, query, key, value, scale=scale)


# -- decoding with the keys split over programs (Flash-Decoding) -------------------------------------

def decode_inputs(heads=(8, 2), key_len=300, batch=2, seed=0):
    hq, hkv = heads
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, hq, 1, 64, generator=generator).half()
    key = torch.randn(batch, hkv, key_len, 64, generator=generator).half()
    value = torch.randn(batch, hkv, key_len, 48, generator=generator).half()
    return query, key, value


@pytest.mark.parametrize("splits", [None, 1, 3, 7, 40])
@pytest.mark.parametrize("heads", [(8, 2), (4, 1), (3, 3)], ids=lambda h: f"Hq{h[0]}-Hkv{h[1]}")
def test_decode_matches_float64_for_any_number_of_splits(splits, heads):
    query, key, value = decode_inputs(heads)
    gqa = heads[0] != heads[1]
    output, lse = fused.decode(query, key, value, enable_gqa=gqa, splits=splits, return_lse=True)
    assert output.shape == (2, heads[0], 1, 48) and output.dtype == torch.float16
    assert_as_accurate_as_naive(output, query, key, value, enable_gqa=gqa)
    expected = float64_log_sum_exp(query, key, value, enable_gqa=gqa)
    torch.testing.assert_close(lse.double(), expected, rtol=1e-5, atol=1e-5)


def test_decode_with_key_padding_ignores_nan_past_each_length():
    query, key, value = decode_inputs(key_len=200)
    mask = attnlib.padding_mask(torch.tensor([150, 0]), 200)
    dirty_key, dirty_value = key.clone(), value.clone()
    dirty_key[0, :, 150:], dirty_value[0, :, 150:] = float("nan"), float("inf")
    dirty_key[1], dirty_value[1] = float("nan"), float("nan")
    output, lse = fused.decode(query, dirty_key, dirty_value, attn_mask=mask, enable_gqa=True, splits=4,
                               return_lse=True)
    assert torch.equal(output[1], torch.zeros_like(output[1])) and (lse[1] == float("-inf")).all()
    assert_as_accurate_as_naive(output, query, key, value, attn_mask=mask, enable_gqa=True)


def test_decode_without_keys_gives_zeros():
    query, key, value = decode_inputs(key_len=0)
    output, lse = fused.decode(query, key, value, enable_gqa=True, return_lse=True)
    assert torch.equal(output, torch.zeros(2, 8, 1, 48, dtype=torch.float16)) and (lse == float("-inf")).all()


def test_decode_refuses_more_than_one_query_a_general_mask_and_bad_splits():
    query, key, value = decode_inputs()
    with pytest.raises(ValueError, match=r"query must hold one query per sequence and head \(L = 1\) to "
                                         r"decode, got L = 2"):
        fused.decode(torch.cat([query, query], dim=2), key, value, enable_gqa=True)
    with pytest.raises(ValueError, match="attn_mask must be None or key padding"):
        fused.decode(query, key, value, attn_mask=torch.rand(300) > 0.5, enable_gqa=True)
    with pytest.raises(ValueError, match="splits must be None or a positive int, got 0"):
        fused.decode(query, key, value, enable_gqa=True, splits=0)


@pytest.mark.parametrize("programs, key_len", [(8, 8192), (8, 131072), (64, 32768), (8, 300), (1, 100)])
def test_decode_splits_fill_the_gpu_with_parts_of_at_least_256_keys(programs, key_len):
    multiprocessors = 132
    splits = fused.decode_splits(programs, key_len, multiprocessors)
    assert splits >= 1
    assert splits == 1 or key_len // splits >= fused.MIN_KEYS_PER_SPLIT
    one_more_is_too_short = key_len // (splits + 1) < fused.MIN_KEYS_PER_SPLIT
    assert programs * splits >= 2 * multiprocessors or one_more_is_too_short


def test_decode_with_batch_times_kv_heads_above_the_grid_limit_runs_in_slices(monkeypatch):
    """B x Hkv programs on the grid's second axis: with the limit at 4, 3 sequences of 2 K/V heads take 3 launches."""
    query, key, value = decode_inputs(heads=(8, 2), key_len=200, batch=3)
    lengths = attnlib.padding_mask(torch.tensor([150, 0, 200]), 200)  # each slice reads its own lengths
    expected, expected_lse = fused.decode(query, key, value, attn_mask=lengths, enable_gqa=True, splits=3,
                                          return_lse=True)
    monkeypatch.setattr(fused.layout, "MAX_BATCH_HEADS", 4)
    module = fused.kernel_module("decode_kernel")
    grids = []

    class RecordingKernel:  # the interpreter has no grid limit: the grids themselves must stay within it
        def __getitem__(self, grid):
            grids.append(grid)
            return kernel[grid]

    kernel = module.decode_split_kernel
    monkeypatch.setattr(module, "decode_split_kernel", RecordingKernel())
    output, lse = fused.decode(query, key, value, attn_mask=lengths, enable_gqa=True, splits=3, return_lse=True)
    assert grids == [(3, 4), (3, 2)]
    assert torch.equal(output, expected) and torch.equal(lse, expected_lse)
    assert_as_accurate_as_naive(output, query, key, value, attn_mask=lengths, enable_gqa=True)


BIG_HEAD_STRIDE = """
import sys, torch
from attnlib import fused
heads, stride, width = 3, 2**30 + 16, 64  # the third query head starts past 2**31 elements
buffer = torch.empty((heads - 1) * stride + width, dtype=torch.float16)  # 4 GB of address space
query = buffer.as_strided((1, heads, 1, width), (0, stride, width, 1))
key, value = torch.load(sys.argv[1])[1:]
query.copy_(torch.load(sys.argv[1])[0])
torch.save(fused.decode(query, key, value, enable_gqa=True, splits=2), sys.argv[2])
"""


def test_decode_reads_query_heads_past_2_to_the_31_elements(tmp_path):
    """The query heads are the decoding block's rows; sliced from a long prefill they lie L x E apart.

    Three query heads on one key/value head, 2**30 + 16 elements apart: the
    third starts past 2**31, where a 32-bit offset wraps around (a
    segmentation fault in the interpreter, hence the child process). The
    output must be that of a contiguous copy, bit for bit.
    """
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(1, 3, 1, 64, generator=generator).half()
    key, value = (torch.randn(1, 1, 100, 64, generator=generator).half() for _ in range(2))
    torch.save([query, key, value], tmp_path / "inputs.pt")
    result = subprocess.run([sys.executable, "-c", BIG_HEAD_STRIDE, tmp_path / "inputs.pt", tmp_path / "out.pt"],
                            capture_output=True, text=True, timeout=300,
                            env=os.environ | {"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    expected = fused.decode(query, key, value, enable_gqa=True, splits=2)
    assert torch.equal(torch.load(tmp_path / "out.pt"), expected)
