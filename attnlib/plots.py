"""One house style for every figure in the book."""
from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt

#: Colours by meaning, so that "scaled" looks the same in every chapter.
COLORS = {
    "scaled": "#1f77b4",
    "unscaled": "#d62728",
    "reference": "#7f7f7f",
    "naive": "#d62728",
    "tiled": "#2ca02c",
    "fused": "#9467bd",
    "torch": "#ff7f0e",
}


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
            "xtick.labelsize": 9.5,
            "ytick.labelsize": 9.5,
            "legend.fontsize": 9.5,
            "legend.frameon": False,
            "image.cmap": "viridis",
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
