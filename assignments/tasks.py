"""The graded form of every checked exercise: its numbers, a reference solution, and its variants.

A task runs its exercise with the chapter's numbers (``book``) or with one of its ``variants``,
drawn from the course seed, so that the book's public solutions do not answer the graded
version. ``solution`` is Python source, formatted with the numbers, that sets ``answer``
in a notebook after the chapter's setup (``SETUP`` and ``CHAPTER_SETUP``). A task without
variants keeps the book's numbers and is graded by attnlib's own checker.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

SETUP = """\
import math
import numpy as np
import sympy as sp
import torch
import attnlib
import attnlib.exercises
from attnlib import montecarlo as mc, stored_results, tiled
from attnlib.heads import MultiHeadAttention, kv_cache_bytes
from attnlib.theory import online_softmax, variance"""

CHAPTER_SETUP = {
    "01": """\
# The worked example of the chapter: three queries, keys and values
Q = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)""",
    "10": """\
from attnlib.theory import backward, softmax as softmax_theory
# Chapter 1's worked example, whose backward pass the chapter follows
Q = torch.tensor([[1.0, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
K = torch.tensor([[1.0, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]], dtype=torch.float64)
V = torch.tensor([[1.0, 0], [0, 1], [1, 1]], dtype=torch.float64)""",
}


@dataclass(frozen=True)
class Task:
    label: str
    solution: str
    book: dict = field(default_factory=dict)
    variants: tuple[dict, ...] = ()
    numbers: str = ""         # the sentence that gives a variant's numbers to the student
    rtol: float = 0.0         # how closely a variant's answer must match the reference (0: exactly)

    def params(self, course_seed: int) -> dict:
        """The numbers of this task in the course ``course_seed``: a variant, or the book's."""
        if not self.variants:
            return self.book
        return random.Random(f"{course_seed}:{self.label}").choice(self.variants)

    def code(self, params: dict) -> str:
        return self.solution.format(**params)


TASKS = [
    Task("ex-01-row-two", book={"row": 2}, variants=({"row": 1}, {"row": 3}), rtol=1e-6,
         numbers="Answer for query {row} of the worked example instead of query 2.",
         solution="""\
answer = (attnlib.attention_weights(Q, K)[{row} - 1], attnlib.scaled_dot_product_attention(Q, K, V)[{row} - 1])"""),
    Task("ex-01-shift-scale", solution="""\
row = (Q @ K.T)[0]
answer = (torch.softmax(1e-6 * row, dim=-1), torch.softmax(1e3 * row, dim=-1))"""),
    Task("ex-01-causal-numpy", solution="""\
scores = np.where(np.tril(np.ones((3, 3), dtype=bool)), (Q @ K.T).numpy() / 2, -np.inf)
exps = np.exp(scores - scores.max(axis=1, keepdims=True))
answer = exps / exps.sum(axis=1, keepdims=True)"""),
    Task("ex-01-value-width", book={"width": 5}, variants=({"width": 3}, {"width": 6}, {"width": 7}),
         numbers="Give the values width {width} instead of 5.",
         solution="""\
values = torch.ones(3, {width}, dtype=torch.float64)
answer = (tuple(attnlib.attention_weights(Q, K).shape), tuple(attnlib.scaled_dot_product_attention(Q, K, values).shape))"""),
    Task("ex-02-unequal-scales", book={"sigma_q": "2", "sigma_k": "1/2"},
         variants=({"sigma_q": "3", "sigma_k": "1/2"}, {"sigma_q": "4", "sigma_k": "1/3"},
                   {"sigma_q": "2", "sigma_k": "1/4"}, {"sigma_q": "3", "sigma_k": "1/4"}),
         numbers="Use standard deviation {sigma_q} for q and {sigma_k} for k.",
         solution="""\
answer = variance.score_variance().subs({{variance.mu_q: 0, variance.mu_k: 0,
                                         variance.sigma_q: sp.Rational("{sigma_q}"),
                                         variance.sigma_k: sp.Rational("{sigma_k}")}})"""),
    Task("ex-02-head-width", book={"d_model": 512, "heads": 8}, rtol=1e-9,
         variants=({"d_model": 768, "heads": 12}, {"d_model": 1024, "heads": 16}, {"d_model": 512, "heads": 4},
                   {"d_model": 2048, "heads": 16}),
         numbers="Use d_model = {d_model} split into {heads} heads, with scores divided by sqrt({d_model}).",
         solution="""\
wrong = variance.derive_scaled_variance(sp.sqrt({d_model}))[-1].equation.rhs
answer = float(wrong.subs(variance.d, {d_model} // {heads}))"""),
    Task("ex-02-bernoulli", book={"p": "1/2"}, variants=({"p": "1/3"}, {"p": "1/4"}, {"p": "2/3"}),
         numbers="Let each coordinate be 1 with probability {p} and 0 otherwise (mean p, variance p(1 - p)).",
         solution="""\
p = sp.Rational("{p}")
values = {{variance.mu_q: p, variance.mu_k: p, variance.sigma_q: sp.sqrt(p * (1 - p)),
          variance.sigma_k: sp.sqrt(p * (1 - p))}}
answer = (variance.score_mean().subs(values), variance.score_variance().subs(values))"""),
    Task("ex-02-correlation-budget", book={"small": 64, "large": 1024}, rtol=1e-6,
         variants=({"small": 32, "large": 512}, {"small": 128, "large": 2048}, {"small": 16, "large": 256}),
         numbers="Answer for d = {small} and d = {large} instead of 64 and 1024.",
         solution="""\
rho = sp.Symbol("rho", positive=True)
correlated = variance.derive_correlated_score_variance()[-1].equation.rhs.subs(variance.STANDARD)
scaled = correlated.subs({{variance.rho_q: rho, variance.rho_k: rho}}) / variance.d
answer = [float(sp.solve(sp.Eq(scaled.subs(variance.d, width), 2), rho)[0]) for width in ({small}, {large})]"""),
    Task("ex-03-heavier-tails", solution="""\
def draw_t3(rng, rows):
    pair = rng.standard_t(3, size=(rows, 2, 16)) / math.sqrt(3)
    return pair[:, 0], pair[:, 1]

t3 = mc.PairSampler("student_t3", 16, draw_t3, 2 * 16 * 8)
answer = sum(mc.estimate_score_variance(16, 1000, t3, seed=s).covers(16) for s in range(100))"""),
    Task("ex-03-budget", book={"width": 1024, "mib": 1, "samples": 20000},
         variants=({"width": 512, "mib": 1, "samples": 20000}, {"width": 1024, "mib": 2, "samples": 30000},
                   {"width": 2048, "mib": 4, "samples": 50000}),
         numbers="Use d = {width}, a budget of {mib} MiB and N = {samples}.",
         solution="""\
rows = mc.chunk_rows(mc.independent_pairs("gaussian", {width}), {samples}, {mib} * 2**20)
answer = (rows, math.ceil({samples} / rows))  # the last chunk may be partial"""),
    Task("ex-03-one-sided", solution="""\
def draw_one_sided(rng, rows, width=256, rho=0.3):
    pair = rng.standard_normal((rows, 2, width))
    pair[:, 0] *= math.sqrt(1 - rho)
    pair[:, 0] += math.sqrt(rho) * rng.standard_normal((rows, 1))
    return pair[:, 0], pair[:, 1]

one_sided = mc.PairSampler("q correlated only", 256, draw_one_sided, 2 * 258 * 8)
answer = mc.estimate_score_variance(256, 10000, one_sided, seed=3).variance / 256"""),
    Task("ex-03-xavier-square", solution="""\
xavier = variance.derive_projected_score_variance("xavier")[-1].equation.rhs
answer = sp.simplify(xavier.subs(variance.d_model, variance.d_k))"""),
    Task("ex-04-temperature", solution="""\
rng = np.random.default_rng(0)

def median_max_weight(width, scale):
    q = torch.from_numpy(rng.standard_normal((2000, 1, width)))
    k = torch.from_numpy(rng.standard_normal((2000, 8, width)))
    return float(np.median(attnlib.attention_weights(q, k, scale=scale)[:, 0].max(-1).values.numpy()))

target = median_max_weight(16, 1.0)
medians = {{T: median_max_weight(256, 1 / (16 * T)) for T in (0.25, 0.5, 1, 2)}}
answer = min(medians, key=lambda T: abs(medians[T] - target))"""),
    Task("ex-04-jacobian-bound", solution="""\
logits = 3 * torch.randn(5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
weights = torch.softmax(logits, dim=-1)
jacobians = torch.diag_embed(weights) - weights[:, :, None] * weights[:, None, :]
answer = (weights, jacobians.abs().sum(dim=(-2, -1)))"""),
    Task("ex-04-logit-gradient", solution="""\
def median_logit_gradient(width, scale, draws=2000):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(draws, 1, width, generator=g, dtype=torch.float64)
    k = torch.randn(draws, 8, width, generator=g, dtype=torch.float64)
    v = torch.randn(draws, 8, 16, generator=g, dtype=torch.float64)
    upstream = torch.randn(draws, 1, 16, generator=g, dtype=torch.float64)
    z = (scale * q @ k.transpose(-2, -1)).requires_grad_()
    (torch.softmax(z, dim=-1) @ v * upstream).sum().backward()
    return float(np.median(z.grad.norm(dim=(-2, -1)).numpy()))

answer = ([median_logit_gradient(w, w**-0.5) for w in (16, 256, 1024)],
          [median_logit_gradient(w, 1.0) for w in (16, 256, 1024)])"""),
    Task("ex-05-decode-one", solution="""\
g = torch.Generator().manual_seed(1)
Q6, K6, V6 = (torch.randn(6, 8, generator=g, dtype=torch.float64) for _ in range(3))
decoded = torch.cat([attnlib.scaled_dot_product_attention(Q6[t:t + 1], K6[:t + 1], V6[:t + 1]) for t in range(6)])
answer = (decoded, False)"""),
    Task("ex-05-which-sum", solution="""\
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(n, 64, generator=g).half() for n in (256, 1024, 1024))
scores = torch.zeros(256, 1024, dtype=torch.float16)
for e in range(64):  # dot products accumulated in float16
    scores = scores + q[:, e:e + 1] * k[:, e][None, :]
scores = scores * torch.tensor(1 / 8, dtype=torch.float16)
exps = torch.exp(scores - scores.amax(-1, keepdim=True)).float()
total, mixed = torch.zeros(256, 1), torch.zeros(256, 64)
for j in range(1024):  # the sums over keys in float32
    total = total + exps[:, j:j + 1]
    mixed = mixed + exps[:, j:j + 1] * v[j].float()[None, :]
reference = attnlib.scaled_dot_product_attention(q.double(), k.double(), v.double())
answer = ((mixed / total).double() - reference).abs().max().item()"""),
    Task("ex-05-batch-decode", book={"slots": 5, "first": 5, "second": 3},
         variants=({"slots": 6, "first": 6, "second": 2}, {"slots": 4, "first": 4, "second": 1},
                   {"slots": 7, "first": 7, "second": 5}),
         numbers="The cache has {slots} slots; sequence 1 fills them, sequence 2 has {second} real tokens "
                 "(the mask has shape (2, 1, {slots})).",
         solution="""\
answer = attnlib.padding_mask(torch.tensor([{first}, {second}]), {slots})[:, 0]"""),
    Task("ex-06-twelve-heads", book={"d_model": 768, "heads": 12}, rtol=1e-6,
         variants=({"d_model": 1024, "heads": 16}, {"d_model": 512, "heads": 8}, {"d_model": 2048, "heads": 16}),
         numbers="Use d_model = {d_model} and {heads} heads.",
         solution="""\
d_k = {d_model} / {heads}
answer = (d_k, math.sqrt({d_model}) / math.sqrt(d_k))"""),
    Task("ex-06-kv-cache", book={"layers": 80, "grouped": 8, "full": 64, "width": 128, "tokens": 32768},
         variants=({"layers": 32, "grouped": 8, "full": 32, "width": 128, "tokens": 8192},
                   {"layers": 48, "grouped": 4, "full": 32, "width": 128, "tokens": 16384},
                   {"layers": 64, "grouped": 8, "full": 48, "width": 128, "tokens": 65536}),
         rtol=1e-6,
         numbers="Use {layers} layers, head width {width}, {tokens} tokens in bfloat16, and {grouped} "
                 "key/value heads, then {full}.",
         solution="""\
answer = tuple(kv_cache_bytes({layers}, heads, {width}, {tokens}, dtype=torch.bfloat16) / 2**30
               for heads in ({grouped}, {full}))"""),
    Task("ex-06-fold-temperature", solution="""\
torch.manual_seed(0)
hot = MultiHeadAttention(32, 4, temperature=2.5, dtype=torch.float64)
folded = MultiHeadAttention(32, 4, dtype=torch.float64)
folded.load_state_dict(hot.state_dict())
with torch.no_grad():
    folded.q_proj.weight /= 2.5
    folded.q_proj.bias /= 2.5
answer = (hot, folded)"""),
    Task("ex-07-layer-bytes", book={"batch": 4, "heads": 32, "n": 4096, "dtype": "bfloat16"},
         variants=({"batch": 8, "heads": 16, "n": 4096, "dtype": "float32"},
                   {"batch": 2, "heads": 40, "n": 8192, "dtype": "bfloat16"},
                   {"batch": 4, "heads": 24, "n": 2048, "dtype": "float32"}),
         numbers="Use {heads} heads, a batch of {batch} sequences of {n} tokens, in {dtype}.",
         solution="""\
answer = torch.empty({batch}, {heads}, {n}, {n}, dtype=torch.{dtype}, device="meta").nbytes"""),
    Task("ex-07-max-length", book={"heads": 16, "batch": 2, "small": 24, "large": 48, "dtype": "float16"},
         variants=({"heads": 8, "batch": 4, "small": 16, "large": 32, "dtype": "float16"},
                   {"heads": 32, "batch": 1, "small": 40, "large": 80, "dtype": "bfloat16"},
                   {"heads": 12, "batch": 2, "small": 80, "large": 160, "dtype": "float32"}),
         numbers="Use {heads} heads, a batch of {batch}, {dtype}, and budgets of {small} GiB and {large} GiB.",
         solution="""\
bytes_per_n_squared = {batch} * {heads} * torch.finfo(torch.{dtype}).bits // 8
answer = tuple(math.isqrt(gib * 2**30 // bytes_per_n_squared) for gib in ({small}, {large}))"""),
    Task("ex-07-extrapolate", solution="""\
results = stored_results.load("cost_of_attention.json")
rows = [r for r in results["n_sweep"] if r["method"] == "naive"]
lengths = np.array([r["n"] for r in rows], dtype=float)
seconds = np.array([r["best_seconds"] for r in rows])
slope = np.polyfit(np.log(lengths[lengths >= 1024]), np.log(seconds[lengths >= 1024]), 1)[0]
answer = (seconds[-1] * (16384 / lengths[-1]) ** slope, 3 * results["batch"] * results["heads"] * 4 * 16384**2)"""),
    Task("ex-08-merge-order", solution="""\
s = sp.symbols("s1:4", real=True)
v = sp.symbols("v1:4", real=True)
a, b, c = (online_softmax.block_state([s[i]], [v[i]], s[i]) for i in range(3))
answer = (online_softmax.merge_states(online_softmax.merge_states(a, b), c),
          online_softmax.merge_states(a, online_softmax.merge_states(b, c)))"""),
    Task("ex-08-why-max", solution="""\
big = np.float32(100.0) + np.random.default_rng(0).normal(size=8).astype(np.float32)
with np.errstate(over="ignore"):
    l_frozen = np.sum(np.exp(big))
m, l_running = -np.inf, np.float32(0)
for score in big:
    m_new = max(m, score)
    l_running = l_running * np.exp(np.float32(m - m_new)) + np.exp(score - m_new)
    m = m_new
answer = (l_frozen, l_running)"""),
    Task("ex-08-block-sizes", book={"heads": 8, "n": 2048, "width": 64},
         variants=({"heads": 16, "n": 2048, "width": 64}, {"heads": 4, "n": 1024, "width": 64},
                   {"heads": 12, "n": 2048, "width": 64}),
         numbers="Use {heads} heads, n = {n} and d = {width}; the last blocks are (n, DEFAULT_BLOCK_K).",
         solution="""\
blocks = [(64, 128), (tiled.DEFAULT_BLOCK_Q, tiled.DEFAULT_BLOCK_K), ({n}, tiled.DEFAULT_BLOCK_K)]
answer = [4 * max({heads} * block_q * block_k, {heads} * {n} * {width}) for block_q, block_k in blocks]"""),
    Task("ex-09-causal-tiles", book={"n": 1024, "block_m": 128, "block_n": 64}, rtol=1e-9,
         variants=({"n": 1024, "block_m": 64, "block_n": 64}, {"n": 2048, "block_m": 128, "block_n": 64},
                   {"n": 512, "block_m": 128, "block_n": 32}),
         numbers="Use L = S = {n}, BLOCK_M = {block_m} and BLOCK_N = {block_n} (so {n} / {block_m} query blocks).",
         solution="""\
counts = []
for start in range(0, {n}, {block_m}):
    whole = (start + 1) // {block_n}  # tiles before the first row's diagonal
    visited = math.ceil(min(start + {block_m}, {n}) / {block_n})  # up to the last row's diagonal
    counts.append((whole, visited - whole, {n} // {block_n} - visited))
counts = np.array(counts)
answer = (counts, counts[:, :2].sum() / counts.sum())"""),
    Task("ex-09-gqa-heads", book={"query_heads": 8, "kv_heads": 2}, rtol=1e-6,
         variants=({"query_heads": 8, "kv_heads": 4}, {"query_heads": 12, "kv_heads": 3},
                   {"query_heads": 6, "kv_heads": 2}),
         numbers="Use {query_heads} query heads and {kv_heads} key/value heads; value head j is all j "
                 "(so out[0, :, 0, 0] has {query_heads} numbers).",
         solution="""\
q = torch.randn(1, {query_heads}, 5, 16, dtype=torch.float64)
k = torch.randn(1, {kv_heads}, 7, 16, dtype=torch.float64)
v = torch.arange({kv_heads}, dtype=torch.float64)[None, :, None, None].expand(1, {kv_heads}, 7, 16)
answer = attnlib.scaled_dot_product_attention(q, k, v, enable_gqa=True)[0, :, 0, 0]"""),
    Task("ex-09-key-lengths", solution="""\
from attnlib import fused
padding = attnlib.padding_mask(torch.tensor([7, 3]), 10).expand(2, 4, 6, 10)
with_hole = padding.clone()
with_hole[0, :, :, 2] = False
per_head = padding.clone()
per_head[:, 1, :, 0] = False
answer = [fused.key_lengths(mask) for mask in (padding, with_hole, per_head)]"""),
    Task("ex-10-row-term", solution="""\
s = sp.symbols("s_1:4", real=True)
g = sp.symbols("g_1:3", real=True)
v = sp.Matrix(3, 2, lambda j, c: sp.Symbol(f"v_{{j + 1}}{{c + 1}}", real=True))
p = softmax_theory.softmax(list(s))
dp = [g[0] * v[j, 0] + g[1] * v[j, 1] for j in range(3)]  # dP_j = (dO V^T)_j
o = [sum(p[j] * v[j, c] for j in range(3)) for c in range(2)]  # O = P V
answer = (sum(p[j] * dp[j] for j in range(3)), g[0] * o[0] + g[1] * o[1])"""),
    Task("ex-10-masked-row", solution="""\
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(n, 8, generator=gen, dtype=torch.float64) for n in (4, 6, 6))
q.requires_grad_()
v.requires_grad_()
mask = torch.ones(4, 6, dtype=torch.bool)
mask[2] = False
attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
answer = (q.grad, v.grad)"""),
    Task("ex-10-worked-value-gradient", solution="""\
values = V.clone().requires_grad_()
attnlib.scaled_dot_product_attention(Q, K, values).sum().backward()
answer = values.grad"""),
    Task("ex-10-stored-bytes", book={"heads": 32, "length": 8192},
         variants=({"heads": 16, "length": 4096}, {"heads": 64, "length": 8192}, {"heads": 32, "length": 16384},
                   {"heads": 40, "length": 4096}),
         numbers="Use {heads} heads and L = S = {length}.",
         solution="""\
answer = (4 * {heads} * {length} * {length}, 4 * {heads} * {length})"""),
    Task("ex-10-tau-divided", solution="""\
def start(rule):  # |grad W_q| at step 0 over tau, for the Adam run, seed 0, d_k 256, LeCun, LayerNorm
    [r] = [r for r in stored_results.load("training_sweep.json")["runs"]
           if r["optimizer"] == "adam" and r["seed"] == 0 and r["config"]["scale_rule"] == rule
           and r["config"]["head_dim"] == 256 and r["config"]["init"] == "lecun"
           and r["config"]["layernorm"] and not r["config"]["qk_norm"]]
    return r["curves"]["grad_q"][0] / r["scale"]
answer = start("1") / start("1/sqrt(d)")"""),
    Task("ex-11-causal-work", book={"n": 32, "ranks": 4},
         variants=({"n": 64, "ranks": 4}, {"n": 48, "ranks": 4}, {"n": 16, "ranks": 4}),
         numbers="Use n = {n} positions on W = {ranks} ranks.",
         solution="""\
block, chunk = {n} // {ranks}, {n} // (2 * {ranks})
# a slice starting after s earlier positions computes s x its length pairs in full, then its own triangle
contiguous = [block * block * r + block * (block + 1) // 2 for r in range({ranks})]
zigzag = [chunk * chunk * c + chunk * (chunk + 1) // 2 for c in range(2 * {ranks})]
answer = (contiguous, [zigzag[r] + zigzag[2 * {ranks} - 1 - r] for r in range({ranks})])"""),
    Task("ex-11-infiniband", book={"kv_heads": 8}, variants=({"kv_heads": 4}, {"kv_heads": 2}, {"kv_heads": 16}),
         rtol=0.02, numbers="Use {kv_heads} key/value heads instead of 8.",
         solution="""\
peers = stored_results.load("peers_nvidia_h200.json")
row = next(r for r in peers["rows"] if r.get("d") == 128 and r.get("n") == 16384
           and r["dtype"] == "bfloat16" and not r["causal"])
flops, bandwidth = row["fused"] * 1e12, 50e9
# compute 4 H L_b^2 d / F equals transfer 2 H_kv L_b d (2 bytes) / bandwidth
answer = ({kv_heads} / 32) * 2 * flops / (2 * bandwidth)"""),
    Task("ex-11-backward-bytes", solution="""\
forward_bytes = 2 + 2            # K and V in bfloat16, per element of a block
backward_bytes = 2 + 2 + 4 + 4   # and dK, dV in float32
answer = backward_bytes / forward_bytes"""),
    Task("ex-11-merge-by-hand", solution="""\
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(n, width, generator=gen, dtype=torch.float64) for n, width in ((3, 8), (10, 8), (10, 4)))
(out_a, lse_a), (out_b, lse_b) = (tiled.attention(q[None], k[None, keys], v[None, keys], return_lse=True)
                                  for keys in (slice(0, 4), slice(4, 10)))
lse = torch.logaddexp(lse_a, lse_b)  # eq. ring-merge: the union's log-sum-exp
output = out_a * torch.exp(lse_a - lse)[..., None] + out_b * torch.exp(lse_b - lse)[..., None]
answer = (output[0], lse[0])"""),
    Task("ex-12-correlated-variance", book={"rho": 0.5}, variants=({"rho": 0.3}, {"rho": 0.7}, {"rho": 0.9}),
         rtol=1e-6, numbers="Use the correlation {rho} inside each plane instead of 0.5.",
         solution="""\
theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)  # the planes' angular frequencies
# a plane of two coordinates correlated by rho contributes 2 + 2 rho^2 cos(2 offset theta)
answer = [np.sum(2 + 2 * {rho}**2 * np.cos(2 * offset * theta)) / 64 for offset in (0, 1, 100)]"""),
    Task("ex-12-alibi-entropy", book={"slope": "1/16"}, variants=({"slope": "1/8"}, {"slope": "1/32"}, {"slope": "1/4"}),
         rtol=1e-6, numbers="Use the ALiBi slope {slope} instead of 1/16.",
         solution="""\
distance = torch.arange(4096, dtype=torch.float64)  # from the last query back to the first key
weights = torch.softmax(-float(sp.Rational("{slope}")) * distance, dim=0)  # a content-free query
answer = torch.special.entr(weights).sum().item()"""),
    Task("ex-12-softcap-slope", book={"cap": 5.0}, variants=({"cap": 10.0}, {"cap": 30.0}, {"cap": 3.0}),
         rtol=1e-6, numbers="Use the cap c = {cap:g}, the derivative of {cap:g} tanh(s / {cap:g}), at the same s.",
         solution="""\
s = torch.tensor([0.0, 5.0, 15.0], dtype=torch.float64, requires_grad=True)
({cap} * torch.tanh(s / {cap})).sum().backward()
answer = s.grad.clone()"""),
    Task("ex-12-temperatures", book={"width": 256, "model": 3072, "heads": 24},
         variants=({"width": 64, "model": 4096, "heads": 32}, {"width": 512, "model": 5120, "heads": 40},
                   {"width": 128, "model": 3072, "heads": 16}),
         rtol=1e-6, numbers="Use heads of width {width} and d_model / h = {model} / {heads}: the scales are "
                            "({model}/{heads})^-1/2, 8/{width} and 1, against 1/sqrt({width}).",
         solution="""\
standard = 1 / math.sqrt({width})
answer = [standard / ({model} / {heads}) ** -0.5, standard / (8 / {width}), standard / 1.0]"""),
    Task("ex-12-mup-widths", solution="""\
widths = np.array([32, 64, 128, 256, 512], dtype=float)
answer = (1 / np.sqrt(widths)) / (8 / widths)  # T = (1/sqrt(d_k)) / scale"""),
]

BY_LABEL = {task.label: task for task in TASKS}


def setup_code(chapter: str) -> str:
    """The imports and the chapter's own objects that every solution of chapter ``chapter`` ("07") may use."""
    return "\n\n".join(part for part in (SETUP, CHAPTER_SETUP.get(chapter, "")) if part)


def run(task: Task, params: dict) -> object:
    """The reference answer of ``task`` with ``params``, computed in a fresh namespace."""
    namespace: dict = {}
    exec(setup_code(task.label[3:5]), namespace)
    exec(task.code(params), namespace)
    return namespace["answer"]
