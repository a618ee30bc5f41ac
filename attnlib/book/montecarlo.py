"""Monte Carlo estimates of Var(q.k), with confidence intervals, in bounded memory.

:func:`estimate_score_variance` draws N pairs (q, k) of d-vectors, forms the
scores s_n = scale * q_n . k_n and returns the unbiased sample variance

    S^2 = 1/(N-1) sum_n (s_n - mean(s))^2

with a confidence interval. The pairs are drawn in chunks: a chunk's arrays,
the temporaries its sampler makes and NumPy's iteration buffers never exceed
``memory_budget_bytes``; besides them the estimator keeps one float64 score
per pair (8 N bytes).
Everything is drawn with NumPy, whose allocations ``tracemalloc`` sees, so the
budget can be checked from outside.

The interval: S^2 is asymptotically normal with variance

    Var(S^2) = (mu_4 - (N-3)/(N-1) sigma^4) / N                      (Chapter 2)

where mu_4 is the fourth central moment of the score; ``ci="moments"`` puts
the sample's mu_4 and S^2 into it, ``ci="bootstrap"`` resamples the scores
instead (percentile interval) and needs no formula.
"""
from __future__ import annotations

import math
import numbers
import statistics
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from tqdm import tqdm

from .theory.variance import sample_variance_variance

FLOAT_BYTES = 8
#: Default working memory for one chunk of pairs: 16 MiB.
DEFAULT_MEMORY_BUDGET = 16 * 2**20
#: Part of every budget kept for NumPy's iteration buffers (np.getbufsize() elements each),
#: which broadcasting in-place operations allocate besides the arrays themselves.
NUMPY_BUFFER_RESERVE = 2 * np.getbufsize() * FLOAT_BYTES
#: Show a progress bar (on stderr) when a run has more than this many chunks.
PROGRESS_MIN_CHUNKS = 16


@dataclass(frozen=True)
class PairSampler:
    """Draws pairs of d-vectors: ``draw(rng, rows) -> (q, k)``, each of shape ``(rows, d)``.

    ``bytes_per_row`` is the most memory one row of the pair occupies while it
    is drawn (arrays and temporaries), which sets the chunk size.
    """

    name: str
    d: int
    draw: Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]
    bytes_per_row: int


def _draw_gaussian(rng, shape):
    return rng.standard_normal(shape)


def _draw_rademacher(rng, shape):
    signs = rng.integers(0, 2, size=shape, dtype=np.int8).astype(np.float64)
    signs *= 2.0
    signs -= 1.0
    return signs


def _draw_uniform(rng, shape):
    bound = math.sqrt(3.0)  # U(-sqrt 3, sqrt 3) has variance 1
    return rng.uniform(-bound, bound, size=shape)


def _draw_student_t5(rng, shape):
    values = rng.standard_t(5, size=shape)
    values *= math.sqrt(3.0 / 5.0)  # Student-t(5) has variance 5/3
    return values


#: Zero-mean, unit-variance coordinate distributions: name -> (draw(rng, shape), extra bytes per value).
DISTRIBUTIONS: dict[str, tuple[Callable, int]] = {
    "gaussian": (_draw_gaussian, 0),
    "rademacher": (_draw_rademacher, 1),  # the int8 signs exist beside their float copy
    "uniform": (_draw_uniform, 0),
    "student_t5": (_draw_student_t5, 0),
}


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_distribution(distribution: str) -> None:
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {sorted(DISTRIBUTIONS)}, got {distribution!r}")


def _per_coordinate(name: str, std, d: int) -> np.ndarray:
    values = np.asarray(std, dtype=np.float64)
    if values.ndim > 1 or values.size not in (1, d):
        raise ValueError(f"{name} must be one number or {d} numbers (one per coordinate), got shape {values.shape}")
    return np.broadcast_to(values, (d,))


