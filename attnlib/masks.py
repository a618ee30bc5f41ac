"""Masks: which keys each query may attend to.

A bool mask says ``True`` where a query may attend; a float mask is added to
the scores, and ``-inf`` in it also forbids a position. The causal pattern
is given by an alignment: ``top_left`` lets query ``i`` see keys ``j <= i``
(torch's convention); ``bottom_right`` lines the last query up with the last
key, ``j <= i + (S - L)``, which is what decoding with a KV cache needs.
"""
from __future__ import annotations

import torch

from .problem import CAUSAL_ALIGNMENTS, AttentionProblem, check_window


def causal_mask(
    query_len: int,
    key_len: int,
    alignment: str = "top_left",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bool ``(L, S)`` mask, True where query ``i`` may see key ``j``."""
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment must be one of {CAUSAL_ALIGNMENTS}, got {alignment!r}")
    for name, n in (("query_len", query_len), ("key_len", key_len)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{name} must be a non-negative int, got {n!r}")
    offset = key_len - query_len if alignment == "bottom_right" else 0
    rows = torch.arange(query_len, device=device)[:, None]
    cols = torch.arange(key_len, device=device)[None, :]
    return cols <= rows + offset


def window_mask(
    query_len: int,
    key_len: int,
    window: tuple[int | None, int | None],
    alignment: str = "top_left",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Bool ``(L, S)`` mask of a sliding window, True where query ``i`` may see key ``j``.

    With ``window = (left, right)`` query ``i``, placed at key position
    ``p = i`` (``top_left``) or ``p = i + S - L`` (``bottom_right``), sees the
    keys ``p - left <= j <= p + right``; None on a side leaves it unbounded.
    FlashAttention's ``window_size=(left, right)`` is the same rule with -1 for
    None (and bottom-right alignment); a transformers ``sliding_window = W`` on
    a causal layer is ``window=(W - 1, 0)``.
    """
    left, right = check_window(window, is_causal=False)
    causal = causal_mask(query_len, key_len, alignment, device)  # checks lengths and alignment
    offset = key_len - query_len if alignment == "bottom_right" else 0
    position = torch.arange(query_len, device=device)[:, None] + offset
    cols = torch.arange(key_len, device=device)[None, :]
    allowed = torch.ones_like(causal)
    if left is not None:
        allowed &= cols >= position - left
    if right is not None:
        allowed &= cols <= position + right
    return allowed


def padding_mask(lengths: torch.Tensor, key_len: int) -> torch.Tensor:
    """Bool ``(B, 1, 1, S)`` mask from per-sequence key lengths ``(B,)``.

    Key ``j`` of sequence ``b`` is visible iff ``j < lengths[b]``; the two
    singleton axes broadcast over heads and queries.
    """
    if not isinstance(lengths, torch.Tensor) or lengths.ndim != 1 or lengths.is_floating_point():
        raise TypeError(f"lengths must be a 1-D integer tensor, got {lengths!r}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > key_len):
        raise ValueError(
            f"lengths must lie in [0, key_len={key_len}], got min {int(lengths.min())} "
            f"and max {int(lengths.max())}"
        )
    cols = torch.arange(key_len, device=lengths.device)
    return (cols[None, :] < lengths[:, None])[:, None, None, :]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Float mask ``0`` where ``allowed`` is True and ``-inf`` where it is False.

    The additive form of a bool mask, for code that adds masks to scores.
    It uses ``-inf`` rather than a large finite negative number: ``-1e9``
    rounds to ``-inf`` in float16 anyway, ``finfo(dtype).min`` added twice
    overflows to ``-inf`` while added once it leaves a fully masked row
    attending uniformly to what it should not see, and ``-inf + -inf`` is
    still ``-inf``, so such masks combine by addition.
    """
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool:
        got = f"a {allowed.dtype} tensor" if isinstance(allowed, torch.Tensor) else type(allowed).__name__
        raise TypeError(f"allowed must be a bool torch.Tensor (True = may attend), got {got}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.full((), float("-inf"), dtype=dtype, device=allowed.device))


def allowed_positions(problem: AttentionProblem) -> torch.Tensor | None:
    """Bool mask of at least 2 dims, broadcastable to ``(..., Hq, L, S)``; None when all is allowed.

    Combines the causal pattern, the sliding window, a bool ``attn_mask`` and
    the ``-inf`` entries of a float ``attn_mask``.
    """
    shape = (problem.query_len, problem.key_len, problem.causal_alignment, problem.query.device)
    patterns = []
    if problem.is_causal:
        patterns.append(causal_mask(*shape))
    if problem.window is not None:
        patterns.append(window_mask(shape[0], shape[1], problem.window, *shape[2:]))
    mask = problem.attn_mask
    if mask is not None:
        if mask.ndim == 1:  # a mask over keys alone: give it its query axis
            mask = mask.unsqueeze(0)
        patterns.append(mask if mask.dtype == torch.bool else mask != float("-inf"))
    if not patterns:
        return None
    allowed = patterns[0]
    for pattern in patterns[1:]:
        allowed = allowed & pattern
    return allowed


def score_bias(problem: AttentionProblem) -> torch.Tensor | None:
    """The float ``attn_mask`` in the compute dtype, or None."""
    mask = problem.attn_mask
    if mask is None or mask.dtype == torch.bool:
        return None
    return mask.to(problem.compute_dtype)
