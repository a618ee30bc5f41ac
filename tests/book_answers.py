"""The right answer to every checked exercise with the book's numbers: what attnlib's practice
checkers must accept (tests/test_exercises_feedback.py).

The exercises the example bank grades are answered by its tasks, run with the book's numbers;
the others, which the book's own solutions answer in public, by the code below. Each runs after
its chapter's setup (assignments/tasks.py) and sets ``answer``.
"""
from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "assignments"))
import tasks  # noqa: E402

PRACTICE_SOLUTIONS = {
    "ex-01-shift-scale": """\
row = (Q @ K.T)[0]
answer = (torch.softmax(1e-6 * row, dim=-1), torch.softmax(1e3 * row, dim=-1))""",
    "ex-01-causal-numpy": """\
scores = np.where(np.tril(np.ones((3, 3), dtype=bool)), (Q @ K.T).numpy() / 2, -np.inf)
exps = np.exp(scores - scores.max(axis=1, keepdims=True))
answer = exps / exps.sum(axis=1, keepdims=True)""",
    "ex-01-permutation": """\
order = [2, 0, 1]
q, k, v = (x[order].numpy() for x in (Q, K, V))
scores = np.where(np.tril(np.ones((3, 3), dtype=bool)), q @ k.T / 2, -np.inf)
exps = np.exp(scores - scores.max(axis=1, keepdims=True))
answer = (exps / exps.sum(axis=1, keepdims=True)) @ v""",
    "ex-02-cross-correlation": """\
# Isserlis for the jointly Gaussian q_a and k_a = rho q_a + sqrt(1 - rho^2) xi_a (unit variances,
# correlation rho): E[q_a^2 k_a^2] = 1 + 2 rho^2, and the d terms q_a k_a are independent
rho = sp.Symbol("rho")
answer = (variance.d * rho, variance.d * (1 + 2 * rho**2 - rho**2))""",
    "ex-03-heavier-tails": """\
def draw_t3(rng, rows):
    pair = rng.standard_t(3, size=(rows, 2, 16)) / math.sqrt(3)
    return pair[:, 0], pair[:, 1]

t3 = mc.PairSampler("student_t3", 16, draw_t3, 2 * 16 * 8)
answer = sum(mc.estimate_score_variance(16, 1000, t3, seed=s).covers(16) for s in range(100))""",
    "ex-03-one-sided": """\
def draw_one_sided(rng, rows, width=256, rho=0.3):
    pair = rng.standard_normal((rows, 2, width))
    pair[:, 0] *= math.sqrt(1 - rho)
    pair[:, 0] += math.sqrt(rho) * rng.standard_normal((rows, 1))
    return pair[:, 0], pair[:, 1]

one_sided = mc.PairSampler("q correlated only", 256, draw_one_sided, 2 * 258 * 8)
answer = mc.estimate_score_variance(256, 10000, one_sided, seed=3).variance / 256""",
    "ex-03-xavier-square": """\
xavier = variance.derive_projected_score_variance("xavier")[-1].equation.rhs
answer = sp.simplify(xavier.subs(variance.d_model, variance.d_k))""",
    "ex-04-temperature": """\
rng = np.random.default_rng(0)

def median_max_weight(width, scale):
    q = torch.from_numpy(rng.standard_normal((2000, 1, width)))
    k = torch.from_numpy(rng.standard_normal((2000, 8, width)))
    return float(np.median(attnlib.attention_weights(q, k, scale=scale)[:, 0].max(-1).values.numpy()))

target = median_max_weight(16, 1.0)
medians = {T: median_max_weight(256, 1 / (16 * T)) for T in (0.25, 0.5, 1, 2)}
answer = min(medians, key=lambda T: abs(medians[T] - target))""",
    "ex-04-jacobian-bound": """\
logits = 3 * torch.randn(5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
weights = torch.softmax(logits, dim=-1)
jacobians = torch.diag_embed(weights) - weights[:, :, None] * weights[:, None, :]
answer = (weights, jacobians.abs().sum(dim=(-2, -1)))""",
    "ex-04-sigmoid": """\
from attnlib.book.theory import softmax as softmax_theory
Delta = sp.Symbol("Delta", real=True)
sigma = 1 / (1 + sp.exp(-Delta / softmax_theory.T))
answer = (sigma * (1 - sigma) / softmax_theory.T, math.log(199 + math.sqrt(199**2 - 1)))""",
    "ex-04-jacobian-norm": """\
p_j = sp.Symbol("p_j", positive=True)
answer = (2 * p_j * (1 - p_j), 2)""",
    "ex-04-logit-gradient": """\
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
          [median_logit_gradient(w, 1.0) for w in (16, 256, 1024)])""",
    "ex-05-decode-one": """\
g = torch.Generator().manual_seed(1)
Q6, K6, V6 = (torch.randn(6, 8, generator=g, dtype=torch.float64) for _ in range(3))
decoded = torch.cat([attnlib.scaled_dot_product_attention(Q6[t:t + 1], K6[:t + 1], V6[:t + 1]) for t in range(6)])
answer = (decoded, False)""",
    "ex-05-which-sum": """\
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
answer = ((mixed / total).double() - reference).abs().max().item()""",
    "ex-05-renormalise": """\
g = torch.Generator().manual_seed(0)
Q, K = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
clipped = torch.softmax(Q @ K.T / math.sqrt(8), -1) * attnlib.causal_mask(5, 5)
kept = clipped.sum(-1)
answer = (clipped / kept[:, None], kept)""",
    "ex-06-fold-temperature": """\
torch.manual_seed(0)
hot = MultiHeadAttention(32, 4, temperature=2.5, dtype=torch.float64)
folded = MultiHeadAttention(32, 4, dtype=torch.float64)
folded.load_state_dict(hot.state_dict())
with torch.no_grad():
    folded.q_proj.weight /= 2.5
    folded.q_proj.bias /= 2.5
answer = (hot, folded)""",
    "ex-07-extrapolate": """\
results = stored_results.load("cost_of_attention.json")
rows = [r for r in results["n_sweep"] if r["method"] == "naive"]
lengths = np.array([r["n"] for r in rows], dtype=float)
seconds = np.array([r["best_seconds"] for r in rows])
slope = np.polyfit(np.log(lengths[lengths >= 1024]), np.log(seconds[lengths >= 1024]), 1)[0]
answer = (seconds[-1] * (16384 / lengths[-1]) ** slope, 3 * results["batch"] * results["heads"] * 4 * 16384**2)""",
    "ex-08-merge-order": """\
z = sp.symbols("z0:3", real=True)
v = sp.symbols("v0:3", real=True)
a, b, c = (online_softmax.block_state([z[i]], [v[i]], z[i]) for i in range(3))
answer = (online_softmax.merge_states(online_softmax.merge_states(a, b), c),
          online_softmax.merge_states(a, online_softmax.merge_states(b, c)))""",
    "ex-08-why-max": """\
big = np.float32(100.0) + np.random.default_rng(0).normal(size=8).astype(np.float32)
with np.errstate(over="ignore"):
    l_frozen = np.sum(np.exp(big))
m, l_running = -np.inf, np.float32(0)
for score in big:
    m_new = max(m, score)
    l_running = l_running * np.exp(np.float32(m - m_new)) + np.exp(score - m_new)
    m = m_new
answer = (l_frozen, l_running)""",
    "ex-09-causal-fraction": """\
n, b_q, b_k = sp.symbols("n b_q b_k", positive=True)
u = sp.symbols("u", integer=True, nonnegative=True)
blocks = n / b_q
visited = sp.summation((u + 1) * b_q / b_k, (u, 0, blocks - 1))
answer = visited / (blocks * n / b_k)""",
    "ex-09-key-lengths": """\
from attnlib import fused
padding = attnlib.padding_mask(torch.tensor([7, 3]), 10).expand(2, 4, 6, 10)
with_hole = padding.clone()
with_hole[0, :, :, 2] = False
per_head = padding.clone()
per_head[:, 1, :, 0] = False
answer = [fused.key_lengths(mask) for mask in (padding, with_hole, per_head)]""",
    "ex-10-row-term": """\
z = sp.symbols("z_0:3", real=True)
do = sp.symbols("dO_0:2", real=True)
v = sp.Matrix(3, 2, lambda j, a: sp.Symbol(f"v_{j}{a}", real=True))
p = softmax_theory.softmax(list(z))
dp = [do[0] * v[j, 0] + do[1] * v[j, 1] for j in range(3)]  # dP_j = (dO V^T)_j
o = [sum(p[j] * v[j, a] for j in range(3)) for a in range(2)]  # O = P V
answer = (sum(p[j] * dp[j] for j in range(3)), do[0] * o[0] + do[1] * o[1])""",
    "ex-10-masked-row": """\
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(n, 8, generator=gen, dtype=torch.float64) for n in (4, 6, 6))
q.requires_grad_()
v.requires_grad_()
mask = torch.ones(4, 6, dtype=torch.bool)
mask[2] = False
attnlib.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
answer = (q.grad, v.grad)""",
    "ex-10-worked-value-gradient": """\
values = V.clone().requires_grad_()
attnlib.scaled_dot_product_attention(Q, K, values).sum().backward()
answer = values.grad""",
    "ex-10-tau-divided": """\
def start(rule):  # |grad W_q| at step 0 over tau, for the Adam run, seed 0, d_k 256, LeCun, LayerNorm
    [r] = [r for r in stored_results.load("training_sweep.json")["runs"]
           if r["optimizer"] == "adam" and r["seed"] == 0 and r["config"]["scale_rule"] == rule
           and r["config"]["head_dim"] == 256 and r["config"]["init"] == "lecun"
           and r["config"]["layernorm"] and not r["config"]["qk_norm"]]
    return r["curves"]["grad_q"][0] / r["scale"]
answer = start("1") / start("1/sqrt(d)")""",
    "ex-11-backward-bytes": """\
forward_bytes = 2 + 2            # K and V in bfloat16, per element of a block
backward_bytes = 2 + 2 + 4 + 4   # and dK, dV in float32
answer = backward_bytes / forward_bytes""",
    "ex-11-merge-by-hand": """\
gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(n, width, generator=gen, dtype=torch.float64) for n, width in ((3, 8), (10, 8), (10, 4)))
(out_a, lse_a), (out_b, lse_b) = (tiled.attention(q[None], k[None, keys], v[None, keys], return_lse=True)
                                  for keys in (slice(0, 4), slice(4, 10)))
lse = torch.logaddexp(lse_a, lse_b)  # eq. ring-merge: the union's log-sum-exp
output = out_a * torch.exp(lse_a - lse)[..., None] + out_b * torch.exp(lse_b - lse)[..., None]
answer = (output[0], lse[0])""",
    "ex-12-mup-widths": """\
widths = np.array([32, 64, 128, 256, 512], dtype=float)
answer = (1 / np.sqrt(widths)) / (8 / widths)  # T = (1/sqrt(d_k)) / scale""",
    "ex-13-sink-share": """\
query = torch.ones(1, 4, 1, dtype=torch.float64)  # q . k_j is the score
key = torch.tensor([2.0, 1.0, 0.0, -1.0], dtype=torch.float64).reshape(1, 4, 1)
sink = torch.tensor([1.0], dtype=torch.float64)
answer = [1 - attnlib.attention_weights(query, key, scale=1.0, window=window, sinks=sink)[0, -1].sum().item()
          for window in (None, (1, 0))]""",
    # by hand, as the solution derives it: the logistic function's derivative sigma (1 - sigma)
    "ex-13-sink-derivation": """\
zeta, lse = sp.symbols("zeta lse", real=True)
sigma = 1 / (1 + sp.exp(lse - zeta))
answer = sigma * (1 - sigma)""",
    "ex-13-window-conventions": """\
from transformers import masking_utils

# query 4500 of 9000 against every key, each convention by its own rule; transformers' by its functions
query, keys, zero = torch.tensor(4500), torch.arange(9000), torch.tensor(0)
def transformers_causal(sliding_window):
    return masking_utils.and_masks(masking_utils.sliding_window_overlay(sliding_window),
                                   masking_utils.causal_mask_function)(zero, zero, query, keys)
paper = (keys >= query - 4096) & (keys <= query)
a = next(s for s in range(4090, 4100) if torch.equal(transformers_causal(s), paper))
b = next(left for left in range(4090, 4100)
         if torch.equal((keys >= query - left) & (keys <= query), transformers_causal(4096)))
c = int(masking_utils.sliding_window_bidirectional_overlay(128)(zero, zero, query, keys).sum())
answer = (a, b, c)""",
    "ex-13-streaming-mask": """\
mask = torch.zeros(10, 10, dtype=torch.bool)
for query in range(10):
    kept = set(range(min(2, query + 1))) | set(range(max(0, query - 2), query + 1))
    mask[query, sorted(kept)] = True
answer = mask""",
    # Chapter 14: eager attention's own weights and hooks on the projections, where the
    # checkers measure through attnlib's probes
    "ex-14-sink-share": """\
from attnlib import checkpoints
from attnlib.book import trained
model, tokenizer = checkpoints.load("smollm2")
with torch.no_grad():
    weights = model(input_ids=trained.reference_tokens(tokenizer, 256), output_attentions=True).attentions
answer = (14, 3, weights[14][0, 3, 1:, 0].mean().item())""",
    "ex-14-score-variance": """\
from attnlib import checkpoints
from attnlib.book import trained
model, tokenizer = checkpoints.load("minilm")
attention, captured = model.encoder.layer[2].attention.self, {}
hooks = [getattr(attention, part).register_forward_hook(
    lambda module, inputs, output, part=part: captured.update({part: output})) for part in ("query", "key")]
with torch.no_grad():
    model(input_ids=trained.reference_tokens(tokenizer, 128))
for hook in hooks:
    hook.remove()
q, k = (captured[part][0, :, 5 * 32:6 * 32].double() for part in ("query", "key"))
answer = (2, 5, (q @ k.T).var().item() / 32)""",
    "ex-14-kv-cache": """\
answer = (2 * 30 * 4096 * 3 * 64 * 2 / 2**20, 2 * 30 * 4096 * 1 * 64 * 2 / 2**20)""",
    "ex-01-cross-mask": """\
answer = torch.arange(6)[None, None, None, :] < torch.tensor([6, 4])[:, None, None, None]""",
    "ex-05-dropout-variance": """\
gen = torch.Generator().manual_seed(4)
q, k, v = (torch.randn(n, 4, generator=gen, dtype=torch.float64) for n in (3, 6, 6))
p = torch.softmax(q @ k.T / 2, dim=-1)[0]
answer = float(0.5 / (1 - 0.5) * (p**2 * v[:, 0]**2).sum())""",
    "ex-12-sinusoid-mean": """\
# the table of Vaswani et al. built here from its formula, not with attnlib.positions
pos = np.arange(512)[:, None]
angles = pos / 10000.0 ** (np.arange(0, 512, 2) / 512)
table = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(512, 512)
answer = float((table.mean(0) ** 2).sum() / 256)""",
    "ex-14-row-split": """\
from attnlib import checkpoints
from attnlib.book import trained
model, tokenizer = checkpoints.load("minilm")
attention, captured = model.encoder.layer[2].attention.self, {}
hooks = [getattr(attention, part).register_forward_hook(
    lambda module, inputs, output, part=part: captured.update({part: output})) for part in ("query", "key")]
with torch.no_grad():
    model(input_ids=trained.reference_tokens(tokenizer, 128))
for hook in hooks:
    hook.remove()
q, k = (captured[part][0, :, 5 * 32:6 * 32].double() for part in ("query", "key"))
scores = q @ k.T
answer = (2, 5, scores.var(dim=1, unbiased=False).mean().item() / 32,
          scores.mean(dim=1).var(unbiased=False).item() / 32)""",
    "ex-14-streaming": """\
from attnlib import checkpoints
from attnlib.book import trained
from attnlib.integrations import probes
model, tokenizer = checkpoints.load("smollm2")
tokens = trained.reference_tokens(tokenizer, 256)
with torch.no_grad(), probes.probe(model, record=False, allowed=trained.sliding_window(256, 64, 4)):
    logits = model(input_ids=tokens).logits
losses = torch.nn.functional.cross_entropy(logits[0, :-1].double(), tokens[0, 1:], reduction="none")
answer = (4, losses[64:].mean().exp().item())""",
    "ex-14-no-scale": """\
from attnlib import checkpoints
from attnlib.book import trained
from attnlib.integrations import probes
model, tokenizer = checkpoints.load("smollm2")
tokens = trained.reference_tokens(tokenizer, 128)
with torch.no_grad(), probes.probe(model, record=False, scale_factor=8.0):
    answer = trained.perplexity(model(input_ids=tokens).logits, tokens)""",
}


def book_answer(label: str) -> object:
    """The answer to exercise ``label`` with the book's numbers."""
    bank = tasks.load_bank(tasks.EXAMPLE_BANK)
    if label in bank.tasks:
        return tasks.run(bank.tasks[label], bank.tasks[label].book)
    namespace: dict = {}
    exec(tasks.setup_code(label[3:5]), namespace)
    exec(PRACTICE_SOLUTIONS[label], namespace)
    return namespace["answer"]


def answered_labels() -> set[str]:
    """Every exercise that ``book_answer`` answers."""
    return set(tasks.load_bank(tasks.EXAMPLE_BANK).tasks) | set(PRACTICE_SOLUTIONS)
