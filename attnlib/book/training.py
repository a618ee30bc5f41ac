"""Does the scale matter in training? A small causal transformer, instrumented.

The task is copying: a random sequence of ``length`` tokens from a vocabulary
of ``vocab_size``, a separator, then the same sequence again::

    x_0 x_1 ... x_{n-1}  SEP  x_0 x_1 ... x_{n-1}

The model predicts every token from the ones before it. The first half is
random, so no model does better there than ``ln(vocab_size)`` nats per token;
each copied token is determined by the first half, so the loss on the copied
half can reach 0, but only by attending back ``length + 1`` positions: no
other path carries a token from one position to another.

:class:`CopyTransformer` is token and learned position embeddings, ``n_layers``
blocks of causal multi-head self-attention and an MLP with residuals, a final
LayerNorm and a linear read-out. What the experiments vary:

- ``scale_rule``: the factor on ``q . k``, ``"1/sqrt(d)"`` (the standard
  rule), ``"1"`` or ``"1/d"``, with ``d = head_dim``;
- ``head_dim``: the width of each head's queries and keys, chosen apart from
  ``d_model`` (the projections map ``d_model`` to ``n_heads * head_dim``);
- ``init``: ``"torch"`` (``nn.Linear``'s default, uniform with standard
  deviation ``1/sqrt(3 fan_in)``) or ``"lecun"`` (normal, ``1/sqrt(fan_in)``);
- ``layernorm``: the LayerNorm before attention, or none (the one before the
  MLP and the final one stay);
- ``post_ln``: the original transformer's Post-LN block instead, each
  sub-layer's LayerNorm applied after its residual sum (needs ``layernorm``);
- ``value_dim``: the width of each head's values, ``head_dim`` unless given,
  so that a control can change ``head_dim`` and hold the values fixed;
- ``qk_norm``: RMS-normalise each head's ``q`` and ``k`` (with a learned gain
  per coordinate) before the product.

:func:`train` runs Adam (or SGD) on fresh batches and logs, every ``log_every`` steps,
the losses, the gradient norms at ``W_q`` and ``W_k``, those weights' norms, the
per-coordinate variances of ``q`` and ``k`` and what the scores look like
(:func:`attention_statistics`).
"""
from __future__ import annotations

import dataclasses
import math
import numbers

import torch
from torch import nn
from torch.nn import functional as F

from ..attention import attention_weights
from . import trained

SCALE_RULES = ("1/sqrt(d)", "1", "1/d")
INITS = ("torch", "lecun")
OPTIMIZERS = ("adam", "sgd")
#: learning rates used when ``train`` is given none
DEFAULT_LR = {"adam": 1e-3, "sgd": 0.1}


def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def scale_for(rule: str, head_dim: int) -> float:
    """The factor on ``q . k`` under ``rule``: ``1/sqrt(head_dim)``, ``1`` or ``1/head_dim``."""
    _check_choice("rule", rule, SCALE_RULES)
    head_dim = _check_positive_int("head_dim", head_dim)
    return {"1/sqrt(d)": head_dim**-0.5, "1": 1.0, "1/d": 1.0 / head_dim}[rule]


