"""Checkers for the exercises of Chapter 8, Online softmax and tiling."""
import numpy as np
import sympy as sp

from ... import tiled
from . import as_array, as_number, checker
from .symbolic import as_expression

_SCORES = sp.symbols("z0:3")
_VALUES = sp.symbols("v0:3")
# Points at which the merged states are evaluated: the maximum in each position, and a tie.
_POINTS = [(3.0, -1.0, 0.5), (-2.0, 1.5, 0.25), (0.1, -0.7, 2.2), (1.0, 1.0, -4.0)]
_VALUES_AT = (0.3, -1.2, 2.0)


def _hint_state(state, side: str) -> str | None:
    """What is wrong with the student's merged state ``side``, or None when it is the direct state."""
    if not isinstance(state, (tuple, list)) or len(state) != 3:
        raise TypeError(f"{side} should be a state (m, l, acc) of three SymPy expressions, got {type(state).__name__}")
    expressions = [as_expression(x, f"{side}'s {name}", _SCORES + _VALUES) for x, name in zip(state, ("m", "l", "acc"))]
    for scores in _POINTS:
        point = dict(zip(_SCORES + _VALUES, scores + _VALUES_AT))
        # the direct state of all three scores, relative to their maximum
        m = max(scores)
        weights = np.exp(np.array(scores) - m)
        direct = (m, weights.sum(), weights @ np.array(_VALUES_AT))
        for name, expression, expected in zip(("m", "l", "acc"), expressions, direct):
            if not np.isclose(float(expression.subs(point)), expected, rtol=1e-9, atol=1e-12):
                return (f"{side}'s {name} differs from the direct state at z = {scores}: "
                        "did each side get rescaled by exp(m_side - m) before adding?")
    return None


@checker("ex-08-merge-order",
         "a pair (left, right) of states (m, l, acc), SymPy expressions in z0, z1, z2, v0, v1, v2: "
         "merge_states(merge_states(A, B), C) and merge_states(A, merge_states(B, C))")
def _merge_order(answer):
    left, right = answer
    for state, side in ((left, "left"), (right, "right")):
        error = _hint_state(state, side)
        if error:
            return False, error
    return True, "both orders give the direct state of all three scores, relative to their maximum."


@checker("ex-08-why-max",
         "a pair (l_frozen, l_running): the final l in float32 for the 8 scores around 100, "
         "with the maximum frozen at 0 and with the running maximum",
         self_check=True)
def _why_max(answer):
    frozen = as_number(answer[0], "l_frozen", finite=False)
    running = as_number(answer[1], "l_running")
    if np.isfinite(frozen):
        hint = ("in float32 e^100 is beyond the largest number, about 3.4e38; did you compute in float64?"
                if frozen > 3.4e38 else "with the maximum frozen at 0, l is the plain sum of e^s for s near 100.")
        return False, f"l_frozen = {frozen:.4g} is finite; {hint}"
    if frozen < 0:
        return False, "l_frozen is a sum of positive terms; it cannot be -inf."
    if not 1 < running < 8:
        return False, (f"l_running = {running:.4g} is not a sum of 8 terms e^(s - m): the largest score "
                       "contributes exactly 1, and each of the other seven a positive share below 1.")
    return True, "the frozen sum overflows to inf, while the running l stays between 1 and the number of scores."


@checker("ex-08-block-sizes",
         "three ints: the bytes of the largest tensor tiled.attention allocates for 8 heads, n = 2048, d = 64, "
         "with blocks (64, 128), the defaults, and (2048, DEFAULT_BLOCK_K)")
def _block_sizes(answer):
    got = as_array(answer, "answer", (3,))
    blocks = [(64, 128), (tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_K), (2048, tiled.DEFAULT_BLOCK_K)]
    for value, (block_q, block_k) in zip(got, blocks):
        tile, output = 4 * 8 * block_q * block_k, 4 * 8 * 2048 * 64  # float32 scores of a tile; the output
        expected = max(tile, output)
        if value == expected:
            continue
        if value * 2**20 == expected:
            return False, f"for blocks ({block_q}, {block_k}) that looks like MiB; give bytes."
        if value == tile:
            return False, (f"for blocks ({block_q}, {block_k}) you counted one tile of scores; "
                           "the output is a tensor too.")
        return False, (f"for blocks ({block_q}, {block_k}) your count is not the largest tensor; list the tensors "
                       "tiled.attention allocates, with their shapes, and compare their bytes.")
    return True, "the largest tensor is a tile of scores or the output, whichever is larger; never n x n."
