"""The public entry points: a drop-in for torch's scaled_dot_product_attention."""
from __future__ import annotations

import contextlib

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

    - ``attn_mask``: bool (True = may attend) or float (added to the scores)
      in the query's dtype or another one the compute dtype holds exactly,
      broadcastable to ``(..., Hq, L, S)``; or torch's ``CausalBias``
      (``torch.nn.attention.bias.causal_upper_left`` / ``causal_lower_right``),
      read as ``is_causal=True`` with ``top_left`` / ``bottom_right`` alignment.
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

    Differences from torch's SDPA
    -----------------------------
    Where torch 2.13 and attnlib differ, and why:

    1. A float ``attn_mask`` in another dtype than the query's is taken when
       the compute dtype holds its values exactly (float16, bfloat16 or
       float32 masks with float16, bfloat16 or float32 queries; any float mask
       with float64 queries), since attnlib adds it in float32 or float64;
       a float64 mask with lower-precision queries is refused, as adding it
       would round it (torch rounds it silently).
    2. Batch dimensions are not broadcast (torch's CPU kernel broadcasts a key
       or value batch of 1): a batch that differs is refused with its shape;
       ``key.expand(B, ...)`` says it explicitly and copies nothing.
    3. Fewer key/value heads than query heads need ``enable_gqa=True``, as
       torch's documentation says, also for a single key/value head (torch's
       CPU kernel broadcasts one head without it); attnlib never copies keys
       or values per query head.
    4. ``is_causal=True`` with an ``attn_mask`` is an error (torch documents an
       error, and its CPU kernel computes the intersection); for both, use
       ``window=(None, 0)`` with the mask, or ``attnlib.causal_mask(...) & mask``.
    5. ``scale`` is a finite Python number: a 0-d tensor, ``inf`` and ``nan``
       are refused; ``dropout_p`` lies in ``[0, 1)``: ``1.0`` is refused
       (torch returns zeros).
    6. A 1-D ``(S,)`` mask over the keys is taken (torch raises IndexError).
    7. A query with no allowed key gets 0 on every path and device (torch's
       CPU kernel also gives 0; its GPU kernels may give NaN), and NaN or inf
       stored where the mask hides a key from every query never reaches the
       output (torch's does).
    8. A value length that differs from the key length is refused (torch's
       CPU kernel returns an output for it).
    9. Tensor subclasses other than ``torch.nn.Parameter`` (and torch's own
       tracing tensors) are refused by name, except ``CausalBias`` as above,
       and so are nested (jagged) tensors, which torch takes: pad them
       (``to_padded_tensor``) and pass a bool ``attn_mask``. The output is
       always a plain ``torch.Tensor``.
    10. Under ``torch.autocast`` attnlib does as torch does: float32 query,
        key, value (and ``sinks``) are cast to the autocast dtype, the call
        runs with autocast off, so every path computes alike (fp32
        accumulation), and the output comes back in the autocast dtype.
    11. ``dropout_p > 0`` runs on the naive path, the only one with dropout,
        which holds the whole ``L x S`` weight matrix: attention dropout
        takes ``O(L * S)`` memory at every length (``last_dispatch()`` says so).
    """
    query, key, value, sinks, autocast_off = _as_autocast_would(query, key, value, sinks)
    with autocast_off:
        problem = check_problem(
            query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, causal_alignment,
            softcap, window, sinks,
        )
        return dispatch.run(problem, backend)


def _as_autocast_would(query, key, value, sinks):
    """Torch's SDPA under ``torch.autocast``: float32 inputs cast to the autocast dtype.

    Returns the inputs (cast where autocast is on for their device) and a context that turns
    autocast off for the call, so that every path computes the same way (fp32 accumulation
    for fp16/bf16) and the output comes back in the autocast dtype, as torch's does.
    """
    device = query.device.type if isinstance(query, torch.Tensor) else None
    if device is None or not torch.amp.is_autocast_available(device) or not torch.is_autocast_enabled(device):
        return query, key, value, sinks, contextlib.nullcontext()
    dtype = torch.get_autocast_dtype(device)

    def cast(x):
        is_float32 = isinstance(x, torch.Tensor) and x.dtype == torch.float32
        return x.to(dtype) if is_float32 else x

    return (*(cast(x) for x in (query, key, value, sinks)), torch.autocast(device, enabled=False))


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
    query, key, value, sinks, autocast_off = _as_autocast_would(query, key, value, sinks)
    with autocast_off:
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
