"""Why attention divides by sqrt(d_k): the moments of the score q.k, derived with SymPy.

The model (Chapter 2): ``q, k`` in R^d, the coordinates of each vector
independent, ``q`` independent of ``k``; the score is

    s = q . k = sum_{a=0}^{d-1} q_a k_a.

Coordinates are indexed by ``a`` from 0, as in the book's notation.

Two rules do all the work, and both are SymPy manipulations here, not typed-in
results:

* the expectation of a product of independent factors is the product of their
  expectations (:func:`apply_independence`);
* the variance of a sum of independent terms is the sum of their variances,
  because every covariance between the terms vanishes by the first rule.

Every ``derive_*`` function returns the derivation as a list of :class:`Step`
(a reason and an equation whose right side was computed from the previous
one); the final right side is the result. The chapters display the steps, the
tests compare the results with closed forms and with exact enumeration.
"""
from __future__ import annotations

import re

import functools
import itertools
import numbers
import textwrap
from dataclasses import dataclass

import numpy as np
import sympy as sp
import sympy.stats as stats
from sympy.stats import Covariance, Expectation, Variance
from sympy.stats.rv import RandomSymbol

#: The dimension d of q and k (d_k in attention), kept symbolic.
d = sp.Symbol("d", integer=True, positive=True)
#: Summation index over coordinates (from 0), and over the input of a projection (Chapter 3).
a = sp.Symbol("a", integer=True, nonnegative=True)
m = sp.Symbol("m", integer=True, positive=True)
#: Means and standard deviations of one coordinate of q and of k.
mu_q, mu_k = sp.symbols("mu_q mu_k", real=True)
sigma_q, sigma_k = sp.symbols("sigma_q sigma_k", positive=True)
#: Correlation between two different coordinates of q (of k).
rho_q, rho_k = sp.symbols("rho_q rho_k", real=True)
#: The exponent in the scale 1/d**lam (lambda: ``a`` is the coordinate index).
lam = sp.Symbol("lambda", real=True)
#: Width of the layer input and weight variance of the projections (Chapter 3).
d_model = sp.Symbol("d_model", integer=True, positive=True)
d_k = sp.Symbol("d_k", integer=True, positive=True)
sigma_w = sp.Symbol("sigma_w", positive=True)

#: Zero-mean, unit-variance coordinate distributions, as sympy.stats variables.
COORDINATE_DISTRIBUTIONS = {
    "gaussian": lambda name: stats.Normal(name, 0, 1),
    "rademacher": lambda name: stats.Rademacher(name),
    "uniform": lambda name: stats.Uniform(name, -sp.sqrt(3), sp.sqrt(3)),
    # Student-t has variance nu/(nu-2) = 5/3; the factor brings it to 1.
    "student_t5": lambda name: sp.sqrt(sp.Rational(3, 5)) * stats.StudentT(name, 5),
}

#: Weight variance sigma_w^2 of three common initialisations of a d_model -> d_k projection.
INIT_WEIGHT_VARIANCES = {
    # nn.Linear's default: kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    "pytorch_default": 1 / (3 * d_model),
    "xavier": 2 / (d_model + d_k),
    "lecun": 1 / d_model,
}


@dataclass(frozen=True)
class Step:
    """One line of a derivation: ``equation`` follows from the previous line by ``reason``."""

    reason: str
    equation: sp.Eq


# shown characters per line of a derivation: it then fits a phone's column (about 290 px)
LINE_WIDTH = 30


def steps_latex(steps, width: int = LINE_WIDTH) -> str:
    """The steps as one LaTeX ``aligned`` block: each equation, its reason on the lines below.

    The reason goes below rather than beside its equation, wrapped at ``width``
    characters, so that the block stays as narrow as its widest equation, and
    fits a book's column.
    """
    lines = []
    for step in steps:
        reason = textwrap.wrap(f"({step.reason})", width)
        lines.append(rf"{sp.latex(step.equation.lhs)} &= {sp.latex(step.equation.rhs)} \\ "
                     + r" \\ ".join(rf"&\qquad \text{{{line}}}" for line in reason))
    return r"\begin{aligned}" + r" \\[4pt] ".join(lines) + r"\end{aligned}"


def _visible_length(latex: str) -> int:
    """Roughly how many characters ``latex`` shows: commands, braces and scripts removed."""
    shown = re.sub(r"\\operatorname\{(\w+)\}", r"\1", latex)
    shown = re.sub(r"\\(left|right|cdot|,|;|quad)", "", shown)
    shown = re.sub(r"\\[a-zA-Z]+", "x", shown)
    return len(re.sub(r"[{}_^ ]", "", shown))


