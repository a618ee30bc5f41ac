"""What the book's live figures show, computed with attnlib on the same inputs.

The HTML book has five figures a reader moves in the page itself, with no
kernel: plain JavaScript files in ``_static/live/`` (one per figure) that
draw their inputs with the seeded generator of :mod:`attnlib.book.seeded` (the
trained head's, stored queries and keys of two checkpoints: :func:`trained_head_inputs`). Each
function here takes a figure's settings and returns the numbers that figure
shows, computed by the library a chapter uses (``attention_weights``,
``tiled.attention``, the masks), so that a chapter can print them and
``tests/test_interactive_figures.py`` can compare them with the page's.
Under each figure the page prints the attnlib lines that compute the state
it shows, from these inputs (``saturation_draw``, ``mask_builder_inputs``,
``online_softmax_inputs``, ``tile_kinds``, ``trained_head_inputs``); the test runs them.

========================  =============================  ==========================
figure (chapter)          script                         numbers
========================  =============================  ==========================
saturation (4)            ``_static/live/saturation.js``  :func:`saturation_state`, :func:`saturation_spread`
mask builder (5)          ``mask_builder.js``             :func:`mask_builder_weights`
online softmax (8)        ``online_softmax.js``           :func:`online_softmax_states`
kernel tiles (9.1)        ``kernel_tiles.js``             :func:`tile_kinds`
trained head (14.3)       ``trained_head.js``             :func:`trained_head_readouts`
========================  =============================  ==========================
"""
from __future__ import annotations

import base64
import functools
import math
import pathlib
from dataclasses import dataclass

import numpy as np
import torch

from .. import tiled
from ..attention import attention_weights
from ..masks import causal_mask, window_mask
from . import stored_results, trained
from .seeded import SeededNormal
from .widgets import SaturationSummary, draw_query_and_keys, saturation_summary

#: The saturation figure's key widths: its slider's stops, 1 to 1024.
SATURATION_DIMS = tuple(2**p for p in range(11))
#: The mask builder's largest query and key counts, and its vectors' width.
MASK_BUILDER_MAX, MASK_BUILDER_WIDTH = 8, 8
#: The online-softmax figure's keys, their width and its block sizes.
ONLINE_KEYS, ONLINE_WIDTH, ONLINE_BLOCKS = 16, 4, (1, 2, 4, 8, 16)


def saturation_draw(seed: int, draw: int = 0, n_keys: int = 8):
    """Query ``(1024,)`` and keys ``(n_keys, 1024)``, float64 tensors, of the figure's draw number ``draw`` (0: first).

    Each press of "draw again" takes the next query and keys from the same
    stream; a width ``d`` uses their first ``d`` coordinates.
    """
    if isinstance(draw, bool) or not isinstance(draw, int) or draw < 0:
        raise ValueError(f"draw must be a non-negative int, got {draw!r}")
    generator = SeededNormal(seed)
    for _ in range(draw + 1):
        query, keys = draw_query_and_keys(generator, max(SATURATION_DIMS), n_keys)
    return torch.from_numpy(query), torch.from_numpy(keys)


def saturation_state(seed: int, draw: int, dim: int, scaled: bool) -> SaturationSummary:
    """The weights, maximum weight and entropy the saturation figure shows."""
    if dim not in SATURATION_DIMS:
        raise ValueError(f"dim must be one of {SATURATION_DIMS}, got {dim!r}")
    query, keys = saturation_draw(seed, draw)
    return saturation_summary(query[:dim], keys[:, :dim], scaled)


def saturation_spread(seed: int, draw: int, dim: int, scaled: bool) -> float:
    """The standard deviation (``torch.std``: over the 8 keys, ``n - 1``) of the scores the
    saturation figure's side shows: ``q·k_j`` unscaled, about ``sqrt(dim)`` since
    ``Var(q·k) = dim``; ``q·k_j / sqrt(dim)`` scaled, about 1."""
    if dim not in SATURATION_DIMS:
        raise ValueError(f"dim must be one of {SATURATION_DIMS}, got {dim!r}")
    query, keys = saturation_draw(seed, draw)
    scores = keys[:, :dim] @ query[:dim]
    return float((scores / math.sqrt(dim) if scaled else scores).std())


