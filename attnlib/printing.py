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
