"""attnlib.positions: RoPE and ALiBi against formulas written here, and bad inputs."""
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import attnlib
from attnlib import fused
from attnlib.positions import alibi, alibi_slopes, rope, rope_frequencies
from reference import max_error, randn

ROOT = pathlib.Path(__file__).resolve().parents[1]


def rotation_matrix_float64(position: int, width: int, base: float = 10000.0) -> torch.Tensor:
    """The (E, E) block-diagonal rotation of RoFormer: plane p = coordinates (2p, 2p+1), angle m/base^(2p/E)."""
    matrix = torch.zeros(width, width, dtype=torch.float64)
    for p in range(width // 2):
        angle = position / base ** (2 * p / width)
        c, s = math.cos(angle), math.sin(angle)
        matrix[2 * p: 2 * p + 2, 2 * p: 2 * p + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return matrix


@pytest.mark.parametrize("width", [2, 8, 64])
def test_rope_is_the_block_rotation_at_each_position(width):
    x = randn(2, 3, 5, width, seed=1)
    positions = torch.tensor([0, 1, 7, 100, 4095])
    rotated = rope(x, positions)
    for row, m in enumerate(positions.tolist()):
        expected = x[..., row, :] @ rotation_matrix_float64(m, width).T
        assert max_error(rotated[..., row, :], expected) < 1e-12


def test_rope_frequencies_follow_the_paper():
    assert torch.equal(rope_frequencies(8, base=100.0),
                       torch.tensor([1.0, 100 ** -0.25, 100 ** -0.5, 100 ** -0.75], dtype=torch.float64))


def test_rope_keeps_every_length():
    x = randn(4, 6, 32, seed=2)
    rotated = rope(x, torch.arange(6) * 13)
    assert max_error(rotated.norm(dim=-1), x.norm(dim=-1)) < 1e-12


def test_rotated_dot_products_depend_only_on_the_offset():
    q, k = randn(5, 16, seed=3), randn(5, 16, seed=4)
    m, n = torch.tensor([0, 3, 9, 2, 40]), torch.tensor([5, 3, 1, 30, 0])
    dots = (rope(q, m) * rope(k, n)).sum(-1)
    shifted = (rope(q, m + 1000) * rope(k, n + 1000)).sum(-1)
    assert max_error(dots, shifted) < 1e-11
    without_rotation = (q * k).sum(-1)
    assert max_error(dots, without_rotation) > 1e-3  # offsets other than 0 change the score


def test_decoding_with_a_cache_equals_the_whole_sequence():
    x = randn(1, 2, 9, 8, seed=5)
    whole = rope(x, torch.arange(9))
    cached_keys = rope(x[..., :8, :], range(8))
    new_query = rope(x[..., 8:, :], [8])
    assert torch.equal(torch.cat([cached_keys, new_query], dim=-2), whole)


def test_positions_per_sequence_broadcast_over_heads():
    x = randn(2, 3, 4, 8, seed=6)
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])[:, None, :]  # (B, 1, L)
    rotated = rope(x, positions)
    assert torch.equal(rotated[1], rope(x[1], torch.tensor([5, 6, 7, 8])))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_is_rotated_in_float32_and_returned_in_its_dtype(dtype):
    x = randn(3, 64, seed=7).to(dtype)
    rotated = rope(x, [0, 2000, 60000])
    assert rotated.dtype == dtype
    expected = torch.stack([x[i].double() @ rotation_matrix_float64(m, 64).T
                            for i, m in enumerate([0, 2000, 60000])])
    assert max_error(rotated, expected) <= 2 * torch.finfo(dtype).eps * x.abs().max().item() * 4


