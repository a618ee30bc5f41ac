"""Shared helpers for accuracy tests: a float64 reference and the kernel projects' tolerance.

The tolerance follows the practice of the kernel projects: a path is as
accurate as it should be when its error against a float64 reference is at
most ``slack`` times the naive path's error in the same dtype, plus a tiny
absolute term for exact-zero cases.
"""
from __future__ import annotations

import torch

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
