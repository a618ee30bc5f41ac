"""Checkers for the exercises of Chapter 5, Stability, precision and masks."""
import math

import numpy as np
import torch

from ...attention import scaled_dot_product_attention
from . import UnreadableAnswer, as_array, as_mask, as_number, as_parts, checker, compare


@checker("ex-05-decode-one", "a pair (decoded, alignment_matters): the six one-token outputs stacked into a "
                             "(6, 8) array, and a bool, whether the causal alignment changes them")
def _decode_one(answer):
    (decoded, _), (alignment_matters, _) = as_parts(answer, ("decoded", "alignment_matters"))
    if isinstance(alignment_matters, torch.Tensor) and alignment_matters.dtype == torch.bool \
            and alignment_matters.numel() == 1:
        alignment_matters = bool(alignment_matters)
    # the chapter's KV-cache example: Q6, K6, V6, each (6, 8) float64
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(6, 8, generator=generator, dtype=torch.float64) for _ in range(3))
    full = scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    passed, message = compare("decoded", as_array(decoded, "decoded", (6, 8)), full, 1e-6)
    if not passed:
        return False, message + " Query t may attend to keys 0..t only: pass K6[:t+1] and V6[:t+1]."
    if not isinstance(alignment_matters, (bool, np.bool_)):
        raise UnreadableAnswer(f"alignment_matters should be a bool, got {type(alignment_matters).__name__}")
    if alignment_matters:
        return False, ("the outputs are right, but compare causal_mask(1, t + 1, 'top_left') with "
                       "'bottom_right' for t = 0: with one query and the keys up to t, is any key hidden?")
    return True, message + " With exactly the past in the cache, no mask (and so no alignment) is needed."


# The precision table's inputs: precision_row(torch.float16, 1024) in the chapter.
_N_QUERIES, _N_KEYS, _WIDTH = 256, 1024, 64


@checker("ex-05-which-sum", "a number: the max |error| against float64 of attention with float16 dot products "
                            "and float32 sums over keys, on the table's float16 inputs with S = 1024",
         self_check=True)
def _which_sum(answer):
    got = as_number(answer, "answer")

    def attention_with_sums_in(sum_dtype: torch.dtype, query, key, value) -> torch.Tensor:
        """Attention ``(L, Ev)`` with the dot products over E accumulated in the inputs' dtype
        and the two sums over the S keys (softmax denominator and A V) accumulated in ``sum_dtype``."""
        scores = torch.zeros(query.shape[0], key.shape[0], dtype=query.dtype)
        for e in range(query.shape[1]):
            scores = scores + query[:, e:e + 1] * key[:, e][None, :]
        scores = scores * torch.tensor(1 / math.sqrt(query.shape[1]), dtype=query.dtype)
        exps = torch.exp(scores - scores.amax(-1, keepdim=True)).to(sum_dtype)
        value = value.to(sum_dtype)
        total = torch.zeros(query.shape[0], 1, dtype=sum_dtype)
        mixed = torch.zeros(query.shape[0], value.shape[1], dtype=sum_dtype)
        for j in range(key.shape[0]):
            total = total + exps[:, j:j + 1]
            mixed = mixed + exps[:, j:j + 1] * value[j][None, :]
        return mixed / total

    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, _WIDTH, generator=generator).half() for n in (_N_QUERIES, _N_KEYS, _N_KEYS))
    reference = scaled_dot_product_attention(q.double(), k.double(), v.double())
    # max |error| against float64 with float32 sums over keys, and with float16 sums
    float32_sums, float16_sums = (
        (attention_with_sums_in(dtype, q, k, v).double() - reference).abs().max().item()
        for dtype in (torch.float32, torch.float16))
    # a float16 final rounding of the output, or another CPU's exp, moves the error by a few per cent
    if 0.8 * float32_sums <= got <= 1.25 * float32_sums:
        return True, (f"{got:.3g} is about {got / float16_sums:.0%} of the all-float16 error: "
                      "most of the error comes from the sums over keys.")
    if 0.8 * float16_sums <= got <= 1.25 * float16_sums:
        return False, (f"{got:.3g} is the error with every sum in float16: convert exps and value with "
                       ".float() before the loop over keys.")
    return False, (f"{got:.3g} is not the error of float32 sums over keys; use precision_row's inputs "
                   "(seed 0, 256 queries, width 64, S = 1024, cast to float16) and keep the dot products in float16.")


@checker("ex-05-batch-decode", "the bool mask of shape (2, 1, 5), True where the new token may attend")
def _batch_decode(answer):
    got = as_mask(answer, "the mask", (2, 1, 5))
    expected = (np.arange(5)[None, :] < np.array([5, 3])[:, None])[:, None, :]
    if np.array_equal(got, expected):
        return True, "the mask hides the two padding slots of the second sequence and nothing else."
    if np.array_equal(got, ~expected):
        return False, "the mask is inverted: in attnlib a bool mask is True where a query MAY attend."
    if not np.array_equal(got[0], expected[0]):
        return False, ("sequence 1 fills the cache (5 tokens), so its new token sees all 5 keys: every cached "
                       "key is in its past.")
    return False, ("sequence 2 has 3 real tokens at the start of the cache and padding at the end: "
                   "only keys 0, 1 and 2 are allowed.")


@checker("ex-05-renormalise", "a pair (renormalised, kept): the clipped weights of the chapter's causal example "
                              "with each row divided by its sum, a (5, 5) array, and the mass each row kept "
                              "after clipping, a (5,) array")
def _renormalise(answer):
    (renormalised, _), (kept, _) = as_parts(answer, ("renormalised", "kept"))
    renormalised = as_array(renormalised, "renormalised", (5, 5))
    kept = as_array(kept, "kept", (5,))
    # the chapter's clipping example: seed 0, five queries and keys of width 8, causal
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 8, generator=generator), torch.randn(5, 8, generator=generator)
    scores = (q.double() @ k.double().T) / math.sqrt(8)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    softmax = torch.softmax(scores, -1)
    expected_kept = (softmax * causal).sum(-1).numpy()
    masked = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1).numpy()
    # float32 scores (as in the chapter) move the weights by about 1e-7
    passed, message = compare("renormalised", renormalised, masked, 1e-5)
    if not passed:
        if np.allclose(renormalised, (softmax * causal).numpy(), atol=1e-5):
            return False, "these are the clipped weights; divide each row by its own sum."
        if np.allclose(renormalised, softmax.numpy(), atol=1e-5):
            return False, "these are the weights before clipping: zero the keys j > i first, then renormalise."
        return False, message + " Clip with the causal mask (key j <= query i), then divide each row by its sum."
    if np.allclose(kept, 1 - expected_kept, atol=1e-5):
        return False, "renormalised is right; kept is the mass clipping removed, not the mass it kept."
    if np.allclose(kept, 1 / expected_kept, atol=1e-5):
        return False, "renormalised is right; kept is the factor each row was multiplied by, not the kept mass."
    passed, message = compare("kept", kept, expected_kept, 1e-5)
    if not passed:
        return False, message + " The kept mass of row i is the sum of its weights on keys 0, ..., i."
    return True, ("renormalised equals the -inf-masked softmax, and each row's kept mass is "
                  "exp(lse over the allowed keys - lse over all keys).")
