"""torch's own objects as arguments: its causal biases, tensor subclasses, nested tensors.

``torch.nn.attention.bias.causal_upper_left`` / ``causal_lower_right`` are
torch's documented way to ask SDPA for a causal mask of either alignment. Their
storage holds no mask, so attnlib must read them as ``is_causal`` with the
matching ``causal_alignment``; the expected values here are torch's own SDPA
called with the same object. Other tensor subclasses and nested tensors are
refused by name.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import attnlib
from attnlib import fused

BIASES = {"upper_left": causal_upper_left, "lower_right": causal_lower_right}
#: (L, S): square, decoding-like L < S, and L > S (lower-right leaves rows with no key)
LENGTHS = [(5, 5), (3, 7), (7, 3)]
CPU_BACKENDS = ["auto", "naive", "tiled"]


def inputs(query_len, key_len, dtype=torch.float64, grad=False):
    generator = torch.Generator().manual_seed(query_len * 100 + key_len)
    shapes = ((2, 4, query_len, 8), (2, 2, key_len, 8), (2, 2, key_len, 8))
    return [torch.randn(shape, generator=generator, dtype=dtype).requires_grad_(grad) for shape in shapes]


def torch_reference(query, key, value, bias):
    return F.scaled_dot_product_attention(query, key, value, attn_mask=bias, enable_gqa=True)


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda n: f"L{n[0]}-S{n[1]}")
@pytest.mark.parametrize("variant", BIASES)
def test_a_causal_bias_gives_torchs_output_and_gradients(variant, lengths, backend):
    query_len, key_len = lengths
    mine = inputs(query_len, key_len, grad=True)
    theirs = [x.detach().clone().requires_grad_() for x in mine]
    expected = torch_reference(*theirs, BIASES[variant](query_len, key_len))
    out = attnlib.scaled_dot_product_attention(*mine, attn_mask=BIASES[variant](query_len, key_len),
                                               enable_gqa=True, backend=backend)
    assert type(out) is torch.Tensor
    # lower-right with L > S leaves rows before the first key: torch's bias warns of NaN,
    # but its CPU kernel gives such a row 0, as attnlib's contract does
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-12, rtol=1e-12)


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")
@pytest.mark.parametrize("lengths", LENGTHS, ids=lambda n: f"L{n[0]}-S{n[1]}")
@pytest.mark.parametrize("variant", BIASES)
def test_a_causal_bias_reads_as_is_causal_with_its_alignment(variant, lengths):
    query_len, key_len = lengths
    q, k, v = inputs(query_len, key_len)
    alignment = "bottom_right" if variant == "lower_right" else "top_left"
    expected = attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True,
                                                    causal_alignment=alignment)
    got = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=BIASES[variant](query_len, key_len),
                                               enable_gqa=True)
    assert torch.equal(got, expected)
    weights = attnlib.attention_weights(q, k, attn_mask=BIASES[variant](query_len, key_len), enable_gqa=True)
    assert torch.equal(weights, attnlib.attention_weights(q, k, is_causal=True, enable_gqa=True,
                                                          causal_alignment=alignment))


def test_explain_sees_the_bias_as_causal_and_the_tiled_entry_takes_it():
    q, k, v = inputs(3, 7, dtype=torch.float32)
    bias = causal_lower_right(3, 7)
    assert attnlib.explain(q, k, v, bias, enable_gqa=True).backend in attnlib.BACKENDS
    from attnlib import tiled
    expected = torch_reference(q, k, v, bias)
    torch.testing.assert_close(tiled.attention(q, k, v, bias, enable_gqa=True, block_q=2, block_k=3), expected)


def test_a_causal_bias_of_other_lengths_is_refused():
    q, k, v = inputs(3, 7)
    with pytest.raises(ValueError, match=r"CausalBias for \(L, S\) = \(3, 6\), but the query and key "
                                         r"lengths are \(L, S\) = \(3, 7\)"):
        attnlib.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 6), enable_gqa=True)


def test_a_causal_bias_with_is_causal_is_refused_as_any_mask_is():
    q, k, v = inputs(4, 4)
    with pytest.raises(ValueError, match="is_causal=True and attn_mask cannot be combined"):
        attnlib.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(4, 4), is_causal=True,
                                             enable_gqa=True)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(4, 4), is_causal=True,
                                       enable_gqa=True)  # torch refuses it too


def test_an_upper_left_bias_with_bottom_right_alignment_is_refused():
    q, k, v = inputs(3, 7)
    with pytest.raises(ValueError, match="causal_alignment='bottom_right' disagrees with attn_mask"):
        attnlib.scaled_dot_product_attention(q, k, v, attn_mask=causal_upper_left(3, 7), enable_gqa=True,
                                             causal_alignment="bottom_right")


class LoggingTensor(torch.Tensor):
    """A user's subclass that does something with every operation."""