#: The draws (0 to 31 of a seed's stream) whose quartiles the saturation figure shades.
SATURATION_BAND_DRAWS = 32


def saturation_band(seed: int, draws: int = SATURATION_BAND_DRAWS) -> dict[bool, np.ndarray]:
    """Quartiles of the largest weight over the figure's draws ``0 .. draws - 1`` at each width.

    Returns ``{scaled: array (3, len(SATURATION_DIMS))}``, rows the 25th, 50th
    and 75th percentiles (NumPy's linear interpolation), for ``scaled`` True
    and False: the shaded band and dashed median the figure draws against d.
    """
    generator = SeededNormal(seed)
    largest = {True: [], False: []}
    for _ in range(draws):
        query, keys = draw_query_and_keys(generator, max(SATURATION_DIMS), 8)
        for scaled in (True, False):
            largest[scaled].append([saturation_summary(query[:d], keys[:, :d], scaled).max_weight
                                    for d in SATURATION_DIMS])
    return {scaled: np.percentile(np.array(rows), [25, 50, 75], axis=0) for scaled, rows in largest.items()}


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


def mask_builder_rules(query_len: int, key_len: int, causal: str | None = None,
                       window: tuple[int | None, int | None] | None = None,
                       valid_keys: int | None = None, padded_keys=()) -> dict[str, torch.Tensor]:
    """Each rule of the mask builder on its own, a bool ``(L, S)`` mask (True: may see), by name.

    ``"padding"``: keys ``j >= valid_keys`` and the keys in ``padded_keys``
    (those the reader clicked); ``"causal"``, ``"window"``: :func:`attnlib.causal_mask`
    and :func:`attnlib.window_mask` (all True when the figure has none). A
    query sees a key when every rule allows it; the figure names the rules
    that hide a cell.
    """
    alignment = causal or "top_left"
    everything = torch.ones(query_len, key_len, dtype=torch.bool)
    keys = torch.arange(key_len)
    kept = ~torch.isin(keys, torch.tensor(sorted(padded_keys), dtype=torch.long))
    if valid_keys is not None:
        kept &= keys < valid_keys
    return {"padding": everything & kept,
            "causal": everything if causal is None else causal_mask(query_len, key_len, alignment),
            "window": everything if window is None else window_mask(query_len, key_len, window, alignment)}


def mask_builder_weights(seed: int, query_len: int, key_len: int, causal: str | None = None,
                         window: tuple[int | None, int | None] | None = None,
                         valid_keys: int | None = None, sink: float | None = None,
                         padded_keys=()) -> MaskedWeights:
    """``attention_weights`` of the figure's first ``query_len`` queries and ``key_len`` keys.

    ``causal``: None, ``"top_left"`` or ``"bottom_right"``; ``window`` as in
    :func:`attnlib.window_mask`; ``valid_keys``: keys ``j >= valid_keys`` are
    padding (None: no padding); ``padded_keys``: more keys that are padding;
    ``sink``: one sink logit (None: no sink). The window goes to
    ``attention_weights`` as its own argument, the rest as a bool ``attn_mask``.
    """
    query, key = mask_builder_inputs(seed)
    query, key = query[None, :query_len], key[None, :key_len]  # one head
    rules = mask_builder_rules(query_len, key_len, causal, window, valid_keys, padded_keys)
    sinks = None if sink is None else torch.tensor([float(sink)], dtype=torch.float64)
    weights = attention_weights(query, key, attn_mask=rules["padding"] & rules["causal"],
                                causal_alignment=causal or "top_left", window=window, sinks=sinks)[0]
    allowed = rules["padding"] & rules["causal"] & rules["window"]
    return MaskedWeights(allowed, weights, None if sink is None else 1 - weights.sum(-1))


