"""Checkers for the exercises of Chapter 1, Attention in four steps."""
import numpy as np
import torch

from ...attention import attention_weights, scaled_dot_product_attention
from . import as_array, as_parts, as_shape, checker, compare

# The worked example of Chapter 1; query rows 1 and 2 are the chapter's own choice (rows count from 0).
_EXAMPLE_Q = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
_EXAMPLE_K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
_EXAMPLE_V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)


@checker("ex-01-row-two", "a pair (weights, output): query 1's (the second query's) three weights and its 2-vector "
         "output")
def _row_two(answer):
    weights, output = answer
    expected_weights = attention_weights(_EXAMPLE_Q, _EXAMPLE_K)[1].numpy()
    expected_output = scaled_dot_product_attention(_EXAMPLE_Q, _EXAMPLE_K, _EXAMPLE_V)[1].numpy()
    ok_w, msg_w = compare("weights", as_array(weights, "weights", (3,)), expected_weights, 5e-3)
    if not ok_w:
        return False, msg_w + " Recheck the scaled scores: each dot product is divided by sqrt(d_k) = 2."
    ok_o, msg_o = compare("output", as_array(output, "output", (2,)), expected_output, 5e-3)
    return ok_o, msg_w + " " + msg_o


@checker("ex-01-shift-scale", "a pair (small, large): row 0's weights for factors c -> 0 and c -> infinity")
def _shift_scale(answer):
    small, large = (as_array(x, name, (3,)) for x, name in as_parts(answer, ("small", "large")))
    ok_s, msg_s = compare("the c -> 0 limit", small, np.full(3, 1 / 3), 1e-3)
    if not ok_s:
        return False, msg_s + " Hint: with all scores near 0 every key looks alike."
    ok_l, msg_l = compare("the c -> infinity limit", large, np.array([0.0, 0.0, 1.0]), 1e-3)
    return ok_l, msg_s + " " + msg_l + ("" if ok_l else " Hint: which score is largest?")


@checker("ex-01-causal-numpy", "the 3 x 3 causal weight matrix of the worked example")
def _causal_numpy(answer):
    expected = attention_weights(_EXAMPLE_Q, _EXAMPLE_K, is_causal=True).numpy()
    passed, message = compare("the causal weights", as_array(answer, "answer", (3, 3)), expected, 1e-6)
    if not passed and np.any(np.triu(as_array(answer, "answer", (3, 3)), k=1) != 0):
        message += " Weights above the diagonal must be exactly 0: query i sees only keys j <= i."
    return passed, message


@checker("ex-01-value-width", "a pair (weights_shape, output_shape) for values of width 5")
def _value_width(answer):
    weights_shape, output_shape = (as_shape(shape, name) for shape, name in
                                   as_parts(answer, ("weights_shape", "output_shape")))
    if weights_shape != (3, 3):
        return False, f"the weights have shape {weights_shape}; they are one row per query, one column per key."
    if output_shape != (3, 5):
        return False, f"the output has shape {output_shape}; it has one row per query and the values' width."
    return True, "Only step 4 sees the values, so only the output has their width."


@checker("ex-01-permutation",
         "the 3 x 2 causal output of the worked example's tokens reordered by (2, 0, 1), rows in the new order")
def _permutation(answer):
    order = [2, 0, 1]
    queries, keys, values = (x[order] for x in (_EXAMPLE_Q, _EXAMPLE_K, _EXAMPLE_V))
    expected = scaled_dot_product_attention(queries, keys, values, is_causal=True).numpy()
    got = as_array(answer, "answer", (3, 2))
    passed, message = compare("the output", got, expected, 5e-3)
    if passed:
        return True, message + " No token keeps its output: each now sees other keys."
    original = scaled_dot_product_attention(_EXAMPLE_Q, _EXAMPLE_K, _EXAMPLE_V, is_causal=True).numpy()
    if np.allclose(got, original[order], atol=5e-3):
        return False, (message + " That is the original causal output, reordered: apply the mask to the "
                       "reordered tokens, so that query i of the new order sees keys j <= i of the new order.")
    if np.allclose(got, scaled_dot_product_attention(queries, keys, values).numpy(), atol=5e-3):
        return False, message + " The causal mask is missing."
    if np.allclose(got, original, atol=5e-3):
        return False, message + " Reorder the queries, keys and values first."
    return False, message + " Hint: the new token 0 is the old token 2, and it may see only itself."