def equation_latex(lhs: sp.Expr, rhs: sp.Expr, width: int = LINE_WIDTH) -> str:
    """``lhs = rhs`` as an ``aligned`` block whose long sums continue on further lines.

    The terms of ``rhs``, when it is a sum, fill each line up to about
    ``width`` shown characters, so that a derivation fits a book's column
    instead of running past it; a product or a single term stays whole.
    """
    terms = [sp.latex(term) for term in sp.Add.make_args(rhs)]
    if len(terms) == 1 or _visible_length(" + ".join(terms)) <= width:
        return rf"\begin{{aligned}}{sp.latex(lhs)} &= {sp.latex(rhs)}\end{{aligned}}"
    lines, current = [], ""
    for term in terms:
        joined = term if not current else (f"{current} {term}" if term.startswith("-")
                                           else f"{current} + {term}")
        if current and _visible_length(joined) > width:
            lines.append(current)
            joined = term
        current = joined
    lines.append(current)
    continued = [line if line.startswith("-") else f"+ {line}" for line in lines[1:]]
    body = r" \\ &\quad ".join([lines[0], *continued])
    return rf"\begin{{aligned}}{sp.latex(lhs)} &= {body}\end{{aligned}}"


def _eq(lhs, rhs) -> sp.Eq:
    """An equation kept as written, even when both sides are equal."""
    return sp.Eq(lhs, rhs, evaluate=False)


def random_coordinate(name: str) -> RandomSymbol:
    """A random coordinate with no distribution attached: only its moments appear."""
    return RandomSymbol(sp.Symbol(name, real=True))


q, k = random_coordinate("q_a"), random_coordinate("k_a")


def apply_independence(expr: sp.Expr, dependent: tuple[frozenset, ...] = ()) -> sp.Expr:
    """Factor each ``E[product]`` in ``expr`` into a product of expectations.

    E[X^a Y^b ...] = E[X^a] E[Y^b] ... when X, Y, ... are independent. Random
    symbols listed together in one set of ``dependent`` stay inside one
    expectation (e.g. two coordinates of a correlated vector); every other
    random symbol is independent of all the others.
    """

    def group_of(symbol: RandomSymbol) -> frozenset:
        return next((group for group in dependent if symbol in group), frozenset({symbol}))

    def factor(expectation: Expectation) -> sp.Expr:
        pulled = expectation.expand()  # linearity: sums split, constants move out
        if pulled != expectation:
            return pulled.replace(lambda e: isinstance(e, Expectation), factor)
        by_group: dict[frozenset, list[sp.Expr]] = {}
        for power in sp.Mul.make_args(expectation.args[0]):
            base = power.as_base_exp()[0]
            by_group.setdefault(group_of(base), []).append(power)
        return sp.Mul(*(Expectation(sp.Mul(*powers)) for powers in by_group.values()))

    return expr.replace(lambda e: isinstance(e, Expectation), factor)


def second_moment(x: RandomSymbol, mean: sp.Expr, std: sp.Expr) -> dict:
    """``{E[x]: mean, E[x^2]: std^2 + mean^2}``, solved from Var(x) = E[x^2] - E[x]^2."""
    definition = sp.Eq(std**2, Variance(x).rewrite(Expectation).subs(Expectation(x), mean))
    (raw,) = sp.solve(definition, Expectation(x**2))
    return {Expectation(x): mean, Expectation(x**2): raw}


def _moments_of_q_and_k() -> dict:
    return {**second_moment(q, mu_q, sigma_q), **second_moment(k, mu_k, sigma_k)}


@functools.lru_cache(maxsize=None)
def derive_product_mean() -> tuple[Step, ...]:
    """E[q_a k_a] = E[q_a] E[k_a] = mu_q mu_k."""
    lhs = Expectation(q * k)
    factored = apply_independence(lhs)
    return (
        Step("independent factors: the expectation of the product is the product of expectations", _eq(lhs, factored)),
        Step("insert the means", _eq(lhs, factored.subs(_moments_of_q_and_k()))),
    )


