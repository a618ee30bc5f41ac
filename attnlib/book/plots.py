"""One house style for every figure in the book."""
from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt

#: The Okabe-Ito palette (Okabe and Ito, "Color Universal Design", 2008): colours that
#: stay apart for readers with any common colour-vision deficiency.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}

#: Colours by meaning, so that "scaled" or "tiled" looks the same in every chapter;
#: each meaning has its own colour, so that any of them can share a figure.
#: tests/test_plots.py checks that they stay apart under deuteranopia and protanopia.
COLORS = {
    "scaled": OKABE_ITO["sky blue"],
    "unscaled": OKABE_ITO["orange"],
    "reference": "#B0B0B0",  # grey, for lines a curve is compared with
    "naive": OKABE_ITO["vermillion"],
    "tiled": OKABE_ITO["blue"],
    "fused": OKABE_ITO["bluish green"],
    "torch": OKABE_ITO["black"],
}

#: The order in which series without a colour of their own take the Okabe-Ito colours.
CYCLE = ("blue", "orange", "bluish green", "vermillion", "reddish purple", "sky blue", "black")

#: The attention paths' marker and line style: a path stays recognisable in print,
#: in grey scale and for a reader who cannot tell two of its colours apart.
PATH_MARKERS = {"naive": "o", "tiled": "s", "fused": "^", "torch": "D"}
PATH_LINESTYLES = {"naive": "-", "tiled": "--", "fused": "-.", "torch": ":"}


def path_style(path: str) -> dict:
    """Matplotlib keywords (colour, marker, line style) that draw one attention path:
    ``ax.plot(n, seconds, **path_style("tiled"), label="tiled")``."""
    return {"color": COLORS[path], "marker": PATH_MARKERS[path], "linestyle": PATH_LINESTYLES[path]}


def use_house_style() -> None:
    """Set matplotlib defaults for the book: legible, no chart junk, sharp on any screen.

    In a notebook, figures are stored as PNG at twice their displayed
    resolution ("retina"), so they stay sharp on high-density screens and
    when zoomed in the HTML book.
    """
    _use_double_resolution_in_notebooks()
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.6),
            "figure.dpi": 100,
            "savefig.dpi": 150,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            # at least 10 pt where a figure is shown at its own size
            "xtick.labelsize": 10,
            "ytick.labelsize": 10,
            "legend.fontsize": 10,
            "legend.frameon": False,
            "image.cmap": "viridis",
            # series drawn without a colour of their own (bars by step, lines by width)
            "axes.prop_cycle": mpl.cycler(color=[OKABE_ITO[name] for name in CYCLE]),
            "svg.hashsalt": "attnlib",
        }
    )


def _use_double_resolution_in_notebooks() -> None:
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def plain_log_ticks(axis) -> None:
    """Ticks at 1, 2 and 5 times each power of ten on a log ``axis`` (``ax.yaxis``), written as
    plain numbers: matplotlib labels only the powers of ten, so data within one decade (250 to
    620 TFLOP/s) would stand beside no number at all."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def heatmap(ax: plt.Axes, matrix, *, row_label: str = "query", col_label: str = "key",
            annotate: bool = True, fmt: str = "{:.3f}", title: str | None = None,
            first_index: int = 0):
    """Draw a small matrix (e.g. attention weights) with its values written in.

    Rows and columns are numbered from ``first_index``: 1 where the text
    counts queries and keys from 1, 0 where it indexes them as the code does.
    """
    import numpy as np

    values = np.asarray(matrix, dtype=float)
    image = ax.imshow(values, vmin=0.0, vmax=max(1e-12, float(np.nanmax(values))) if values.size else 1.0)
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    ax.set_xticks(range(values.shape[1]), [str(first_index + j) for j in range(values.shape[1])])
    ax.set_yticks(range(values.shape[0]), [str(first_index + i) for i in range(values.shape[0])])
    ax.grid(False)
    if title:
        ax.set_title(title)
    if annotate:
        threshold = 0.6 * (np.nanmax(values) if values.size else 1.0)
        for (i, j), x in np.ndenumerate(values):
            ax.text(j, i, fmt.format(x), ha="center", va="center", fontsize=10,
                    color="black" if x > threshold else "white")
    return image
