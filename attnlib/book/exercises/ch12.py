"""Checkers for the exercises of Chapter 12, The scale in real models."""
import math

import numpy as np
import torch

from ...positions import sinusoidal
from . import as_array, as_number, checker, compare

_OFFSETS = (0, 1, 100)
_WIDTH, _RHO, _BASE = 64, 0.5, 10000.0
_SLOPE, _CONTEXT = 1 / 16, 4096
_CAP, _SCORES = 5.0, (0.0, 5.0, 15.0)


@checker("ex-12-correlated-variance",
         "three numbers: Var(q.k)/d_k at offsets 0, 1 and 100 for d_k = 64, base 10000 and correlation 0.5 "
         "inside each plane")
def _correlated_variance(answer):
    got = as_array(answer, "answer", (3,))
    theta = _BASE ** (-np.arange(0, _WIDTH, 2) / _WIDTH)
    # one plane contributes 2 + 2 rho^2 cos(2 phi), phi = offset * theta_p (Chapter 12's SymPy result)
    expected = np.array([np.sum(2 + 2 * _RHO**2 * np.cos(2 * o * theta)) / _WIDTH for o in _OFFSETS])
    passed, message = compare("the three ratios", got, expected, 1e-6)
    if passed:
        return True, "at offset 0 every plane adds 2 + 2 rho^2; further away the cos(2 phi) terms cancel."
    single_angle = np.array([np.sum(2 + 2 * _RHO**2 * np.cos(o * theta)) / _WIDTH for o in _OFFSETS])
    if np.allclose(got, single_angle, atol=1e-6):
        return False, "the variance depends on cos(2 phi), twice the plane's angle, not cos(phi)."
    if np.allclose(got, expected * _WIDTH, atol=1e-4):
        return False, "those are variances of q.k; divide them by d_k."
    if np.allclose(got, 1.0, atol=1e-6):
        return False, "that is the variance with independent coordinates; the correlation rho enters each plane."
    return False, message


@checker("ex-12-alibi-entropy",
         "a number: the entropy in nats of the weights of a content-free query at the last of 4096 causal "
         "positions, ALiBi slope 1/16")
def _alibi_entropy(answer):
    try:
        is_nan = not isinstance(answer, (str, bytes)) and math.isnan(float(answer))
    except (TypeError, ValueError):
        is_nan = False  # not one number at all: as_number says what was expected
    if is_nan:
        return False, ("the entropy is nan: a weight of 0 gives 0 * log 0, which is 0 in the limit but nan in "
                       "floating point; use torch.special.entr or torch.xlogy, or compute in float64.")
    got = as_number(answer, "answer")
    r = math.exp(-_SLOPE)
    # geometric weights (1 - r) r^delta; the tail past 4096 keys is e^-256, far below any rounding
    expected = -math.log(1 - r) - r * math.log(r) / (1 - r)
    # float32 sums 4096 terms: its rounding stays well below 1e-4 relative, other slopes are 0.3 nats away
    if math.isclose(got, expected, rel_tol=1e-4):
        return True, "the weights are geometric in the distance, and their entropy is the closed form."
    if math.isclose(got, math.log(_CONTEXT), abs_tol=1e-6):
        return False, "that is the entropy of uniform weights over every key: was the ALiBi mask applied?"
    for head in range(1, 9):
        other = math.exp(-(2.0 ** -head))
        if head != 4 and math.isclose(got, -math.log(1 - other) - other * math.log(other) / (1 - other),
                                      abs_tol=1e-6):
            return False, "that is the entropy of another head; which of the 8 slopes is 1/16?"
    if got < 0:
        return False, "an entropy is never negative; sum -w ln w over the keys."
    return False, "the entropy does not match; check that q is zero and that the query is the last of 4096."


@checker("ex-12-softcap-slope",
         "three numbers: the derivative of 5 tanh(z / 5) at z = 0, 5 and 15")