@functools.lru_cache(maxsize=None)
def derive_product_variance() -> tuple[Step, ...]:
    """Var(q_a k_a) = sigma_q^2 sigma_k^2 + mu_q^2 sigma_k^2 + mu_k^2 sigma_q^2."""
    lhs = Variance(q * k)
    definition = lhs.rewrite(Expectation)
    factored = apply_independence(definition)
    moments = sp.expand(factored.subs(_moments_of_q_and_k()))
    return (
        Step("definition of the variance", _eq(lhs, definition)),
        Step("independence, applied to both products", _eq(lhs, factored)),
        Step("insert means and second moments (variance plus squared mean)", _eq(lhs, moments)),
    )


@functools.lru_cache(maxsize=None)
def derive_covariance_of_terms() -> tuple[Step, ...]:
    """Cov(q_0 k_0, q_1 k_1) = 0: two terms of the sum share no coordinate."""
    q1, k1, q2, k2 = (random_coordinate(n) for n in ("q_0", "k_0", "q_1", "k_1"))
    lhs = Covariance(q1 * k1, q2 * k2)
    definition = lhs.rewrite(Expectation)
    return (
        Step("definition of the covariance", _eq(lhs, definition)),
        Step("four independent coordinates: both products factor alike",
             _eq(lhs, apply_independence(definition))),
    )


def derive_variances_add(n_terms: int = 3) -> tuple[Step, ...]:
    """Var(X_0 + ... + X_{n-1}) = Var(X_0) + ... + Var(X_{n-1}) for the terms X_a = q_a k_a."""
    qs = [random_coordinate(f"q_{a}") for a in range(n_terms)]
    ks = [random_coordinate(f"k_{a}") for a in range(n_terms)]
    lhs = Variance(sp.Add(*(qj * kj for qj, kj in zip(qs, ks))))
    expanded = lhs.expand()

    def vanish(cov: Covariance) -> sp.Expr:
        return apply_independence(cov.rewrite(Expectation))

    return (
        Step("variance of a sum: the variances plus twice every covariance", _eq(lhs, expanded)),
        Step("each covariance vanishes by independence",
             _eq(lhs, expanded.replace(lambda e: isinstance(e, Covariance), vanish))),
    )


@functools.lru_cache(maxsize=None)
def derive_score_moments() -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """E[s] = d mu_q mu_k and Var(s) = d Var(q_i k_i) for symbolic d.

    Returns ``(mean_steps, variance_steps)``. The sums are SymPy ``Sum`` objects
    over a = 0..d-1 whose terms are identical, so ``doit`` multiplies by d.
    """
    s = random_coordinate("s")
    mean_term = derive_product_mean()[-1].equation.rhs
    variance_term = derive_product_variance()[-1].equation.rhs
    mean_sum = sp.Sum(Expectation(q * k), (a, 0, d - 1))
    variance_sum = sp.Sum(Variance(q * k), (a, 0, d - 1))
    mean_steps = (
        Step("linearity of expectation over the d terms", _eq(Expectation(s), mean_sum)),
        Step("each term from the product rule", _eq(Expectation(s), mean_sum.subs(Expectation(q * k), mean_term))),
        Step("d identical terms", _eq(Expectation(s), sp.Sum(mean_term, (a, 0, d - 1)).doit())),
    )
    variance_steps = (
        Step("the d terms are independent, so their variances add", _eq(Variance(s), variance_sum)),
        Step("each term from the product rule",
             _eq(Variance(s), variance_sum.subs(Variance(q * k), variance_term))),
        Step("d identical terms", _eq(Variance(s), sp.factor(sp.Sum(variance_term, (a, 0, d - 1)).doit()))),
    )
    return mean_steps, variance_steps


STANDARD = {mu_q: 0, mu_k: 0, sigma_q: 1, sigma_k: 1}


def score_mean() -> sp.Expr:
    """E[q.k] = d mu_q mu_k (general means and variances)."""
    return derive_score_moments()[0][-1].equation.rhs


def score_variance() -> sp.Expr:
    """Var(q.k) = d (sigma_q^2 sigma_k^2 + mu_q^2 sigma_k^2 + mu_k^2 sigma_q^2)."""
    return derive_score_moments()[1][-1].equation.rhs


def _check_distribution(distribution: str) -> None:
    if distribution not in COORDINATE_DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {sorted(COORDINATE_DISTRIBUTIONS)}, "
                         f"got {distribution!r}")


