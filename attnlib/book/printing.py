"""Printing computed numbers so that every machine prints the same text.

Two CPUs (or a CPU and a GPU) agree on a computed float only to within a
few roundings: their vector units sum in different orders and their
``exp`` differ in the last bit. A default tensor repr shows every value to
four or five significant digits and switches layout (``1.0000`` or
``1.``, scientific notation or not) depending on what else is in the
tensor, so it can print different text for the same computation on
another machine. :func:`fixed` prints a fixed number of decimal places,
far above those roundings, in one layout, and never a negative zero.
"""
from __future__ import annotations

import html
import numbers

import numpy as np
import torch


def fixed(values, decimals: int = 4) -> str:
    """``values`` (a tensor, an array or a sequence of real numbers) to ``decimals`` places.

    Rows of a matrix print on their own lines, as NumPy lays them out; NaN
    and infinities print as ``nan``, ``inf`` and ``-inf``.
    """
    if isinstance(decimals, bool) or not isinstance(decimals, numbers.Integral) or decimals < 0:
        raise ValueError(f"decimals must be a non-negative int, got {decimals!r}")
    if isinstance(values, torch.Tensor):
        array = values.detach().cpu().double().numpy()
    else:
        array = np.asarray(values)
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"values must hold real numbers, got an array of dtype {array.dtype}")
    # adding 0.0 turns the -0.0 that rounding leaves from tiny negative values into 0.0
    rounded = np.round(array.astype(np.float64), decimals) + 0.0
    return np.array2string(rounded, precision=decimals, floatmode="fixed", suppress_small=True,
                           max_line_width=80, threshold=10**6)


class Table:
    """Stored results shown as a table: a real HTML table in the book and in Jupyter,
    the same aligned text where only text is shown (and for nbval, which compares it).

    ``rows`` hold the cells as the chapter formats them (strings, so that every machine
    prints the same digits); a column whose cells all read as numbers is right-aligned.
    """

    def __init__(self, columns: list[str], rows: list[list[str]], caption: str | None = None):
        if any(len(row) != len(columns) for row in rows):
            raise ValueError(f"every row must have {len(columns)} cells, one per column")
        self.caption = caption  # what the table shows, above it
        self.columns = [str(c) for c in columns]
        self.rows = [[str(cell) for cell in row] for row in rows]
        self.numeric = [all(_reads_as_a_number(row[i]) for row in self.rows) and bool(self.rows)
                        for i in range(len(columns))]

    def __repr__(self) -> str:
        widths = [max(len(cell) for cell in column) for column in zip(self.columns, *self.rows)]
        lines = [self.caption] if self.caption else []
        for cells in (self.columns, *self.rows):
            lines.append("  ".join(cell.rjust(w) if right else cell.ljust(w)
                                   for cell, w, right in zip(cells, widths, self.numeric)).rstrip())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        def cells(tag, values):
            return "".join(f'<{tag} style="text-align: {"right" if right else "left"}">{html.escape(v)}</{tag}>'
                           for v, right in zip(values, self.numeric))
        body = "".join(f"<tr>{cells('td', row)}</tr>" for row in self.rows)
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (f'<table class="dataframe stored-results">{caption}<thead><tr>{cells("th", self.columns)}</tr></thead>'
                f"<tbody>{body}</tbody></table>")


def _reads_as_a_number(text: str) -> bool:
    try:
        float(text.rstrip("%"))
    except ValueError:
        return False
    return True