@dataclasses.dataclass(frozen=True)
class CopyTask:
    """Random sequences of ``length`` tokens, a separator, and the same tokens again.

    Tokens are ``0 .. vocab_size - 1``; the separator is ``vocab_size``.
    A batch is ``(inputs, targets)``, both ``(batch, 2 * length)``: the
    sequence without its last token, and without its first.
    """

    vocab_size: int = 16
    length: int = 16

    def __post_init__(self):
        _check_positive_int("vocab_size", self.vocab_size)
        if _check_positive_int("length", self.length) < 2:
            raise ValueError(f"length must be at least 2, got {self.length!r}")

    @property
    def n_tokens(self) -> int:
        """Vocabulary of the model: the tokens and the separator."""
        return self.vocab_size + 1

    @property
    def context(self) -> int:
        """Positions the model reads: ``2 * length``."""
        return 2 * self.length

    def batch(self, batch_size: int, generator: torch.Generator):
        batch_size = _check_positive_int("batch_size", batch_size)
        tokens = torch.randint(self.vocab_size, (batch_size, self.length), generator=generator)
        separator = torch.full((batch_size, 1), self.vocab_size)
        sequence = torch.cat((tokens, separator, tokens), dim=1)
        return sequence[:, :-1], sequence[:, 1:]

    def copied(self) -> torch.Tensor:
        """``(2 * length,)`` bool: which targets are copies (the last ``length``)."""
        return torch.arange(self.context) >= self.length

    def random_targets(self) -> torch.Tensor:
        """``(2 * length,)`` bool: which targets are unpredictable (tokens 1 .. length-1)."""
        return torch.arange(self.context) < self.length - 1

    def optimal_loss(self) -> float:
        """The lowest mean loss over all targets: ``(length - 1) ln(vocab_size) / (2 length)``.

        The ``length - 1`` random tokens cost ``ln(vocab_size)`` each; the
        separator and the copies can be predicted exactly.
        """
        return (self.length - 1) * math.log(self.vocab_size) / self.context


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """What defines a :class:`CopyTransformer`; the defaults are the sweep's base model."""

    head_dim: int = 64
    scale_rule: str = "1/sqrt(d)"
    init: str = "torch"
    layernorm: bool = True
    qk_norm: bool = False
    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 2
    post_ln: bool = False
    value_dim: int | None = None

    def __post_init__(self):
        for name in ("head_dim", "d_model", "n_heads", "n_layers"):
            _check_positive_int(name, getattr(self, name))
        _check_choice("scale_rule", self.scale_rule, SCALE_RULES)
        _check_choice("init", self.init, INITS)
        _check_bool("layernorm", self.layernorm)
        _check_bool("qk_norm", self.qk_norm)
        if _check_bool("post_ln", self.post_ln) and not self.layernorm:
            raise ValueError("post_ln=True needs layernorm=True (a Post-LN block is normalised), "
                             f"got layernorm={self.layernorm!r}")
        if self.value_dim is not None:
            _check_positive_int("value_dim", self.value_dim)

    @property
    def values_per_head(self) -> int:
        """Width of each head's values: ``value_dim``, or ``head_dim`` when it is None."""
        return self.head_dim if self.value_dim is None else self.value_dim

    @property
    def scale(self) -> float:
        return scale_for(self.scale_rule, self.head_dim)


class RMSNorm(nn.Module):
    """``x / rms(x) * gain`` over the last dimension, the gain learned and starting at 1."""

    def __init__(self, width: int):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * self.gain


