"""Shared helpers for accuracy tests: seeded inputs, a float64 reference, torch as a
reference on masked rows, and the kernel projects' tolerance.

The tolerance follows the practice of the kernel projects: a path is as
accurate as it should be when its error against a float64 reference is at
most ``slack`` times the naive path's error in the same dtype, plus a tiny
absolute term for exact-zero cases.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import attnlib


def float64_reference(query, key, value, attn_mask=None, **kwargs) -> torch.Tensor:
    """The naive path on float64 copies of the inputs (the mask too when it is float)."""
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    return attnlib.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), attn_mask, backend="naive", **kwargs
    )


def max_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    """Largest absolute difference; NaN anywhere counts as an infinite error."""
    diff = (output.double() - reference.double()).abs()
    if torch.isnan(diff).any():
        return float("inf")
    return float(diff.max()) if diff.numel() else 0.0


def assert_as_accurate_as_naive(output, query, key, value, attn_mask=None, *, slack=2.0,
                                tiny=1e-6, **kwargs) -> None:
    """``err(output) <= slack * err(naive in the same dtype) + tiny``, both against float64."""
    reference = float64_reference(query, key, value, attn_mask, **kwargs)
    naive = attnlib.scaled_dot_product_attention(query, key, value, attn_mask, backend="naive", **kwargs)
    err_path, err_naive = max_error(output, reference), max_error(naive, reference)
    assert err_path <= slack * err_naive + tiny, (
        f"error {err_path:.3e} exceeds {slack} x naive's {err_naive:.3e} + {tiny:.0e}"
    )


def randn(*shape, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype)


def causal_allowed(L, S, offset):
    """Written independently of attnlib.masks: key j visible to query i iff j <= i + offset."""
    return torch.ones(L, S, dtype=torch.bool).tril(diagonal=offset)


def torch_sdpa_on_visible_rows(q, k, v, mask, enable_gqa=False):
    """torch's SDPA, with rows that see no key (torch gives NaN there) set to 0."""
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)
    if mask is not None and mask.dtype == torch.bool:
        sees_something = mask.any(dim=-1, keepdim=True)
        out = torch.where(sees_something, out, torch.zeros((), dtype=out.dtype))
    return out
