"""attnlib: scaled dot-product attention, built up chapter by chapter.

``scaled_dot_product_attention`` is a drop-in for
``torch.nn.functional.scaled_dot_product_attention`` with one contract and
several paths behind it (``naive`` always; ``tiled`` and ``fused`` as the
book builds them). ``import attnlib`` never needs Triton, and the library needs
nothing but torch. :func:`explain` and :func:`last_dispatch` say which path a call
takes and why not the others; :class:`MultiHeadAttention` is a layer on top;
``attnlib.masks``, ``attnlib.positions`` (RoPE, ALiBi), ``attnlib.checkpoints`` and
``attnlib.integrations.transformers`` are imported by name. The book's own helpers
(plots, exercises, stored results) are in ``attnlib.book``, with the ``book`` extra.
"""
try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "attnlib needs PyTorch, which it never installs itself (Colab has it; "
        "elsewhere follow the README, which installs the CPU build)"
    ) from exc

from .attention import attention_weights, explain, scaled_dot_product_attention
from .dispatch import BACKENDS, Dispatch, last_dispatch, record_dispatches
from .heads import MultiHeadAttention, kv_cache_bytes
from .masks import additive_mask, causal_mask, padding_mask, window_mask

__all__ = [
    "BACKENDS",
    "Dispatch",
    "MultiHeadAttention",
    "additive_mask",
    "attention_weights",
    "causal_mask",
    "explain",
    "kv_cache_bytes",
    "last_dispatch",
    "padding_mask",
    "record_dispatches",
    "scaled_dot_product_attention",
    "window_mask",
]
__version__ = "0.1.0"
