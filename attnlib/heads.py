"""Multi-head attention: MHA, GQA and MQA as settings of one module.

The hidden width ``d_model`` is split into ``n_heads`` query heads of width
``head_dim = d_model // n_heads``; ``n_kv_heads`` key/value heads of the same
width are shared by groups of ``n_heads // n_kv_heads`` query heads::

    n_kv_heads == n_heads        multi-head attention (MHA)
    1 < n_kv_heads < n_heads     grouped-query attention (GQA)
    n_kv_heads == 1              multi-query attention (MQA)

Each head computes ``softmax(scale * q k^T + mask) v`` through
:func:`attnlib.scaled_dot_product_attention`, with

    scale = 1 / (sqrt(head_dim) * temperature)

``head_dim`` is the width of the vectors in each dot product, whatever
the number of heads or the way keys are shared. ``temperature=1`` is the
standard rule; any other value, or a learnable scale, is a different model.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from .attention import attention_weights, scaled_dot_product_attention
from .masks import causal_mask


def _check_positive_int(name: str, n) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(n).__name__} {n!r}")
    if n <= 0:
        raise ValueError(f"{name} must be a positive int, got {n!r}")
    return int(n)


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            f"temperature must be a positive real number, got {type(temperature).__name__} {temperature!r}"
        )
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return float(temperature)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int,
                   batch: int = 1, dtype: torch.dtype = torch.float16) -> int:
    """Bytes a KV cache holds: ``2 * n_layers * batch * seq_len * n_kv_heads * head_dim * itemsize``.

    The 2 counts keys and values; query heads do not appear, which is the
    whole saving of GQA and MQA.
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * n_layers * batch * seq_len * n_kv_heads * head_dim * itemsize


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention with separate Q/K/V/output projections.

    Shapes (batch first): ``query (B, L, d_model)``, ``key`` and ``value``
    ``(B, S, d_model)`` (both default to ``query``: self-attention) ->
    output ``(B, L, d_model)``. Per head ``h`` with key/value head
    ``g = h // (n_heads // n_kv_heads)``:

    .. math::
        O_h = \operatorname{softmax}\!\Big(\frac{Q_h K_g^\top}{\sqrt{d_k}\,T} + M\Big) V_g,

        \text{out} = [O_0, \dots, O_{H-1}] W_o^\top + b_o .

    Args:
        d_model: hidden width, divisible by ``n_heads``.
        n_heads: query heads; ``head_dim = d_k = d_model // n_heads``.
        n_kv_heads: key/value heads (default ``n_heads``); ``n_heads`` must be a multiple of it.
        temperature: ``T > 0`` in the denominator ``sqrt(d_k) * T`` (default 1, the standard rule).
        learnable_scale: replace the fixed ``1/sqrt(d_k)`` by a learned positive factor
            ``exp(log_scale)``, initialised at ``1/sqrt(d_k)`` (still divided by ``T``).
        dropout: dropout on the attention weights in training mode.
        bias: biases in the four projections.
        backend: passed to :func:`attnlib.scaled_dot_product_attention`.

    Masks: ``attn_mask`` follows :func:`attnlib.scaled_dot_product_attention`
    (bool True = may attend, or float added to the scores; broadcastable to
    ``(B, n_heads, L, S)``). ``key_padding_mask`` is bool ``(B, S)`` with True
    at padding, as in ``torch.nn.MultiheadAttention``. (torch's module reads a
    bool ``attn_mask`` the other way round, True = blocked: invert it.)
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *,
                 temperature: float = 1.0, learnable_scale: bool = False, dropout: float = 0.0,
                 bias: bool = True, backend: str = "auto", device=None, dtype=None):
        super().__init__()
        d_model = _check_positive_int("d_model", d_model)
        n_heads = _check_positive_int("n_heads", n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else _check_positive_int("n_kv_heads", n_kv_heads)
        if d_model % n_heads != 0:
            raise ValueError(
                f"d_model must be divisible by n_heads so that every head has the same "
                f"width, got d_model={d_model} and n_heads={n_heads}"
            )
        if n_heads % n_kv_heads != 0:
            raise ValueError(
                f"n_heads must be a multiple of n_kv_heads so that query heads share "
                f"key/value heads in equal groups, got n_heads={n_heads} and n_kv_heads={n_kv_heads}"
            )
        if not isinstance(learnable_scale, bool):
            raise TypeError(f"learnable_scale must be a bool, got {learnable_scale!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be a real number in [0, 1), got {dropout!r}")
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a str, got {type(backend).__name__} {backend!r}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.temperature = temperature
        self.dropout = float(dropout)
        self.backend = backend
        factory = {"device": device, "dtype": dtype}
        kv_width = n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, d_model, bias=bias, **factory)
        self.k_proj = nn.Linear(d_model, kv_width, bias=bias, **factory)
        self.v_proj = nn.Linear(d_model, kv_width, bias=bias, **factory)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias, **factory)
        if learnable_scale:
            # log-parametrised so the learned factor stays positive
            start = torch.tensor(-0.5 * math.log(self.head_dim), **factory)
            self.log_scale = nn.Parameter(start)
        else:
            self.register_parameter("log_scale", None)

    @property
    def temperature(self) -> float:
        """``T`` in the denominator ``sqrt(d_k) * T``; setting it changes the model."""
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = _check_temperature(value)

    @property
    def learnable_scale(self) -> bool:
        return self.log_scale is not None

    @property
    def scale(self) -> float:
        """The factor multiplying ``q . k``: ``1/(sqrt(d_k) T)``, or ``exp(log_scale)/T``."""
        base = math.exp(float(self.log_scale.detach())) if self.learnable_scale else 1.0 / math.sqrt(self.head_dim)
        return base / self.temperature

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
                f"head_dim={self.head_dim}, temperature={self.temperature}, "
                f"learnable_scale={self.learnable_scale}")

    def _check_input(self, name: str, x) -> None:
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[-1] != self.d_model:
            got = f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a tensor of shape (batch, length, d_model={self.d_model}), got {got}")

    def _split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """``(B, T, heads * head_dim) -> (B, heads, T, head_dim)``."""
        batch, length, _ = x.shape
        return x.view(batch, length, heads, self.head_dim).transpose(1, 2)

    def project_query(self, query: torch.Tensor) -> torch.Tensor:
        """Query heads ``(B, n_heads, L, head_dim)`` from ``query (B, L, d_model)``."""
        self._check_input("query", query)
        return self._split_heads(self.q_proj(query), self.n_heads)

    def project_key_value(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Key and value heads, each ``(B, n_kv_heads, S, head_dim)``: what a KV cache stores."""
        self._check_input("key", key)
        self._check_input("value", value)
        return (self._split_heads(self.k_proj(key), self.n_kv_heads),
                self._split_heads(self.v_proj(value), self.n_kv_heads))

    def _scaled_query(self, q: torch.Tensor) -> tuple[torch.Tensor, float]:
        """Query heads and the float scale to hand to attention.

        A learnable scale is a tensor, and the attention call takes a Python
        float, so the factor is applied to the queries,
        ``(tau q) . k = tau (q . k)``, and the call gets ``scale=1.0``.
        """
        if self.learnable_scale:
            return q * (self.log_scale.exp() / self.temperature), 1.0
        return q, self.scale

    def _combined_mask(self, attn_mask, key_padding_mask, is_causal, batch, query_len, key_len, device):
        """One mask for the attention call, and whether it still asks for ``is_causal``."""
        if key_padding_mask is None:
            return attn_mask, is_causal
        if (not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool
                or tuple(key_padding_mask.shape) != (batch, key_len)):
            got = (f"a {key_padding_mask.dtype} tensor of shape {tuple(key_padding_mask.shape)}"
                   if isinstance(key_padding_mask, torch.Tensor) else type(key_padding_mask).__name__)
            raise ValueError(f"key_padding_mask must be a bool tensor of shape (batch, S) = "
                             f"{(batch, key_len)} with True at padding, got {got}")
        visible = ~key_padding_mask[:, None, None, :]
        if attn_mask is None:
            if is_causal:
                return causal_mask(query_len, key_len, device=device) & visible, False
            return visible, False
        if attn_mask.dtype == torch.bool:
            return attn_mask & visible, is_causal
        return attn_mask.masked_fill(~visible, float("-inf")), is_causal

    def _attention_inputs(self, query, key, value, attn_mask, key_padding_mask, is_causal):
        """Scaled query heads, key and value heads, the combined mask, ``is_causal`` and the float scale."""
        key = query if key is None else key
        value = key if value is None else value
        q, scale = self._scaled_query(self.project_query(query))
        k, v = self.project_key_value(key, value)
        mask, is_causal = self._combined_mask(
            attn_mask, key_padding_mask, is_causal, query.shape[0], query.shape[1], key.shape[1], query.device
        )
        return q, k, v, mask, is_causal, scale

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None,
                *, attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        """Attention output ``(B, L, d_model)``; see the class docstring for shapes and masks."""
        q, k, v, mask, is_causal, scale = self._attention_inputs(query, key, value, attn_mask, key_padding_mask, is_causal)
        heads = scaled_dot_product_attention(
            q, k, v, mask, dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal,
            scale=scale, enable_gqa=self.n_kv_heads != self.n_heads, backend=self.backend,
        )
        batch, _, length, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, self.d_model))

    def attention_weights(self, query: torch.Tensor, key: torch.Tensor | None = None, *,
                          attn_mask: torch.Tensor | None = None, key_padding_mask: torch.Tensor | None = None,
                          is_causal: bool = False) -> torch.Tensor:
        """The weights ``(B, n_heads, L, S)`` each head puts on each key (no dropout)."""
        q, k, _, mask, is_causal, scale = self._attention_inputs(query, key, key, attn_mask, key_padding_mask, is_causal)
        return attention_weights(q, k, mask, is_causal=is_causal, scale=scale,
                                 enable_gqa=self.n_kv_heads != self.n_heads)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention, *, backend: str = "auto") -> "MultiHeadAttention":
        """An MHA module computing what ``module`` computes, with its weights copied.

        torch keeps the three input projections stacked in ``in_proj_weight``
        ``(3 d_model, d_model)`` in the order q, k, v. Feed the result
        batch-first inputs whatever ``module.batch_first`` says.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("module must not use add_bias_kv or add_zero_attn, which add keys "
                             "this module does not have")
        if module.kdim != module.embed_dim or module.vdim != module.embed_dim:
            raise ValueError(f"module must have kdim == vdim == embed_dim = {module.embed_dim}, "
                             f"got kdim={module.kdim}, vdim={module.vdim}")
        weight = module.in_proj_weight
        has_bias = module.in_proj_bias is not None
        converted = cls(module.embed_dim, module.num_heads, dropout=module.dropout, bias=has_bias,
                        backend=backend, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            for index, projection in enumerate((converted.q_proj, converted.k_proj, converted.v_proj)):
                rows = slice(index * module.embed_dim, (index + 1) * module.embed_dim)
                projection.weight.copy_(weight[rows])
                if has_bias:
                    projection.bias.copy_(module.in_proj_bias[rows])
            converted.out_proj.weight.copy_(module.out_proj.weight)
            if has_bias:
                converted.out_proj.bias.copy_(module.out_proj.bias)
        return converted
