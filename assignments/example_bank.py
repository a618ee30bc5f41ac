"""The example question bank: PUBLIC PRACTICE, not for credit.

This file is public, with the book: anyone can read its ranges and run its solutions, so a
course graded with it is graded on answers its students can compute without the exercise.
It is the template of a private bank: copy it outside the repository, change the ranges (and
add tasks, see the instructor page), set PUBLIC_PRACTICE = False, and build with
``make assignments BANK=path/to/your_bank.py COURSE_SEED=<n> REF=<tag or commit>``.

Each task draws its numbers from ranges with the course seed (``rng`` is a ``random.Random``);
a draw equal to the book's numbers is drawn again. Tolerances: 0 for counts and byte sizes
(exact integers); otherwise the rounding of the dtype a student computes in, as noted.
"""
import math
from fractions import Fraction

import numpy as np
import sympy as sp

from tasks import Task

PUBLIC_PRACTICE = True

# float32 rounds to about 1.2e-7 relative per operation; a handful of operations, or a sum of
# a few dozen terms, stay within 1e-5. Answers derived in float64 or SymPy get the same: a
# student may convert them to float32, and 1e-5 still tells every draw of a range apart.
FLOAT32 = 1e-5
DTYPES = ("float16", "bfloat16", "float32")


# --- constraints and second computations -------------------------------------------------------
# Each task's ``check`` asserts what its numbers must satisfy for the question to make sense (a
# changed range that breaks one fails the build, naming the task); ``second`` computes the answer
# again from the formula, in plain Python or NumPy, without the library calls of ``solution``.
# Three tasks have none, as their answer is a library constant put to use: ex-03-budget
# (NumPy's buffer reserve), ex-08-block-sizes (tiled's default blocks), ex-11-infiniband (a
# stored measurement).

WORKED_Q = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]])
WORKED_K = np.array([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]])
WORKED_V = np.array([[1.0, 0], [0, 1], [1, 1]])
BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def _row_two(p):
    scores = WORKED_Q @ WORKED_K.T / 2  # sqrt(d) = 2
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights[p["row"]], weights[p["row"]] @ (p["factor"] * WORKED_V)


def _largest_fitting(budget, per_n_squared):
    n = int(math.sqrt(budget / per_n_squared))
    while (n + 1) ** 2 * per_n_squared <= budget:
        n += 1
    while n ** 2 * per_n_squared > budget:
        n -= 1
    return n


