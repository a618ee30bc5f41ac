"""Checkers for the exercises of Chapter 13, Attention inside models."""
import math

import numpy as np

from . import as_array, checker, compare

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
