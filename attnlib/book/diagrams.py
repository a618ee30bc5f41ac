"""Schematic diagrams for the book, drawn with matplotlib: no data, only structure.

``four_steps`` shows the four steps of attention with the shape of every
matrix; ``online_softmax_tiles`` shows one block of queries sweeping the key
tiles while its running state (m, l, acc) is carried from tile to tile.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from .plots import COLORS

_INPUT = "#dbe9f6"
_SCORES = "#fde0c5"
_OUTPUT = "#d5efd5"
_STATE = "#eadcf2"


def _matrix(ax, x, y, width, height, color, label, shape):
    """A matrix as a box of the given size, its name inside and its shape below."""
    ax.add_patch(Rectangle((x, y), width, height, facecolor=color, edgecolor="black", lw=1))
    ax.text(x + width / 2, y + height / 2, label, ha="center", va="center", fontsize=12)
    ax.text(x + width / 2, y - 0.25, shape, ha="center", va="top", fontsize=9.5)


def _arrow(ax, start, end, label=None, above=True):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.2,
                                 color="black"))
    if label:
        middle = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + (0.2 if above else -0.2))
        ax.text(*middle, label, ha="center", va="bottom" if above else "top", fontsize=9.5)


def four_steps(ax: plt.Axes) -> None:
    """Q, K, V and the four steps, each box sized like its matrix (here d_v > d_k)."""
    n, d_k, d_v = 2.0, 1.0, 1.2
    _matrix(ax, 0.0, 3.2, d_k, n, _INPUT, "$Q$", r"$n \times d_k$")
    _matrix(ax, 0.0, 0.2, d_k, n, _INPUT, "$K$", r"$n \times d_k$")
    _matrix(ax, 1.8, 3.2, n, n, _SCORES, r"$QK^\top$", r"$n \times n$")
    _matrix(ax, 4.8, 3.2, n, n, _SCORES, r"$Z = QK^\top / \sqrt{d_k}$", r"$n \times n$")
    _matrix(ax, 7.8, 3.2, n, n, _SCORES, "$P$", r"$n \times n$, rows sum to 1")
    _matrix(ax, 7.8, 0.2, d_v, n, _INPUT, "$V$", r"$n \times d_v$")
    _matrix(ax, 11.0, 3.2, d_v, n, _OUTPUT, "$O = PV$", r"$n \times d_v$")
    _arrow(ax, (1.0, 4.2), (1.8, 4.2))
    _arrow(ax, (1.0, 1.2), (1.95, 3.2))
    ax.text(2.8, 5.35, "1. scores", ha="center", fontsize=10, color=COLORS["scaled"])
    _arrow(ax, (3.8, 4.2), (4.8, 4.2))
    ax.text(5.8, 5.35, "2. scale", ha="center", fontsize=10, color=COLORS["scaled"])
    _arrow(ax, (6.8, 4.2), (7.8, 4.2))
    ax.text(8.8, 5.35, "3. softmax by rows", ha="center", fontsize=10, color=COLORS["scaled"])
    _arrow(ax, (9.8, 4.2), (11.0, 4.2))
    _arrow(ax, (9.0, 1.2), (11.0, 3.6))
    ax.text(11.6, 5.35, "4. mix", ha="center", fontsize=10, color=COLORS["scaled"])
    ax.set_xlim(-0.3, 12.5)
    ax.set_ylim(-0.7, 5.8)
    ax.set_aspect("equal")
    ax.axis("off")


def online_softmax_tiles(ax: plt.Axes, n_tiles: int = 4) -> None:
    """One query block, its state after each key tile, and the final division."""
    tile_w, gap = 1.8, 1.3
    for j in range(n_tiles):
        x = j * (tile_w + gap) + 1.6
        ax.add_patch(Rectangle((x, 3.0), tile_w, 0.9, facecolor=_INPUT, edgecolor="black"))
        ax.text(x + tile_w / 2, 3.45, f"$K_{j + 1}, V_{j + 1}$", ha="center", va="center",
                fontsize=11)
        ax.add_patch(Rectangle((x, 1.2), tile_w, 1.2, facecolor=_SCORES, edgecolor="black"))
        ax.text(x + tile_w / 2, 1.8, f"$S_{j + 1} = Q K_{j + 1}^\\top$\n(one tile)", ha="center",
                va="center", fontsize=9.5)
        _arrow(ax, (x + tile_w / 2, 3.0), (x + tile_w / 2, 2.4))
        state_x = x + tile_w + 0.05
        ax.add_patch(Rectangle((state_x, -0.6), gap - 0.1, 1.2, facecolor=_STATE,
                               edgecolor="black"))
        ax.text(state_x + (gap - 0.1) / 2, 0.0, r"$m, \ell,$" + "\n" + r"$\mathrm{acc}$",
                ha="center", va="center", fontsize=10)
        _arrow(ax, (x + tile_w / 2, 1.2), (state_x + 0.1, 0.3))
    ax.add_patch(Rectangle((0.0, 1.2), 1.2, 1.2, facecolor=_INPUT, edgecolor="black"))
    ax.text(0.6, 1.8, "$Q$\n(block)", ha="center", va="center", fontsize=10.5)
    ax.add_patch(Rectangle((0.0, -0.6), 1.2, 1.2, facecolor=_STATE, edgecolor="black"))
    ax.text(0.6, 0.0, r"$-\infty, 0,$" + "\n" + "$0$", ha="center", va="center", fontsize=10)
    for j in range(n_tiles):
        start = 1.2 if j == 0 else (j - 1) * (tile_w + gap) + 1.6 + tile_w + gap - 0.05
        end = j * (tile_w + gap) + 1.6 + tile_w + 0.05
        _arrow(ax, (start, -0.75), (end, -0.75), "rescale and add" if j == 0 else None,
               above=False)
    last = (n_tiles - 1) * (tile_w + gap) + 1.6 + tile_w + gap
    _arrow(ax, (last, 0.0), (last + 0.8, 0.0))
    ax.add_patch(Rectangle((last + 0.8, -0.6), 2.6, 1.2, facecolor=_OUTPUT, edgecolor="black"))
    ax.text(last + 2.1, 0.0, r"$O = \mathrm{acc} / \ell$" + "\n" + r"$\mathrm{lse} = m + \log \ell$",
            ha="center", va="center", fontsize=9.5)
    ax.set_xlim(-0.2, last + 3.6)
    ax.set_ylim(-1.6, 4.1)
    ax.set_aspect("equal")
    ax.axis("off")


def gpu_memory(ax: plt.Axes) -> None:
    """Where the fused kernel keeps what: HBM, each multiprocessor's shared memory, registers.

    Arrows run from an item to the top edge of the level below or from an item to the
    bottom of the level above, so that none crosses a level's title or another item.
    """
    slot = 10.6 / 5
    height, gap = 1.7, 0.9
    registers, shared, hbm = 0.0, height + gap, 2 * (height + gap)
    levels = [
        (hbm, "HBM (the GPU's memory): large, far",
         {0: "$Q$", 1: "$K$", 2: "$V$", 3: "$O$", 4: "lse"}, _INPUT),
        (shared, "shared memory of one multiprocessor: small, near",
         {1: "$K_j$ tile", 2: "$V_j$ tile", 3: "next tiles"}, _SCORES),
        (registers, "registers of one program: smallest, nearest",
         {0: "$Q_i$ block", 1: "$Z = \\tau Q_i K_j^\\top$", 2: "$P = e^{Z - m}$", 3: "$m, \\ell$",
          4: "acc"}, _STATE),
    ]
    for y, title, items, color in levels:
        ax.add_patch(Rectangle((0.0, y), 11.0, height, facecolor="white", edgecolor="black", lw=1))
        ax.text(11.0 / 2, y + height - 0.12, title, ha="center", va="top", fontsize=10)
        for index, item in items.items():
            x = 0.2 + index * slot
            ax.add_patch(Rectangle((x, y + 0.15), slot - 0.2, 0.7, facecolor=color, edgecolor="black"))
            ax.text(x + (slot - 0.2) / 2, y + 0.5, item, ha="center", va="center", fontsize=9.5)

    def centre(index):
        return 0.2 + index * slot + (slot - 0.2) / 2

    def bottom(level):
        return level + 0.15

    def top(level):
        return level + height

    # HBM to shared memory and registers: each straight down its column
    _arrow(ax, (centre(0), bottom(hbm)), (centre(0), top(registers)))
    ax.text(centre(0) + 0.15, hbm - gap / 2, "$Q_i$: once", ha="left", va="center", fontsize=9)
    _arrow(ax, (centre(1), bottom(hbm)), (centre(1), top(shared)))
    _arrow(ax, (centre(2), bottom(hbm)), (centre(2), top(shared)))
    ax.text(centre(2) + 0.15, hbm - gap / 2, "each $K_j, V_j$ tile once\nper query block",
            ha="left", va="center", fontsize=9)
    # shared memory to the tensor cores' operands
    _arrow(ax, (centre(1), bottom(shared)), (centre(1), top(registers)))
    _arrow(ax, (centre(2), bottom(shared)), (centre(4), top(registers)))
    ax.text(centre(1) - 0.15, shared - gap / 2, "tensor cores:\n$Q_i K_j^\\top$, $P V_j$",
            ha="right", va="center", fontsize=9)
    # the result, once: from the registers past the free end of shared memory
    _arrow(ax, (centre(4) + 0.5, top(registers) - height + 0.85), (centre(4) + 0.5, bottom(hbm)))
    ax.text(centre(4) + 0.35, hbm - gap / 2, "$O_i$, lse:\nonce, at the end", ha="right",
            va="center", fontsize=9)
    ax.set_xlim(-0.2, 11.2)
    ax.set_ylim(-0.2, hbm + height + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
