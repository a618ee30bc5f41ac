"""What the book's live figures show, computed with attnlib on the same inputs.

The HTML book has four figures a reader moves in the page itself, with no
kernel: plain JavaScript files in ``_static/live/`` (one per figure) that
draw their inputs with the seeded generator of :mod:`attnlib.book.seeded`. Each
function here takes a figure's settings and returns the numbers that figure
shows, computed by the library a chapter uses (``attention_weights``,
``tiled.attention``, the masks), so that a chapter can print them and
``tests/test_interactive_figures.py`` can compare them with the page's.

========================  =============================  ==========================
figure (chapter)          script                         numbers
========================  =============================  ==========================
saturation (4)            ``_static/live/saturation.js``  :func:`saturation_draw`
mask builder (5)          ``mask_builder.js``             :func:`mask_builder_weights`
online softmax (8)        ``online_softmax.js``           :func:`online_softmax_states`
kernel tiles (9.1)        ``kernel_tiles.js``             :func:`tile_kinds`
========================  =============================  ==========================
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import tiled
from ..attention import attention_weights
from ..masks import causal_mask, window_mask
from .seeded import SeededNormal
from .widgets import SaturationSummary, draw_query_and_keys, saturation_summary

#: The saturation figure's key widths: its slider's stops, 1 to 1024.
SATURATION_DIMS = tuple(2**p for p in range(11))
#: The mask builder's largest query and key counts, and its vectors' width.
MASK_BUILDER_MAX, MASK_BUILDER_WIDTH = 8, 8
#: The online-softmax figure's keys, their width and its block sizes.
ONLINE_KEYS, ONLINE_WIDTH, ONLINE_BLOCKS = 16, 4, (1, 2, 4, 8, 16)


def saturation_draw(seed: int, draw: int = 0, n_keys: int = 8):
    """Query ``(1024,)`` and keys ``(n_keys, 1024)`` of the figure's draw number ``draw`` (0: first).

    Each press of "draw again" takes the next query and keys from the same
    stream; a width ``d`` uses their first ``d`` coordinates.
    """
    if draw < 0:
        raise ValueError(f"draw must be a non-negative int, got {draw!r}")
    generator = SeededNormal(seed)
    for _ in range(draw + 1):
        query, keys = draw_query_and_keys(generator, max(SATURATION_DIMS), n_keys)
    return query, keys


def saturation_state(seed: int, draw: int, dim: int, scaled: bool) -> SaturationSummary:
    """The weights, maximum weight and entropy the saturation figure shows."""
    if dim not in SATURATION_DIMS:
        raise ValueError(f"dim must be one of {SATURATION_DIMS}, got {dim!r}")
    query, keys = saturation_draw(seed, draw)
    return saturation_summary(query[:dim], keys[:, :dim], scaled)


def mask_builder_inputs(seed: int):
    """Queries and keys ``(8, 8)`` each, float64; ``L`` queries and ``S`` keys are their first rows."""
    generator = SeededNormal(seed)
    shape = (MASK_BUILDER_MAX, MASK_BUILDER_WIDTH)
    return (torch.from_numpy(generator.standard_normal(shape)),
            torch.from_numpy(generator.standard_normal(shape)))


@dataclass(frozen=True)
class MaskedWeights:
    """The mask builder's grid: which keys each query sees, their weights, and the sink's share."""

    allowed: torch.Tensor  # (L, S) bool
    weights: torch.Tensor  # (L, S) float64; 0 where not allowed
    sink: torch.Tensor | None  # (L,) the sink's weight per query; None without a sink


def mask_builder_weights(seed: int, query_len: int, key_len: int, causal: str | None = None,
                         window: tuple[int | None, int | None] | None = None,
                         valid_keys: int | None = None, sink: float | None = None) -> MaskedWeights:
    """``attention_weights`` of the figure's first ``query_len`` queries and ``key_len`` keys.

    ``causal``: None, ``"top_left"`` or ``"bottom_right"``; ``window`` as in
    :func:`attnlib.window_mask`; ``valid_keys``: keys ``j >= valid_keys`` are
    padding (None: no padding); ``sink``: one sink logit (None: no sink).
    """
    query, key = mask_builder_inputs(seed)
    query, key = query[None, :query_len], key[None, :key_len]  # one head
    alignment = causal or "top_left"
    allowed = torch.ones(query_len, key_len, dtype=torch.bool)
    if causal is not None:  # folded into the mask, which padding also needs
        allowed &= causal_mask(query_len, key_len, alignment)
    if valid_keys is not None:
        allowed &= torch.arange(key_len) < valid_keys
    sinks = None if sink is None else torch.tensor([float(sink)], dtype=torch.float64)
    weights = attention_weights(query, key, attn_mask=allowed, causal_alignment=alignment,
                                window=window, sinks=sinks)[0]
    if window is not None:
        allowed &= window_mask(query_len, key_len, window, alignment)
    return MaskedWeights(allowed, weights, None if sink is None else 1 - weights.sum(-1))


def online_softmax_inputs(seed: int):
    """Query ``(1, 4)``, keys ``(16, 4)`` and scalar values ``(16, 1)``, float64."""
    generator = SeededNormal(seed)
    query = generator.standard_normal((1, ONLINE_WIDTH))
    keys = generator.standard_normal((ONLINE_KEYS, ONLINE_WIDTH))
    values = generator.standard_normal((ONLINE_KEYS, 1))
    return tuple(torch.from_numpy(x) for x in (query, keys, values))


@dataclass(frozen=True)
class OnlineState:
    """The running state after the keys ``0 .. keys_read - 1``: ``m``, ``l``, ``acc`` and ``acc / l``."""

    keys_read: int
    m: float
    l: float
    acc: float
    output: float


def online_softmax_states(seed: int, block: int) -> list[OnlineState]:
    """The state after each key block, from ``tiled.attention`` over the keys read so far.

    After ``t`` blocks the online softmax's state is the softmax state of
    those keys alone: ``m`` their largest score, ``l = exp(lse - m)`` and
    ``acc = output * l``, with ``output, lse`` what the tiled path returns
    for those keys (in blocks of ``block``).
    """
    if block not in ONLINE_BLOCKS:
        raise ValueError(f"block must be one of {ONLINE_BLOCKS}, got {block!r}")
    query, keys, values = online_softmax_inputs(seed)
    scores = (query @ keys.T)[0] / math.sqrt(ONLINE_WIDTH)
    states = []
    for end in range(block, ONLINE_KEYS + 1, block):
        output, lse = tiled.attention(query, keys[:end], values[:end], block_k=block, return_lse=True)
        m = float(scores[:end].max())
        l = math.exp(float(lse[0]) - m)
        states.append(OnlineState(end, m, l, float(output[0, 0]) * l, float(output[0, 0])))
    return states


#: :func:`tile_kinds`' codes.
SKIPPED, MASKED, WHOLE = 0, 1, 2


def tile_kinds(seq_len: int, block_m: int, block_n: int, causal: bool,
               window: tuple[int | None, int | None] | None = None) -> np.ndarray:
    """``(ceil(L / block_m), ceil(S / block_n))`` codes of the tiles of self-attention over ``seq_len``.

    SKIPPED: no row of the tile may see any of its keys, so the kernel never
    loads it; WHOLE: every row sees every key of a full tile, computed with no
    mask; MASKED: the rest (crossed by the mask's edge, or the last, partial
    tile of keys). From :func:`attnlib.causal_mask` and :func:`attnlib.window_mask`.
    """
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool)
    if causal:
        allowed &= causal_mask(seq_len, seq_len)
    if window is not None:
        allowed &= window_mask(seq_len, seq_len, window)
    rows, cols = math.ceil(seq_len / block_m), math.ceil(seq_len / block_n)
    kinds = np.zeros((rows, cols), dtype=int)
    for a in range(rows):
        for b in range(cols):
            tile = allowed[a * block_m:(a + 1) * block_m, b * block_n:(b + 1) * block_n]
            if tile.any():
                kinds[a, b] = WHOLE if tile.all() and tile.shape[1] == block_n else MASKED
    return kinds