class CausalSelfAttention(nn.Module):
    """``softmax(scale * q k^T + causal mask) v`` per head, then an output projection.

    ``x (B, L, d_model) -> (B, L, d_model)``. When ``capture`` is True the
    last forward pass keeps ``q``, ``k`` (per head, ``(B, H, L, head_dim)``,
    after QK-norm, before the scale) and the weights ``(B, H, L, L)`` in
    ``captured``, for :func:`attention_statistics`.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        width = config.n_heads * config.head_dim
        value_width = config.n_heads * config.values_per_head
        self.n_heads, self.head_dim, self.scale = config.n_heads, config.head_dim, config.scale
        self.q_proj = nn.Linear(config.d_model, width, bias=False)
        self.k_proj = nn.Linear(config.d_model, width, bias=False)
        self.v_proj = nn.Linear(config.d_model, value_width, bias=False)
        self.out_proj = nn.Linear(value_width, config.d_model, bias=False)
        norm = RMSNorm if config.qk_norm else lambda width: nn.Identity()
        self.q_norm, self.k_norm = norm(config.head_dim), norm(config.head_dim)
        self.capture, self.captured = False, None

    def _heads(self, x):
        batch, length, width = x.shape
        return x.view(batch, length, self.n_heads, width // self.n_heads).transpose(1, 2)

    def forward(self, x):
        q = self.q_norm(self._heads(self.q_proj(x)))
        k = self.k_norm(self._heads(self.k_proj(x)))
        v = self._heads(self.v_proj(x))
        weights = attention_weights(q, k, is_causal=True, scale=self.scale)
        if self.capture:
            self.captured = (q.detach(), k.detach(), weights.detach())
        heads = weights @ v
        return self.out_proj(heads.transpose(1, 2).flatten(2))


class Block(nn.Module):
    """``x + attn(LN(x))`` (or ``x + attn(x)`` without ``layernorm``), then ``x + mlp(LN(x))``.

    With ``post_ln`` (Vaswani et al.'s original block) ``LN(x + attn(x))``, then
    ``LN(x + mlp(x))``: attention reads the previous block's normalised output.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.post_ln = config.post_ln
        self.attn_norm = nn.LayerNorm(config.d_model) if config.layernorm else nn.Identity()
        self.attn = CausalSelfAttention(config)
        self.mlp_norm = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(),
                                 nn.Linear(4 * config.d_model, config.d_model))

    def forward(self, x):
        if self.post_ln:
            x = self.attn_norm(x + self.attn(x))
            return self.mlp_norm(x + self.mlp(x))
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class CopyTransformer(nn.Module):
    """Tokens ``(B, L)`` -> logits ``(B, L, n_tokens)``, causal: position i reads 0..i.

    Token and position embeddings are drawn with standard deviation
    ``1/sqrt(2)`` each, so their sum, the block's input, has unit variance.
    """

    def __init__(self, config: ModelConfig, n_tokens: int, context: int):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(_check_positive_int("n_tokens", n_tokens),
                                            config.d_model)
        self.position_embedding = nn.Embedding(_check_positive_int("context", context),
                                               config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.readout = nn.Linear(config.d_model, n_tokens)
        nn.init.normal_(self.token_embedding.weight, std=0.5**0.5)
        nn.init.normal_(self.position_embedding.weight, std=0.5**0.5)
        if config.init == "lecun":
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    lecun_normal_(module)

    def forward(self, tokens):
        length = tokens.shape[-1]
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(length))
        for block in self.blocks:
            x = block(x)
        return self.readout(self.final_norm(x))

    def attention_layers(self) -> list[CausalSelfAttention]:
        return [block.attn for block in self.blocks]


def lecun_normal_(linear: nn.Linear) -> None:
    """LeCun normal initialisation: weights ``N(0, 1/fan_in)``, biases 0."""
    with torch.no_grad():
        linear.weight.normal_(0.0, linear.in_features**-0.5)
        if linear.bias is not None:
            linear.bias.zero_()


