"""The float64 error the fused kernel's checks are measured by."""
import math

import torch

import attnlib
from attnlib.book.accuracy import float64_error


def test_the_reference_has_no_error_and_a_perturbation_is_measured_exactly():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (5, 7, 7))
    mask = torch.randn(5, 7, generator=g).float()
    mask[0, 0] = -math.inf
    exact = attnlib.scaled_dot_product_attention(q, k, v, mask.double(), backend="naive", is_causal=False)
    assert float64_error(exact, q, k, v, attn_mask=mask) == 0.0
    shifted = exact.clone()
    shifted[0, 1, 2, 3] += 0.25
    assert math.isclose(float64_error(shifted, q, k, v, attn_mask=mask), 0.25, abs_tol=1e-12)
    assert float64_error(exact, q, k, v, is_causal=True) > 0.01  # the arguments reach the reference