@functools.lru_cache(maxsize=None)
def coordinate_moment(distribution: str, order: int) -> sp.Expr:
    """E[x^order] for one coordinate x of the named distribution, computed by sympy.stats.

    SymPy has no moment generating function for Student-t, so its moments are
    integrals of the density.
    """
    _check_distribution(distribution)
    x = COORDINATE_DISTRIBUTIONS[distribution]("x")
    try:
        return sp.nsimplify(sp.simplify(stats.E(x**order)))
    except NotImplementedError:
        (t_variable,) = x.free_symbols
        point = sp.Symbol("t", real=True)
        density = stats.density(t_variable)(point)
        raw = sp.integrate((x.subs(t_variable, point)) ** order * density, (point, -sp.oo, sp.oo))
        return sp.simplify(sp.gammasimp(raw.rewrite(sp.gamma)))


def product_moments_by_sympy_stats(distribution: str) -> dict[str, sp.Expr]:
    """E[q_a k_a] and Var(q_a k_a) computed directly by sympy.stats, with no rule of ours.

    q_a and k_a are two independent variables of the named distribution
    (gaussian, rademacher or uniform; sympy.stats cannot integrate the
    Student-t product this way).
    """
    _check_distribution(distribution)
    if distribution == "student_t5":
        raise ValueError("distribution must be gaussian, rademacher or uniform for the direct "
                         "sympy.stats computation, got 'student_t5'")
    x, y = (COORDINATE_DISTRIBUTIONS[distribution](name) for name in ("x", "y"))
    return {"mean": sp.simplify(stats.E(x * y)), "variance": sp.simplify(stats.variance(x * y))}


def score_variance_for(distribution: str) -> sp.Expr:
    """Var(q.k) for the named coordinate distribution: its mean and variance put into :func:`score_variance`."""
    mean = coordinate_moment(distribution, 1)
    std = sp.sqrt(coordinate_moment(distribution, 2) - mean**2)
    return sp.simplify(score_variance().subs({mu_q: mean, mu_k: mean, sigma_q: std, sigma_k: std}))


def _check_small_dimension(dimension, limit: int) -> int:
    if isinstance(dimension, bool) or not isinstance(dimension, numbers.Integral):
        raise TypeError(f"dimension must be an integer, got {type(dimension).__name__} {dimension!r}")
    if not 1 <= dimension <= limit:
        raise ValueError(f"dimension must be between 1 and {limit} (4**dimension patterns are "
                         f"enumerated), got {dimension}")
    return int(dimension)


def rademacher_enumeration(dimension: int) -> dict[str, int | sp.Rational]:
    """Exact moments of q.k for Rademacher q, k in {-1, 1}^dimension.

    Enumerates every one of the 2^(2*dimension) sign patterns of (q, k), each
    with probability 4^(-dimension), and returns the mean, the variance and the
    fourth central moment of q.k as exact rationals (integer sums divided by 4^d).
    """
    dimension = _check_small_dimension(dimension, limit=8)
    patterns = np.array(list(itertools.product((-1, 1), repeat=2 * dimension)), dtype=np.int64)
    scores = (patterns[:, :dimension] * patterns[:, dimension:]).sum(axis=1)
    count = len(scores)
    # Integer power sums make the moments exact: E[s^n] = (sum of s^n) / 4^d.
    raw = [sp.Rational(int((scores**n).sum()), count) for n in range(5)]
    mean = raw[1]
    return {
        "patterns": count,
        "mean": mean,
        "variance": raw[2] - mean**2,
        "fourth_central_moment": raw[4] - 4 * raw[3] * mean + 6 * raw[2] * mean**2 - 3 * mean**4,
    }


def derive_scaled_variance(divisor: sp.Expr) -> tuple[Step, ...]:
    """Var(q.k / divisor) for zero-mean, unit-variance coordinates: d / divisor^2."""
    s = random_coordinate("s")
    lhs = Variance(s / divisor)
    pulled = lhs.expand()  # Var(c X) = c^2 Var(X)
    return (
        Step("a constant factor comes out squared", _eq(lhs, pulled)),
        Step("insert the variance of the score", _eq(lhs, pulled.subs(Variance(s), score_variance().subs(STANDARD)))),
    )


def scaling_exponent() -> list[sp.Expr]:
    """The exponents lambda for which Var(q.k / d^lambda) does not change with d: solves d/dd Var = 0."""
    variance = derive_scaled_variance(d**lam)[-1].equation.rhs
    return sp.solve(sp.Eq(sp.diff(variance, d), 0), lam)


