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
against. With grouped-query heads (``G = Hq / Hkv`` query heads per key/value
head) the ``G`` heads' queries are stacked as rows of one matrix per
key/value head, so keys and values are never copied per query head.
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


def _rows_per_kv_head(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """``(..., Hq, L, W)`` as ``(..., Hkv, G*L, W)``: the ``G`` query heads that share a
    key/value head stacked as rows of one matrix, which multiplies that head's keys (or
    values) once, so no key or value is copied per query head (a view when ``x`` is contiguous)."""
    if group_size == 1:
        return x
    return x.reshape(*x.shape[:-3], x.shape[-3] // group_size, group_size * x.shape[-2], x.shape[-1])


def _hide_unseen(x: torch.Tensor, allowed: torch.Tensor | None, group_size: int) -> torch.Tensor:
    """Zero key/value rows that no query may see.

    A weight of exactly 0 still turns a NaN or inf stored there (padding)
    into NaN in ``A @ V`` and in the gradient ``dS @ K``; zeroing the rows
    keeps what the mask hides out of every result. A key/value head's row is
    kept when a query of any of the ``group_size`` heads that share it may see it.
    """
    if allowed is None:
        return x
    seen_by_some_query = allowed.any(dim=-2)  # (..., Hq or 1, S)
    if group_size > 1 and seen_by_some_query.ndim >= 2 and seen_by_some_query.shape[-2] > 1:
        heads = seen_by_some_query.shape[-2]
        seen_by_some_query = seen_by_some_query.unflatten(-2, (heads // group_size, group_size)).any(dim=-2)
    if not may_hold_non_finite(x, ~seen_by_some_query):
        return x
    return torch.where(seen_by_some_query.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def may_hold_non_finite(x: torch.Tensor, hidden: torch.Tensor) -> bool:
    """False only when the ``hidden`` rows of ``x`` surely hold no NaN or inf.

    Checked on the CPU, where reading those rows (padding: a few) is far cheaper than
    zeroing a copy of ``x``; a NaN or inf makes their sum NaN or inf, and so may an
    overflow (then the rows are zeroed anyway). Elsewhere, and while torch.compile
    traces, or under a torch.func transform, it answers True: the check would wait for the
    device, break the graph, or branch on a value vmap cannot branch on.
    """
    if x.device.type != "cpu" or torch.compiler.is_compiling() or torch._C._functorch.is_functorch_wrapped_tensor(x):
        return True
    return not bool(torch.isfinite(x[hidden.expand(x.shape[:-1])].sum()))


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
    dtype, group = problem.compute_dtype, problem.group_size
    query = _rows_per_kv_head(problem.query.to(dtype), group)
    key = problem.key.to(dtype)
    # A NaN in a hidden key makes only hidden scores NaN, which the mask then sets to -inf;
    # it reaches a result only through the query's gradient, dS @ K.
    if torch.is_grad_enabled() and problem.query.requires_grad:
        key = _hide_unseen(key, allowed, group)
    scores = (query @ key.transpose(-2, -1)).view(*problem.query.shape[:-1], problem.key_len)
    scores = soft_cap(scores * problem.scale, problem.softcap)
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
    group = problem.group_size
    value = _hide_unseen(problem.value.to(problem.compute_dtype), allowed, group)
    output = _rows_per_kv_head(_dropout(attention, problem.dropout_p), group) @ value
    return output.view(problem.output_shape).to(problem.query.dtype)