def attention_statistics(q, k, weights, scale: float) -> dict:
    """What the scores of one causal attention layer look like.

    ``q``, ``k``: ``(..., L, d)`` before the scale; ``weights``: ``(..., L, L)``,
    causal (query i sees keys 0..i). Over the allowed pairs (j <= i):

    - ``var_qk_over_d``: ``Var(q . k) / d`` of the raw dot products, 1 for
      independent unit-variance coordinates;
    - ``var_q``, ``var_k``: the variance of each coordinate of ``q`` (of ``k``)
      over all its rows (batch, heads, positions), averaged over the ``d``
      coordinates: the unit-variance assumption of the ``1/sqrt(d)`` argument;
    - ``max_abs_logit``: the largest ``|scale * q . k|``;
    - ``entropy``: the mean over query rows of ``-sum_j a_ij ln a_ij`` (nats);
    - ``max_weight``: the mean over query rows of the largest weight.

    And, with Chapter 14's measures of trained checkpoints
    (:mod:`attnlib.book.trained`), each per head ``(B, H, L, d)`` and then
    averaged over the heads:

    - ``within_qk_over_d``, ``between_qk_over_d``: the two parts of
      :func:`~attnlib.book.trained.score_variance_split`, the variance within
      rows (what softmax sees) and between them (what it discards);
    - ``independent_within``: the within-row part that independent coordinates
      with the measured means and variances would give
      (:func:`~attnlib.book.trained.independent_split`);
    - ``mean_sq_q``, ``mean_sq_k``: the mean over coordinates of each
      coordinate's squared mean over the tokens, the part of ``q`` (``k``)
      that every token of a head shares
      (:func:`~attnlib.book.trained.coordinate_statistics`); 0 in
      Chapter 2's model.
    """
    length, width = q.shape[-2], q.shape[-1]
    allowed = torch.ones(length, length, dtype=torch.bool).tril()
    dots = (q @ k.transpose(-1, -2))[..., allowed].double()
    def mean_coordinate_variance(x):
        return x.double().flatten(0, -2).var(0).mean().item()

    split = trained.score_variance_split(q, k, causal=True)
    return {
        "var_qk_over_d": dots.var().item() / width,
        "var_q": mean_coordinate_variance(q),
        "var_k": mean_coordinate_variance(k),
        "max_abs_logit": scale * dots.abs().max().item(),
        "entropy": torch.special.entr(weights.double()).sum(-1).mean().item(),
        "max_weight": weights.amax(-1).double().mean().item(),
        "within_qk_over_d": split["within"].mean().item(),
        "between_qk_over_d": split["between"].mean().item(),
        "independent_within": trained.independent_split(q, k)["within"].mean().item(),
        "mean_sq_q": trained.coordinate_statistics(q)["mean_squared"].mean().item(),
        "mean_sq_k": trained.coordinate_statistics(k)["mean_squared"].mean().item(),
    }


def uniform_causal_entropy(length: int) -> float:
    """Mean entropy of uniform causal attention over ``length`` queries: mean of ``ln(i+1)``."""
    return sum(math.log(i + 1) for i in range(_check_positive_int("length", length))) / length


@dataclasses.dataclass
class TrainingLog:
    """One run: each list has an entry per logged step.

    Losses are in nats per target. Gradient norms are the Frobenius norms of
    the loss's gradient at ``W_q`` and ``W_k``, taken together over layers;
    ``weight_q`` and ``weight_k`` the Frobenius norms of those weights, likewise;
    the score statistics (see :func:`attention_statistics`) are the largest
    (``max_abs_logit``) or the mean (the others) over layers.
    """

    config: ModelConfig
    step: list = dataclasses.field(default_factory=list)
    loss: list = dataclasses.field(default_factory=list)
    copy_loss: list = dataclasses.field(default_factory=list)
    random_loss: list = dataclasses.field(default_factory=list)
    grad_q: list = dataclasses.field(default_factory=list)
    grad_k: list = dataclasses.field(default_factory=list)
    weight_q: list = dataclasses.field(default_factory=list)
    weight_k: list = dataclasses.field(default_factory=list)
    var_q: list = dataclasses.field(default_factory=list)
    var_k: list = dataclasses.field(default_factory=list)
    var_qk_over_d: list = dataclasses.field(default_factory=list)
    max_abs_logit: list = dataclasses.field(default_factory=list)
    entropy: list = dataclasses.field(default_factory=list)
    max_weight: list = dataclasses.field(default_factory=list)
    within_qk_over_d: list = dataclasses.field(default_factory=list)
    between_qk_over_d: list = dataclasses.field(default_factory=list)
    independent_within: list = dataclasses.field(default_factory=list)
    mean_sq_q: list = dataclasses.field(default_factory=list)
    mean_sq_k: list = dataclasses.field(default_factory=list)

    CURVES = ("loss", "copy_loss", "random_loss", "grad_q", "grad_k", "weight_q", "weight_k",
              "var_q", "var_k", "var_qk_over_d", "max_abs_logit", "entropy", "max_weight",
              "within_qk_over_d", "between_qk_over_d", "independent_within", "mean_sq_q",
              "mean_sq_k")
    #: the curves that runs stored before Chapter 14's measures were logged lack
    SPLIT_CURVES = CURVES[-5:]

    def first_step_below(self, threshold: float) -> int | None:
        """The first logged step whose copy loss is below ``threshold``, or None."""
        return next((s for s, c in zip(self.step, self.copy_loss) if c < threshold), None)

    def as_dict(self) -> dict:
        return {"config": dataclasses.asdict(self.config), "step": self.step,
                **{name: getattr(self, name) for name in self.CURVES}}


