"""attnlib.causal_mask and attnlib.padding_mask against patterns written out by hand."""
import torch

import attnlib


def test_causal_top_left_is_lower_triangular():
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    assert torch.equal(attnlib.causal_mask(3, 5), expected)


def test_causal_bottom_right_lines_up_the_last_query_with_the_last_key():
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(attnlib.causal_mask(3, 5, "bottom_right"), expected)


def test_causal_bottom_right_with_more_queries_than_keys_leaves_early_rows_empty():
    expected = torch.tensor([[0, 0], [0, 0], [1, 0], [1, 1]], dtype=torch.bool)
    assert torch.equal(attnlib.causal_mask(4, 2, "bottom_right"), expected)


def test_padding_mask_marks_keys_beyond_each_length():
    mask = attnlib.padding_mask(torch.tensor([2, 0, 4]), 4)
    assert mask.shape == (3, 1, 1, 4)
    expected = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask[:, 0, 0], expected)
