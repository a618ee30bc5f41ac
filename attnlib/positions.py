"""Where a token is: absolute sinusoidal encodings, rotary position embeddings (RoPE) and
ALiBi biases.

- :func:`sinusoidal` returns the absolute encodings of Vaswani et al. (2017),
  a fixed ``(L, E)`` table added to the token embeddings before the first
  layer: ``PE[m, 2p] = sin(m * theta_p)``, ``PE[m, 2p + 1] = cos(m * theta_p)``,
  with the same frequencies ``theta_p`` as RoPE's. Added to the input, they
  reach the scores only through the projections, so they change the
  queries' and keys' means and variances.

RoPE and ALiBi tell attention how far apart a query and a key are, and both
act on the scores ``s_ij = scale * q_i . k_j`` without touching the scale:

- :func:`rope` rotates queries and keys before the dot product
  (RoFormer, Su et al.). Coordinates ``(2p, 2p + 1)`` of a vector at
  position ``m`` form one plane, turned by the angle ``m * theta_p`` with
  ``theta_p = base ** (-2p / E)``. This *interleaved* pairing is the
  paper's; some code bases (GPT-NeoX, Llama in Hugging Face transformers)
  pair coordinate ``p`` with ``p + E/2`` instead ("halves"), which is the
  same rotation after a fixed permutation of the coordinates. A rotation
  keeps every vector's length, and ``rope(q, m) . rope(k, n)`` depends on
  the positions only through ``n - m``.
- :func:`alibi` returns the biases of ALiBi (Press, Smith and Lewis):
  ``-slope_h * |i - j|`` added to the scaled scores of head ``h``, as a float
  ``attn_mask`` of shape ``(H, L, S)`` that every backend takes.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import torch

from .problem import CAUSAL_ALIGNMENTS

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return int(value)


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a real number, got {type(base).__name__} {base!r}")
    if not (math.isfinite(base) and base > 1):
        raise ValueError(f"base must be a finite number above 1, got {base!r}")
    return float(base)


def rope_frequencies(head_dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """``theta_p = base ** (-2p / E)`` for ``p = 0 .. E/2 - 1``: float64, shape ``(E/2,)``.

    Plane ``p`` turns by ``theta_p`` radians per position: the first plane
    by one radian, the last by almost ``1 / base``.
    """
    head_dim = _check_count("head_dim", head_dim, 0)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates pairs of coordinates), got {head_dim}")
    base = _check_base(base)
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def sinusoidal(
    length: int,
    width: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The sinusoidal position encodings of positions ``0 .. L-1``, shape ``(L, E)``.

    ``PE[m, 2p] = sin(m * theta_p)`` and ``PE[m, 2p + 1] = cos(m * theta_p)``
    with ``theta_p = base ** (-2p / E)`` (:func:`rope_frequencies`), as in
    "Attention Is All You Need" (section 3.5), where ``base = 10000``. Every
    row has squared length ``E / 2``. Computed in float64, returned in ``dtype``.
    """
    length = _check_count("length", length, 0)
    width = _check_count("width", width, 2)
    if width % 2:
        raise ValueError(f"width must be even (a sine and a cosine per frequency), got {width}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    theta = rope_frequencies(width, base=base)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * theta  # (L, E/2)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return table.to(dtype=dtype, device=device)


def _as_positions(positions, length: int, device: torch.device) -> torch.Tensor:
    """``positions`` as an int64 tensor whose last axis has ``length`` entries."""
    if isinstance(positions, range) or (
        isinstance(positions, Sequence) and not isinstance(positions, (str, bytes))
    ):
        if not all(isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in positions):
            raise TypeError(f"positions must hold ints, got {list(positions)!r}")
        positions = torch.tensor(list(positions), dtype=torch.int64, device=device)
    if not isinstance(positions, torch.Tensor):
        raise TypeError(
            f"positions must be an integer tensor, a range or a list of ints, "
            f"got {type(positions).__name__} {positions!r}"
        )
    if positions.dtype.is_floating_point or positions.dtype.is_complex or positions.dtype == torch.bool:
        raise TypeError(f"positions must have an integer dtype, got {positions.dtype}")
    if positions.ndim == 0 or positions.shape[-1] != length:
        raise ValueError(
            f"positions must have one entry per row of x (last axis of length L = {length}), "
            f"got shape {tuple(positions.shape)}"
        )
    return positions.to(device=device, dtype=torch.int64)


def rope(x: torch.Tensor, positions, *, base: float = 10000.0) -> torch.Tensor:
    r"""Rotary position embedding of ``x (..., L, E)`` (e.g. ``(B, H, L, E)``) at ``positions``.

    ``positions``: integers, shape ``(L,)`` or any shape ending in ``L`` that
    broadcasts against ``x.shape[:-1]`` (per-sequence positions ``(B, 1, L)``).
    Keys cached at ``0 .. S-1`` and a new query at ``S`` are rotated with
    those positions, which is what decoding with a KV cache needs.

    For each plane ``p`` (coordinates ``2p`` and ``2p + 1``) and position
    ``m``, with ``theta_p`` from :func:`rope_frequencies`:

    .. math::
        \begin{pmatrix} y_{2p} \\ y_{2p+1} \end{pmatrix} =
        \begin{pmatrix} \cos m\theta_p & -\sin m\theta_p \\
                        \sin m\theta_p & \cos m\theta_p \end{pmatrix}
        \begin{pmatrix} x_{2p} \\ x_{2p+1} \end{pmatrix}

    Angles are computed in float64 (``m * theta_p`` is large for long
    contexts); fp16/bf16 are rotated in float32 and returned in their dtype.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"x must have a floating dtype (float16, bfloat16, float32 or float64), got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., L, E), got shape {tuple(x.shape)}")
    if x.shape[-1] % 2:
        raise ValueError(f"x's last dimension E must be even (RoPE rotates pairs), got shape {tuple(x.shape)}")
    positions = _as_positions(positions, x.shape[-2], x.device)
    try:
        torch.broadcast_shapes(positions.shape, x.shape[:-1])
    except RuntimeError:
        raise ValueError(
            f"positions of shape {tuple(positions.shape)} do not broadcast against "
            f"x's (..., L) = {tuple(x.shape[:-1])}"
        ) from None
    theta = rope_frequencies(x.shape[-1], base=base).to(x.device)
    angles = positions[..., None].to(torch.float64) * theta  # (..., L, E/2)
    dtype = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    pairs = x.to(dtype).unflatten(-1, (-1, 2))  # (..., L, E/2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's slope per head, float64 ``(H,)``.

    For ``H`` a power of two, the geometric sequence ``2 ** (-8 (h + 1) / H)``
    for heads ``h = 0 .. H - 1``. Otherwise (the paper's rule) the slopes of
    the largest power of two below ``H``, followed by every other slope of
    twice that power (the 1st, 3rd, ...) until there are ``H``.
    """
    n_heads = _check_count("n_heads", n_heads, 1)

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    power = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(power) + geometric(2 * power)[0::2][: n_heads - power]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi(
    n_heads: int,
    query_len: int,
    key_len: int,
    *,
    causal: bool = False,
    alignment: str = "top_left",
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """ALiBi biases as a float ``attn_mask`` of shape ``(H, L, S)``, in ``dtype``.

    ``bias[h, i, j] = -slope_h * |p_i - j|``, where query ``i`` sits at
    position ``p_i = i`` (``alignment="top_left"``) or ``p_i = i + S - L``
    (``"bottom_right"``: the last query at the last key, as when decoding
    with a KV cache). With ``causal=True`` keys after ``p_i`` get ``-inf``,
    so the mask carries the causal pattern too (``is_causal`` cannot be
    combined with a mask). Pass it as ``attn_mask=``, in the query's dtype;
    it broadcasts over a batch axis.
    """
    n_heads = _check_count("n_heads", n_heads, 1)
    query_len = _check_count("query_len", query_len, 0)
    key_len = _check_count("key_len", key_len, 0)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    if alignment not in CAUSAL_ALIGNMENTS:
        raise ValueError(f"alignment must be one of {CAUSAL_ALIGNMENTS}, got {alignment!r}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    offset = key_len - query_len if alignment == "bottom_right" else 0
    query_positions = torch.arange(query_len, device=device)[:, None] + offset
    distance = torch.arange(key_len, device=device)[None, :] - query_positions  # (L, S)
    slopes = alibi_slopes(n_heads).to(device)
    bias = -slopes[:, None, None] * distance.abs().to(torch.float64)
    if causal:
        bias = bias.masked_fill(distance > 0, float("-inf"))
    return bias.to(dtype)
