"""The public entry points: a drop-in for torch's scaled_dot_product_attention."""
from __future__ import annotations

import torch

from . import dispatch, naive
from .problem import check_problem


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    softcap: float | None = None,
    window: tuple[int | None, int | None] | None = None,
    sinks: torch.Tensor | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    r"""``softmax(scale * Q K^T + mask) V``, with torch's semantics (>= 2.5).

    Shapes: ``query (..., Hq, L, E)``, ``key (..., Hkv, S, E)``,
    ``value (..., Hkv, S, Ev)`` -> output ``(..., Hq, L, Ev)``.

    - ``attn_mask``: bool (True = may attend) or float in the query's dtype
      (added to the scores), broadcastable to ``(..., Hq, L, S)``.
    - ``is_causal``: query ``i`` sees keys ``j <= i`` (``top_left``) or
      ``j <= i + S - L`` (``causal_alignment="bottom_right"``). Not combinable
      with ``attn_mask``.
    - ``scale`` defaults to ``1/sqrt(E)``, the per-head query/key width.
    - ``softcap`` (an extension of torch's signature, FlashAttention's name):
      a finite positive ``c`` turns the scores into ``c * tanh(scale * q.k / c)``
      before the mask is applied (logit soft-capping, as in Gemma 2); None: no cap.
    - ``window=(left, right)``: a sliding window. Query ``i`` sits at key
      position ``p = i`` (``top_left``) or ``p = i + S - L``
      (``bottom_right``, the ``causal_alignment`` in force) and sees keys
      ``p - left <= j <= p + right``; None leaves a side unbounded. It narrows
      ``is_causal`` and ``attn_mask`` (their intersection is what is seen). It
      is FlashAttention's ``window_size`` with None for -1; transformers'
      ``sliding_window = W`` on a causal layer is ``window=(W - 1, 0)``.
    - ``sinks``: ``(Hq,)`` logits in the query's dtype, one per query head
      (attention sinks, as in gpt-oss): each joins every row's softmax
      denominator as a score that carries no value, so the weights of a row
      sum to less than 1. A row with no allowed key still gives 0.
    - ``enable_gqa``: ``Hq`` may be a multiple of ``Hkv``; query head ``h``
      uses key/value head ``h // (Hq // Hkv)``.
    - A query with no allowed key gets output 0 and gradient 0; what the
      mask hides from every query never reaches the output.
    - fp16/bf16 are computed with fp32 accumulation and returned in the
      input dtype.
    - ``backend``: ``"auto"`` or a name in ``attnlib.BACKENDS``;
      ``attnlib.last_dispatch()`` tells which ran and why the others did not.
    """
    problem = check_problem(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment,
        softcap, window, sinks,
    )
    return dispatch.run(problem, backend)


def explain(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    softcap: float | None = None,
    window: tuple[int | None, int | None] | None = None,
    sinks: torch.Tensor | None = None,
    backend: str = "auto",
) -> dispatch.Dispatch:
    """Which backend ``scaled_dot_product_attention`` would run with these arguments, and why."""
    problem = check_problem(
        query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment,
        softcap, window, sinks,
    )
    return dispatch.choose(problem, backend)


def attention_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: str = "top_left",
    softcap: float | None = None,
    window: tuple[int | None, int | None] | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """The weight matrix ``A = softmax(cap(scale * Q K^T) + mask)``, shape ``(..., Hq, L, S)``.

    Same masking rules, ``softcap``, ``window`` and ``sinks`` as
    :func:`scaled_dot_product_attention` (rows with no allowed key are all 0;
    with sinks a row sums to 1 minus its sink's share); no dropout. Returned
    in the input dtype.
    """
    no_values = key[..., :0]
    problem = check_problem(
        query, key, no_values, attn_mask, 0.0, is_causal, scale, enable_gqa, causal_alignment,
        softcap, window, sinks,
    )
    return naive.weights(problem).to(query.dtype)
