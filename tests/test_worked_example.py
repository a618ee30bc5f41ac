"""Chapter 1's worked example (n = 3, d_k = 4) against the figures the source article states."""
import pytest
import torch

import attnlib

FIRST_QUERY = [1.0, 0.0, 1.0, 0.0]
K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)
# the article gives only the first query row (query 0); rows 1 and 2 are the chapter's own choice
Q = torch.tensor([FIRST_QUERY, [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)


def test_scores_of_query_0():
    assert (Q[0] @ K.T).tolist() == [1.0, 1.0, 2.0]


def test_scaled_weights_and_output_of_query_0():
    weights = attnlib.attention_weights(Q, K)
    output = attnlib.scaled_dot_product_attention(Q, K, V)
    assert weights[0].tolist() == pytest.approx([0.274, 0.274, 0.452], abs=5e-4)
    assert output[0].tolist() == pytest.approx([0.726, 0.726], abs=5e-4)


def test_unscaled_weights_of_query_0():
    weights = attnlib.attention_weights(Q, K, scale=1.0)
    assert weights[0].tolist() == pytest.approx([0.212, 0.212, 0.576], abs=5e-4)


def test_the_scale_is_one_half_for_width_four():
    halved = attnlib.attention_weights(Q, K, scale=0.5)
    assert torch.equal(attnlib.attention_weights(Q, K), halved)


def test_query_1_as_computed_by_hand_in_the_exercise():
    weights = attnlib.attention_weights(Q, K)
    output = attnlib.scaled_dot_product_attention(Q, K, V)
    assert weights[1].tolist() == pytest.approx([0.384, 0.384, 0.233], abs=5e-4)
    assert output[1].tolist() == pytest.approx([0.616, 0.616], abs=5e-4)