def online_softmax_inputs(seed: int, scores: dict[int, float] | None = None):
    """Query ``(1, 4)``, keys ``(16, 4)`` and scalar values ``(16, 1)``, float64.

    ``scores``: ``{j: z}``, the scores a reader dragged in the figure; key ``j``
    moves along the query until its score ``q·k_j / 2`` is ``z``.
    """
    generator = SeededNormal(seed)
    query = generator.standard_normal((1, ONLINE_WIDTH))
    keys = generator.standard_normal((ONLINE_KEYS, ONLINE_WIDTH))
    values = generator.standard_normal((ONLINE_KEYS, 1))
    tau = 1 / math.sqrt(ONLINE_WIDTH)
    for j, z in (scores or {}).items():
        keys[j] += (z - tau * (query[0] @ keys[j])) / (tau * (query[0] @ query[0])) * query[0]
    return tuple(torch.from_numpy(x) for x in (query, keys, values))


@dataclass(frozen=True)
class OnlineState:
    """The running state after the keys ``0 .. keys_read - 1``: ``m``, ``l``, ``acc`` and ``acc / l``."""

    keys_read: int
    m: float
    l: float
    acc: float
    output: float


def online_softmax_states(seed: int, block: int, scores: dict[int, float] | None = None) -> list[OnlineState]:
    """The state after each key block, from ``tiled.attention`` over the keys read so far.

    After ``t`` blocks the online softmax's state is the softmax state of
    those keys alone: ``m`` their largest score, ``l = exp(lse - m)`` and
    ``acc = output * l``, with ``output, lse`` what the tiled path returns
    for those keys (in blocks of ``block``); ``scores`` as in :func:`online_softmax_inputs`.
    """
    if block not in ONLINE_BLOCKS:
        raise ValueError(f"block must be one of {ONLINE_BLOCKS}, got {block!r}")
    query, keys, values = online_softmax_inputs(seed, scores)
    z = (query @ keys.T)[0] / math.sqrt(ONLINE_WIDTH)
    states = []
    for end in range(block, ONLINE_KEYS + 1, block):
        output, lse = tiled.attention(query, keys[:end], values[:end], block_k=block, return_lse=True)
        m = float(z[:end].max())
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


#: The trained-head figure's sentences, its models' layers (first, middle, last) and masks.
TRAINED_SENTENCES = (
    "The cat sat on the warm mat while the rain fell outside.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
)
TRAINED_LAYERS = {"minilm": (0, 3, 5), "smollm2": (0, 15, 29)}
TRAINED_CAUSAL = {"minilm": False, "smollm2": True}
#: Its stored queries and keys (``benchmarks/live_trained_heads.py``), and the page's copy
#: of them: a comment that stamps how they were made, the script's line, then the same JSON
#: (loaded by Chapter 14.3's page only: ``_ext/live_figure_data.py``).
TRAINED_RESULTS = "trained_heads.json"
TRAINED_DATA = pathlib.Path(__file__).resolve().parents[2] / "_static" / "live" / "trained_heads_data.js"
TRAINED_DATA_LINE = "(window.attnlibLive = window.attnlibLive || { builders: {} }).trainedHeads ="
#: A row counts as one-hot when its largest weight exceeds this (as in Chapter 14.3's table).
ONE_HOT_THRESHOLD = 0.9
#: The scale multipliers at which ``benchmarks/live_trained_heads.py`` measures its rounding.
TRAINED_CHECKED_FACTORS = (0.25, 1.0, 8.0)


def trained_factors(model: str) -> list[float]:
    """The figure's scale multipliers for ``model``, 0.25 to 8: the quarter powers of 2 to three
    significant digits, and exactly the two classic mistakes, x sqrt(d_k) (no scale) and
    x sqrt(d_k / d_model) (dividing by sqrt(d_model)), which replace a stop within 2 per cent."""
    entry = _trained_data()[model]
    mistakes = [math.sqrt(entry["d_k"]), math.sqrt(entry["d_k"] / entry["d_model"])]
    stops = [float(f"{2 ** (k / 4):.3g}") for k in range(-8, 13)]
    stops = [s for s in stops if all(abs(s / m - 1) > 0.02 for m in mistakes)]
    return sorted(stops + mistakes)


