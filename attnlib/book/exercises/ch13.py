"""Checkers for the exercises of Chapter 13, Attention inside models."""
import math

import numpy as np
import sympy as sp

from . import as_array, as_count, as_mask, as_number, as_parts, checker, compare
from .symbolic import as_expression, same

_SCORES, _SINK, _WINDOW_KEYS = (2.0, 1.0, 0.0, -1.0), 1.0, (2, 3)


@checker("ex-13-sink-share",
         "two numbers: the sink's share of the last query's row (scores 2, 1, 0, -1, sink logit 1), "
         "with no window and with window=(1, 0)")
def _sink_share_checker(answer):
    def _sink_share(scores, sink):  # e^s / (e^s + sum_j e^z_j)
        return math.exp(sink) / (math.exp(sink) + sum(math.exp(z) for z in scores))

    got = as_array(answer, "answer", (2,))
    windowed = [_SCORES[j] for j in _WINDOW_KEYS]
    expected = [_sink_share(_SCORES, _SINK), _sink_share(windowed, _SINK)]
    # float32 rounds shares below 1 by under 1e-7; each hint below is at least 0.01 away
    passed, message = compare("the two shares", got, np.array(expected), 1e-6)
    if passed:
        return True, "the window leaves the sink fewer keys to share the row with, so its share grows."
    if math.isclose(float(got[1]), _sink_share([_SCORES[0], _SCORES[1]], _SINK), abs_tol=1e-6):
        return False, "window=(1, 0) keeps the query's own key and the one before it: the last two keys."
    if math.isclose(float(got[0]), _sink_share(_SCORES, 0.0), abs_tol=1e-6):
        return False, "that is softmax plus one, a sink logit of 0; this sink's logit is 1."
    if math.isclose(float(got[0]), 1 - _sink_share(_SCORES, _SINK), abs_tol=1e-6):
        return False, "that is what the keys receive; the sink's share is what the row's weights leave out."
    return False, message


@checker("ex-13-window-conventions",
         "a tuple (a, b, c) of ints: (a) transformers' causal sliding_window for the Mistral paper's window of 4096, "
         "(b) FlashAttention's left window_size for transformers' causal sliding_window = 4096, (c) the keys a "
         "query far from both ends sees in a bidirectional layer with sliding_window = 128")
def _window_conventions_checker(answer):
    got = [as_count(x, name) for x, name in as_parts(answer, ("a", "b", "c"))]
    # (a) the paper's i - W <= j <= i; (b) flash-attn's [i - left, i] is transformers' i - w < j <= i;
    # (c) transformers' bidirectional overlay |i - j| <= sliding_window
    expected = [4096 + 1, 4096 - 1, 2 * 128 + 1]
    hints = {
        0: {4096: "the paper's W counts the positions before the query; transformers' sliding_window "
                  "counts the query as well.",
            4095: "the paper's window is one key wider than its W, not narrower: it reaches back W "
                  "positions and keeps the query."},
        1: {4096: "FlashAttention's left size counts only the keys before the query; transformers' "
                  "sliding_window counts the query too.",
            4097: "FlashAttention's window is [i - left, i]: it keeps the query, so left is below "
                  "sliding_window, not above it."},
        2: {128: "the bidirectional overlay reaches sliding_window positions on each side of the query.",
            129: "the bidirectional overlay reaches sliding_window positions on each side of the query.",
            256: "the keys on both sides are counted; count the query's own key too."},
    }
    for index, (mine, right) in enumerate(zip(got, expected)):
        if mine != right:
            part = "abc"[index]
            hint = hints[index].get(mine, "write each convention's rule as an inequality between i and j "
                                          "and count the j it allows.")
            return False, f"({part}) is off: {hint}"
    return True, "three conventions, one window each: convert by writing the inequality, not the name."


@checker("ex-13-gemma-cache",
         "a tuple (alternating_8k, alternating_128k, global_128k) of GiB: the KV cache of 42 layers, 8 key/value "
         "heads of width 256, bfloat16, batch 1, half of them sliding (w = 4096, caching w - 1 positions), at "
         "n = 8192 and n = 131072, and with every layer global at n = 131072")
