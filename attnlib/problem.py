"""Argument checking for the public attention call.

Every backend receives an :class:`AttentionProblem`: the caller's tensors,
checked once against the contract in DESIGN.md, plus the sizes and the
compute dtype that the paths need. Nothing here broadcasts, truncates or
recasts a tensor; a call that does not meet the contract raises
``TypeError`` or ``ValueError`` naming the argument, what was expected and
what was received.
"""
from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass

import torch

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class AttentionProblem:
    """One checked attention call.

    Shapes: ``query (..., Hq, L, E)``, ``key (..., Hkv, S, E)``,
    ``value (..., Hkv, S, Ev)``; ``attn_mask`` broadcastable to
    ``(..., Hq, L, S)``. Inputs with ``ndim == 2`` have no head axis and are
    treated as one head.
    """

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None
    dropout_p: float
    is_causal: bool
    scale: float
    enable_gqa: bool
    causal_alignment: str
    #: ``c`` in ``c * tanh(scale * q.k / c)``, applied before the mask; None: no cap.
    softcap: float | None = None
    #: ``(left, right)``: query ``i`` sees key ``j`` iff ``p - left <= j <= p + right`` with
    #: ``p = i + causal_offset``; None on a side: unbounded; None: no window.
    window: tuple[int | None, int | None] | None = None
    #: ``(Hq,)`` logits, one per query head, that join each row's softmax denominator
    #: and carry no value; None: no sinks.
    sinks: torch.Tensor | None = None

    @property
    def query_len(self) -> int:
        return self.query.shape[-2]

    @property
    def key_len(self) -> int:
        return self.key.shape[-2]

    @property
    def head_dim(self) -> int:
        return self.query.shape[-1]

    @property
    def value_dim(self) -> int:
        return self.value.shape[-1]

    @property
    def query_heads(self) -> int:
        return self.query.shape[-3] if self.query.ndim >= 3 else 1

    @property
    def kv_heads(self) -> int:
        return self.key.shape[-3] if self.key.ndim >= 3 else 1

    @property
    def group_size(self) -> int:
        """Query heads that share one key/value head (1 without GQA)."""
        return self.query_heads // self.kv_heads

    @property
    def causal_offset(self) -> int:
        """Query ``i`` may see key ``j`` iff ``j <= i + causal_offset``."""
        if self.causal_alignment == "bottom_right":
            return self.key_len - self.query_len
        return 0

    @property
    def compute_dtype(self) -> torch.dtype:
        """fp16/bf16 are computed with fp32 accumulation; fp32/fp64 as they are."""
        return compute_dtype_of(self.query.dtype)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return (*self.query.shape[:-1], self.value_dim)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a {x.dtype} tensor of shape {tuple(x.shape)} on {x.device}"
    return f"{type(x).__name__} {x!r}"


#: Tensor types taken as plain tensors: a parameter is one, and torch's tracing
#: (torch.compile, torch.export) hands the call fake and functional tensors
#: that stand for plain ones.
_PLAIN_TENSOR_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter",
                       "torch._subclasses.fake_tensor.FakeTensor",
                       "torch._subclasses.functional_tensor.FunctionalTensor")


def _type_name(x) -> str:
    kind = type(x)
    return f"{kind.__module__}.{kind.__qualname__}"


def check_plain_tensor(name: str, x) -> None:
    """Refuse a nested tensor or a tensor subclass, whose storage need not hold what it means."""
    if x.is_nested:
        raise TypeError(
            f"{name} is a nested (jagged) tensor, which attnlib does not take; pad the sequences "
            f"to one length ({name}.to_padded_tensor(0.0)) and pass a bool attn_mask that hides "
            "the padding"
        )
    if _type_name(x) not in _PLAIN_TENSOR_TYPES:
        raise TypeError(
            f"{name} must be a plain torch.Tensor, got the tensor subclass {_type_name(x)}, whose "
            "data attnlib cannot tell from its storage; pass the dense tensor it stands for "
            f"(for torch's causal biases, is_causal=True with causal_alignment)"
        )


def _check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_describe(x)}")
    check_plain_tensor(name, x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must have a floating dtype (float16, bfloat16, float32 or "
            f"float64), got {x.dtype}"
        )
    if x.ndim < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (..., length, width), "
            f"got shape {tuple(x.shape)}"
        )