def independent_pairs(distribution: str, d: int, *, mean_q: float = 0.0, mean_k: float = 0.0,
                      std_q: float | Sequence[float] = 1.0, std_k: float | Sequence[float] = 1.0) -> PairSampler:
    """q and k with independent coordinates of a named distribution: q_i = mean_q + std_q[i] z_i.

    ``std_q``/``std_k`` may be one number or one per coordinate (unequal variances).
    """
    _check_distribution(distribution)
    d = _check_int("d", d, 1)
    draw_coordinates, extra_bytes = DISTRIBUTIONS[distribution]
    scale = np.stack([_per_coordinate(name, std, d) for name, std in (("std_q", std_q), ("std_k", std_k))])
    shift = np.array([[mean_q], [mean_k]], dtype=np.float64)
    standard = bool(np.all(scale == 1.0) and np.all(shift == 0.0))

    def draw(rng, rows):
        # One draw for both vectors: chunked runs then see the same stream as one big run.
        pair = draw_coordinates(rng, (rows, 2, d))
        if not standard:
            pair *= scale
            pair += shift
        return pair[:, 0], pair[:, 1]

    return PairSampler(distribution, d, draw, 2 * d * (FLOAT_BYTES + extra_bytes))


def equicorrelated_pairs(d: int, rho: float) -> PairSampler:
    """Gaussian q, k, independent of each other, unit variance, Corr(q_i, q_j) = Corr(k_i, k_j) = rho (i != j).

    q = sqrt(rho) z_0 + sqrt(1 - rho) z with one shared z_0 per vector.
    """
    d = _check_int("d", d, 1)
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must be in [0, 1], got {rho}")

    def draw(rng, rows):
        pair = rng.standard_normal((rows, 2, d))
        pair *= math.sqrt(1.0 - rho)
        pair += math.sqrt(rho) * rng.standard_normal((rows, 2, 1))
        return pair[:, 0], pair[:, 1]

    return PairSampler(f"equicorrelated rho={rho}", d, draw, 2 * (d + 2) * FLOAT_BYTES)


def layernorm_projection_pairs(d_model: int, d_k: int, *, weight_std: float, seed: int,
                               layer_norm: bool = True, input_mean: float = 0.0,
                               input_std: float = 1.0) -> PairSampler:
    """Scores of a freshly initialised attention layer: q = W_q x, k = W_k y.

    x, y in R^d_model are two tokens with independent coordinates
    N(input_mean, input_std^2), normalised by LayerNorm (no affine part) when
    ``layer_norm``. W_q, W_k (d_k x d_model) are drawn once from N(0, weight_std^2)
    with ``seed`` and kept fixed, as in a model at initialisation; the Monte
    Carlo then averages over tokens.
    """
    d_model = _check_int("d_model", d_model, 2)
    d_k = _check_int("d_k", d_k, 1)
    weights_rng = np.random.default_rng(seed)
    w_q, w_k = weight_std * weights_rng.standard_normal((2, d_model, d_k))

    def draw(rng, rows):
        tokens = rng.standard_normal((rows, 2, d_model))
        tokens *= input_std
        tokens += input_mean
        if layer_norm:
            tokens -= tokens.mean(axis=-1, keepdims=True)
            tokens /= np.sqrt(tokens.var(axis=-1, keepdims=True) + 1e-5)  # torch's default eps
        return tokens[:, 0] @ w_q, tokens[:, 1] @ w_k

    # tokens, one temporary of the same size in var(), and the two projections
    name = f"{'LayerNorm, ' if layer_norm else ''}d_model={d_model}, weight std {weight_std:.4g}"
    return PairSampler(name, d_k, draw, (4 * d_model + 2 * d_k + 4) * FLOAT_BYTES)


@dataclass(frozen=True)
class VarianceEstimate:
    """The sample variance of N scores with its confidence interval and how it was computed."""

    label: str
    d: int
    n_samples: int
    scale: float
    mean: float
    variance: float
    ci_low: float
    ci_high: float
    level: float
    fourth_central_moment: float
    chunk_rows: int
    n_chunks: int
    chunk_bytes: int
    memory_budget_bytes: int

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    def covers(self, value: float) -> bool:
        """Whether the interval contains ``value``."""
        return self.ci_low <= value <= self.ci_high

    def relative_to(self, value: float) -> tuple[float, float, float]:
        """(S^2/value - 1, ci_low/value - 1, ci_high/value - 1)."""
        return self.variance / value - 1, self.ci_low / value - 1, self.ci_high / value - 1