@functools.lru_cache(maxsize=None)
def derive_correlated_score_variance() -> tuple[Step, ...]:
    """Var(q.k) when coordinates within q (within k) have correlation rho_q (rho_k).

    Var(s) = sum_a sum_a' Cov(q_a k_a, q_a' k_a'): d diagonal terms plus d(d-1)
    off-diagonal ones, where q_a, q_a' are no longer independent.
    """
    qj, kj = random_coordinate("q_a'"), random_coordinate("k_a'")
    off_diagonal = Covariance(q * k, qj * kj)
    definition = off_diagonal.rewrite(Expectation)
    factored = apply_independence(definition, dependent=(frozenset({q, qj}), frozenset({k, kj})))
    # Corr(q_a, q_a') = rho_q means E[q_a q_a'] = rho_q sigma_q^2 + mu_q^2.
    moments = {**_moments_of_q_and_k(), **second_moment(qj, mu_q, sigma_q), **second_moment(kj, mu_k, sigma_k)}
    pairs = {Expectation(q * qj): rho_q * sigma_q**2 + mu_q**2, Expectation(k * kj): rho_k * sigma_k**2 + mu_k**2}
    covariance = sp.expand(factored.subs(pairs).subs(moments))
    diagonal = derive_product_variance()[-1].equation.rhs
    total = Variance(random_coordinate("s"))
    double_sum = d * Variance(q * k) + d * (d - 1) * off_diagonal
    return (
        Step("two different coordinates: definition of the covariance", _eq(off_diagonal, definition)),
        Step("q independent of k; coordinates of one vector stay together",
             _eq(off_diagonal, factored)),
        Step("insert the correlations", _eq(off_diagonal, covariance)),
        Step("double sum: d diagonal and d(d-1) off-diagonal terms",
             _eq(total, double_sum)),
        Step("insert both", _eq(total, sp.expand(double_sum.subs(
            {Variance(q * k): diagonal, off_diagonal: covariance})))),
    )


def anisotropic_score_variance() -> sp.Expr:
    """Var(q.k) = sum_a sigma_{q,a}^2 sigma_{k,a}^2 for zero-mean coordinates of unequal variances."""
    sq, sk = sp.IndexedBase("sigma_q"), sp.IndexedBase("sigma_k")
    term = derive_product_variance()[-1].equation.rhs.subs({mu_q: 0, mu_k: 0, sigma_q: sq[a], sigma_k: sk[a]})
    return sp.Sum(term, (a, 0, d - 1))


def two_level_profile_variance(delta: sp.Expr, aligned: bool = True) -> sp.Expr:
    """Var(q.k) when half the coordinates have variance 1 + delta and half 1 - delta (d even).

    The average coordinate variance stays 1. ``aligned``: k has the same
    profile as q; otherwise the opposite one (k's large variances where q's are small).
    """
    sq, sk = sp.IndexedBase("sigma_q"), sp.IndexedBase("sigma_k")
    summand = anisotropic_score_variance().function
    half = d / 2
    high, low = sp.sqrt(1 + delta), sp.sqrt(1 - delta)
    first = summand.subs({sq[a]: high, sk[a]: high if aligned else low})
    second = summand.subs({sq[a]: low, sk[a]: low if aligned else high})
    return sp.factor(sp.Sum(first, (a, 0, half - 1)).doit() + sp.Sum(second, (a, half, d - 1)).doit())


@functools.lru_cache(maxsize=None)
def derive_score_fourth_central_moment() -> tuple[Step, ...]:
    """E[(s - E s)^4] for s = q.k, general coordinate moments, symbolic d.

    One term X = q_a k_a has raw moments E[X^n] = E[q^n] E[k^n]
    (independence). Cumulants of independent terms add (the characteristic
    function factorises near t = 0), so the cumulants of s are d times those of X. The
    bookkeeping uses formal power series in t built from the first four
    moments, the moment generating function truncated at t^4; the series
    stands for the cumulants only and need not converge (for Student-t
    coordinates the moment generating function does not exist). Centering
    removes the first cumulant; the fourth central moment is 4! times the
    t^4 coefficient of exp(K).
    """
    t = sp.Symbol("t")
    raw = {n: apply_independence(Expectation((q * k) ** n).expand()) for n in range(1, 5)}
    mgf = 1 + sum(raw[n] * t**n / sp.factorial(n) for n in range(1, 5))
    cumulant_x = sp.series(sp.log(mgf), t, 0, 5).removeO()
    centered_sum = sp.expand(d * (cumulant_x - raw[1] * t))
    central_mgf = sp.series(sp.exp(centered_sum), t, 0, 5).removeO()
    fourth = sp.expand(sp.factorial(4) * central_mgf.coeff(t, 4))
    mu4 = sp.Function("mu_4")(random_coordinate("s"))
    return (
        Step("independence, for the fourth power of one term",
             _eq(Expectation((q * k) ** 4), raw[4])),
        Step("cumulants of the sum are d times those of one term",
             _eq(mu4, fourth)),
    )