@pytest.mark.parametrize("argument", ["query", "key", "value", "attn_mask"])
def test_another_tensor_subclass_is_refused_by_name(argument):
    q, k, v = inputs(4, 4, dtype=torch.float32)
    arguments = dict(query=q, key=k, value=v, attn_mask=torch.ones(4, 4, dtype=torch.bool))
    arguments[argument] = arguments[argument].as_subclass(LoggingTensor)
    with pytest.raises(TypeError, match=rf"{argument} must be a plain torch.Tensor, got the tensor subclass "
                                        rf".*LoggingTensor.*pass the dense tensor"):
        attnlib.scaled_dot_product_attention(**arguments, enable_gqa=True)


def test_a_parameter_is_a_plain_tensor():
    q, k, v = inputs(4, 4, dtype=torch.float32)
    sinks = torch.nn.Parameter(torch.zeros(4))
    out = attnlib.scaled_dot_product_attention(torch.nn.Parameter(q), k, v, enable_gqa=True, sinks=sinks)
    assert type(out) is torch.Tensor


@pytest.mark.parametrize("argument", ["query", "key", "value", "attn_mask"])
def test_a_nested_tensor_is_refused_with_what_to_do(argument):
    q, k, v = inputs(4, 4, dtype=torch.float32)
    arguments = dict(query=q, key=k, value=v, attn_mask=torch.ones(2, 4, 4, 4, dtype=torch.bool))
    dense = arguments[argument]
    arguments[argument] = torch.nested.nested_tensor([dense[0], dense[1]], layout=torch.jagged)
    with pytest.raises(TypeError, match=rf"{argument} is a nested \(jagged\) tensor.*to_padded_tensor.*"
                                        "bool attn_mask"):
        attnlib.scaled_dot_product_attention(**arguments, enable_gqa=True)


@pytest.mark.skipif(not fused.triton_installed(), reason="Triton is not installed")
def test_the_fused_kernel_in_the_interpreter_reads_a_causal_bias_as_torch_does():
    """A process of its own: Triton decides at its first import whether it interprets."""
    script = textwrap.dedent("""
        import torch, torch.nn.functional as F
        from torch.nn.attention.bias import causal_lower_right, causal_upper_left
        import attnlib
        g = torch.Generator().manual_seed(0)
        for make, (L, S) in [(causal_lower_right, (16, 40)), (causal_upper_left, (16, 40)),
                             (causal_lower_right, (24, 24))]:
            q = torch.randn(1, 2, L, 16, generator=g)
            k, v = (torch.randn(1, 2, S, 16, generator=g) for _ in range(2))
            out = attnlib.scaled_dot_product_attention(q, k, v, attn_mask=make(L, S), backend="fused")
            expected = F.scaled_dot_product_attention(q, k, v, attn_mask=make(L, S))
            torch.testing.assert_close(out, expected, atol=2e-6, rtol=2e-5)
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