def chunk_rows(sampler: PairSampler, n_samples: int, memory_budget_bytes: int) -> int:
    """The most pairs per chunk whose working memory fits the budget (at most n_samples)."""
    rows = (memory_budget_bytes - NUMPY_BUFFER_RESERVE) // sampler.bytes_per_row
    if rows < 1:
        raise ValueError(f"memory_budget_bytes must hold NumPy's buffers ({NUMPY_BUFFER_RESERVE} bytes) and "
                         f"one pair ({sampler.bytes_per_row} bytes at d={sampler.d}), got {memory_budget_bytes}")
    return min(rows, n_samples)


def _central_moments(scores: np.ndarray, block: int) -> tuple[float, float, float]:
    """(mean, m2, m4) of ``scores`` with divisor N, visiting at most ``block`` values at a time."""
    mean = float(scores.mean())
    m2 = m4 = 0.0
    for start in range(0, len(scores), block):
        centered = scores[start:start + block] - mean
        squared = centered * centered
        m2 += float(squared.sum())
        m4 += float((squared * squared).sum())
    return mean, m2 / len(scores), m4 / len(scores)


def _bootstrap_interval(scores, rng, n_bootstrap, level, memory_budget_bytes):
    n = len(scores)
    per_resample = 3 * n * FLOAT_BYTES  # the indices, the resampled scores and var()'s temporary
    batch = (memory_budget_bytes - NUMPY_BUFFER_RESERVE) // per_resample
    if batch < 1:
        raise ValueError(f"memory_budget_bytes must hold one bootstrap resample of {n} scores "
                         f"({per_resample} bytes), got {memory_budget_bytes}")
    variances = []
    for start in range(0, n_bootstrap, batch):
        rows = min(batch, n_bootstrap - start)
        resampled = scores[rng.integers(0, n, size=(rows, n))]
        variances.append(resampled.var(axis=1, ddof=1))
    variances = np.concatenate(variances)
    tail = (1 - level) / 2
    return float(np.quantile(variances, tail)), float(np.quantile(variances, 1 - tail))


def _resolve_sampler(d: int, distribution: str | PairSampler) -> PairSampler:
    if isinstance(distribution, PairSampler):
        if distribution.d != d:
            raise ValueError(f"distribution draws vectors of dimension {distribution.d}, but d is {d}")
        return distribution
    if isinstance(distribution, str):
        return independent_pairs(distribution, d)
    raise TypeError(f"distribution must be a name or a PairSampler, got {type(distribution).__name__}")


def _scores_in_chunks(sampler: PairSampler, n_samples: int, rng: np.random.Generator, rows: int,
                      scale: float, progress: bool | None) -> np.ndarray:
    n_chunks = math.ceil(n_samples / rows)
    scores = np.empty(n_samples)
    show = n_chunks > PROGRESS_MIN_CHUNKS if progress is None else progress
    for start in tqdm(range(0, n_samples, rows), total=n_chunks, disable=not show, file=sys.stderr,
                      desc=f"{sampler.name}, d={sampler.d}", leave=False):
        q, k = sampler.draw(rng, min(rows, n_samples - start))
        np.einsum("nd,nd->n", q, k, out=scores[start:start + len(q)])
        del q, k  # free this chunk before the next one is drawn
    if scale != 1.0:
        scores *= scale
    return scores


def draw_scores(d: int, n_samples: int, distribution: str | PairSampler = "gaussian", *, seed: int = 0,
                scale: float = 1.0, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                progress: bool | None = None) -> np.ndarray:
    """The scores ``scale * q_n . k_n`` of ``n_samples`` seeded pairs, shape ``(n_samples,)``, drawn in chunks.

    The same scores :func:`estimate_score_variance` summarises with the same arguments.
    """
    d = _check_int("d", d, 1)
    n_samples = _check_int("n_samples", n_samples, 2)
    seed = _check_int("seed", seed, 0)
    memory_budget_bytes = _check_int("memory_budget_bytes", memory_budget_bytes, 1)
    sampler = _resolve_sampler(d, distribution)
    rows = chunk_rows(sampler, n_samples, memory_budget_bytes)
    return _scores_in_chunks(sampler, n_samples, np.random.default_rng(seed), rows, scale, progress)