def _gemma_cache_checker(answer):
    got = np.array([as_number(x, name) for x, name in
                    as_parts(answer, ("alternating_8k", "alternating_128k", "global_128k"))])

    def gib(global_layers, sliding_layers, n, sliding_positions=4096 - 1, bytes_per_number=2,
            tensors=2, gib_bytes=2**30):
        per_position = tensors * 8 * 256 * bytes_per_number  # one layer, one position
        positions = global_layers * n + sliding_layers * min(n, sliding_positions)
        return positions * per_position / gib_bytes

    def cases(**change):
        return np.array([gib(21, 21, 8192, **change), gib(21, 21, 131072, **change), gib(42, 0, 131072, **change)])

    def close(a, b):  # float32's rounding is 6e-8 of a value; the nearest slip below is 1e-5 of it away
        return np.abs(a - b) <= 1e-6 * np.abs(b)

    right = close(got, cases())
    if right.all():
        return True, "at 128k the sliding layers hold a few per cent of the cache; the global layers hold the rest."
    slips = [(cases(sliding_positions=4096), "a sliding layer caches w - 1 positions here, not w"),
             (cases(gib_bytes=1e9), "a GiB is 2**30 bytes, not 10**9"),
             (cases(tensors=1), "the cache holds keys and values, two tensors"),
             (cases(bytes_per_number=4), "bfloat16 takes 2 bytes a number"),
             (cases(sliding_positions=10**9), "a sliding layer keeps only its window, whatever n is")]
    index = int(np.argmin(right))
    name = ("alternating_8k", "alternating_128k", "global_128k")[index]
    hint = next((text for values, text in slips if close(got[index], values[index])),
                "count the positions each kind of layer keeps, then the bytes of one position of one layer")
    return False, f"{name} = {got[index]:g} GiB is off: {hint}."


@checker("ex-13-streaming-mask",
         "a bool (10, 10) mask, True where query i may see key j: StreamingLLM's cache for 10 positions, a "
         "window of w = 3 keys (the query's included) and the first 2 keys kept")
def _streaming_mask_checker(answer):
    got = as_mask(answer, "answer", (10, 10))
    i, j = np.arange(10)[:, None], np.arange(10)[None, :]
    causal = j <= i
    expected = causal & ((j > i - 3) | (j < 2))
    if np.array_equal(got, expected):
        return True, "however long the stream, a query sees a fixed number of keys: the cache's size is fixed."
    if np.any(got & ~causal):
        return False, "the mask lets a query see a later key; StreamingLLM's cache is causal."
    if np.array_equal(got, causal & (j > i - 3)):
        return False, "that is the window alone; the first 2 keys stay in the cache for every query."
    if np.array_equal(got, causal & ((j >= i - 3) | (j < 2))):
        return False, "the window holds one key too many: w counts the query's own key."
    if np.array_equal(got, causal & ((j > i - 2) | (j < 2))):
        return False, "the window holds one key too few: w = 3 is the query and the 2 keys before it."
    wrong = np.argwhere(got != expected)
    return False, f"{len(wrong)} entries differ, the first in row {wrong[0][0]}; recheck that query's keys."


@checker("ex-13-sink-derivation",
         "a SymPy expression in zeta and lse: the derivative of the sink's share of a row with respect to the "
         "sink logit zeta, where lse is the row's log-sum-exp over its keys")
def _sink_derivation_checker(answer):
    zeta, lse = sp.symbols("zeta lse", real=True)
    got = as_expression(answer, "answer", (zeta, lse))
    share = sp.exp(zeta) / (sp.exp(zeta) + sp.exp(lse))  # e^zeta over e^zeta + sum_j e^z_j
    if same(got, sp.diff(share, zeta)):
        return True, "the share moves fastest where it is one half, at zeta = lse, and stalls at both ends."
    if same(got, share):
        return False, "that is the share itself; differentiate it with respect to zeta."
    if same(got, -sp.diff(share, zeta)):
        return False, "the sign is off: a larger sink logit takes more of the row, not less."
    if same(got, sp.exp(zeta - lse)):
        return False, "the denominator holds the sink's own term as well as the keys'."
    return False, "write the share as a logistic function of zeta - lse first; its derivative follows from that."
