"""attnlib.book.montecarlo: unbiased, calibrated, memory-bounded, deterministic, and strict about its input.

True values come from closed forms written here: Var(q.k) = d and, for
Gaussian coordinates, mu_4(q.k) = 3 d^2 + 6 d (so Var(S^2) = (mu_4 - (N-3)/(N-1) d^2)/N).
"""
import math
import tracemalloc

import numpy as np
import pytest
from scipy import stats

from attnlib.book import montecarlo as mc

REPETITIONS = 300


@pytest.fixture(scope="module")
def repeated_gaussian_estimates():
    d, n = 4, 400
    return d, n, [mc.estimate_score_variance(d, n, "gaussian", seed=seed, progress=False)
                  for seed in range(REPETITIONS)]


def test_estimator_is_unbiased(repeated_gaussian_estimates):
    d, n, estimates = repeated_gaussian_estimates
    mu4 = 3 * d**2 + 6 * d
    sd_of_mean = math.sqrt((mu4 - (n - 3) / (n - 1) * d**2) / n / len(estimates))
    mean = np.mean([e.variance for e in estimates])
    assert abs(mean - d) < 4 * sd_of_mean


def test_confidence_interval_is_calibrated(repeated_gaussian_estimates):
    d, _, estimates = repeated_gaussian_estimates
    covered = sum(e.covers(d) for e in estimates)
    assert stats.binomtest(covered, len(estimates), 0.95).pvalue > 0.01


def test_interval_width_matches_the_closed_form_fourth_moment():
    d, n = 16, 20000
    estimate = mc.estimate_score_variance(d, n, "gaussian", seed=7)
    mu4 = 3 * d**2 + 6 * d
    expected_half = 1.959963984540054 * math.sqrt((mu4 - (n - 3) / (n - 1) * d**2) / n)
    assert estimate.half_width == pytest.approx(expected_half, rel=0.1)


@pytest.mark.parametrize("distribution", sorted(mc.DISTRIBUTIONS))
def test_each_distribution_has_unit_variance_coordinates(distribution):
    # d = 1: the score is the product of two coordinates, whose variance is 1 * 1.
    q, k = mc.independent_pairs(distribution, 1).draw(np.random.default_rng(0), 200_000)
    assert q.var() == pytest.approx(1, abs=0.03) and abs(q.mean()) < 0.02
    assert mc.estimate_score_variance(64, 20000, distribution, seed=1).covers(64)


def test_deterministic_under_a_seed():
    first = mc.estimate_score_variance(32, 5000, "student_t5", seed=11)
    again = mc.estimate_score_variance(32, 5000, "student_t5", seed=11)
    other = mc.estimate_score_variance(32, 5000, "student_t5", seed=12)
    assert first == again
    assert first.variance != other.variance


def test_chunking_does_not_change_the_result():
    budget = mc.NUMPY_BUFFER_RESERVE + 40 * 2 * 64 * 8  # 40 pairs per chunk
    small = mc.estimate_score_variance(64, 3000, "gaussian", seed=5, memory_budget_bytes=budget)
    large = mc.estimate_score_variance(64, 3000, "gaussian", seed=5)
    assert small.n_chunks == 75 and large.n_chunks == 1
    assert small.variance == pytest.approx(large.variance, rel=1e-12)


def sampler_cases():
    return [
        mc.independent_pairs("rademacher", 96),
        mc.independent_pairs("gaussian", 96, mean_q=0.5, std_k=np.linspace(0.5, 1.5, 96)),
        mc.equicorrelated_pairs(96, 0.2),
        mc.layernorm_projection_pairs(128, 96, weight_std=0.1, seed=0),
    ]


@pytest.mark.parametrize("sampler", sampler_cases(), ids=lambda s: s.name)
@pytest.mark.parametrize("budget", [300_000, 2_000_000])
def test_a_chunk_never_exceeds_its_budget(sampler, budget):
    n = 20000
    # a first call imports what the estimator loads lazily (tqdm's lock, ...): code, not chunk memory
    mc.estimate_score_variance(sampler.d, 10, sampler, memory_budget_bytes=budget)
    tracemalloc.start()
    try:
        estimate = mc.estimate_score_variance(sampler.d, n, sampler, memory_budget_bytes=budget)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    scores_bytes = 8 * n
    assert estimate.n_chunks > 1 and estimate.chunk_bytes <= budget
    assert peak - scores_bytes <= budget


def test_sampler_is_never_asked_for_more_rows_than_the_budget_allows():
    inner = mc.independent_pairs("uniform", 50)
    requested = []

    def recording_draw(rng, rows):
        requested.append(rows)
        return inner.draw(rng, rows)

    sampler = mc.PairSampler("recorded", 50, recording_draw, inner.bytes_per_row)
    budget = 500_000
    mc.estimate_score_variance(50, 10_001, sampler, memory_budget_bytes=budget)
    assert sum(requested) == 10_001
    assert max(requested) * 2 * 50 * 8 <= budget - mc.NUMPY_BUFFER_RESERVE