def _softcap_slope(answer):
    got = as_array(answer, "answer", (3,))
    scores = np.array(_SCORES)
    expected = 1 - np.tanh(scores / _CAP) ** 2
    # 1 - tanh^2 loses its leading digits: in float32 its error is a few times 1.2e-7 whatever its size
    passed, message = compare("the three slopes", got, expected, 1e-6)
    if passed:
        return True, "far beyond the cap the slope is nearly 0, so almost no gradient reaches q and k."
    if np.allclose(got, 1 - np.tanh(scores) ** 2, atol=1e-8):
        return False, "the tanh takes z / c, and the chain rule's 1/c cancels the factor c in front."
    if np.allclose(got, 1 - np.tanh(scores / _CAP), atol=1e-8):
        return False, "the derivative of tanh(x) is 1 - tanh(x)^2: the tanh is squared."
    if np.allclose(got, _CAP * np.tanh(scores / _CAP), atol=1e-8):
        return False, "those are the capped scores; the exercise asks for their derivatives."
    return False, message


@checker("ex-12-temperatures",
         "three numbers: T relative to 1/sqrt(256) for the scales (3072/24)^-1/2, 8/256 and 1")
def _temperatures(answer):
    got = as_array(answer, "answer", (3,))
    standard = 1 / math.sqrt(256)
    scales = np.array([(3072 / 24) ** -0.5, 8 / 256, 1.0])
    expected = standard / scales
    passed, message = compare("the three temperatures", got, expected, 1e-5 * expected.max())  # float32's rounding
    if passed:
        return True, "T = (1/sqrt(d_k)) / scale: below 1 the convention is sharper, above 1 flatter."
    if np.allclose(got, 1 / expected, rtol=1e-9):
        return False, "those are inverted: T divides the scores, T = (1/sqrt(d_k)) / scale."
    if np.allclose(got, expected**2, rtol=1e-9):
        return False, "those compare variances; a temperature compares the factors themselves."
    return False, message


_MUP_WIDTHS = (32, 64, 128, 256, 512)


@checker("ex-12-mup-widths",
         "five numbers: T relative to 1/sqrt(d_k) of muP's factor 8/d_k at d_k = 32, 64, 128, 256, 512")
def _mup_widths(answer):
    got = as_array(answer, "answer", (len(_MUP_WIDTHS),))
    widths = np.array(_MUP_WIDTHS, dtype=float)
    expected = (1 / np.sqrt(widths)) / (8 / widths)
    passed, message = compare("the list of five temperatures", got, expected, 1e-6)
    if passed:
        return True, "muP's factor is the textbook one at d_k = 64 and differs from it by sqrt(d_k)/8 elsewhere."
    if np.allclose(got, 1 / expected, rtol=1e-6):
        return False, "those are inverted: T divides the scores, T = (1/sqrt(d_k)) / scale."
    if np.allclose(got, np.sqrt(widths), rtol=1e-6):
        return False, "that is the temperature of 1/d_k; muP's reference code multiplies the scores by 8/d_k."
    return False, message


@checker("ex-12-sinusoid-mean",
         "a number between 0 and 1: the share of a row's squared length that the mean sinusoidal row over "
         "positions 0..511 keeps, for a model width of 512")
def _sinusoid_mean(answer):
    got = as_number(answer, "answer")

    def share(positions: int) -> float:  # the mean row's squared length over a row's, d_model / 2
        mean = sinusoidal(positions, 512, dtype=torch.float64).mean(0)
        return float(mean.square().sum()) / 256

    expected = share(512)
    passed, message = compare("the share", np.asarray(got), np.asarray(expected), 5e-4)
    if passed:
        return True, ("fewer planes stay near cos = 1 over 512 positions than over 128, so the shared part "
                      "shrinks as the sequence grows, but it does not vanish.")
    if abs(got - share(128)) <= 5e-4:
        return False, "that is the share over 128 positions, the chapter's; the exercise asks for 512."
    if abs(got - 100 * expected) <= 5e-2:
        return False, "give the share as a fraction between 0 and 1, not a percentage."
    if abs(got - expected * 256) <= 0.2:
        return False, "that is the mean row's squared length; divide it by a row's, d_model / 2 = 256."
    return False, message + " Average the table's rows over the positions, then compare squared lengths."
