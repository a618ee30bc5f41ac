"""What attnlib does around a call: dispatch records per thread, torch.compile, threads,
autocast, masks in another float dtype, and the naive path's grouped heads without copies."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import attnlib
from attnlib import dispatch


def qkv(length=8, dtype=torch.float32, heads=(2, 2), key_len=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hq, hkv = heads
    q = torch.randn(1, hq, length, 16, generator=generator).to(dtype)
    k, v = (torch.randn(1, hkv, key_len or length, 16, generator=generator).to(dtype) for _ in range(2))
    return q, k, v


def test_last_dispatch_is_per_thread():
    q, k, v = qkv()
    attnlib.scaled_dot_product_attention(q, k, v, backend="naive")
    seen_in_thread = []

    def other():
        seen_in_thread.append(attnlib.last_dispatch())  # a new thread has seen no call yet
        attnlib.scaled_dot_product_attention(q, k, v, backend="tiled")
        seen_in_thread.append(attnlib.last_dispatch().backend)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen_in_thread == [None, "tiled"]
    assert attnlib.last_dispatch().backend == "naive"


def test_record_dispatches_records_every_call_of_its_block_and_nests():
    q, k, v = qkv()
    with attnlib.record_dispatches() as outer:
        attnlib.scaled_dot_product_attention(q, k, v, backend="naive")
        with attnlib.record_dispatches() as inner:
            attnlib.scaled_dot_product_attention(q, k, v, backend="tiled")
            attnlib.scaled_dot_product_attention(q, k, v)
    attnlib.scaled_dot_product_attention(q, k, v)  # after the blocks: in neither
    assert [d.backend for d in outer] == ["naive", "tiled", "naive"]
    assert [d.backend for d in inner] == ["tiled", "naive"]
    assert all(isinstance(d, attnlib.Dispatch) for d in outer)
    assert "record_dispatches" in attnlib.__all__ and attnlib.record_dispatches.__doc__


class GraphCounter:
    """A torch.compile backend that counts the graphs it is given (one per graph break + 1)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


@pytest.mark.parametrize("backend, length", [("naive", 32), ("tiled", 160)])
def test_torch_compile_traces_each_path_as_one_graph_without_warnings(backend, length):
    torch._dynamo.reset()
    q, k, v = qkv(length)
    counter = GraphCounter()

    def attend(q, k, v):
        return attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)

    compiled = torch.compile(attend, backend=counter, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # (dynamo itself raises a DeprecationWarning)
        out = compiled(q, k, v)
    assert counter.graphs == 1
    torch.testing.assert_close(out, attend(q, k, v))


def test_the_tiled_path_leaves_the_callers_thread_count_alone():
    before = torch.get_num_threads()
    q, k, v = qkv(1024, heads=(4, 4))
    seen = set()
    done = threading.Event()

    def call():
        attnlib.scaled_dot_product_attention(q, k, v, backend="tiled")
        done.set()

    worker = threading.Thread(target=call)
    worker.start()
    while not done.is_set():  # the main thread's count, while another thread runs tiled
        seen.add(torch.get_num_threads())
    worker.join()
    assert seen <= {before} and torch.get_num_threads() == before


def test_on_a_cpu_the_fused_path_gives_the_cpu_reason_first():
    q, k, v = qkv()
    reason = attnlib.explain(q, k, v).passed_over["fused"]
    assert reason.startswith("on the CPU the kernel runs only in Triton's interpreter")


@pytest.mark.parametrize("backend, length", [("naive", 64), ("tiled", 600)])
def test_under_autocast_attnlib_returns_what_torch_returns(backend, length):
    q, k, v = qkv(length)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        got = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)
    assert got.dtype == expected.dtype == torch.bfloat16
    # the same bf16 inputs, computed in fp32 by both: at most one bf16 rounding apart
    torch.testing.assert_close(got, expected, atol=2 ** -7, rtol=2 ** -7)
    bf16 = attnlib.scaled_dot_product_attention(*(x.to(torch.bfloat16) for x in (q, k, v)), is_causal=True,
                                                backend=backend)
    assert torch.equal(got, bf16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("backend", ["naive", "tiled"])
def test_a_float32_mask_with_other_queries_gives_torchs_output(dtype, backend):
    q, k, v = qkv(6, dtype=dtype)
    mask = torch.randn(6, 6, generator=torch.Generator().manual_seed(3))
    mask[0, 1:] = float("-inf")
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask.double())
    got = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask, backend=backend)
    assert got.dtype == dtype
    tolerance = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(got.double(), expected, atol=tolerance, rtol=tolerance)


def test_a_mask_that_would_be_rounded_is_refused():
    q, k, v = qkv(6)
    with pytest.raises(TypeError, match=r"compute dtype holds exactly \(torch.float16, torch.bfloat16, "
                                        r"torch.float32\), got torch.float64"):
        attnlib.scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(6, 6, dtype=torch.float64))


class LargestTensor(TorchDispatchMode):
    """The largest number of elements any operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(x, torch.Tensor):
                self.largest = max(self.largest, x.numel())
        return out


@pytest.mark.parametrize("kv_heads", [8, 1], ids=["GQA 32:8", "MQA 32:1"])
def test_the_naive_path_never_copies_keys_or_values_per_query_head(kv_heads):
    q, k, v = qkv(1, heads=(32, kv_heads), key_len=2048)
    padding = torch.ones(1, 1, 1, 2048, dtype=torch.bool)
    padding[..., :100] = False
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=padding, enable_gqa=True)
    with LargestTensor() as watch:
        got = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=padding, enable_gqa=True,
                                                   backend="naive")
    torch.testing.assert_close(got, expected)
    scores = q.shape[1] * q.shape[2] * k.shape[2]
    assert watch.largest <= max(k.numel(), scores)  # a copy of K per query head: 32 * 2048 * 16
    assert dispatch.last_dispatch().backend == "naive"
