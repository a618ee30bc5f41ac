"""The naive path: attention in its four steps, in plain torch.

    1. scores   S = Q K^T                    (..., Hq, L, S)
    2. scale    S = S * scale  (+ mask)      scale = 1/sqrt(E) by default;
                with ``softcap`` c:  S = c * tanh(S * scale / c), then the mask
    3. softmax  A = softmax(S) row by row    rows sum to 1 (or are all 0);
                with ``sinks``, each head's sink logit joins every row's
                denominator and the row sums to 1 minus the sink's share
    4. mix      O = A V                      (..., Hq, L, Ev)

It materialises the whole ``L x S`` weight matrix, runs on any device and
dtype (float64 included) and is the reference the other paths are tested
against.
"""
from __future__ import annotations

import torch

from .masks import allowed_positions, score_bias
from .problem import AttentionProblem

NAME = "naive"
SUPPORTS_SOFTCAP = True
SUPPORTS_WINDOW = True
SUPPORTS_SINKS = True


def unsupported_reason(problem: AttentionProblem) -> str | None:
    """The naive path takes every call that meets the contract."""
    return None


def _expand_kv_heads(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """Repeat each key/value head for the ``group_size`` query heads that share it."""
    return x if group_size == 1 else x.repeat_interleave(group_size, dim=-3)


def _hide_unseen(x: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Zero key/value rows that no query may see.

    A weight of exactly 0 still turns a NaN or inf stored there (padding)
    into NaN in ``A @ V`` and in the gradient ``dS @ K``; zeroing the rows
    keeps what the mask hides out of every result.
    """
    if allowed is None:
        return x
    seen_by_some_query = allowed.any(dim=-2).unsqueeze(-1)
    return torch.where(seen_by_some_query, x, torch.zeros((), dtype=x.dtype, device=x.device))


def soft_cap(scores: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Logit soft-capping ``c * tanh(s / c)``: about ``s`` for ``|s| << c``, never beyond ``+-c``.

    ``softcap`` None leaves the scores as they are.
    """
    if softcap is None:
        return scores
    return softcap * torch.tanh(scores / softcap)


def masked_scaled_scores(problem: AttentionProblem, allowed: torch.Tensor | None) -> torch.Tensor:
    """Steps 1 and 2: ``cap(scale * Q K^T) + bias``, with ``-inf`` where ``allowed`` is False.

    ``cap`` is :func:`soft_cap` with the problem's ``softcap`` (the identity without one).
    """
    dtype = problem.compute_dtype
    query = problem.query.to(dtype)
    key = _hide_unseen(_expand_kv_heads(problem.key.to(dtype), problem.group_size), allowed)
    scores = soft_cap((query @ key.transpose(-2, -1)) * problem.scale, problem.softcap)
    bias = score_bias(problem)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


def sink_logits(problem: AttentionProblem) -> torch.Tensor | None:
    """The ``sinks`` in the compute dtype, shaped to broadcast against ``(..., Hq, L, S)`` scores."""
    if problem.sinks is None:
        return None
    heads_axis = (-1, 1, 1) if problem.query.ndim >= 3 else (1, 1)
    return problem.sinks.to(problem.compute_dtype).reshape(heads_axis)


def stable_softmax(scores: torch.Tensor, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Step 3: row-wise softmax that subtracts the row maximum first.

    ``sinks`` (broadcastable to ``scores[..., :1]``) are extra logits in each
    row's denominator with no weight of their own returned ("softmax plus one"
    for a sink of 0). A row with no finite score (every key masked, or no keys
    at all) gets weights 0 instead of ``0/0 = NaN``, and so does its gradient.
    """
    if scores.shape[-1] == 0:
        return scores
    row_max = scores.amax(dim=-1, keepdim=True)
    if sinks is not None:
        row_max = torch.maximum(row_max, sinks.expand_as(row_max))
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exps = torch.exp(scores - row_max)
    total = exps.sum(dim=-1, keepdim=True)
    if sinks is not None:
        total = total + torch.exp(sinks - row_max)
    return exps / torch.where(total > 0, total, torch.ones_like(total))


def _dropout(weights: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout on the weights; reproducible under ``torch.manual_seed``."""
    if p == 0.0:
        return weights
    keep = torch.rand(weights.shape, device=weights.device) >= p
    return weights * keep / (1.0 - p)


def weights(problem: AttentionProblem) -> torch.Tensor:
    """The attention weight matrix ``A`` in the compute dtype, without dropout."""
    return stable_softmax(masked_scaled_scores(problem, allowed_positions(problem)), sink_logits(problem))


def forward(problem: AttentionProblem) -> torch.Tensor:
    """Step 4: ``O = dropout(A) V``, returned in the input dtype."""
    allowed = allowed_positions(problem)
    attention = stable_softmax(masked_scaled_scores(problem, allowed), sink_logits(problem))
    value = _expand_kv_heads(problem.value.to(problem.compute_dtype), problem.group_size)
    output = _dropout(attention, problem.dropout_p) @ _hide_unseen(value, allowed)
    return output.to(problem.query.dtype)
