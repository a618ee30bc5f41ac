"""attnlib.book.printing.fixed: the same text for values that differ by a few roundings."""
import numpy as np
import pytest
import torch

from attnlib.book.printing import fixed


def test_values_a_few_roundings_apart_print_the_same():
    values = torch.tensor([0.25190001, 0.7481, 1.0, 5.8494e-17, 2.0016e-34], dtype=torch.float64)
    nudged = values * (1 + 4 * torch.finfo(torch.float32).eps)
    assert fixed(values) == fixed(nudged) == "[0.2519 0.7481 1.0000 0.0000 0.0000]"


def test_layout_does_not_depend_on_the_other_values():
    # torch's repr prints 1.0000 next to 0.5 but "1." next to a tiny value
    assert fixed(torch.tensor([1.0, 0.5]), 2) == "[1.00 0.50]"
    assert fixed(torch.tensor([1.0, 1e-7]), 2) == "[1.00 0.00]"


def test_small_values_stay_in_fixed_point():
    # without suppress_small NumPy switches the whole row to scientific notation
    assert fixed(np.array([0.9817, 0.018, 0.0003])) == "[0.9817 0.0180 0.0003]"


def test_no_negative_zero():
    assert fixed(np.array([-1e-9, -0.0, 3e-5]), 3) == "[0.000 0.000 0.000]"


def test_non_finite_values_and_matrices():
    text = fixed(torch.tensor([[float("-inf"), float("nan")], [0.123456, -2.0]], dtype=torch.float16), 2)
    assert text == "[[ -inf   nan]\n [ 0.12 -2.00]]"


def test_sequences_and_integers():
    assert fixed([1, 2], 1) == "[1.0 2.0]"


@pytest.mark.parametrize("decimals", [-1, 1.5, True, "4"])
def test_bad_decimals(decimals):
    with pytest.raises(ValueError, match="decimals must be a non-negative int"):
        fixed([1.0], decimals)


def test_complex_values_are_refused():
    with pytest.raises(TypeError, match="values must hold real numbers"):
        fixed(np.array([1j]))


def test_a_table_prints_aligned_text_and_renders_as_html():
    from attnlib.book.printing import Table

    table = Table(["arch", "regs", "tile"], [["sm_75", "124", "64x16"], ["sm_90", "79", "128x128"]])
    assert repr(table).splitlines() == ["arch   regs  tile",
                                        "sm_75   124  64x16",
                                        "sm_90    79  128x128"]
    html = table._repr_html_()
    assert html.count("<tr>") == 3 and '<td style="text-align: right">79</td>' in html
    assert '<td style="text-align: left">64x16</td>' in html


def test_a_table_caption_heads_the_text_and_the_html():
    from attnlib.book.printing import Table

    table = Table(["n", "ratio"], [["1024", "1.29"]], caption="fused / flash, bf16 & fp16")
    assert repr(table).splitlines() == ["fused / flash, bf16 & fp16", "   n  ratio", "1024   1.29"]
    assert "<caption>fused / flash, bf16 &amp; fp16</caption><thead>" in table._repr_html_()


def test_a_table_refuses_a_row_of_the_wrong_length():
    from attnlib.book.printing import Table

    with pytest.raises(ValueError, match="3 cells"):
        Table(["a", "b", "c"], [["1", "2"]])