def _check_mask(attn_mask, query: torch.Tensor, key: torch.Tensor) -> None:
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {_describe(attn_mask)}")
    check_plain_tensor("attn_mask", attn_mask)
    if attn_mask.dtype != torch.bool and attn_mask.dtype not in exact_mask_dtypes(query.dtype):
        exact = ", ".join(str(d) for d in exact_mask_dtypes(query.dtype))
        raise TypeError(
            f"attn_mask must be bool (True = may attend) or have the query's dtype "
            f"{query.dtype} (added to the scores) or another float dtype whose every value the "
            f"compute dtype holds exactly ({exact}), got {attn_mask.dtype}"
        )
    if attn_mask.device != query.device:
        raise ValueError(
            f"attn_mask must be on the query's device {query.device}, got {attn_mask.device}"
        )
    target = (*query.shape[:-1], key.shape[-2])
    try:
        broadcast = torch.broadcast_shapes(attn_mask.shape, target)
    except RuntimeError:
        broadcast = None
    if broadcast != target:
        raise ValueError(
            f"attn_mask must be broadcastable to (..., Hq, L, S) = {target}, "
            f"got shape {tuple(attn_mask.shape)}"
        )


def compute_dtype_of(dtype: torch.dtype) -> torch.dtype:
    """fp16/bf16 are computed with fp32 accumulation; fp32/fp64 as they are."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def exact_mask_dtypes(query_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """Float dtypes a float ``attn_mask`` may have with ``query_dtype``: the query's, and every one
    that converts to the compute dtype without rounding (a float32 mask with bf16 queries)."""
    compute = compute_dtype_of(query_dtype)
    widths = {torch.float16: 16, torch.bfloat16: 16, torch.float32: 32, torch.float64: 64}
    return tuple(d for d in FLOAT_DTYPES if d == query_dtype or widths[d] <= widths[compute])


def torch_causal_bias(attn_mask, is_causal: bool, causal_alignment: str, query: torch.Tensor,
                      key: torch.Tensor):
    """``(attn_mask, is_causal, causal_alignment)`` with torch's ``CausalBias`` read as what it means.

    ``torch.nn.attention.bias.causal_upper_left(L, S)`` is ``is_causal=True``
    (top-left) and ``causal_lower_right(L, S)`` is ``is_causal=True,
    causal_alignment="bottom_right"``; the two agree when ``L == S``. The
    object's storage holds no mask, so it must never be read as one. Any
    other mask is returned as it came.
    """
    # a CausalBias exists only once its module is loaded; importing it here would load
    # torch._dynamo (and SymPy) on every call, a second and more for a plain mask
    bias = sys.modules.get("torch.nn.attention.bias")
    if bias is None or not isinstance(attn_mask, bias.CausalBias):
        return attn_mask, is_causal, causal_alignment
    if is_causal:
        raise ValueError(
            "is_causal=True and attn_mask cannot be combined, and a CausalBias attn_mask is "
            "already causal; drop is_causal"
        )
    lengths = (query.shape[-2], key.shape[-2])
    if (attn_mask.seq_len_q, attn_mask.seq_len_kv) != lengths:
        raise ValueError(
            f"attn_mask is a CausalBias for (L, S) = ({attn_mask.seq_len_q}, "
            f"{attn_mask.seq_len_kv}), but the query and key lengths are (L, S) = {lengths}"
        )
    lower_right = attn_mask.variant == bias.CausalVariant.LOWER_RIGHT
    alignment = "bottom_right" if lower_right and lengths[0] != lengths[1] else "top_left"
    if causal_alignment == "bottom_right" and alignment == "top_left" and lengths[0] != lengths[1]:
        raise ValueError(
            "causal_alignment='bottom_right' disagrees with attn_mask, torch's causal_upper_left "
            "bias (top-left); pass one of them"
        )
    return None, True, alignment


def _check_scale(scale, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {_describe(scale)}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return float(scale)


def _check_softcap(softcap) -> float | None:
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise TypeError(
            f"softcap must be a finite positive real number or None, got {_describe(softcap)}"
        )
    if not (math.isfinite(softcap) and softcap > 0):
        raise ValueError(f"softcap must be a finite positive real number, got {softcap!r}")
    return float(softcap)


def check_window(window, is_causal: bool) -> tuple[int | None, int | None] | None:
    if window is None:
        return None
    if not isinstance(window, tuple) or len(window) != 2:
        raise TypeError(
            "window must be None or a tuple (left, right) of non-negative ints or None, "
            f"got {_describe(window)}"
        )
    for side, reach in zip(("left", "right"), window):
        if reach is None:
            continue
        if isinstance(reach, bool) or not isinstance(reach, numbers.Integral):
            raise TypeError(
                f"window's {side} reach must be a non-negative int or None, got {_describe(reach)}"
            )
        if reach < 0:
            raise ValueError(
                f"window's {side} reach must be a non-negative int or None (unbounded), got {reach}"
            )
    left, right = (None if reach is None else int(reach) for reach in window)
    if left is None and right is None:
        raise ValueError("window=(None, None) bounds nothing; pass window=None for no window")
    if is_causal and right is not None and right > 0:
        raise ValueError(
            f"window=({left}, {right}) reaches {right} keys to the right, which is_causal=True "
            "forbids; pass a right reach of 0 or None with is_causal"
        )
    return left, right


def _check_sinks(sinks, query: torch.Tensor) -> torch.Tensor | None:
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"sinks must be a torch.Tensor or None, got {_describe(sinks)}")
    check_plain_tensor("sinks", sinks)
    heads = query.shape[-3] if query.ndim >= 3 else 1
    if sinks.dtype != query.dtype:
        raise TypeError(f"sinks must have the query's dtype {query.dtype}, got {sinks.dtype}")
    if sinks.shape != (heads,):
        raise ValueError(
            f"sinks must have shape (Hq,) = ({heads},), one logit per query head, "
            f"got shape {tuple(sinks.shape)}"
        )
    if sinks.device != query.device:
        raise ValueError(f"sinks must be on the query's device {query.device}, got {sinks.device}")
    if not bool(torch.isfinite(sinks).all()):
        raise ValueError(f"sinks must be finite, got {sinks.tolist()}")
    return sinks


def check_problem(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
    causal_alignment="top_left",
    softcap=None,
    window=None,
    sinks=None,
) -> AttentionProblem:
    """Check one call against the contract and return it as a problem."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        _check_tensor(name, x)
    if not (query.ndim == key.ndim == value.ndim):
        raise ValueError(
            "query, key and value must have the same number of dimensions, got "
            f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise TypeError(
            "query, key and value must share one dtype, got "
            f"query {query.dtype}, key {key.dtype}, value {value.dtype}"
        )
    if key.device != query.device or value.device != query.device:
        raise ValueError(
            "query, key and value must be on one device, got "
            f"query {query.device}, key {key.device}, value {value.device}"
        )
    if key.shape[-1] != query.shape[-1]:
        raise ValueError(
            f"key width must equal query width E = {query.shape[-1]}, "
            f"got key of shape {tuple(key.shape)}"
        )
    if value.shape[-2] != key.shape[-2]:
        raise ValueError(
            f"value length must equal key length S = {key.shape[-2]}, "
            f"got value of shape {tuple(value.shape)}"
        )
    if value.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"value must have the key's batch and head dimensions {tuple(key.shape[:-2])}, "
            f"got value of shape {tuple(value.shape)}"
        )
    if query.shape[:-3] != key.shape[:-3]:
        raise ValueError(
            f"key must have the query's batch dimensions {tuple(query.shape[:-3])}, "
            f"got key of shape {tuple(key.shape)} (batch dimensions are not broadcast)"
        )
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool, got {_describe(enable_gqa)}")
    if query.ndim >= 3:
        hq, hkv = query.shape[-3], key.shape[-3]
        if enable_gqa:
            if hkv == 0 or hq % hkv != 0:
                raise ValueError(
                    f"with enable_gqa, query heads Hq = {hq} must be a multiple of "
                    f"key/value heads Hkv = {hkv}"
                )
        elif hq != hkv:
            raise ValueError(
                f"query has Hq = {hq} heads but key/value have Hkv = {hkv}; "
                "pass enable_gqa=True for grouped-query attention"
            )
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {_describe(is_causal)}")
    if causal_alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(
            f"causal_alignment must be one of {CAUSAL_ALIGNMENTS}, got {causal_alignment!r}"
        )
    attn_mask, is_causal, causal_alignment = torch_causal_bias(
        attn_mask, is_causal, causal_alignment, query, key)
    if attn_mask is not None:
        if is_causal:
            raise ValueError(
                "is_causal=True and attn_mask cannot be combined; fold the causal "
                "pattern into attn_mask (attnlib.causal_mask) or drop attn_mask"
            )
        _check_mask(attn_mask, query, key)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a real number, got {_describe(dropout_p)}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must lie in [0, 1), got {dropout_p!r}")
    return AttentionProblem(
        query=query,
        key=key,
        value=value,
        attn_mask=attn_mask,
        dropout_p=float(dropout_p),
        is_causal=is_causal,
        scale=_check_scale(scale, query.shape[-1]),
        enable_gqa=enable_gqa,
        causal_alignment=causal_alignment,
        softcap=_check_softcap(softcap),
        window=check_window(window, is_causal),
        sinks=_check_sinks(sinks, query),
    )
