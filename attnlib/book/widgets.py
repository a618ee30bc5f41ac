"""An interactive saturation demo: one query, a few keys, softmax with and without 1/sqrt(d).

The numbers come from :func:`saturation_summary`, a plain function the
chapter also uses for its static figure; :class:`SaturationDemo` only wires
it to ipywidgets (a ``d`` slider, a scaling toggle and a new-draw button).
Its callback :meth:`SaturationDemo.update` needs no browser, so a test can
drive it. Works in Jupyter and in Colab, whose built-in widget manager
renders core ipywidgets. Its draws come from :class:`attnlib.book.seeded.SeededNormal`,
as do those of the HTML book's live version of the figure
(``_static/live/saturation.js``), so the same seed shows the same draws in both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..attention import attention_weights
from .seeded import SeededNormal

#: Key widths the slider offers: powers of two from 4 to 1024.
DIMS = tuple(2**p for p in range(2, 11))


@dataclass(frozen=True)
class SaturationSummary:
    """Softmax weights of one query over ``n`` keys and how peaked they are."""

    weights: np.ndarray  # (n,)
    max_weight: float
    entropy: float  # nats; at most ln n
    max_entropy: float  # ln n


def draw_query_and_keys(rng, dim: int, n_keys: int = 8):
    """Standard normal query ``(dim,)`` and keys ``(n_keys, dim)`` from ``rng``.

    ``rng``: a NumPy generator or a :class:`attnlib.book.seeded.SeededNormal`.
    """
    return rng.standard_normal(dim), rng.standard_normal((n_keys, dim))


def saturation_summary(query: np.ndarray, keys: np.ndarray, scaled: bool) -> SaturationSummary:
    """Weights ``softmax(K q * s)`` with ``s = 1/sqrt(d)`` if ``scaled`` else 1, via attnlib.

    ``query (d,)``, ``keys (n, d)``. Entropy ``H = -sum_i a_i ln a_i`` in nats,
    with ``0 ln 0 = 0``.
    """
    q = torch.as_tensor(query, dtype=torch.float64)[None, :]
    k = torch.as_tensor(keys, dtype=torch.float64)
    weights = attention_weights(q, k, scale=None if scaled else 1.0)[0]
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    entropy = float(-(weights * logs).sum())
    return SaturationSummary(
        weights=weights.numpy(),
        max_weight=float(weights.max()),
        entropy=entropy,
        max_entropy=math.log(weights.numel()),
    )


def _bars_html(summary: SaturationSummary) -> str:
    rows = "".join(
        f"<div style='display:flex;align-items:center;gap:6px;font-family:monospace'>"
        f"<span style='width:4em'>key {j}</span>"
        f"<span style='display:inline-block;height:12px;width:{300 * w:.1f}px;background:#1f77b4'></span>"
        f"<span>{w:.3f}</span></div>"
        for j, w in enumerate(summary.weights)
    )
    return (
        f"{rows}<p style='font-family:monospace'>maximum weight {summary.max_weight:.3f} &nbsp; "
        f"entropy {summary.entropy:.3f} nats &nbsp; (maximum ln {summary.weights.size} = "
        f"{summary.max_entropy:.3f})</p>"
    )


class SaturationDemo:
    """ipywidgets controls around :func:`saturation_summary`.

    One draw holds a query and keys of width ``max(DIMS)``; a width ``d``
    uses their first ``d`` coordinates, so moving the slider or toggling
    the scale changes one thing at a time. The new-draw button redraws.
    Display ``demo.widget``.
    """

    def __init__(self, seed: int = 0, n_keys: int = 8, dim: int = 64, scaled: bool = True):
        import ipywidgets as widgets

        if dim not in DIMS:
            raise ValueError(f"dim must be one of {DIMS}, got {dim!r}")
        self.rng = SeededNormal(seed)
        self.n_keys = n_keys
        self.dim = widgets.SelectionSlider(options=DIMS, value=dim, description="d")
        self.scaled = widgets.ToggleButton(value=scaled, description="divide by sqrt(d)")
        self.new_draw = widgets.Button(description="new draw")
        self.readout = widgets.HTML()
        self.widget = widgets.VBox([widgets.HBox([self.dim, self.scaled, self.new_draw]), self.readout])
        self.summary: SaturationSummary | None = None
        self._query, self._keys = draw_query_and_keys(self.rng, max(DIMS), n_keys)
        self.dim.observe(self.update, names="value")
        self.scaled.observe(self.update, names="value")
        self.new_draw.on_click(self.redraw)
        self.update()

    def redraw(self, _button=None) -> None:
        """Button callback: a fresh query and keys, then :meth:`update`."""
        self._query, self._keys = draw_query_and_keys(self.rng, max(DIMS), self.n_keys)
        self.update()

    def update(self, _change=None) -> None:
        """Slider/toggle callback: recompute the summary for the current settings and redraw the bars."""
        d = self.dim.value
        self.summary = saturation_summary(self._query[:d], self._keys[:, :d], self.scaled.value)
        self.readout.value = _bars_html(self.summary)