def score_fourth_central_moment(kurtosis_q: sp.Expr | None = None, kurtosis_k: sp.Expr | None = None) -> sp.Expr:
    """mu_4(q.k) for zero-mean, unit-variance coordinates with E[q^4] = kurtosis_q, E[k^4] = kurtosis_k.

    Equals d (kurtosis_q kurtosis_k - 3) + 3 d^2. Symbols beta_q, beta_k are used when not given.
    """
    beta_q = sp.Symbol("beta_q", positive=True) if kurtosis_q is None else kurtosis_q
    beta_k = sp.Symbol("beta_k", positive=True) if kurtosis_k is None else kurtosis_k
    general = derive_score_fourth_central_moment()[-1].equation.rhs
    values = {Expectation(q): 0, Expectation(k): 0, Expectation(q**2): 1, Expectation(k**2): 1,
              Expectation(q**4): beta_q, Expectation(k**4): beta_k}
    return sp.expand(general.subs(values))


def score_fourth_central_moment_for(distribution: str) -> sp.Expr:
    """mu_4(q.k) for the named zero-mean, unit-variance distribution."""
    beta = coordinate_moment(distribution, 4)
    return score_fourth_central_moment(beta, beta)


def sample_variance_variance(fourth_central_moment, variance, n_samples):
    """Var(S^2) = (mu_4 - (N-3)/(N-1) sigma^4) / N for the unbiased sample variance S^2 of N draws.

    Works on numbers and on SymPy expressions. The confidence intervals of
    attnlib.book.montecarlo put estimates of mu_4 and sigma^2 into it.
    """
    return (fourth_central_moment - (n_samples - 3) * variance**2 / (n_samples - 1)) / n_samples


def derive_projected_score_variance(init: str | None = None) -> tuple[Step, ...]:
    """Var(q.k) for q = W_q x, k = W_k y with LayerNorm'd x, y in R^d_model and random weights.

    W_q, W_k (d_k x d_model) have independent zero-mean entries of variance
    sigma_w^2, independent of the inputs. Given x, q_j = sum_m W_jm x_m is a sum
    of independent terms, so Var(q_j) = sigma_w^2 sum_m x_m^2, and LayerNorm
    (without its affine part) makes sum_m x_m^2 = d_model. Different rows of W
    give independent coordinates, so the product rule applies with d = d_k.
    ``init`` names an entry of INIT_WEIGHT_VARIANCES to insert for sigma_w^2.
    """
    w = random_coordinate("W_jm")
    x_m = sp.Indexed(sp.IndexedBase("x"), m)
    term = Variance(w * x_m).expand().subs(Variance(w), sigma_w**2)
    coordinate_variance = sp.Sum(term, (m, 1, d_model))
    layer_norm = {sp.Sum(x_m**2, (m, 1, d_model)): d_model}
    pulled = sp.factor_terms(coordinate_variance)  # sigma_w^2 sum_m x_m^2
    steps = [
        Step("given the input, the terms of the projection are independent",
             _eq(Variance(random_coordinate("q_j")), coordinate_variance)),
        Step("LayerNorm fixes the squared length of the input", _eq(Variance(random_coordinate("q_j")), pulled.subs(layer_norm))),
    ]
    coordinate = steps[-1].equation.rhs
    score = score_variance().subs({mu_q: 0, mu_k: 0, sigma_q: sp.sqrt(coordinate), sigma_k: sp.sqrt(coordinate), d: d_k})
    steps.append(Step("score variance with this coordinate variance, over the width of a head",
                      _eq(Variance(random_coordinate("s")), score)))
    if init is not None:
        if init not in INIT_WEIGHT_VARIANCES:
            raise ValueError(f"init must be one of {sorted(INIT_WEIGHT_VARIANCES)}, got {init!r}")
        steps.append(Step(f"{init.replace('_', ' ')} initialisation",
                          _eq(Variance(random_coordinate("s")), sp.simplify(score.subs(sigma_w, sp.sqrt(INIT_WEIGHT_VARIANCES[init]))))))
    return tuple(steps)
