"""torch.func on every path that autograd runs: vmap, grad, jacrev, and their compositions.

The naive path is plain torch operations, so torch.func transforms it as it does any
code; the tiled path is an autograd.Function with ``setup_context`` and vmap rules
(for its forward and for its backward). Each transform of the tiled path must give
what the same transform of the naive path gives, in float64.
"""
from __future__ import annotations

import pytest
import torch
from torch.func import grad, jacrev, vmap

import attnlib
from attnlib import tiled

TOLERANCE = dict(atol=1e-12, rtol=1e-12)


def inputs(query_len=5, key_len=6, batch=3, heads=(4, 2)):
    generator = torch.Generator().manual_seed(query_len + key_len)
    hq, hkv = heads
    q = torch.randn(batch, hq, query_len, 8, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(batch, hkv, key_len, 8, generator=generator, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(batch, 1, query_len, key_len, generator=generator) > 0.3
    return q, k, v, mask


def attention(backend, **extra):
    def call(q, k, v, mask=None):
        return attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True,
                                                    backend=backend, **extra)
    return call


TRANSFORMS = {
    "vmap": lambda f, q, k, v, m: vmap(f)(q, k, v, m),
    "vmap, keys shared": lambda f, q, k, v, m: vmap(f, in_dims=(0, None, None, None))(q, k[0], v[0], m[0]),
    "vmap over heads": lambda f, q, k, v, m: vmap(f, in_dims=(1, 1, 1, None))(q[:, :2], k, v, m[:, 0]),
    "grad": lambda f, q, k, v, m: grad(lambda q, k, v: f(q, k, v, m).sin().sum(), argnums=(0, 1, 2))(q, k, v),
    "vmap of grad": lambda f, q, k, v, m: vmap(grad(lambda q, k, v, m: f(q, k, v, m).sin().sum(),
                                                    argnums=(0, 1, 2)))(q, k, v, m),
    "jacrev": lambda f, q, k, v, m: jacrev(lambda k: f(q[:1], k, v[:1], m[:1]).sum(dim=-1))(k[:1]),
    "grad of vmap": lambda f, q, k, v, m: grad(lambda q: vmap(f)(q, k, v, m).square().sum())(q),
}


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_the_tiled_path_transforms_as_the_naive_path_does(transform):
    q, k, v, mask = inputs()
    expected = TRANSFORMS[transform](attention("naive"), q, k, v, mask)
    got = TRANSFORMS[transform](attention("tiled"), q, k, v, mask)
    torch.testing.assert_close(got, expected, **TOLERANCE)


@pytest.mark.parametrize("keywords", [dict(is_causal=True, causal_alignment="bottom_right"),
                                      dict(softcap=2.0, window=(2, None))], ids=["causal", "softcap-window"])
def test_extension_keywords_survive_vmap_and_jacrev(keywords):
    q, k, v, _ = inputs(query_len=3, key_len=6)
    transforms = (lambda f: vmap(f)(q, k, v),
                  lambda f: jacrev(lambda k: f(q[:1], k, v[:1]).sum(dim=-1))(k[:1]))
    for transform in transforms:
        expected = transform(attention("naive", **keywords))
        torch.testing.assert_close(transform(attention("tiled", **keywords)), expected, **TOLERANCE)


def test_inputs_without_a_head_axis_and_small_blocks():
    """2-D inputs per vmapped element, and several query and key blocks."""
    q, k, v, _ = inputs(query_len=9, key_len=11, batch=2, heads=(1, 1))
    q, k, v = q[:, 0], k[:, 0], v[:, 0]  # (2, L, E): vmapped, each element (L, E)

    def blocked(q, k, v):
        return tiled.attention(q, k, v, is_causal=True, block_q=4, block_k=3)

    def naive(q, k, v):
        return attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, backend="naive")

    torch.testing.assert_close(vmap(blocked)(q, k, v), vmap(naive)(q, k, v), **TOLERANCE)
    loss = (lambda f: lambda q, k, v: f(q, k, v).sin().sum())
    torch.testing.assert_close(vmap(grad(loss(blocked), argnums=(0, 1, 2)))(q, k, v),
                               vmap(grad(loss(naive), argnums=(0, 1, 2)))(q, k, v), **TOLERANCE)


def test_sinks_get_their_gradient_under_grad():
    q, k, v, mask = inputs()
    sinks = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64)

    def loss(backend):
        return lambda s: attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, sinks=s,
                                                              backend=backend).sin().sum()

    torch.testing.assert_close(grad(loss("tiled"))(sinks), grad(loss("naive"))(sinks), **TOLERANCE)


def test_auto_past_the_naive_threshold_takes_tiled_and_vmap_works():
    """The review's case: vmap under backend='auto' once L x S reaches 512 x 512."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1, 520, 8, generator=generator) for _ in range(3))
    assert attnlib.explain(q[0], k[0], v[0]).backend == "tiled"
    got = vmap(attnlib.scaled_dot_product_attention)(q, k, v)
    expected = vmap(attention("naive"))(q, k, v)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_bfloat16_gradients_under_grad_equal_autograds():
    q, k, v, mask = (x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs())

    def loss(q):
        return attention("tiled")(q, k, v, mask).float().sin().sum()

    q_autograd = q.clone().requires_grad_()
    loss(q_autograd).backward()
    assert torch.equal(grad(loss)(q), q_autograd.grad)


def test_second_derivatives_are_refused_by_name():
    q, k, v, mask = inputs()
    with pytest.raises(RuntimeError, match="the tiled path has no second derivatives; use backend='naive'"):
        grad(lambda q: grad(lambda q: attention("tiled")(q, k, v, mask).sin().sum())(q).sum())(q)


@pytest.mark.skipif(not __import__("attnlib").fused.triton_installed(), reason="Triton is not installed")
def test_the_fused_kernels_in_the_interpreter_transform_as_the_naive_path_does():
    """A process of its own: Triton decides at its first import whether it interprets."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import torch, attnlib
        from torch.func import vmap, grad, jacrev
        g = torch.Generator().manual_seed(0)
        q = torch.randn(2, 2, 16, 16, generator=g)
        k, v = (torch.randn(2, 2, 24, 16, generator=g) for _ in range(2))
        results = {}
        for backend in ("naive", "fused"):
            f = lambda q, k, v: attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)
            results[backend] = (
                vmap(f)(q, k, v),
                *grad(lambda q, k, v: f(q, k, v).sin().sum(), argnums=(0, 1, 2))(q, k, v),
                jacrev(lambda k: f(q[:1], k, v[:1]).sum(dim=(-1, -2)))(k[:1]),
            )
        for got, expected in zip(results["fused"], results["naive"]):
            torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
