"""Looking inside a transformers model's attention: its queries and keys, its scale, its mask.

    from attnlib.integrations import probes
    with probes.probe(model) as calls:          # attnlib runs every layer's attention
        model(**inputs)
    calls[3].query, calls[3].key                # layer 3's (B, Hq, L, E) and (B, Hkv, S, E)
    calls[3].value                              # and its values (B, Hkv, S, Ev)

    with probes.probe(model, scale_factor=0.5):  # every layer's scale halved
        ...
    with probes.probe(model, allowed=mask):      # a bool (L, S) mask in place of the model's
        ...

While the block runs, the model's attention is attnlib's transformers backend
(:mod:`attnlib.integrations.transformers`) under the name :data:`NAME`; the model's own
``attn_implementation`` comes back afterwards. The queries, keys and values are those
the layer hands to attention: projected, and (queries and keys) rotated by RoPE where the
model uses it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, AttentionMaskInterface

from . import transformers as hf_backend

NAME = "attnlib-probe"


@dataclass(frozen=True)
class Call:
    """One layer's attention call: what it received and the scale it used."""

    query: torch.Tensor  # (B, Hq, L, E)
    key: torch.Tensor    # (B, Hkv, S, E)
    scale: float
    value: torch.Tensor  # (B, Hkv, S, Ev)


@dataclass
class _Probe:
    calls: list
    record: bool
    scale_factor: float
    allowed: torch.Tensor | None
    backend: str


_ACTIVE: list[_Probe] = []


def _probe_attention(module, query, key, value, attention_mask, scaling=None, **keywords):
    probe = _ACTIVE[-1]
    scale = (query.shape[-1] ** -0.5 if scaling is None else scaling) * probe.scale_factor
    if probe.record:
        probe.calls.append(Call(query.detach(), key.detach(), scale, value.detach()))
    if probe.allowed is not None:
        if probe.allowed.shape != (query.shape[-2], key.shape[-2]):
            raise ValueError(f"allowed must have shape (L, S) = {(query.shape[-2], key.shape[-2])}, "
                             f"got {tuple(probe.allowed.shape)}")
        attention_mask = probe.allowed[None, None]
    return hf_backend.attnlib_attention(module, query, key, value, attention_mask, scaling=scale,
                                        backend=probe.backend, **keywords)


@contextlib.contextmanager
def probe(model, *, record: bool = True, scale_factor: float = 1.0,
          allowed: torch.Tensor | None = None, backend: str = "auto"):
    """Run ``model``'s attention through attnlib inside the block; yields the list of
    :class:`Call` (one per layer and forward pass, in call order; empty unless ``record``).

    ``scale_factor`` multiplies every layer's scale (its ``scaling``); ``allowed``, a bool
    ``(L, S)`` tensor (True: may attend), replaces the mask the model builds, causality
    included; ``backend`` is attnlib's path ("auto", "naive", "tiled", "fused")."""
    if not isinstance(scale_factor, (int, float)) or not scale_factor > 0:
        raise ValueError(f"scale_factor must be a positive number, got {scale_factor!r}")
    if allowed is not None and (not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool
                                or allowed.ndim != 2):
        raise TypeError(f"allowed must be a 2-D bool tensor (L, S), got {allowed!r:.80}")
    AttentionInterface.register(NAME, _probe_attention)
    AttentionMaskInterface.register(NAME, hf_backend.attnlib_mask)
    previous = model.config._attn_implementation
    _ACTIVE.append(_Probe([], record, float(scale_factor), allowed, backend))
    model.set_attn_implementation(NAME)
    try:
        yield _ACTIVE[-1].calls
    finally:
        _ACTIVE.pop()
        model.set_attn_implementation(previous)
