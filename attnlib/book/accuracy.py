"""How far an attention output is from the float64 reference of the naive path."""
from __future__ import annotations

import torch

from attnlib.attention import scaled_dot_product_attention


def float64_error(output: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  attn_mask: torch.Tensor | None = None, **kwargs) -> float:
    """The largest |output - reference|, the reference computed by the naive path in float64
    from the same inputs and arguments (a float mask is widened with them)."""
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.double()
    reference = scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask,
                                             backend="naive", **kwargs)
    return (output.double() - reference).abs().max().item()