@functools.lru_cache(maxsize=1)
def _trained_data() -> dict:
    return stored_results.load(TRAINED_RESULTS)


def _unpack(stored: dict, shape: tuple[int, ...]) -> torch.Tensor:
    steps = np.frombuffer(base64.b64decode(stored["data"]), dtype="<i2").reshape(shape).astype(np.float64)
    return torch.from_numpy(steps * np.array(stored["step"])[:, None, None])


def trained_head_inputs(model: str, sentence: int, layer: int, head: int):
    """Query ``(n, d_k)`` and key ``(n, d_k)``, float64, of ``head`` in ``layer`` on sentence
    number ``sentence``, as stored (16-bit steps of ``max |x| / 32767`` per head); in SmolLM2
    after RoPE, and the key of the key head that the query head shares (GQA)."""
    data = _trained_data()
    if model not in data:
        raise ValueError(f"model must be one of {sorted(data)}, got {model!r}")
    entry = data[model]
    if sentence not in range(len(entry["sentences"])):
        raise ValueError(f"sentence must be in 0..{len(entry['sentences']) - 1}, got {sentence!r}")
    if layer not in entry["layers"]:
        raise ValueError(f"layer must be one of {entry['layers']}, got {layer!r}")
    if head not in range(entry["heads"]):
        raise ValueError(f"head must be in 0..{entry['heads'] - 1}, got {head!r}")
    stored = entry["sentences"][sentence]
    n, d = len(stored["tokens"]), entry["d_k"]
    at = stored["layers"][entry["layers"].index(layer)]
    query = _unpack(at["q"], (entry["heads"], n, d))[head]
    key = _unpack(at["k"], (entry["key_heads"], n, d))[head // (entry["heads"] // entry["key_heads"])]
    return query, key


def trained_head_tokens(model: str, sentence: int) -> list[str]:
    """The tokens of sentence number ``sentence`` as ``model``'s tokenizer cut it."""
    return list(_trained_data()[model]["sentences"][sentence]["tokens"])


@dataclass(frozen=True)
class HeadReadouts:
    """A head's weights ``(n, n)`` at a scale multiplier and the figure's three readouts."""

    weights: torch.Tensor
    entropy: float  # mean over rows of H(p_i) / ln S_i (rows with one key left out)
    sink: float  # mean weight on the first token (of the queries after it, when causal)
    one_hot: float  # share of rows whose largest weight exceeds ONE_HOT_THRESHOLD


def head_readouts(query: torch.Tensor, key: torch.Tensor, factor: float, causal: bool) -> HeadReadouts:
    """:class:`HeadReadouts` of ``attention_weights`` at ``factor / sqrt(d_k)``."""
    w = attention_weights(query, key, scale=factor / math.sqrt(query.shape[-1]), is_causal=causal)
    return weight_readouts(w, causal)


def weight_readouts(w: torch.Tensor, causal: bool) -> HeadReadouts:
    """:class:`HeadReadouts` of one head's weights ``w`` ``(n, n)``, through Chapter 14.3's
    measures (:mod:`attnlib.book.trained`)."""
    heads = w[None, None]  # (B, H, L, S), as the chapter's measures take them
    return HeadReadouts(w, float(trained.entropy_over_log_keys(heads, causal)[0]),
                        float(trained.key_share(heads, 0, causal)[0]),
                        float(trained.one_hot_share(heads, causal, ONE_HOT_THRESHOLD)[0]))


def trained_head_readouts(model: str, sentence: int, layer: int, head: int, factor: float) -> HeadReadouts:
    """What the trained-head figure shows for these settings, from the stored queries and keys."""
    query, key = trained_head_inputs(model, sentence, layer, head)
    return head_readouts(query, key, factor, TRAINED_CAUSAL[model])