def _norm(tensors) -> float:
    """Frobenius norm of several tensors taken together."""
    return math.sqrt(sum(t.double().square().sum().item() for t in tensors))


def _record(log: TrainingLog, step, model, task, per_target_loss):
    layers = model.attention_layers()
    stats = [attention_statistics(*layer.captured, layer.scale) for layer in layers]
    log.step.append(step)
    log.loss.append(per_target_loss.mean().item())
    log.copy_loss.append(per_target_loss[:, task.copied()].mean().item())
    log.random_loss.append(per_target_loss[:, task.random_targets()].mean().item())
    log.grad_q.append(_norm(layer.q_proj.weight.grad for layer in layers))
    log.grad_k.append(_norm(layer.k_proj.weight.grad for layer in layers))
    log.weight_q.append(_norm(layer.q_proj.weight.detach() for layer in layers))
    log.weight_k.append(_norm(layer.k_proj.weight.detach() for layer in layers))
    for name in ("var_q", "var_k", "var_qk_over_d") + TrainingLog.SPLIT_CURVES:
        getattr(log, name).append(sum(s[name] for s in stats) / len(stats))
    log.max_abs_logit.append(max(s["max_abs_logit"] for s in stats))
    log.entropy.append(sum(s["entropy"] for s in stats) / len(stats))
    log.max_weight.append(sum(s["max_weight"] for s in stats) / len(stats))


def train(config: ModelConfig, task: CopyTask = CopyTask(), *, steps: int = 400,
          batch_size: int = 32, optimizer: str = "adam", lr: float | None = None,
          seed: int = 0, log_every: int = 10) -> TrainingLog:
    """Train a fresh :class:`CopyTransformer` for ``steps`` steps; return its log.

    ``optimizer``: ``"adam"`` (default ``lr`` 1e-3), which divides each
    gradient coordinate by a running estimate of its size, so a small
    gradient still moves the weights; or ``"sgd"`` with momentum 0.9
    (default ``lr`` 0.1), whose steps are proportional to the gradient.

    ``seed`` fixes the initial weights and every batch. Steps ``0, log_every,
    2 log_every, ...`` and the last are logged, each from its own training
    batch before the update (step 0 is the model at initialisation).
    """
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
    if not isinstance(task, CopyTask):
        raise TypeError(f"task must be a CopyTask, got {type(task).__name__}")
    steps = _check_positive_int("steps", steps)
    log_every = _check_positive_int("log_every", log_every)
    _check_choice("optimizer", optimizer, OPTIMIZERS)
    if lr is None:
        lr = DEFAULT_LR[optimizer]
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not lr > 0:
        raise ValueError(f"lr must be a positive number or None, got {lr!r}")
    torch.manual_seed(seed)
    model = CopyTransformer(config, task.n_tokens, task.context)
    if optimizer == "adam":
        updater = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        updater = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    batches = torch.Generator().manual_seed(seed)
    log = TrainingLog(config)
    for step in range(steps + 1):
        logged = step % log_every == 0 or step == steps
        for layer in model.attention_layers():
            layer.capture = logged
        inputs, targets = task.batch(batch_size, batches)
        logits = model(inputs)
        per_target_loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        updater.zero_grad()
        per_target_loss.mean().backward()
        if logged:
            _record(log, step, model, task, per_target_loss.detach())
        if step < steps:
            updater.step()
    return log