@pytest.mark.parametrize("x, positions, error, words", [
    (randn(2, 5, seed=0), range(2), ValueError, "E must be even"),
    (randn(2, 4, seed=0), torch.tensor([0.0, 1.0]), TypeError, "integer dtype"),
    (randn(2, 4, seed=0), torch.tensor([True, False]), TypeError, "integer dtype"),
    (randn(2, 4, seed=0), [0, 1.5], TypeError, "positions must hold ints"),
    (randn(2, 4, seed=0), range(3), ValueError, "L = 2"),
    (randn(2, 4, seed=0), torch.tensor(1), ValueError, "L = 2"),
    (randn(2, 3, 4, seed=0), torch.zeros(3, 3, dtype=torch.int64), ValueError, "do not broadcast"),
    (randn(4, seed=0), range(1), ValueError, "at least 2 dimensions"),
    (randn(2, 4, seed=0).long(), range(2), TypeError, "floating dtype"),
    ([[1.0, 2.0]], range(1), TypeError, "x must be a torch.Tensor"),
    (randn(2, 4, seed=0), "01", TypeError, "positions must be"),
])
def test_rope_rejects_bad_input_by_name(x, positions, error, words):
    with pytest.raises(error, match=words):
        rope(x, positions)


@pytest.mark.parametrize("base", [1.0, 0.5, float("inf"), float("nan")])
def test_rope_rejects_a_base_that_does_not_shrink_the_frequencies(base):
    with pytest.raises(ValueError, match="base must be a finite number above 1"):
        rope(randn(2, 4, seed=0), range(2), base=base)


def test_rope_rejects_a_base_that_is_not_a_number():
    with pytest.raises(TypeError, match="base must be a real number"):
        rope(randn(2, 4, seed=0), range(2), base="10000")


def test_alibi_slopes_for_a_power_of_two_are_the_geometric_sequence():
    assert torch.equal(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)], dtype=torch.float64))
    assert torch.equal(alibi_slopes(1), torch.tensor([2.0 ** -8], dtype=torch.float64))


def test_alibi_slopes_for_other_head_counts_interleave_the_next_power():
    # 12 heads: the 8 slopes 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (every other of 16 heads)
    expected = [2.0 ** -h for h in range(1, 9)] + [2.0 ** -(h + 0.5) for h in range(4)]
    assert max_error(alibi_slopes(12), torch.tensor(expected, dtype=torch.float64)) < 1e-15
    assert len(set(alibi_slopes(12).tolist())) == 12


def alibi_by_loops(n_heads, L, S, causal, offset):
    slopes = alibi_slopes(n_heads).tolist()
    bias = torch.empty(n_heads, L, S, dtype=torch.float64)
    for h in range(n_heads):
        for i in range(L):
            for j in range(S):
                future = j > i + offset
                bias[h, i, j] = float("-inf") if causal and future else -slopes[h] * abs(i + offset - j)
    return bias


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_alibi_biases_are_minus_slope_times_distance(causal, alignment):
    L, S = 3, 7
    bias = alibi(4, L, S, causal=causal, alignment=alignment, dtype=torch.float64)
    expected = alibi_by_loops(4, L, S, causal, S - L if alignment == "bottom_right" else 0)
    assert bias.shape == (4, L, S) and bias.dtype == torch.float64
    assert torch.equal(bias, expected)


def biased_attention_float64(q, k, v, bias):
    """softmax(q.k / sqrt(E) + bias) v in float64; rows with no allowed key give 0."""
    scores = q.double() @ k.double().mT / math.sqrt(q.shape[-1]) + bias.double()
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v.double()


@pytest.mark.parametrize("backend", ["naive", "tiled"])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_alibi_runs_as_a_float_mask_on_cpu_backends(backend, alignment):
    q, k, v = randn(2, 4, 5, 16, seed=8), randn(2, 4, 12, 16, seed=9), randn(2, 4, 12, 16, seed=10)
    bias = alibi(4, 5, 12, causal=True, alignment=alignment, dtype=torch.float64)
    output = attnlib.scaled_dot_product_attention(q, k, v, bias, backend=backend)
    assert max_error(output, biased_attention_float64(q, k, v, bias)) < 1e-13


def test_alibi_with_causal_top_left_leaves_no_row_empty_and_matches_is_causal_pattern():
    bias = alibi(2, 6, 6, causal=True)
    assert torch.equal(bias[0] > float("-inf"), torch.ones(6, 6, dtype=torch.bool).tril())