def estimate_score_variance(d: int, n_samples: int, distribution: str | PairSampler = "gaussian", *,
                            seed: int = 0, scale: float = 1.0, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
                            ci: str = "moments", level: float = 0.95, n_bootstrap: int = 1000,
                            progress: bool | None = None) -> VarianceEstimate:
    """Sample variance of ``scale * q.k`` over ``n_samples`` seeded pairs, with a confidence interval.

    ``distribution``: a name in DISTRIBUTIONS (independent zero-mean, unit-variance
    coordinates) or a :class:`PairSampler` of dimension ``d``. ``ci``: ``"moments"``
    (normal interval from the sample's fourth central moment) or ``"bootstrap"``.
    ``progress``: a tqdm bar on stderr; by default only for runs of more than
    PROGRESS_MIN_CHUNKS chunks.
    """
    d = _check_int("d", d, 1)
    n_samples = _check_int("n_samples", n_samples, 2)
    seed = _check_int("seed", seed, 0)
    memory_budget_bytes = _check_int("memory_budget_bytes", memory_budget_bytes, 1)
    if ci not in ("moments", "bootstrap"):
        raise ValueError(f"ci must be 'moments' or 'bootstrap', got {ci!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level}")
    sampler = _resolve_sampler(d, distribution)
    rows = chunk_rows(sampler, n_samples, memory_budget_bytes)
    rng = np.random.default_rng(seed)
    scores = _scores_in_chunks(sampler, n_samples, rng, rows, scale, progress)

    mean, m2, m4 = _central_moments(scores, block=rows * sampler.bytes_per_row // (3 * FLOAT_BYTES) or 1)
    variance = m2 * n_samples / (n_samples - 1)
    if ci == "moments":
        spread = math.sqrt(max(sample_variance_variance(m4, variance, n_samples), 0.0))
        half = statistics.NormalDist().inv_cdf((1 + level) / 2) * spread
        low, high = variance - half, variance + half
    else:
        low, high = _bootstrap_interval(scores, rng, _check_int("n_bootstrap", n_bootstrap, 1), level,
                                        memory_budget_bytes)
    return VarianceEstimate(sampler.name, d, n_samples, scale, mean, variance, low, high, level, m4,
                            rows, math.ceil(n_samples / rows), rows * sampler.bytes_per_row, memory_budget_bytes)


def sweep_seed(seed: int, distribution: str, d: int) -> int:
    """An independent seed for one (distribution, d) cell of a sweep, derived from ``seed``."""
    index = sorted(DISTRIBUTIONS).index(distribution)
    return int(np.random.SeedSequence([seed, index, d]).generate_state(1)[0])


def sweep(distributions: Sequence[str], dims: Sequence[int], n_samples: int, *, seed: int = 0,
          memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET, progress: bool = True) -> list[VarianceEstimate]:
    """:func:`estimate_score_variance` for every distribution and d, each cell with its own derived seed."""
    for distribution in distributions:
        _check_distribution(distribution)
    cells = [(name, _check_int("d", d, 1)) for name in distributions for d in dims]
    return [
        estimate_score_variance(d, n_samples, name, seed=sweep_seed(seed, name, d),
                                memory_budget_bytes=memory_budget_bytes, progress=False)
        for name, d in tqdm(cells, disable=not progress, file=sys.stderr, desc="sweep")
    ]


#: The sweep of Chapter 3 and benchmarks/montecarlo_sweep.py: d = 1, 2, 4, ..., 1024.
CHAPTER_SWEEP = {
    "distributions": ("gaussian", "rademacher", "uniform", "student_t5"),
    "dims": tuple(2**p for p in range(11)),
    "n_samples": 20000,
    "seed": 0,
}


def largest_relative_deviation(results: Sequence[VarianceEstimate]) -> tuple[VarianceEstimate, tuple[float, float, float]]:
    """The estimate whose S^2/d is farthest from 1, with (S^2/d - 1, ci_low/d - 1, ci_high/d - 1)."""
    worst = max(results, key=lambda e: abs(e.variance / e.d - 1))
    return worst, worst.relative_to(worst.d)