def test_bootstrap_interval_agrees_with_the_moment_interval():
    moments = mc.estimate_score_variance(16, 4000, "gaussian", seed=3)
    boot = mc.estimate_score_variance(16, 4000, "gaussian", seed=3, ci="bootstrap", n_bootstrap=400)
    assert boot.variance == moments.variance
    assert boot.half_width == pytest.approx(moments.half_width, rel=0.2)
    assert boot.ci_low < boot.variance < boot.ci_high


def test_scale_divides_the_variance_by_its_square():
    raw = mc.estimate_score_variance(256, 4000, "uniform", seed=9)
    scaled = mc.estimate_score_variance(256, 4000, "uniform", seed=9, scale=1 / 16)
    assert scaled.variance == pytest.approx(raw.variance / 256, rel=1e-12)


def test_correlated_pairs_follow_the_derived_variance():
    d, rho = 32, 0.3
    estimate = mc.estimate_score_variance(d, 20000, mc.equicorrelated_pairs(d, rho), seed=2)
    assert estimate.covers(d + d * (d - 1) * rho**2)


def test_layernorm_projection_follows_the_derived_variance():
    d_model, d_k = 256, 32
    sampler = mc.layernorm_projection_pairs(d_model, d_k, weight_std=1 / math.sqrt(d_model), seed=4)
    estimate = mc.estimate_score_variance(d_k, 20000, sampler, seed=4)
    assert estimate.variance / d_k == pytest.approx(1.0, abs=0.1)


def test_sweep_covers_every_cell_with_its_own_seed():
    results = mc.sweep(["gaussian", "rademacher"], [1, 8], 500, seed=0, progress=False)
    assert [(r.label, r.d) for r in results] == [("gaussian", 1), ("gaussian", 8), ("rademacher", 1), ("rademacher", 8)]
    assert len({r.variance for r in results}) == 4


# Bad input: one test per case, each naming the argument.

def test_rejects_d_below_one():
    with pytest.raises(ValueError, match="d must be >= 1"):
        mc.estimate_score_variance(0, 100)


def test_rejects_non_integer_d():
    with pytest.raises(TypeError, match="d must be an integer, got float"):
        mc.estimate_score_variance(4.0, 100)


def test_rejects_fewer_than_two_samples():
    with pytest.raises(ValueError, match="n_samples must be >= 2"):
        mc.estimate_score_variance(4, 1)


def test_rejects_unknown_distribution():
    with pytest.raises(ValueError, match="distribution must be one of"):
        mc.estimate_score_variance(4, 100, "cauchy")


def test_rejects_a_distribution_of_the_wrong_type():
    with pytest.raises(TypeError, match="distribution must be a name or a PairSampler"):
        mc.estimate_score_variance(4, 100, 3)


def test_rejects_a_sampler_of_another_dimension():
    with pytest.raises(ValueError, match="distribution draws vectors of dimension 8, but d is 4"):
        mc.estimate_score_variance(4, 100, mc.independent_pairs("gaussian", 8))


def test_rejects_a_budget_that_cannot_hold_one_pair():
    with pytest.raises(ValueError, match="memory_budget_bytes must hold"):
        mc.estimate_score_variance(4, 100, memory_budget_bytes=1000)


def test_rejects_an_unknown_interval_method():
    with pytest.raises(ValueError, match="ci must be 'moments' or 'bootstrap'"):
        mc.estimate_score_variance(4, 100, ci="exact")


def test_rejects_a_level_outside_zero_one():
    with pytest.raises(ValueError, match="level must be strictly between 0 and 1"):
        mc.estimate_score_variance(4, 100, level=95)


def test_rejects_a_negative_seed():
    with pytest.raises(ValueError, match="seed must be >= 0"):
        mc.estimate_score_variance(4, 100, seed=-1)


def test_rejects_a_correlation_outside_zero_one():
    with pytest.raises(ValueError, match="rho must be in"):
        mc.equicorrelated_pairs(4, 1.5)


def test_rejects_per_coordinate_deviations_of_the_wrong_length():
    with pytest.raises(ValueError, match="std_k must be one number or 8 numbers"):
        mc.independent_pairs("gaussian", 8, std_k=[1.0, 2.0])


def test_sweep_rejects_unknown_distribution():
    with pytest.raises(ValueError, match="distribution must be one of"):
        mc.sweep(["gaussian", "laplace"], [1], 10)


def test_draw_scores_returns_the_scores_the_estimate_summarises():
    scores = mc.draw_scores(8, 3000, "rademacher", seed=4)
    estimate = mc.estimate_score_variance(8, 3000, "rademacher", seed=4)
    assert scores.shape == (3000,) and set(np.unique(scores)) <= set(range(-8, 9, 2))
    assert estimate.variance == pytest.approx(scores.var(ddof=1), rel=1e-12)
