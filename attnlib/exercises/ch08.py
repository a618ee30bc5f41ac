"""Checkers for the exercises of Chapter 8, Online softmax and tiling."""
import numpy as np
import sympy as sp

from .. import tiled
from . import as_array, checker

_SCORE_NAMES = ("s1", "s2", "s3")
_VALUE_NAMES = ("v1", "v2", "v3")
# Points at which the merged states are evaluated: the maximum in each position, and a tie.
_POINTS = [(3.0, -1.0, 0.5), (-2.0, 1.5, 0.25), (0.1, -0.7, 2.2), (1.0, 1.0, -4.0)]
_VALUES = (0.3, -1.2, 2.0)


def _direct_state(scores, values):
    """(m, l, acc) of all scores at once, relative to their maximum."""
    m = max(scores)
    weights = np.exp(np.array(scores) - m)
    return m, float(weights.sum()), float(weights @ np.array(values))


def _evaluate(expression, point: dict) -> float:
    expression = sp.sympify(expression)
    unknown = sorted(s.name for s in expression.free_symbols if s.name not in point)
    if unknown:
        raise ValueError(f"the states should use only the symbols s1, s2, s3, v1, v2, v3, got {unknown}")
    return float(expression.subs({s: point[s.name] for s in expression.free_symbols}))


def _state_error(state, side: str) -> str | None:
    if not isinstance(state, (tuple, list)) or len(state) != 3:
        raise TypeError(f"{side} should be a state (m, l, acc) of three SymPy expressions, got {state!r}")
    for scores in _POINTS:
        point = dict(zip(_SCORE_NAMES + _VALUE_NAMES, scores + _VALUES))
        got = [_evaluate(x, point) for x in state]
        for name, g, e in zip(("m", "l", "acc"), got, _direct_state(scores, _VALUES)):
            if not np.isclose(g, e, rtol=1e-9, atol=1e-12):
                return (f"{side}'s {name} differs from the direct state at s = {scores}: "
                        "did each side get rescaled by exp(m_side - m) before adding?")
    return None


@checker("ex-08-merge-order",
         "a pair (left, right) of states (m, l, acc), SymPy expressions in s1, s2, s3, v1, v2, v3: "
         "merge_states(merge_states(A, B), C) and merge_states(A, merge_states(B, C))")
def _merge_order(answer):
    left, right = answer
    for state, side in ((left, "left"), (right, "right")):
        error = _state_error(state, side)
        if error:
            return False, error
    return True, "both orders give the direct state of all three scores, relative to their maximum."


@checker("ex-08-why-max",
         "a pair (l_frozen, l_running): the final l in float32 for the 8 scores around 100, "
         "with the maximum frozen at 0 and with the running maximum")
def _why_max(answer):
    frozen, running = (float(as_array(x, name, ())) for x, name in zip(answer, ("l_frozen", "l_running")))
    if np.isfinite(frozen):
        hint = ("in float32 e^100 is beyond the largest number, about 3.4e38; did you compute in float64?"
                if frozen > 3.4e38 else "with the maximum frozen at 0, l is the plain sum of e^s for s near 100.")
        return False, f"l_frozen = {frozen:.4g} is finite; {hint}"
    if not 1 <= running <= 8 * (1 + 1e-6):
        return False, (f"l_running = {running:.4g} lies outside [1, 8]: each term e^(s - m) is at most 1 and "
                       "the largest score contributes exactly 1.")
    return True, "the frozen sum overflows to inf, while the running l stays between 1 and the number of scores."


def _largest_tensor_bytes(heads: int, n: int, width: int, block_q: int, block_k: int) -> int:
    """Bytes of the largest float32 tensor of the tiled forward: a tile of scores or the output."""
    return 4 * max(heads * block_q * block_k, heads * n * width)


@checker("ex-08-block-sizes",
         "three ints: the bytes of the largest tensor tiled.attention allocates for 8 heads, n = 2048, d = 64, "
         "with blocks (64, 128), the defaults, and (2048, DEFAULT_BLOCK_K)")
def _block_sizes(answer):
    got = as_array(answer, "answer", (3,))
    blocks = [(64, 128), (tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_K), (2048, tiled.DEFAULT_BLOCK_K)]
    for value, (block_q, block_k) in zip(got, blocks):
        expected = _largest_tensor_bytes(8, 2048, 64, block_q, block_k)
        if value == expected:
            continue
        if value * 2**20 == expected:
            return False, f"for blocks ({block_q}, {block_k}) that looks like MiB; give bytes."
        if value == 4 * 8 * block_q * block_k:
            return False, (f"for blocks ({block_q}, {block_k}) you counted one tile of scores; "
                           "the output is a tensor too.")
        return False, (f"for blocks ({block_q}, {block_k}) your count is {value / expected:.3g} times the right one; "
                       "compare a tile of scores, heads x block_q x block_k, with the output, heads x n x d.")
    return True, "the largest tensor is a tile of scores or the output, whichever is larger; never n x n."