@pytest.mark.skipif(not fused.triton_installed(), reason="Triton is not installed")
def test_alibi_and_softcap_on_the_fused_kernel_in_the_interpreter():
    """Run in a child process: Triton must be imported with TRITON_INTERPRET=1 set (see attnlib.fused)."""
    script = textwrap.dedent("""
        import math, torch, attnlib
        from attnlib.positions import alibi
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 4, n, 16, generator=g) for n in (5, 40, 40))
        bias = alibi(4, 5, 40, causal=True, alignment="bottom_right")
        out = attnlib.scaled_dot_product_attention(q, k, v, bias, backend="fused")
        scores = q.double() @ k.double().mT / 4 + bias.double()
        expected = torch.softmax(scores, -1) @ v.double()
        print("alibi error", float((out.double() - expected).abs().max()))
        out = attnlib.scaled_dot_product_attention(q, k, v, bias, softcap=2.0, backend="fused")
        capped = 2.0 * torch.tanh(q.double() @ k.double().mT / 4 / 2.0) + bias.double()
        expected = torch.softmax(capped, -1) @ v.double()
        print("softcap ran, error", float((out.double() - expected).abs().max()))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    error = float(result.stdout.split("alibi error ")[1].split()[0])
    assert error < 1e-5
    assert float(result.stdout.split("softcap ran, error ")[1].split()[0]) < 1e-5


@pytest.mark.parametrize("kwargs, error, words", [
    ({"n_heads": 0}, ValueError, "n_heads must be at least 1"),
    ({"n_heads": 2.0}, TypeError, "n_heads must be an int"),
    ({"n_heads": True}, TypeError, "n_heads must be an int"),
    ({"query_len": -1}, ValueError, "query_len must be at least 0"),
    ({"key_len": 3.5}, TypeError, "key_len must be an int"),
    ({"alignment": "bottom-right"}, ValueError, "alignment must be one of"),
    ({"causal": 1}, TypeError, "causal must be a bool"),
    ({"dtype": torch.int32}, TypeError, "dtype must be a floating"),
])
def test_alibi_rejects_bad_input_by_name(kwargs, error, words):
    arguments = {"n_heads": 4, "query_len": 3, "key_len": 5, **kwargs}
    with pytest.raises(error, match=words):
        alibi(**arguments)


def test_sympy_rotated_score_equals_the_relative_form():
    from attnlib.book.theory import positions as rope_theory
    assert rope_theory.relative_form_residual() == 0


@pytest.mark.parametrize("mean_q, cov_q, mean_k, cov_k", [
    ([0, 0], [[1, 0], [0, 1]], [0, 0], [[1, 0], [0, 1]]),
    ([0.3, -0.2], [[1, 0], [0, 1]], [0.5, 0.1], [[2, 0], [0, 2]]),
    ([0, 0], [[1, 0.8], [0.8, 1]], [0, 0], [[1, 0.8], [0.8, 1]]),
    ([0.4, 0.1], [[2, 0.3], [0.3, 0.5]], [-0.2, 0.7], [[1, -0.4], [-0.4, 3]]),
])
def test_sympy_moments_match_the_trace_formula(mean_q, cov_q, mean_k, cov_k):
    """For independent q, k: E[q^T R k] = a^T R b and
    Var = tr(R S_k R^T S_q) + a^T R S_k R^T a + b^T R^T S_q R b (a, b means; S covariances)."""
    from attnlib.book.theory import positions as rope_theory
    mean, variance = rope_theory.rotated_score_moments(mean_q, cov_q, mean_k, cov_k)
    a, b = np.array(mean_q), np.array(mean_k)
    s_q, s_k = np.array(cov_q), np.array(cov_k)
    for angle in [0.0, 0.3, 1.0, 2.5, -4.0]:
        r = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        expected_variance = np.trace(r @ s_k @ r.T @ s_q) + a @ r @ s_k @ r.T @ a + b @ r.T @ s_q @ r @ b
        point = {rope_theory.phi: angle}
        assert abs(float(mean.subs(point)) - a @ r @ b) < 1e-12
        assert abs(float(variance.subs(point)) - expected_variance) < 1e-12


def test_sympy_moments_refuse_a_polynomial_above_second_moments():
    from attnlib.book.theory import positions as rope_theory
    with pytest.raises(ValueError, match="moments above the second"):
        rope_theory._expectation(rope_theory.q1**3, [0, 0], np.eye(2), [0, 0], np.eye(2))
