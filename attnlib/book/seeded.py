"""A seeded normal generator written twice: here and in the book's JavaScript.

The figures a reader moves in the HTML book draw their random queries and
keys in the browser. For a cell to print the numbers such a figure shows,
Python must draw the very same numbers from the same seed, so both sides
use this small generator instead of NumPy's or the browser's.

- Uniforms: Tommy Ettinger's *mulberry32*, a 32-bit integer generator
  (state += 0x6D2B79F5, then two multiply-xorshift rounds), whose integer
  steps are exact in both languages; ``u = (x + 0.5) / 2**32`` lies in (0, 1).
- Normals: the Box-Muller transform, one normal from two uniforms,
  ``z = sqrt(-2 ln u1) cos(2 pi u2)``.

The JavaScript twin is ``_static/live/common.js`` (``seededNormal``). The
integers agree exactly; a normal may differ in the last bit or two, where
the browser's ``Math.log`` and ``Math.cos`` round otherwise than the C
library, which ``tests/test_interactive_figures.py`` bounds.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

_MASK = 0xFFFFFFFF


def _imul(a: int, b: int) -> int:
    """The low 32 bits of ``a * b``, as JavaScript's ``Math.imul`` (read unsigned)."""
    return (a * b) & _MASK


class SeededNormal:
    """Standard normal draws from a 32-bit seed, the same in Python and in the book's pages.

    ``standard_normal(shape)`` fills an array in row-major order, like
    NumPy's generators, so it can stand in for one
    (:func:`attnlib.book.widgets.draw_query_and_keys` takes either).
    """

    def __init__(self, seed: int):
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= _MASK:
            raise ValueError(f"seed must be an int in [0, 2**32 - 1], got {seed!r}")
        self.state = int(seed)

    def next_uint32(self) -> int:
        """The next 32-bit integer of mulberry32."""
        self.state = (self.state + 0x6D2B79F5) & _MASK
        t = _imul(self.state ^ (self.state >> 15), self.state | 1)
        t ^= (t + _imul(t ^ (t >> 7), t | 61)) & _MASK
        return (t ^ (t >> 14)) & _MASK

    def uniform(self) -> float:
        """A uniform draw in (0, 1), never 0, so that its logarithm is finite."""
        return (self.next_uint32() + 0.5) / 2**32

    def normal(self) -> float:
        """A standard normal draw (Box-Muller, cosine branch)."""
        radius = math.sqrt(-2.0 * math.log(self.uniform()))
        return radius * math.cos(2.0 * math.pi * self.uniform())

    def standard_normal(self, shape) -> np.ndarray:
        """A float64 array of ``shape`` (an int or a tuple), filled in row-major order."""
        shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        values = [self.normal() for _ in range(math.prod(shape))]
        return np.array(values, dtype=np.float64).reshape(shape)