def _tiles_by_brute_force(p):
    """Each (query block, key tile) pair classified from its rows and columns."""
    n, bm, bn = p["n"], p["block_m"], p["block_n"]
    counts = []
    for first_row in range(0, n, bm):
        last_row = first_row + bm - 1
        kinds = ["unmasked" if (j + 1) * bn - 1 <= first_row else "skipped" if j * bn > last_row else "masked"
                 for j in range(n // bn)]
        counts.append([kinds.count("unmasked"), kinds.count("masked"), kinds.count("skipped")])
    counts = np.array(counts)
    return counts, counts[:, :2].sum() / counts.sum()


def _causal_pairs_by_brute_force(p):
    """Each rank's causal (query, key) pairs counted query by query: a query at position q sees q + 1 keys."""
    n, ranks = p["n"], p["ranks"]
    block, chunk = n // ranks, n // (2 * ranks)
    contiguous = [sum(q + 1 for q in range(r * block, (r + 1) * block)) for r in range(ranks)]
    zigzag = [sum(q + 1 for c in (r, 2 * ranks - 1 - r) for q in range(c * chunk, (c + 1) * chunk))
              for r in range(ranks)]
    assert sum(contiguous) == sum(zigzag) == n * (n + 1) // 2
    return contiguous, zigzag


def _rope_variance(p):
    """Var(q . k) / d_k from each plane's 2 x 2 covariance and rotation: E[(q^T R k)^2] = tr(R C R^T C)."""
    rho, total = p["rho"], []
    covariance = np.array([[1.0, rho], [rho, 1.0]])
    for offset in (0, 1, 100):
        planes = 0.0
        for theta in 10000.0 ** (-np.arange(0, 64, 2) / 64):
            c, s = math.cos(offset * theta), math.sin(offset * theta)
            rotation = np.array([[c, -s], [s, c]])
            planes += np.trace(rotation @ covariance @ rotation.T @ covariance)
        total.append(planes / 64)
    return total


def _alibi_entropy(p):
    """The entropy of weights proportional to r^i, i = 0 .. N - 1, r = exp(-slope), in closed form."""
    slope, n = float(Fraction(p["slope"])), 4096
    r = math.exp(-slope)
    log_z = math.log((1 - r ** n) / (1 - r))
    mean_distance = r / (1 - r) - n * r ** n / (1 - r ** n)
    return log_z + slope * mean_distance


def _assert(condition: bool, constraint: str) -> None:
    assert condition, constraint


def _check_causal_tiles(p):
    assert p["n"] % p["block_m"] == 0 and p["n"] % p["block_n"] == 0, "n must be a multiple of both blocks"
    assert p["blocks"] == p["n"] // p["block_m"] and p["pairs"] == p["blocks"] * (p["n"] // p["block_n"]), \
        "blocks and pairs must follow from n and the blocks"


def _check_causal_work(p):
    assert p["n"] % (2 * p["ranks"]) == 0, "n must split into 2 W equal chunks (attnlib's zigzag sharding)"
    assert p["last"] == p["ranks"] - 1, "last is the last rank"



# The draws that derive one number from another (a width from heads, a count from a length).

def _head_width(rng):
    heads, d_k = rng.randint(2, 100_000), rng.choice([32, 64, 96, 128])  # the answer is 1 / heads
    return {"d_model": heads * d_k, "heads": heads, "d_k": d_k}


def _bernoulli(rng):
    denominator = rng.randint(3, 2000)
    return {"p": str(Fraction(rng.randint(1, denominator - 1), denominator))}


def _batch_decode(rng):
    slots = rng.randint(3, 1000)
    return {"slots": slots, "first": slots, "second": rng.randint(1, slots - 1)}


def _twelve_heads(rng):
    heads = rng.randint(2, 2048)
    return {"d_model": heads * rng.randint(8, 512), "heads": heads}


def _max_length(rng):
    small = rng.randint(8, 4096)
    return {"heads": rng.randint(1, 128), "batch": rng.randint(1, 64), "small": small,
            "large": small * rng.randint(2, 4), "dtype": rng.choice(DTYPES)}


def _causal_tiles(rng):
    n, block_m, block_n = 256 * rng.randint(2, 32), rng.choice([32, 64, 128, 256]), rng.choice([16, 32, 64, 128, 256])
    return {"n": n, "block_m": block_m, "block_n": block_n, "blocks": n // block_m,
            "pairs": (n // block_m) * (n // block_n)}


def _gqa_heads(rng):
    kv_heads = rng.randint(2, 64)
    return {"query_heads": kv_heads * rng.randint(2, 64), "kv_heads": kv_heads}


def _causal_work(rng):
    ranks = rng.randint(2, 16)
    return {"n": 2 * ranks * rng.randint(2, 1000), "ranks": ranks, "last": ranks - 1}


def _infiniband(rng):
    while True:  # the answer is proportional to kv_heads / gbps: 5% or more from the book's 8 / 50
        drawn = {"kv_heads": rng.choice([1, 2, 4, 16]), "gbps": round(10 ** rng.uniform(1, 3), 2)}
        if abs(drawn["kv_heads"] / drawn["gbps"] / (8 / 50) - 1) > 0.05:
            return drawn


def _alibi_slope(rng):
    denominator = rng.randint(100, 9999)  # slopes from 1/64 to 1
    return {"slope": str(Fraction(rng.randint(-(-denominator // 64), denominator), denominator))}


def _temperatures(rng):
    heads = rng.randint(8, 64)
    return {"width": 32 * rng.randint(1, 512), "model": heads * rng.randint(16, 512), "heads": heads}


TASKS = [
    # the worked example has three queries only: scaling its values gives more than two courses
    Task("ex-01-row-two", draw=lambda rng: {"row": rng.choice([0, 1, 2]), "factor": round(10 ** rng.uniform(0.3, 4), 4)},
         check=lambda p: _assert(p["row"] in (0, 1, 2) and p["factor"] >= 1, "a query of three, a positive factor"),
         second=_row_two,
         book={"row": 1, "factor": 1}, rtol=FLOAT32,
         numbers="Answer for query {row} of the worked example (queries count from 0) instead of query 1, with "
                 "the values V multiplied by {factor}.",
         prompt="a pair (weights, output): query {row}'s three weights and its 2-vector output, values {factor} V",
         solution="""\
answer = (attnlib.attention_weights(Q, K)[{row}],
          attnlib.scaled_dot_product_attention(Q, K, {factor} * V)[{row}])"""),
    Task("ex-01-value-width", draw=lambda rng: {"width": rng.randint(2, 1_000_000)},
         check=lambda p: _assert(p["width"] >= 1, "a positive width"),
         second=lambda p: ((3, 3), (3, p["width"])),
         book={"width": 5},
         numbers="Give the values width {width} instead of 5.",
         prompt="a pair (weights_shape, output_shape) of tuples of ints for values of width {width}",
         solution="""\
values = torch.ones(3, {width}, dtype=torch.float64)
answer = (tuple(attnlib.attention_weights(Q, K).shape),
          tuple(attnlib.scaled_dot_product_attention(Q, K, values).shape))"""),
    Task("ex-02-unequal-scales",
         draw=lambda rng: {"sigma_q": str(rng.randint(2, 999)), "sigma_k": f"1/{rng.randint(2, 999)}"},
         check=lambda p: _assert(Fraction(p["sigma_q"]) > 0 and Fraction(p["sigma_k"]) > 0, "positive deviations"),
         second=lambda p: sp.Symbol("d") * sp.Rational(p["sigma_q"]) ** 2 * sp.Rational(p["sigma_k"]) ** 2,
         book={"sigma_q": "2", "sigma_k": "1/2"},
         numbers="Use standard deviation {sigma_q} for q and {sigma_k} for k.",
         prompt="Var(q . k) as a SymPy expression in d, for zero means, sigma_q = {sigma_q} and sigma_k = {sigma_k}",
         solution="""\
answer = variance.score_variance().subs({{variance.mu_q: 0, variance.mu_k: 0,
                                         variance.sigma_q: sp.Rational("{sigma_q}"),
                                         variance.sigma_k: sp.Rational("{sigma_k}")}})"""),
    Task("ex-02-head-width",
         draw=_head_width,
         check=lambda p: _assert(p["d_model"] == p["heads"] * p["d_k"], "d_model = heads x d_k"),
         second=lambda p: p["d_k"] / p["d_model"],
         book={"d_model": 512, "heads": 8, "d_k": 64}, rtol=FLOAT32,
         numbers="Use d_model = {d_model} split into {heads} heads, with scores divided by sqrt({d_model}).",
         prompt="a number: the variance of q . k / sqrt({d_model}) when q . k runs over d_k = {d_k} coordinates",
         solution="""\
wrong = variance.derive_scaled_variance(sp.sqrt({d_model}))[-1].equation.rhs
answer = float(wrong.subs(variance.d, {d_model} // {heads}))"""),
    Task("ex-02-bernoulli",
         draw=_bernoulli,
         check=lambda p: _assert(0 < Fraction(p["p"]) < 1, "a probability strictly between 0 and 1"),
         second=lambda p: (lambda q, d: (d * q**2, d * (q**2 - q**4)))(sp.Rational(p["p"]), sp.Symbol("d")),
         book={"p": "1/2"}, also_at={"d": 3},
         numbers="Let each coordinate be 1 with probability {p} and 0 otherwise (mean p, variance p(1 - p)).",
         prompt="a pair (mean, variance) of q . k for coordinates that are 1 with probability {p}: SymPy "
                "expressions in d, or their values at d = 3",
         solution="""\
p = sp.Rational("{p}")
values = {{variance.mu_q: p, variance.mu_k: p, variance.sigma_q: sp.sqrt(p * (1 - p)),
          variance.sigma_k: sp.sqrt(p * (1 - p))}}
answer = (variance.score_mean().subs(values), variance.score_variance().subs(values))"""),
    Task("ex-02-correlation-budget",
         draw=lambda rng: {"small": rng.randint(3, 999), "large": rng.randint(1000, 20000)},
         check=lambda p: _assert(2 < p["small"] < p["large"], "two widths above 2, the smaller first"),
         second=lambda p: [1 / math.sqrt(width - 1) for width in (p["small"], p["large"])],
         book={"small": 64, "large": 1024}, rtol=FLOAT32,
         numbers="Answer for d = {small} and d = {large} instead of 64 and 1024.",
         prompt="a pair (rho_{small}, rho_{large}): the positive correlations that make Var(q . k / sqrt(d)) = 2 "
                "at d = {small} and {large}",
         solution="""\
rho = sp.Symbol("rho", positive=True)
correlated = variance.derive_correlated_score_variance()[-1].equation.rhs.subs(variance.STANDARD)
scaled = correlated.subs({{variance.rho_q: rho, variance.rho_k: rho}}) / variance.d
answer = [float(sp.solve(sp.Eq(scaled.subs(variance.d, width), 2), rho)[0]) for width in ({small}, {large})]"""),
    Task("ex-03-budget",
         draw=lambda rng: {"width": 2 ** rng.randint(8, 12), "mib": rng.randint(1, 8),
                           "samples": rng.randint(10_000, 1_000_000)},
         check=lambda p: _assert(p["mib"] >= 1 and p["samples"] > 0, "a budget of at least 1 MiB, some samples"),
         book={"width": 1024, "mib": 1, "samples": 20000},
         numbers="Use d = {width}, a budget of {mib} MiB and N = {samples}.",
         prompt="a pair (rows, chunks) of ints: Gaussian pairs per chunk at d = {width} with a {mib} MiB budget, "
                "and chunks for N = {samples}",
         solution="""\
rows = mc.chunk_rows(mc.independent_pairs("gaussian", {width}), {samples}, {mib} * 2**20)
answer = (rows, math.ceil({samples} / rows))  # the last chunk may be partial"""),
    Task("ex-05-batch-decode",
         draw=_batch_decode,
         check=lambda p: _assert(p["first"] == p["slots"] and 1 <= p["second"] < p["slots"],
                                 "sequence 1 fills the cache, sequence 2 is shorter"),
         second=lambda p: np.arange(p["slots"])[None, None, :] < np.array([p["first"], p["second"]])[:, None, None],
         book={"slots": 5, "first": 5, "second": 3},
         numbers="The cache has {slots} slots; sequence 1 fills them, sequence 2 has {second} real tokens "
                 "(the mask has shape (2, 1, {slots})).",
         prompt="the bool mask of shape (2, 1, {slots}), True where the new token may attend",
         solution="""\
answer = attnlib.padding_mask(torch.tensor([{first}, {second}]), {slots})[:, 0]"""),
    Task("ex-06-twelve-heads",
         draw=_twelve_heads,
         check=lambda p: _assert(p["d_model"] % p["heads"] == 0, "heads divide d_model"),
         second=lambda p: (p["d_model"] // p["heads"], math.sqrt(p["heads"])),
         book={"d_model": 768, "heads": 12}, rtol=FLOAT32,
         numbers="Use d_model = {d_model} and {heads} heads.",
         prompt="a pair (d_k, t_eff): the head width and the temperature hidden by dividing by sqrt(d_model), "
                "for d_model = {d_model} and {heads} heads",
         solution="""\
d_k = {d_model} / {heads}
answer = (d_k, math.sqrt({d_model}) / math.sqrt(d_k))"""),
    Task("ex-06-kv-cache",
         draw=lambda rng: {"layers": rng.randint(16, 96), "grouped": rng.choice([1, 2, 4, 8]),
                           "full": rng.choice([16, 32, 48, 64]), "width": rng.choice([64, 128]),
                           "tokens": 1024 * rng.randint(4, 128)},
         check=lambda p: _assert(p["grouped"] < p["full"] and p["full"] % p["grouped"] == 0,
                                 "fewer key/value heads that divide the full count"),
         # keys and values, 2 bytes each in bfloat16, per layer, head, coordinate and token
         second=lambda p: tuple(2 * p["layers"] * heads * p["width"] * p["tokens"] * 2 / 2**30
                                for heads in (p["grouped"], p["full"])),
         book={"layers": 80, "grouped": 8, "full": 64, "width": 128, "tokens": 32768}, rtol=FLOAT32,
         numbers="Use {layers} layers, head width {width}, {tokens} tokens in bfloat16, and {grouped} "
                 "key/value heads, then {full}.",
         prompt="a pair (gqa_gib, mha_gib): the KV cache in GiB with {grouped} key/value heads, and with {full}",
         solution="""\
answer = tuple(kv_cache_bytes({layers}, heads, {width}, {tokens}, dtype=torch.bfloat16) / 2**30
               for heads in ({grouped}, {full}))"""),
    Task("ex-07-layer-bytes",
         draw=lambda rng: {"batch": rng.randint(1, 64), "heads": rng.randint(1, 128), "n": 64 * rng.randint(1, 512),
                           "dtype": rng.choice(DTYPES)},
         check=lambda p: _assert(p["dtype"] in BYTES, "a dtype of the book"),
         second=lambda p: p["batch"] * p["heads"] * p["n"] ** 2 * BYTES[p["dtype"]],
         book={"batch": 4, "heads": 32, "n": 4096, "dtype": "bfloat16"},
         numbers="Use {heads} heads, a batch of {batch} sequences of {n} tokens, in {dtype}.",
         prompt="an int: the bytes of one layer's score matrices (batch {batch}, {heads} heads, n = {n}, {dtype}), "
                "each stored once",
         solution="""\
answer = torch.empty({batch}, {heads}, {n}, {n}, dtype=torch.{dtype}, device="meta").nbytes"""),
    Task("ex-07-max-length",
         draw=_max_length,
         check=lambda p: _assert(p["small"] < p["large"] and p["dtype"] in BYTES,
                                 "a smaller budget first, a dtype of the book"),
         second=lambda p: tuple(_largest_fitting(gib * 2**30, p["batch"] * p["heads"] * BYTES[p["dtype"]])
                                for gib in (p["small"], p["large"])),
         book={"heads": 16, "batch": 2, "small": 24, "large": 48, "dtype": "float16"},
         numbers="Use {heads} heads, a batch of {batch}, {dtype}, and budgets of {small} GiB and {large} GiB.",
         prompt="a pair (n_small, n_large) of ints: the largest n for one {dtype} copy of the scores of {heads} "
                "heads, batch {batch}, in {small} GiB and in {large} GiB",
         solution="""\
bytes_per_n_squared = {batch} * {heads} * torch.finfo(torch.{dtype}).bits // 8
answer = tuple(math.isqrt(gib * 2**30 // bytes_per_n_squared) for gib in ({small}, {large}))"""),
    Task("ex-08-block-sizes",
         draw=lambda rng: {"heads": rng.randint(1, 256), "n": 1024 * rng.randint(1, 64),
                           "width": rng.choice([16, 32, 64, 128, 256])},
         check=lambda p: _assert(p["n"] % 1024 == 0, "n a multiple of the blocks, so that every tile is full"),
         book={"heads": 8, "n": 2048, "width": 64},
         numbers="Use {heads} heads, n = {n} and d = {width}; the last blocks are (n, DEFAULT_BLOCK_K).",
         prompt="three ints: the bytes of the largest tensor tiled.attention allocates for {heads} heads, n = {n}, "
                "d = {width}, with blocks (64, 128), the defaults, and ({n}, DEFAULT_BLOCK_K)",
         solution="""\
blocks = [(64, 128), (tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_K), ({n}, tiled.DEFAULT_BLOCK_K)]
answer = [4 * max({heads} * block_q * block_k, {heads} * {n} * {width}) for block_q, block_k in blocks]"""),
    Task("ex-09-causal-tiles",
         draw=_causal_tiles,
         check=_check_causal_tiles, second=_tiles_by_brute_force,
         book={"n": 1024, "block_m": 128, "block_n": 64, "blocks": 8, "pairs": 128}, rtol=FLOAT32,
         numbers="Use L = S = {n}, BLOCK_M = {block_m} and BLOCK_N = {block_n} (so {blocks} query blocks).",
         prompt="a pair (counts, fraction): a {blocks} x 3 array of ints, (unmasked, masked, skipped) key tiles per "
                "query block for L = S = {n}, BLOCK_M = {block_m}, BLOCK_N = {block_n}, causal; and the fraction of "
                "the {pairs} tile pairs visited",
         solution="""\
counts = []
for start in range(0, {n}, {block_m}):
    whole = (start + 1) // {block_n}  # tiles before the first row's diagonal
    visited = math.ceil(min(start + {block_m}, {n}) / {block_n})  # up to the last row's diagonal
    counts.append((whole, visited - whole, {n} // {block_n} - visited))
counts = np.array(counts)
answer = (counts, counts[:, :2].sum() / counts.sum())"""),
    Task("ex-09-gqa-heads",
         draw=_gqa_heads,
         check=lambda p: _assert(p["query_heads"] % p["kv_heads"] == 0, "key/value heads divide the query heads"),
         second=lambda p: [float(h // (p["query_heads"] // p["kv_heads"])) for h in range(p["query_heads"])],
         book={"query_heads": 8, "kv_heads": 2}, rtol=FLOAT32,
         numbers="Use {query_heads} query heads and {kv_heads} key/value heads; value head j is all j "
                 "(so out[0, :, 0, 0] has {query_heads} numbers).",
         prompt="the {query_heads} numbers out[0, :, 0, 0], one per query head, for {query_heads} query heads and "
                "{kv_heads} key/value heads, value head j all j",
         solution="""\
q = torch.randn(1, {query_heads}, 5, 16, dtype=torch.float64)
k = torch.randn(1, {kv_heads}, 7, 16, dtype=torch.float64)
v = torch.arange({kv_heads}, dtype=torch.float64)[None, :, None, None].expand(1, {kv_heads}, 7, 16)
answer = attnlib.scaled_dot_product_attention(q, k, v, enable_gqa=True)[0, :, 0, 0]"""),
    Task("ex-10-stored-bytes",
         draw=lambda rng: {"heads": rng.randint(1, 256), "length": 64 * rng.randint(8, 2048)},
         check=lambda p: _assert(p["heads"] >= 1 and p["length"] >= 1, "positive sizes"),
         second=lambda p: (p["heads"] * p["length"] ** 2 * 4, p["heads"] * p["length"] * 4),
         book={"heads": 32, "length": 8192},
         numbers="Use {heads} heads and L = S = {length}.",
         prompt="a pair (weights_bytes, lse_bytes) of ints: bytes of float32 P and of the float32 log-sum-exp kept "
                "for the backward pass of one layer with {heads} heads, L = S = {length}, batch 1",
         solution="""\
answer = (4 * {heads} * {length} * {length}, 4 * {heads} * {length})"""),
    Task("ex-11-causal-work",
         draw=_causal_work,
         check=_check_causal_work, second=_causal_pairs_by_brute_force,
         book={"n": 32, "ranks": 4, "last": 3},
         numbers="Use n = {n} positions on W = {ranks} ranks.",
         prompt="a pair (contiguous, zigzag) of {ranks} ints each: the causal (query, key) pairs that ranks 0 to "
                "{last} compute over the whole ring, n = {n}, W = {ranks}",
         solution="""\
block, chunk = {n} // {ranks}, {n} // (2 * {ranks})
# a slice starting after s earlier positions computes s x its length pairs in full, then its own triangle
contiguous = [block * block * r + block * (block + 1) // 2 for r in range({ranks})]
zigzag = [chunk * chunk * c + chunk * (chunk + 1) // 2 for c in range(2 * {ranks})]
answer = (contiguous, [zigzag[r] + zigzag[2 * {ranks} - 1 - r] for r in range({ranks})])"""),
    # 2%: the chapter's table prints the measured throughput to three significant figures.
    Task("ex-11-infiniband",
         draw=_infiniband,
         check=lambda p: _assert(32 % p["kv_heads"] == 0 and p["gbps"] > 0
                                 and abs(p["kv_heads"] / p["gbps"] / (8 / 50) - 1) > 0.05,
                                 "key/value heads that divide 32 query heads; an answer 5% or more from the "
                                 "book's, which the 2% tolerance tells apart"),
         book={"kv_heads": 8, "gbps": 50}, rtol=0.02,
         numbers="Use {kv_heads} key/value heads instead of 8, and a link of {gbps} GB/s instead of 50.",
         prompt="a number: the block length L_b (tokens per GPU) above which a ring step is compute-bound, 32 query "
                "heads, {kv_heads} key/value heads, bfloat16, fused forward, a link of {gbps} GB/s",
         solution="""\
peers = stored_results.load("peers_nvidia_h200.json")
row = next(r for r in peers["rows"] if r.get("d") == 128 and r.get("n") == 16384
           and r["dtype"] == "bfloat16" and not r["causal"])
flops, bandwidth = row["fused"] * 1e12, {gbps}e9
# compute 4 H L_b^2 d / F equals transfer 2 H_kv L_b d (2 bytes) / bandwidth
answer = ({kv_heads} / 32) * 2 * flops / (2 * bandwidth)"""),
    Task("ex-12-correlated-variance", draw=lambda rng: {"rho": round(rng.uniform(0.1, 0.95), 6)},
         check=lambda p: _assert(0 < p["rho"] < 1, "a correlation strictly between 0 and 1"),
         second=_rope_variance,
         book={"rho": 0.5}, rtol=FLOAT32,
         numbers="Use the correlation {rho} inside each plane instead of 0.5.",
         prompt="three numbers: Var(q.k)/d_k at offsets 0, 1 and 100 for d_k = 64, base 10000 and correlation {rho} "
                "inside each plane",
         solution="""\
theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)  # the planes' angular frequencies
# a plane of two coordinates correlated by rho contributes 2 + 2 rho^2 cos(2 offset theta)
answer = [np.sum(2 + 2 * {rho}**2 * np.cos(2 * offset * theta)) / 64 for offset in (0, 1, 100)]"""),
    Task("ex-12-alibi-entropy", draw=_alibi_slope,
         check=lambda p: _assert(0 < Fraction(p["slope"]) <= 1, "a slope in (0, 1]"),
         second=_alibi_entropy,
         book={"slope": "1/16"}, rtol=FLOAT32,
         numbers="Use the ALiBi slope {slope} instead of 1/16.",
         prompt="a number: the entropy in nats of the weights of a content-free query at the last of 4096 causal "
                "positions, ALiBi slope {slope}",
         solution="""\
distance = torch.arange(4096, dtype=torch.float64)  # from the last query back to the first key
weights = torch.softmax(-float(sp.Rational("{slope}")) * distance, dim=0)  # a content-free query
answer = torch.special.entr(weights).sum().item()"""),
    # 1 - tanh^2 cancels: in float32 its absolute error is a few times 1.2e-7 whatever its size,
    # hence an absolute tolerance; caps from 6 keep the smallest slope (at z = 15) above 0.02.
    Task("ex-12-softcap-slope", draw=lambda rng: {"cap": round(rng.uniform(6, 60), 4)},
         check=lambda p: _assert(p["cap"] >= 6, "caps from 6, for which atol=1e-6 is argued"),
         second=lambda p: [1 - math.tanh(s / p["cap"]) ** 2 for s in (0.0, 5.0, 15.0)],
         book={"cap": 5},
         rtol=FLOAT32, atol=1e-6,
         numbers="Use the cap c = {cap}, the derivative of {cap} tanh(z / {cap}), at the same z.",
         prompt="three numbers: the derivative of {cap} tanh(z / {cap}) at z = 0, 5 and 15",
         solution="""\
s = torch.tensor([0.0, 5.0, 15.0], dtype=torch.float64, requires_grad=True)
({cap} * torch.tanh(s / {cap})).sum().backward()
answer = s.grad.clone()"""),
    Task("ex-12-temperatures",
         draw=_temperatures,
         check=lambda p: _assert(p["model"] % p["heads"] == 0 and p["width"] % 32 == 0,
                                 "heads divide d_model; a width in multiples of 32"),
         second=lambda p: [math.sqrt(p["model"] / p["heads"] / p["width"]), math.sqrt(p["width"]) / 8,
                           1 / math.sqrt(p["width"])],
         book={"width": 256, "model": 3072, "heads": 24}, rtol=FLOAT32,
         numbers="Use heads of width {width} and d_model / H = {model} / {heads}: the scales are "
                 "({model}/{heads})^-1/2, 8/{width} and 1, against 1/sqrt({width}).",
         prompt="three numbers: T relative to 1/sqrt({width}) for the scales ({model}/{heads})^-1/2, 8/{width} and 1",
         solution="""\
standard = 1 / math.sqrt({width})
answer = [standard / ({model} / {heads}) ** -0.5, standard / (8 / {width}), standard / 1.0]"""),
    Task("ex-13-gemma-cache",
         draw=lambda rng: {"layers": 2 * rng.randint(8, 40), "kv_heads": rng.choice([1, 2, 4, 8, 16]),
                           "width": rng.choice([64, 128, 256]), "window": rng.choice([512, 1024, 2048, 4096]),
                           "short": 1024 * rng.randint(8, 16), "long": 1024 * rng.randint(32, 128)},
         check=lambda p: _assert(p["window"] < p["short"] < p["long"] and p["layers"] % 2 == 0,
                                 "an even number of layers; both contexts longer than the window, the shorter first"),
         # per layer and position: keys and values, kv_heads x width numbers each, 2 bytes in bfloat16; the
         # sliding half keeps window - 1 positions, the global half all of them
         second=lambda p: tuple(
             2 * p["kv_heads"] * p["width"] * 2 * (global_layers * n + (p["layers"] - global_layers)
                                                   * min(n, p["window"] - 1)) / 2**30
             for global_layers, n in ((p["layers"] // 2, p["short"]), (p["layers"] // 2, p["long"]),
                                      (p["layers"], p["long"]))),
         book={"layers": 42, "kv_heads": 8, "width": 256, "window": 4096, "short": 8192, "long": 131072},
         rtol=FLOAT32,
         numbers="Use {layers} layers, half of them sliding with a window of w = {window}, {kv_heads} key/value "
                 "heads of width {width}, and contexts of n = {short} and n = {long}.",
         prompt="a tuple (alternating_short, alternating_long, global_long) of GiB: the KV cache of {layers} layers, "
                "{kv_heads} key/value heads of width {width}, bfloat16, batch 1, half of them sliding (w = {window}, "
                "caching w - 1 positions), at n = {short} and n = {long}, and with every layer global at n = {long}",
         solution="""\
def cache_gib(n, global_layers):
    sliding_layers = {layers} - global_layers
    return (kv_cache_bytes(global_layers, {kv_heads}, {width}, n, dtype=torch.bfloat16)
            + kv_cache_bytes(sliding_layers, {kv_heads}, {width}, min(n, {window} - 1),
                             dtype=torch.bfloat16)) / 2**30

answer = (cache_gib({short}, {layers} // 2), cache_gib({long}, {layers} // 2), cache_gib({long}, {layers}))"""),
]
